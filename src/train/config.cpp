#include "trainpack/train/config.h"

#include <fmt/format.h>

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <typeinfo>
#include <utility>

#include "trainpack/core/state.h"
#include "trainpack/train/single_cost.h"
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

  if (config.accumulate_steps() < 1) {
    throw std::invalid_argument(
        fmt::format("TrainConfig: accumulate_steps must be >= 1 (1: no accumulation), got {}",
                    config.accumulate_steps()));
  }
  int64_t steps_per_epoch = 0;
  if (config.steps_per_epoch()) {
    steps_per_epoch = *config.steps_per_epoch();
    if (steps_per_epoch < 0) {
      throw std::invalid_argument(
          fmt::format("TrainConfig: steps_per_epoch must be >= 0, got {}", steps_per_epoch));
    }
  } else if (auto size = input->size()) {
    if (*size == 0) {
      // An epoch of no step would "finish" every epoch at once, validate an untrained model and
      // save it as the best (tensorpack does the same, silently).
      throw std::invalid_argument(fmt::format(
          "TrainConfig: the training input yields no batch per pass ({}), so an epoch would have "
          "no step. A batch larger than the data set drops it all: use a smaller batch or "
          "BatchData's remainder; or the data is not where it was looked for (a folder one level "
          "off?). TrainConfig().steps_per_epoch(n) overrides this.",
          config.dataflow() ? config.dataflow()->describe() : input->name()));
    }
    // A step reads accumulate_steps batches; the batches left over at the end of a pass start
    // the next epoch.
    steps_per_epoch = *size / config.accumulate_steps();
    if (steps_per_epoch == 0 && *size > 0) {
      throw std::invalid_argument(fmt::format(
          "TrainConfig: the input has {} batches per pass, fewer than accumulate_steps ({}), so "
          "an epoch would have no step; lower accumulate_steps or set steps_per_epoch",
          *size, config.accumulate_steps()));
    }
  } else {
    TP_LOG_ERROR(
        "You must set `TrainConfig(steps_per_epoch)` if the size of your input is not "
        "available.");
    throw std::invalid_argument(fmt::format(
        "TrainConfig: steps_per_epoch is not set and the size of the input ({}) is unknown; set "
        "TrainConfig().steps_per_epoch(n)",
        input->name()));
  }

  trainer.set_accumulate_steps(config.accumulate_steps());
  if (config.precision()) trainer.set_precision(*config.precision());
  if (config.cuda_graph()) trainer.set_cuda_graph(*config.cuda_graph());
  if (!config.gradient_processors().empty()) {
    trainer.set_gradient_processors(config.gradient_processors());
  }
  std::shared_ptr<ModelDesc> model = config.model();
  input->set_allow_changed_input(config.allow_changed_input());
  trainer.set_allow_changed_input(config.allow_changed_input());
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

constexpr const char* kCheckpointDataSuffix = ".data";

bool has_suffix(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The step of a checkpoint named `model-<step>` (a file name, without `.data`), or nullopt.
std::optional<int64_t> step_of(const std::string& name) {
  const std::string prefix = "model-";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) {
    return std::nullopt;
  }
  const std::string digits = name.substr(prefix.size());
  if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 18) {
    return std::nullopt;
  }
  return std::stoll(digits);
}

