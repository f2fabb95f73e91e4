// All monitors, as tensorpack's `callbacks/monitor.py` holds them: the base and the aggregator
// (core/monitor_base.h) and each monitor of its own file.
#pragma once

#include "trainpack/callbacks/json_writer.h"
#include "trainpack/callbacks/scalar_printer.h"
#include "trainpack/callbacks/send_monitor_data.h"
#include "trainpack/callbacks/tf_event_writer.h"
#include "trainpack/core/monitor_base.h"
