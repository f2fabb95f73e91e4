// Step-level callbacks, as tensorpack's callbacks/steps module: this header only includes
// MaintainStepCounter (core/step_counter.h) and SessionRunTimeout (session_run_timeout.h).
#pragma once

#include "trainpack/callbacks/session_run_timeout.h"
#include "trainpack/core/step_counter.h"
