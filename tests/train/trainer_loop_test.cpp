// The main loop's timing (docs/tensorpack-differences.md #1 and #14) as exact traces.
#include <gtest/gtest.h>

#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"

namespace trainpack {
namespace trainer_loop_test {

using testing::run_noop;
using testing::Trace;
using testing::TraceCallback;

TEST(TrainerLoop, TwoEpochsOfTwoStepsFollowTensorpacksTimeline) {
  auto trace = std::make_shared<Trace>();
  run_noop({std::make_shared<TraceCallback>(trace)}, 2, 1, 2);
  const Trace expected = {
      "setup_graph ep=0 ls=-1 gs=0",  "before_train ep=0 ls=-1 gs=0",
      "before_epoch ep=1 ls=-1 gs=0", "before_run ep=1 ls=0 gs=0",
      "after_run ep=1 ls=0 gs=1",     "trigger_step ep=1 ls=0 gs=1",
      "before_run ep=1 ls=1 gs=1",    "after_run ep=1 ls=1 gs=2",
      "trigger_step ep=1 ls=1 gs=2",  "after_epoch ep=1 ls=1 gs=2",
      "trigger_epoch ep=1 ls=1 gs=2", "trigger ep=1 ls=1 gs=2",
      "before_epoch ep=2 ls=-1 gs=2", "before_run ep=2 ls=0 gs=2",
      "after_run ep=2 ls=0 gs=3",     "trigger_step ep=2 ls=0 gs=3",
      "before_run ep=2 ls=1 gs=3",    "after_run ep=2 ls=1 gs=4",
      "trigger_step ep=2 ls=1 gs=4",  "after_epoch ep=2 ls=1 gs=4",
      "trigger_epoch ep=2 ls=1 gs=4", "trigger ep=2 ls=1 gs=4",
      "after_train ep=2 ls=1 gs=4",
  };
  EXPECT_EQ(*trace, expected);
}

}  // namespace trainer_loop_test
}  // namespace trainpack

