#include "trainpack/train/config.h"

#include <fmt/format.h>

#include <dirent.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <typeinfo>
#include <utility>

#include "trainpack/train/single_cost.h"
#include "trainpack/train/state.h"
#include "trainpack/utils/checkpoint.h"
#include "trainpack/utils/logger.h"

namespace trainpack {

ModelDesc::~ModelDesc() = default;

void launch_train_with_config(const TrainConfig& config, SingleCostTrainer& trainer) {
  if (!config.model()) {
    throw std::invalid_argument(
        "TrainConfig: no model; set TrainConfig().model(std::make_shared<YourModelDesc>())");
  }
  if (config.dataflow() && config.data()) {
    throw std::invalid_argument(
        "TrainConfig: dataflow and data are both set; give one of them (data is an InputSource, "
        "dataflow a DataFlow)");
  }
  if (!config.dataflow() && !config.data()) {
    throw std::invalid_argument(
        "TrainConfig: neither dataflow nor data is set; give the training data with "
        "TrainConfig().dataflow(...) or .data(...)");
  }
  if (config.starting_epoch() < 1) {
    throw std::invalid_argument(
        fmt::format("TrainConfig: starting_epoch must be >= 1, got {}", config.starting_epoch()));
  }
  if (config.starting_global_step() && *config.starting_global_step() < 0) {
    throw std::invalid_argument(fmt::format(
        "TrainConfig: starting_global_step must be >= 0, got {}", *config.starting_global_step()));
  }
  if (config.max_epoch() < config.starting_epoch() - 1) {
    throw std::invalid_argument(
        fmt::format("TrainConfig: max_epoch ({}) is smaller than starting_epoch - 1 ({})",
                    config.max_epoch(), config.starting_epoch() - 1));
  }

  InputSourcePtr input = config.data();
  if (!input) {
    // tensorpack: FeedInput for exactly a SimpleTrainer, QueueInput for every other trainer.
    if (typeid(trainer) == typeid(SimpleTrainer)) {
      input = std::make_shared<FeedInput>(config.dataflow());
    } else {
      TP_LOG_INFO("Automatically applying QueueInput on the DataFlow.");
      input = std::make_shared<QueueInput>(config.dataflow());
    }
  }

  int64_t steps_per_epoch = 0;
  if (config.steps_per_epoch()) {
    steps_per_epoch = *config.steps_per_epoch();
    if (steps_per_epoch < 0) {
      throw std::invalid_argument(
          fmt::format("TrainConfig: steps_per_epoch must be >= 0, got {}", steps_per_epoch));
    }
  } else if (auto size = input->size()) {
    steps_per_epoch = *size;
  } else {
    TP_LOG_ERROR(
        "You must set `TrainConfig(steps_per_epoch)` if the size of your input is not "
        "available.");
    throw std::invalid_argument(fmt::format(
        "TrainConfig: steps_per_epoch is not set and the size of the input ({}) is unknown; set "
        "TrainConfig().steps_per_epoch(n)",
        input->name()));
  }

  std::shared_ptr<ModelDesc> model = config.model();
  trainer.setup_graph(
      model->inputs(), input, model->module(),
      [model](TowerContext& ctx, const std::vector<at::Tensor>& inputs) {
        return model->build_graph(ctx, inputs);
      },
      [model] { return model->optimizer(); });

  trainer.train_with_defaults(TrainOptions()
                                  .callbacks(config.callbacks())
                                  .extra_callbacks(config.extra_callbacks())
                                  .monitors(config.monitors())
                                  .session_init(config.session_init())
                                  .steps_per_epoch(steps_per_epoch)
                                  .starting_epoch(config.starting_epoch())
                                  .starting_global_step(config.starting_global_step())
                                  .max_epoch(config.max_epoch()));
}

namespace {

// The steps of the `model-<step>.data` files in `dir`, newest first.
std::vector<int64_t> checkpoint_steps_in(const std::string& dir) {
  std::vector<int64_t> steps;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return steps;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    const std::string prefix = "model-", suffix = ".data";
    if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix)) {
      continue;
    }
    const std::string digits =
        name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 18) {
      continue;
    }
    steps.push_back(std::stoll(digits));
  }
  ::closedir(d);
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

}  // namespace

std::optional<std::string> AutoResumeTrainConfig::find_latest_valid_checkpoint(
    const std::string& dir) {
  std::vector<std::string> candidates;  // prefixes, in the order to try
  auto add = [&](const std::string& relative) {
    const std::string prefix =
        !relative.empty() && relative.front() == '/' ? relative : dir + "/" + relative;
    if (std::find(candidates.begin(), candidates.end(), prefix) == candidates.end()) {
      candidates.push_back(prefix);
    }
  };
  try {
    if (auto index = read_checkpoint_index(dir)) {
      if (!index->model_checkpoint_path.empty()) add(index->model_checkpoint_path);
      for (auto it = index->all_model_checkpoint_paths.rbegin();
           it != index->all_model_checkpoint_paths.rend(); ++it) {
        add(*it);
      }
    }
  } catch (const CheckpointError& e) {
    TP_LOG_WARN("{}; looking for checkpoints in {} without it.", e.what(), dir);
  }
  for (int64_t step : checkpoint_steps_in(dir)) add(fmt::format("model-{}", step));
  for (const auto& prefix : candidates) {
    if (!checkpoint_exists(prefix)) continue;
    const std::string problem = verify_checkpoint(prefix);
    if (problem.empty()) return prefix;
    TP_LOG_WARN("Checkpoint {} cannot be used ({}); trying an older one.", prefix, problem);
  }
  return std::nullopt;
}

AutoResumeTrainConfig::AutoResumeTrainConfig(TrainConfig config, bool always_resume)
    : TrainConfig(std::move(config)) {
  const std::optional<std::string> dir = logger::get_logger_dir();
  if (!dir) {
    throw std::invalid_argument(
        "AutoResumeTrainConfig: the logger directory is not set. Call "
        "trainpack::logger::set_logger_dir(dir) before constructing it: that directory is where its "
        "checkpoints are looked for.");
  }
  if (!always_resume && session_init()) return;
  if (auto found = find_latest_valid_checkpoint(*dir)) {
    found_checkpoint_ = *found;
    if (session_init()) {
      TP_LOG_INFO("Found checkpoint at {}. session_init arguments will be overwritten.", *found);
    } else {
      TP_LOG_INFO("Will load checkpoint at {}.", *found);
    }
    session_init(std::make_shared<SaverRestore>(*found));
  }
}

std::optional<ResumePoint> AutoResumeTrainConfig::resume_point() const {
  if (found_checkpoint_.empty()) return std::nullopt;
  return saved_resume_point(read_checkpoint(found_checkpoint_), "checkpoint " + found_checkpoint_);
}

}  // namespace trainpack