// The names of the files in `dir` (not following anything).
std::vector<std::string> file_names(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

std::string file_name(const std::string& prefix) {
  const auto slash = prefix.rfind('/');
  return slash == std::string::npos ? prefix : prefix.substr(slash + 1);
}

// Why auto-resume cannot continue from checkpoint `prefix`, "" when it can. `blocks` is set when
// the checkpoint is intact but not resumable (no counters): then it must not be overwritten by a
// run resumed from an older one either.
std::string unusable_reason(const std::string& prefix, bool* blocks) {
  *blocks = false;
  TensorMap state;
  try {
    state = read_checkpoint(prefix, CheckpointReadOptions().own_files_only(true));
  } catch (const CheckpointError& e) {
    // "<file>: <reason>": the file is named beside the reason already.
    const std::string what = e.what();
    const std::string named = e.path() + ": ";
    return what.compare(0, named.size(), named) == 0 ? what.substr(named.size()) : what;
  }
  std::optional<ResumePoint> point;
  try {
    point = saved_resume_point(state, "checkpoint " + prefix);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  if (!point) {
    *blocks = true;
    return "it holds no trainer counters (trainer/global_step, trainer/epoch, "
           "trainer/step_in_epoch: a weights-only checkpoint), so a resume would restart at "
           "epoch 1 and overwrite the newer files; to train from its weights, use it with "
           "SaverRestore in a new directory";
  }
  const std::vector<std::string> bad = non_finite_model_entries(state);
  if (!bad.empty()) {
    std::string names;
    for (size_t i = 0; i < bad.size() && i < 5; ++i) names += (i ? ", " : "") + bad[i];
    if (bad.size() > 5) names += fmt::format(" (and {} more)", bad.size() - 5);
    return fmt::format(
        "its weights are not finite (NaN or inf in {}): the run that saved it had diverged", names);
  }
  return "";
}

// A log directory that every user can write (mode o+w, as /tmp is) may hold files another user
// planted: said once per directory, with what is done about it and how to close it.
void warn_if_others_can_write(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || (st.st_mode & S_IWOTH) == 0) return;
  TP_LOG_WARN(
      "The log directory {} can be written by every user (mode {:04o}): checkpoints there that "
      "are symbolic links or belong to another user are not resumed. To keep others out: "
      "chmod o-w {}",
      dir, st.st_mode & 07777, dir);
}

}  // namespace

AutoResumeError::AutoResumeError(std::string dir,
                                 std::vector<std::pair<std::string, std::string>> unusable,
                                 const std::string& message)
    : std::runtime_error(message), dir_(std::move(dir)), unusable_(std::move(unusable)) {}