namespace trainpack {
namespace trainer_loop_test {

using testing::ActionCallback;
using testing::LogCapture;
using testing::run_noop;
using testing::Trace;
using testing::TraceCallback;

// ---- StopTraining raised from each hook: the hook in progress does not reach later
// callbacks, training ends cleanly, after_train runs. Raised at epoch 1, local step 1.
struct StopCase {
  const char* hook;
  std::vector<std::string> trace;  // what a TraceCallback after the raiser records
};

class StopTrainingFromHook : public ::testing::TestWithParam<StopCase> {};

std::shared_ptr<ActionCallback> raiser_for(const std::string& hook) {
  auto cb = std::make_shared<ActionCallback>();
  auto raise_at_step_1 = [hook](ActionCallback& self) {
    if (self.epoch_num() == 1 && self.local_step() == 1) throw StopTraining("stop-in-" + hook);
  };
  auto raise_in_epoch_1 = [hook](ActionCallback& self) {
    if (self.epoch_num() == 1) throw StopTraining("stop-in-" + hook);
  };
  if (hook == "before_train")
    cb->before_train_fn = [](ActionCallback&) { throw StopTraining("stop-in-before_train"); };
  if (hook == "before_epoch") cb->before_epoch_fn = raise_in_epoch_1;
  if (hook == "before_run") cb->before_run_fn = raise_at_step_1;
  if (hook == "after_run") cb->after_run_fn = raise_at_step_1;
  if (hook == "trigger_step") cb->trigger_step_fn = raise_at_step_1;
  if (hook == "after_epoch") cb->after_epoch_fn = raise_in_epoch_1;
  if (hook == "trigger_epoch") cb->trigger_epoch_fn = raise_in_epoch_1;
  if (hook == "trigger") cb->trigger_fn = raise_in_epoch_1;
  return cb;
}

TEST_P(StopTrainingFromHook, EndsTrainingCleanlyAndRunsAfterTrain) {
  const StopCase& c = GetParam();
  auto trace = std::make_shared<Trace>();
  LogCapture log;
  run_noop({raiser_for(c.hook), std::make_shared<TraceCallback>(trace)}, 2, 1, 2);
  EXPECT_EQ(*trace, c.trace);
  EXPECT_TRUE(
      log.contains(std::string("Training was stopped by exception stop-in-") + c.hook + "."));
  EXPECT_FALSE(log.contains("Training has finished!"));
}

const std::vector<std::string> kUntilStep1 = {
    "setup_graph ep=0 ls=-1 gs=0", "before_train ep=0 ls=-1 gs=0", "before_epoch ep=1 ls=-1 gs=0",
    "before_run ep=1 ls=0 gs=0",   "after_run ep=1 ls=0 gs=1",     "trigger_step ep=1 ls=0 gs=1"};

std::vector<std::string> concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

INSTANTIATE_TEST_SUITE_P(
    EachHook, StopTrainingFromHook,
    ::testing::Values(
        StopCase{"before_train", {"setup_graph ep=0 ls=-1 gs=0", "after_train ep=0 ls=-1 gs=0"}},
        StopCase{"before_epoch",
                 {"setup_graph ep=0 ls=-1 gs=0", "before_train ep=0 ls=-1 gs=0",
                  "after_train ep=1 ls=-1 gs=0"}},
        StopCase{"before_run", concat(kUntilStep1, {"after_train ep=1 ls=1 gs=1"})},
        // MaintainStepCounter runs before user callbacks: the step was counted.
        StopCase{"after_run",
                 concat(kUntilStep1, {"before_run ep=1 ls=1 gs=1", "after_train ep=1 ls=1 gs=2"})},
        StopCase{"trigger_step",
                 concat(kUntilStep1, {"before_run ep=1 ls=1 gs=1", "after_run ep=1 ls=1 gs=2",
                                      "after_train ep=1 ls=1 gs=2"})},
        StopCase{
            "after_epoch",
            concat(kUntilStep1, {"before_run ep=1 ls=1 gs=1", "after_run ep=1 ls=1 gs=2",
                                 "trigger_step ep=1 ls=1 gs=2", "after_train ep=1 ls=1 gs=2"})},
        StopCase{"trigger_epoch",
                 concat(kUntilStep1, {"before_run ep=1 ls=1 gs=1", "after_run ep=1 ls=1 gs=2",
                                      "trigger_step ep=1 ls=1 gs=2", "after_epoch ep=1 ls=1 gs=2",
                                      "after_train ep=1 ls=1 gs=2"})},
        StopCase{"trigger",
                 concat(kUntilStep1, {"before_run ep=1 ls=1 gs=1", "after_run ep=1 ls=1 gs=2",
                                      "trigger_step ep=1 ls=1 gs=2", "after_epoch ep=1 ls=1 gs=2",
                                      "after_train ep=1 ls=1 gs=2"})}),
    [](const ::testing::TestParamInfo<StopCase>& info) { return std::string(info.param.hook); });

// ---- stop requests (docs/tensorpack-differences.md #14) ----

TEST(TrainerLoop, StopRequestedMidEpochEndsBeforeTheNextStep) {
  auto trace = std::make_shared<Trace>();
  auto stopper = std::make_shared<ActionCallback>();
  stopper->after_run_fn = [](ActionCallback& self) {
    if (self.global_step() == 2) self.ctx->request_stop();
  };
  LogCapture log;
  run_noop({stopper, std::make_shared<TraceCallback>(trace)}, 3, 1, 2);
  const Trace expected = {
      "setup_graph ep=0 ls=-1 gs=0",
      "before_train ep=0 ls=-1 gs=0",
      "before_epoch ep=1 ls=-1 gs=0",
      "before_run ep=1 ls=0 gs=0",
      "after_run ep=1 ls=0 gs=1",
      "trigger_step ep=1 ls=0 gs=1",
      "before_run ep=1 ls=1 gs=1",
      "after_run ep=1 ls=1 gs=2",
      // the step that requested the stop completes; no after_epoch for the cut epoch
      "trigger_step ep=1 ls=1 gs=2",
      "after_train ep=1 ls=1 gs=2",
  };
  EXPECT_EQ(*trace, expected);
  EXPECT_FALSE(log.contains("Training has finished!"));
}

TEST(TrainerLoop, StopRequestedOnAnEpochsLastStepStartsNoNewEpoch) {
  auto trace = std::make_shared<Trace>();
  auto stopper = std::make_shared<ActionCallback>();
  stopper->trigger_step_fn = [](ActionCallback& self) {
    if (self.global_step() == 2) self.trainer().request_stop();
  };
  LogCapture log;
  run_noop({stopper, std::make_shared<TraceCallback>(trace)}, 2, 1, 3);
  ASSERT_GE(trace->size(), 4u);
  const Trace expected = {"after_epoch ep=1 ls=1 gs=2", "trigger_epoch ep=1 ls=1 gs=2",
                          "trigger ep=1 ls=1 gs=2"};
  EXPECT_EQ(Trace(trace->end() - 4, trace->end() - 1), expected);
  EXPECT_EQ(trace->back(), "after_train ep=1 ls=1 gs=2");
  EXPECT_FALSE(log.contains("Start Epoch 2 ..."));
  EXPECT_FALSE(log.contains("Training has finished!"));
}

TEST(TrainerLoop, StopRequestedOnTheLastStepOfTrainingFinishesNormally) {
  auto stopper = std::make_shared<ActionCallback>();
  stopper->trigger_step_fn = [](ActionCallback& self) {
    if (self.global_step() == 4) self.trainer().request_stop();
  };
  LogCapture log;
  run_noop({stopper}, 2, 1, 2);
  EXPECT_TRUE(log.contains("Epoch 2 (global_step 4) finished"));
  EXPECT_TRUE(log.contains("Training has finished!"));
}

TEST(TrainerLoop, StopRequestedInBeforeTrainRunsNoEpoch) {
  auto trace = std::make_shared<Trace>();
  auto stopper = std::make_shared<ActionCallback>();
  stopper->before_train_fn = [](ActionCallback& self) { self.trainer().request_stop(); };
  run_noop({stopper, std::make_shared<TraceCallback>(trace)}, 2, 1, 2);
  const Trace expected = {"setup_graph ep=0 ls=-1 gs=0", "before_train ep=0 ls=-1 gs=0",
                          "after_train ep=0 ls=-1 gs=0"};
  EXPECT_EQ(*trace, expected);
}

// ---- degenerate ranges ----

TEST(TrainerLoop, ZeroEpochsStillRunBeforeAndAfterTrain) {
  auto trace = std::make_shared<Trace>();
  LogCapture log;
  run_noop({std::make_shared<TraceCallback>(trace)}, 5, 3, 2);
  const Trace expected = {"setup_graph ep=0 ls=-1 gs=0", "before_train ep=2 ls=-1 gs=0",
                          "after_train ep=2 ls=-1 gs=0"};
  EXPECT_EQ(*trace, expected);
  EXPECT_TRUE(log.contains("Training has finished!"));
  // Rarely meant on a fresh run: said.
  EXPECT_TRUE(log.contains(
      "WRN max_epoch=2 is below starting_epoch=3: no epoch will run, only before_train and "
      "after_train. Epochs count from starting_epoch to max_epoch inclusive; raise max_epoch to "
      "train."));
}

TEST(TrainerLoop, AMaxEpochAtTheStartingEpochRunsOneEpochWithoutAWarning) {
  LogCapture log;
  run_noop({}, 1, 3, 3);
  EXPECT_FALSE(log.contains("is below starting_epoch"));
  EXPECT_TRUE(log.contains("Start Epoch 3 ..."));
}

TEST(TrainerLoop, ZeroStepsPerEpochStillRunEpochHooks) {
  auto trace = std::make_shared<Trace>();
  run_noop({std::make_shared<TraceCallback>(trace)}, 0, 1, 2);
  const Trace expected = {
      "setup_graph ep=0 ls=-1 gs=0",   "before_train ep=0 ls=-1 gs=0",
      "before_epoch ep=1 ls=-1 gs=0",  "after_epoch ep=1 ls=-1 gs=0",
      "trigger_epoch ep=1 ls=-1 gs=0", "trigger ep=1 ls=-1 gs=0",
      "before_epoch ep=2 ls=-1 gs=0",  "after_epoch ep=2 ls=-1 gs=0",
      "trigger_epoch ep=2 ls=-1 gs=0", "trigger ep=2 ls=-1 gs=0",
      "after_train ep=2 ls=-1 gs=0",
  };
  EXPECT_EQ(*trace, expected);
}

// Restores a global step, as a checkpoint restore does.
class SetGlobalStep : public SessionInit {
 public:
  explicit SetGlobalStep(int64_t step) : step_(step) {}
  void run_init(Trainer& trainer) override {
    trainer.graph().variable("global_step").set(static_cast<double>(step_));
  }

