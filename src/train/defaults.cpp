#include "trainpack/train/defaults.h"

#include "trainpack/callbacks/graph.h"
#include "trainpack/callbacks/json_writer.h"
#include "trainpack/callbacks/progress_bar.h"
#include "trainpack/callbacks/scalar_printer.h"
#include "trainpack/callbacks/summary.h"
#include "trainpack/callbacks/tf_event_writer.h"

namespace trainpack {

std::vector<CallbackPtr> DEFAULT_CALLBACKS() {
  return {std::make_shared<MovingAverageSummary>(), std::make_shared<ProgressBar>(),
          MergeAllSummaries(), std::make_shared<RunUpdateOps>()};
}

std::vector<MonitorPtr> DEFAULT_MONITORS() {
  return {TFEventWriter::create(), JSONWriter::create(), std::make_shared<ScalarPrinter>()};
}

}  // namespace trainpack
