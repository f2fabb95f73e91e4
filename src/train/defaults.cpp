#include "trainpack/train/defaults.h"

#include <stdexcept>

#include "trainpack/callbacks/graph.h"
#include "trainpack/callbacks/json_writer.h"
#include "trainpack/callbacks/progress_bar.h"
#include "trainpack/callbacks/scalar_printer.h"
#include "trainpack/callbacks/summary.h"
#include "trainpack/callbacks/tf_event_writer.h"
#include "trainpack/core/trainer.h"

namespace trainpack {

std::vector<CallbackPtr> DEFAULT_CALLBACKS() {
  return {std::make_shared<MovingAverageSummary>(), std::make_shared<ProgressBar>(),
          MergeAllSummaries(), std::make_shared<RunUpdateOps>()};
}

std::vector<MonitorPtr> DEFAULT_MONITORS() {
  return {TFEventWriter::create(), JSONWriter::create(), std::make_shared<ScalarPrinter>()};
}

void Trainer::train_with_defaults(TrainOptions options) {
  if (!options.steps_per_epoch()) {
    throw std::invalid_argument(
        "Trainer::train_with_defaults: steps_per_epoch is required; set "
        "TrainOptions().steps_per_epoch(n)");
  }
  std::vector<CallbackPtr> callbacks = options.callbacks();
  std::vector<CallbackPtr> extra =
      options.extra_callbacks() ? *options.extra_callbacks() : DEFAULT_CALLBACKS();
  callbacks.insert(callbacks.end(), extra.begin(), extra.end());
  std::vector<MonitorPtr> monitors = options.monitors() ? *options.monitors() : DEFAULT_MONITORS();
  if (options.starting_global_step()) set_starting_global_step(*options.starting_global_step());
  train(callbacks, monitors, *options.steps_per_epoch(), options.starting_epoch(),
        options.max_epoch(), options.session_init());
}

}  // namespace trainpack