std::optional<std::string> AutoResumeTrainConfig::find_latest_valid_checkpoint(
    const std::string& dir) {
  struct Candidate {
    std::string prefix;
    std::optional<int64_t> step;
  };
  warn_if_others_can_write(dir);
  std::vector<Candidate> candidates;
  auto add = [&](const std::string& prefix) {
    for (const auto& c : candidates) {
      if (c.prefix == prefix) return;
    }
    candidates.push_back({prefix, step_of(file_name(prefix))});
  };
  // Whatever the directory holds that a fresh run would overwrite: reasons by file.
  std::vector<std::pair<std::string, std::string>> unusable;
  bool index_present = false;
  std::string index_latest;  // the prefix the index names as the latest, when usable as a name
  const std::string index_path = dir + "/" + kCheckpointIndexFile;
  try {
    if (auto index = read_checkpoint_index(dir)) {
      index_present = true;
      std::vector<std::string> entries{index->model_checkpoint_path};
      entries.insert(entries.end(), index->all_model_checkpoint_paths.rbegin(),
                     index->all_model_checkpoint_paths.rend());
      std::vector<std::string> warned;
      for (size_t i = 0; i < entries.size(); ++i) {
        std::string prefix;
        const std::string problem = index_entry_problem(dir, entries[i], &prefix);
        if (problem.empty()) {
          if (i == 0) index_latest = prefix;
          add(prefix);
        } else if (std::find(warned.begin(), warned.end(), entries[i]) == warned.end()) {
          warned.push_back(entries[i]);
          TP_LOG_WARN("The checkpoint index {} names \"{}\": {}; that entry is ignored.",
                      index_path, entries[i], problem);
        }
      }
    }
  } catch (const CheckpointError& e) {
    index_present = true;
    unusable.emplace_back(index_path, e.what());
    TP_LOG_WARN("{}; looking for checkpoints in {} without it.", e.what(), dir);
  }
  std::vector<std::string> best_copies;  // other `.data` files: MinSaver/MaxSaver copies
  for (const std::string& name : file_names(dir)) {
    if (!has_suffix(name, kCheckpointDataSuffix)) continue;
    const std::string stem =
        name.substr(0, name.size() - std::string(kCheckpointDataSuffix).size());
    if (step_of(stem)) {
      add(dir + "/" + stem);
    } else {
      best_copies.push_back(dir + "/" + name);
    }
  }
  // Newest first, by the global step in the name; names without one (from the index) last, in
  // the index's order. Resuming from an older one than the newest valid one would overwrite it.
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& a, const Candidate& b) {
                     if (a.step.has_value() != b.step.has_value()) return a.step.has_value();
                     return a.step.has_value() && *a.step > *b.step;
                   });
  std::vector<std::pair<std::string, std::string>> blocking;  // intact, not resumable, newer
  for (const auto& c : candidates) {
    if (!checkpoint_exists(c.prefix)) continue;  // an index entry whose file is gone
    bool blocks = false;
    const std::string problem = unusable_reason(c.prefix, &blocks);
    if (problem.empty()) {
      if (!blocking.empty()) {
        std::string list;
        for (const auto& [path, why] : blocking) list += fmt::format("\n  {}: {}", path, why);
        throw AutoResumeError(
            dir, blocking,
            fmt::format(
                "AutoResumeTrainConfig: the newest checkpoint that can be resumed in {} is {}, "
                "but newer ones cannot be resumed and would be overwritten by that run:{}\n"
                "Move them out of the directory to resume from {}, or start over in a new "
                "directory (or back this one up: logger::set_logger_dir(dir, 'b') moves it to "
                "{}.<MMDD-HHMMSS>).",
                dir, c.prefix, list, c.prefix, dir));
      }
      if (!index_latest.empty() && index_latest != c.prefix) {
        const auto latest_step = step_of(file_name(index_latest));
        if (!latest_step || !c.step || *latest_step < *c.step) {
          TP_LOG_WARN(
              "The checkpoint index names {} as the latest, but {} is newer and valid (saved "
              "after the index was last written); resuming from {}: resuming from an older one "
              "would overwrite the newer ones.",
              index_latest, c.prefix, c.prefix);
        }
      }
      return c.prefix;
    }
    unusable.emplace_back(c.prefix + kCheckpointDataSuffix, problem);
    if (blocks) blocking.emplace_back(c.prefix + kCheckpointDataSuffix, problem);
    TP_LOG_WARN("Checkpoint {} cannot be used ({}); trying an older one.", c.prefix, problem);
  }
  for (const auto& copy : best_copies) {
    unusable.emplace_back(copy,
                          "a copy of a best checkpoint (MinSaver/MaxSaver) of a previous run");
  }
  if (unusable.empty() && !index_present) return std::nullopt;  // nothing to overwrite
  std::string list;
  for (const auto& [path, why] : unusable) list += fmt::format("\n  {}: {}", path, why);
  if (unusable.empty())
    list = fmt::format("\n  {}: names only checkpoints that are gone", index_path);
  throw AutoResumeError(
      dir, unusable,
      fmt::format(
          "AutoResumeTrainConfig: log directory {} holds checkpoints of a previous run, but none "
          "can be resumed:{}\nTraining from scratch here would overwrite them. To start over, use "
          "a new directory, or back this one up first: logger::set_logger_dir(dir, 'b') moves it "
          "to {}.<MMDD-HHMMSS>. To continue from one of them anyway, restore it explicitly with "
          "SaverRestore.",
          dir, list, dir));
}

AutoResumeTrainConfig::AutoResumeTrainConfig(TrainConfig config, bool always_resume)
    : AutoResumeTrainConfig(std::move(config), AutoResumeOptions().always_resume(always_resume)) {}

AutoResumeTrainConfig::AutoResumeTrainConfig(TrainConfig config, AutoResumeOptions options)
    : TrainConfig(std::move(config)) {
  const bool always_resume = options.always_resume();
  const bool allow_missing_parameters = options.allow_missing_parameters();
  const std::optional<std::string> dir = logger::get_logger_dir();
  if (!dir) {
    throw std::invalid_argument(
        "AutoResumeTrainConfig: the logger directory is not set. Call "
        "trainpack::logger::set_logger_dir(dir) before constructing it: that directory is where "
        "its "
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
    session_init(std::make_shared<SaverRestore>(
        *found, SaverRestoreOptions().require_all(!allow_missing_parameters)));
  }
}

std::optional<ResumePoint> AutoResumeTrainConfig::resume_point() const {
  if (found_checkpoint_.empty()) return std::nullopt;
  return saved_resume_point(
      read_checkpoint(found_checkpoint_, CheckpointReadOptions().own_files_only(true)),
      "checkpoint " + found_checkpoint_);
}

}  // namespace trainpack