 private:
  int64_t step_;
};

TEST(TrainerLoop, StartsFromARestoredGlobalStepAndALaterEpoch) {
  auto trace = std::make_shared<Trace>();
  LogCapture log;
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train({std::make_shared<TraceCallback>(trace)}, {}, 2, 3, 4,
                std::make_shared<SetGlobalStep>(100));
  const Trace expected = {
      "setup_graph ep=0 ls=-1 gs=0",    "before_train ep=2 ls=-1 gs=100",
      "before_epoch ep=3 ls=-1 gs=100", "before_run ep=3 ls=0 gs=100",
      "after_run ep=3 ls=0 gs=101",     "trigger_step ep=3 ls=0 gs=101",
      "before_run ep=3 ls=1 gs=101",    "after_run ep=3 ls=1 gs=102",
      "trigger_step ep=3 ls=1 gs=102",  "after_epoch ep=3 ls=1 gs=102",
      "trigger_epoch ep=3 ls=1 gs=102", "trigger ep=3 ls=1 gs=102",
      "before_epoch ep=4 ls=-1 gs=102", "before_run ep=4 ls=0 gs=102",
      "after_run ep=4 ls=0 gs=103",     "trigger_step ep=4 ls=0 gs=103",
      "before_run ep=4 ls=1 gs=103",    "after_run ep=4 ls=1 gs=104",
      "trigger_step ep=4 ls=1 gs=104",  "after_epoch ep=4 ls=1 gs=104",
      "trigger_epoch ep=4 ls=1 gs=104", "trigger ep=4 ls=1 gs=104",
      "after_train ep=4 ls=1 gs=104",
  };
  EXPECT_EQ(*trace, expected);
  EXPECT_TRUE(log.contains("Start training with global_step=100"));
  EXPECT_TRUE(log.contains("Start Epoch 3 ..."));
  EXPECT_EQ(trainer.epoch_num(), 4);
  EXPECT_EQ(trainer.starting_epoch(), 3);
  EXPECT_EQ(trainer.max_epoch(), 4);
  EXPECT_EQ(trainer.steps_per_epoch(), 2);
}

TEST(TrainerLoop, LogsTensorpacksEpochLines) {
  LogCapture log;
  run_noop({}, 3, 1, 2);
  EXPECT_TRUE(log.contains("Setup callbacks graph ..."));
  EXPECT_TRUE(log.contains("Graph Finalized."));
  EXPECT_TRUE(log.contains("Start Epoch 1 ..."));
  EXPECT_TRUE(log.contains("Epoch 1 (global_step 3) finished, time:"));
  EXPECT_TRUE(log.contains("Epoch 2 (global_step 6) finished, time:"));
  EXPECT_EQ(log.lines().back(), "Training has finished!");
}

}  // namespace trainer_loop_test
}  // namespace trainpack
