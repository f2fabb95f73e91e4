// Step-level callbacks. MaintainStepCounter is the trainer's own: it is registered first after the
// trainer's callbacks and increments global_step after every hooked run, so callbacks before it
// see the old value in after_run and callbacks after it (and every trigger_step) see the new one.
//
// SessionRunTimeout (a time limit on every hooked run) lives in session_run_timeout.h, included
// here because tensorpack keeps it in this module.
//
// Differences from tensorpack: none.
#pragma once

#include "trainpack/callbacks/base.h"
#include "trainpack/callbacks/session_run_timeout.h"

namespace trainpack {

class MaintainStepCounter : public Callback {
 public:
  MaintainStepCounter() { set_chief_only(false); }

 protected:
  // Logs "Start training with global_step=N" when training does not start from 0.
  void _before_train() override;
  void _after_run(const StepContext& ctx, const RunValues& values) override;
};

}  // namespace trainpack
