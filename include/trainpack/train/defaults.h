// The callbacks and monitors that train_with_defaults adds when the user does not say otherwise
// (tensorpack's DEFAULT_CALLBACKS() and DEFAULT_MONITORS(), the same lists in the same order;
// docs/trainer.md lists them). Each call returns fresh objects. TFEventWriter and JSONWriter
// become NoOpMonitors, with tensorpack's warning, when no logger directory is set when
// DEFAULT_MONITORS() is called.
#pragma once

#include <vector>

#include "trainpack/core/callback.h"
#include "trainpack/core/monitor_base.h"

namespace trainpack {

std::vector<CallbackPtr> DEFAULT_CALLBACKS();
std::vector<MonitorPtr> DEFAULT_MONITORS();

}  // namespace trainpack
