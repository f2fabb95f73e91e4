// The main loop's timing (spec 2.1, 2.4, section 22 #1 and #14) as exact traces.
#include <gtest/gtest.h>

#include "support/trace.h"
#include "trainpack/train/trainer.h"

namespace trainpack {
namespace {

using testing::run_noop;
using testing::Trace;
using testing::TraceCallback;

TEST(TrainerLoop, TwoEpochsOfTwoStepsFollowTensorpacksTimeline) {
  auto trace = std::make_shared<Trace>();
  run_noop({std::make_shared<TraceCallback>(trace)}, 2, 1, 2);
  const Trace expected = {
      "setup_graph ep=0 ls=-1 gs=0",
      "before_train ep=0 ls=-1 gs=0",
      "before_epoch ep=1 ls=-1 gs=0",
      "before_run ep=1 ls=0 gs=0",
      "after_run ep=1 ls=0 gs=1",
      "trigger_step ep=1 ls=0 gs=1",
      "before_run ep=1 ls=1 gs=1",
      "after_run ep=1 ls=1 gs=2",
      "trigger_step ep=1 ls=1 gs=2",
      "after_epoch ep=1 ls=1 gs=2",
      "trigger_epoch ep=1 ls=1 gs=2",
      "trigger ep=1 ls=1 gs=2",
      "before_epoch ep=2 ls=-1 gs=2",
      "before_run ep=2 ls=0 gs=2",
      "after_run ep=2 ls=0 gs=3",
      "trigger_step ep=2 ls=0 gs=3",
      "before_run ep=2 ls=1 gs=3",
      "after_run ep=2 ls=1 gs=4",
      "trigger_step ep=2 ls=1 gs=4",
      "after_epoch ep=2 ls=1 gs=4",
      "trigger_epoch ep=2 ls=1 gs=4",
      "trigger ep=2 ls=1 gs=4",
      "after_train ep=2 ls=1 gs=4",
  };
  EXPECT_EQ(*trace, expected);
}

}  // namespace
}  // namespace trainpack
