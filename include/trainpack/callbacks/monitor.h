// All monitors, as tensorpack's `callbacks/monitor.py` holds them: the base and the aggregator
// (monitor_base.h) and each monitor of its own file.
#pragma once

#include "trainpack/callbacks/monitor_base.h"
