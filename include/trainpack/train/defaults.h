// The callbacks and monitors that train_with_defaults adds when the user does not say otherwise
// (tensorpack's DEFAULT_CALLBACKS() and DEFAULT_MONITORS()). Each call returns fresh objects.
//
// tensorpack's lists are [MovingAverageSummary, ProgressBar, MergeAllSummaries, RunUpdateOps] and
// [TFEventWriter, JSONWriter, ScalarPrinter]. trainpack's lists hold those of them that exist in
// this version, in tensorpack's order: RunUpdateOps, and no monitors yet (the summary callbacks,
// the progress bar and the monitor writers are added to these lists as they land).
#pragma once

#include <vector>

#include "trainpack/callbacks/base.h"
#include "trainpack/callbacks/monitor_base.h"

namespace trainpack {

std::vector<CallbackPtr> DEFAULT_CALLBACKS();
std::vector<MonitorPtr> DEFAULT_MONITORS();

}  // namespace trainpack
