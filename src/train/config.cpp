#include "trainpack/train/config.h"

#include <fmt/format.h>

#include <stdexcept>
#include <typeinfo>

#include "trainpack/train/single_cost.h"
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
                                  .max_epoch(config.max_epoch()));
}

}  // namespace trainpack
