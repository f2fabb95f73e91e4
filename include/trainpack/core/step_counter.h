// MaintainStepCounter: the trainer's own callback. Trainer::setup_callbacks registers it first
// after the trainer's callbacks; it increments global_step after every hooked run, so callbacks
// before it see the old value in after_run and callbacks after it (and every trigger_step) see the
// new one. It runs on every rank (not chief-only).
//
// callbacks/steps.h includes this header, because tensorpack keeps the class in that module.
//
// Differences from tensorpack: none.
#pragma once

#include "trainpack/core/callback.h"

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
