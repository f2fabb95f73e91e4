#include "trainpack/core/step_counter.h"

#include "trainpack/core/trainer.h"
#include "trainpack/utils/logger.h"

namespace trainpack {

void MaintainStepCounter::_before_train() {
  if (global_step() != 0) TP_LOG_INFO("Start training with global_step={}", global_step());
}

void MaintainStepCounter::_after_run(const StepContext& ctx, const RunValues& /*values*/) {
  ++ctx.trainer().global_step_;
}

}  // namespace trainpack
