// Step-level callbacks, as tensorpack's callbacks/steps module: MaintainStepCounter, the trainer's
// own, which increments global_step after every hooked run (core/step_counter.h), and
// SessionRunTimeout, a time limit on every hooked run (session_run_timeout.h). This header only
// includes the two.
//
// Differences from tensorpack: none.
#pragma once

#include "trainpack/callbacks/session_run_timeout.h"
#include "trainpack/core/step_counter.h"
