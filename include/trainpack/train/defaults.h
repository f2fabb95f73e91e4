// The callbacks and monitors that train_with_defaults adds when the user does not say otherwise
// (tensorpack's DEFAULT_CALLBACKS() and DEFAULT_MONITORS()). Each call returns fresh objects.
//
// tensorpack's lists are [MovingAverageSummary, ProgressBar, MergeAllSummaries, RunUpdateOps] and
// [TFEventWriter, JSONWriter, ScalarPrinter]. trainpack's monitors are the same (TFEventWriter
// and JSONWriter become NoOpMonitors, with tensorpack's warning, when no logger directory is set);
// its callbacks are [ProgressBar, RunUpdateOps] until the summary callbacks
// (MovingAverageSummary, MergeAllSummaries) land, in tensorpack's order.
#pragma once

#include <vector>

#include "trainpack/callbacks/base.h"
#include "trainpack/callbacks/monitor_base.h"

namespace trainpack {

std::vector<CallbackPtr> DEFAULT_CALLBACKS();
std::vector<MonitorPtr> DEFAULT_MONITORS();

}  // namespace trainpack
