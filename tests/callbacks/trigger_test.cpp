// PeriodicTrigger, PeriodicCallback and EnableCallbackIf as exact traces.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "support/errors.h"
#include "trainpack/callbacks/trigger.h"
#include "trainpack/testing.h"

namespace trainpack {
namespace trigger_test {

using testing::message_of;

using testing::ActionCallback;
using ::testing::HasSubstr;
using testing::run_noop;
using testing::Trace;
using testing::TraceCallback;
using testing::TriggerRecorder;

Trace only(const Trace& trace, const std::string& hook) {
  Trace out;
  for (const auto& l : trace) {
    if (l.rfind(hook + " ", 0) == 0) out.push_back(l);
  }
  return out;
}

TEST(PeriodicTrigger, FiresEveryKStepsAfterTheIncrement) {
  auto trace = std::make_shared<Trace>();
  run_noop({std::make_shared<PeriodicTrigger>(std::make_shared<TraceCallback>(trace),
                                              PeriodicTriggerOptions().every_k_steps(2))},
           3, 1, 2);
  EXPECT_EQ(only(*trace, "trigger"),
            (Trace{"trigger ep=1 ls=1 gs=2", "trigger ep=2 ls=0 gs=4", "trigger ep=2 ls=2 gs=6"}));
  // The inner trigger_step is always forwarded, the inner trigger_epoch never.
  EXPECT_EQ(only(*trace, "trigger_step").size(), 6u);
  EXPECT_TRUE(only(*trace, "trigger_epoch").empty());
}

TEST(PeriodicTrigger, FiresAfterEveryKthEpoch) {
  auto trace = std::make_shared<Trace>();
  run_noop({std::make_shared<PeriodicTrigger>(std::make_shared<TriggerRecorder>(trace),
                                              PeriodicTriggerOptions().every_k_epochs(2))},
           1, 1, 5);
  EXPECT_EQ(*trace, (Trace{"trigger ep=2 ls=0 gs=2", "trigger ep=4 ls=0 gs=4"}));
}

TEST(PeriodicTrigger, HasNoLastEpochRule) {
  auto trace = std::make_shared<Trace>();
  run_noop({std::make_shared<PeriodicTrigger>(std::make_shared<TriggerRecorder>(trace),
                                              PeriodicTriggerOptions().every_k_epochs(2))},
           1, 1, 3);
  EXPECT_EQ(*trace, (Trace{"trigger ep=2 ls=0 gs=2"}));
}

TEST(PeriodicTrigger, BeforeTrainTriggersOnceBeforeTraining) {
  auto trace = std::make_shared<Trace>();
  run_noop({std::make_shared<PeriodicTrigger>(std::make_shared<TriggerRecorder>(trace),
                                              PeriodicTriggerOptions().before_train(true))},
           2, 1, 2);
  EXPECT_EQ(*trace, (Trace{"trigger ep=0 ls=-1 gs=0"}));
}

TEST(PeriodicTrigger, StepAndEpochConditionsTogetherTriggerTwice) {
  auto trace = std::make_shared<Trace>();
  run_noop({std::make_shared<PeriodicTrigger>(
               std::make_shared<TriggerRecorder>(trace),
               PeriodicTriggerOptions().every_k_steps(2).every_k_epochs(1))},
           2, 1, 1);
  EXPECT_EQ(*trace, (Trace{"trigger ep=1 ls=1 gs=2", "trigger ep=1 ls=1 gs=2"}));
}

TEST(PeriodicTrigger, NameWrapsTheInnerName) {
  PeriodicTrigger t(std::make_shared<TriggerRecorder>(nullptr),
                    PeriodicTriggerOptions().every_k_steps(1));
  EXPECT_EQ(t.name(), "PeriodicTrigger-TriggerRecorder");
}

TEST(PeriodicTrigger, CopiesChiefOnlyFromTheInnerCallback) {
  auto inner = std::make_shared<TriggerRecorder>(nullptr);
  inner->set_chief_only(false);
  PeriodicTrigger t(inner, PeriodicTriggerOptions().every_k_steps(1));
  inner->set_chief_only(true);  // later changes are not reflected (tensorpack)
  EXPECT_FALSE(t.chief_only());
}

TEST(PeriodicTrigger, WithNoPeriodIsAnError) {
  EXPECT_THAT(message_of<std::invalid_argument>([] {
                PeriodicTrigger(std::make_shared<TriggerRecorder>(nullptr),
                                PeriodicTriggerOptions());
              }),
              HasSubstr("PeriodicTrigger: every_k_steps and every_k_epochs are both unset"));
}

TEST(PeriodicTrigger, ANegativePeriodIsAnError) {
  EXPECT_THAT(message_of<std::invalid_argument>([] {
                PeriodicTrigger(std::make_shared<TriggerRecorder>(nullptr),
                                PeriodicTriggerOptions().every_k_steps(-3));
              }),
              HasSubstr("PeriodicTrigger: every_k_steps must be positive"));
  EXPECT_THAT(message_of<std::invalid_argument>([] {
                PeriodicTrigger(std::make_shared<TriggerRecorder>(nullptr),
                                PeriodicTriggerOptions().every_k_epochs(-1));
              }),
              HasSubstr("PeriodicTrigger: every_k_epochs must be positive"));
}

TEST(PeriodicTrigger, ANullCallbackIsAnError) {
  EXPECT_THAT(message_of<std::invalid_argument>(
                  [] { PeriodicTrigger(nullptr, PeriodicTriggerOptions().every_k_steps(1)); }),
              HasSubstr("callback is null"));
}

TEST(PeriodicCallback, StepPeriodSeesTheOldStepInBeforeRunAndTheNewOneInTriggerStep) {
  auto trace = std::make_shared<Trace>();
  run_noop({std::make_shared<PeriodicCallback>(std::make_shared<TraceCallback>(trace),
                                               PeriodicCallbackOptions().every_k_steps(2))},
           3, 1, 2);
  const Trace expected = {
      "setup_graph ep=0 ls=-1 gs=0", "before_train ep=0 ls=-1 gs=0", "before_epoch ep=1 ls=-1 gs=0",
      "before_run ep=1 ls=0 gs=0",   "after_run ep=1 ls=0 gs=1",     "trigger_step ep=1 ls=1 gs=2",
      "before_run ep=1 ls=2 gs=2",   "after_run ep=1 ls=2 gs=3",     "trigger_step ep=2 ls=0 gs=4",
      "before_run ep=2 ls=1 gs=4",   "after_run ep=2 ls=1 gs=5",     "trigger_step ep=2 ls=2 gs=6",
      "after_epoch ep=2 ls=2 gs=6",  "trigger_epoch ep=2 ls=2 gs=6", "trigger ep=2 ls=2 gs=6",
      "after_train ep=2 ls=2 gs=6",
  };
  EXPECT_EQ(*trace, expected);
}

TEST(PeriodicCallback, EpochPeriodEnablesWholeEpochsAndTheEndOfTheLastEpoch) {
  auto trace = std::make_shared<Trace>();
  run_noop({std::make_shared<PeriodicCallback>(std::make_shared<TraceCallback>(trace),
                                               PeriodicCallbackOptions().every_k_epochs(2))},
           2, 1, 3);
  const Trace expected = {
      "setup_graph ep=0 ls=-1 gs=0",
      "before_train ep=0 ls=-1 gs=0",
      // epoch 2, all of it
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
      // the last epoch: its last step and its end (not its before_epoch: differences #1)
      "before_run ep=3 ls=1 gs=5",
      "after_run ep=3 ls=1 gs=6",
      "trigger_step ep=3 ls=1 gs=6",
      "after_epoch ep=3 ls=1 gs=6",
      "trigger_epoch ep=3 ls=1 gs=6",
      "trigger ep=3 ls=1 gs=6",
      "after_train ep=3 ls=1 gs=6",
  };
  EXPECT_EQ(*trace, expected);
}

TEST(PeriodicCallback, WithNoPeriodIsAnError) {
  EXPECT_THAT(message_of<std::invalid_argument>([] {
                PeriodicCallback(std::make_shared<TriggerRecorder>(nullptr),
                                 PeriodicCallbackOptions());
              }),
              HasSubstr("PeriodicCallback: every_k_steps and every_k_epochs are both unset"));
}

TEST(PeriodicCallback, ANegativePeriodIsAnError) {
  EXPECT_THAT(message_of<std::invalid_argument>([] {
                PeriodicCallback(std::make_shared<TriggerRecorder>(nullptr),
                                 PeriodicCallbackOptions().every_k_epochs(-2));
              }),
              HasSubstr("PeriodicCallback: every_k_epochs must be positive"));
  EXPECT_THAT(message_of<std::invalid_argument>([] {
                PeriodicCallback(std::make_shared<TriggerRecorder>(nullptr),
                                 PeriodicCallbackOptions().every_k_steps(-2));
              }),
              HasSubstr("PeriodicCallback: every_k_steps must be positive"));
}

TEST(PeriodicCallback, NameWrapsTheInnerName) {
  PeriodicCallback c(std::make_shared<TriggerRecorder>(nullptr),
                     PeriodicCallbackOptions().every_k_steps(1));
  EXPECT_EQ(c.name(), "PeriodicCallback-TriggerRecorder");
}

TEST(EnableCallbackIf, AfterRunFollowsTheDecisionOfBeforeRun) {
  auto trace = std::make_shared<Trace>();
  bool enabled = true;
  // Registered before the wrapper: flips the predicate between its before_run and after_run.
  auto flipper = std::make_shared<ActionCallback>();
  flipper->after_run_fn = [&enabled](ActionCallback&) { enabled = !enabled; };
  auto gated =
      std::make_shared<EnableCallbackIf>(std::make_shared<TraceCallback>(trace),
                                         [&enabled](const EnableCallbackIf&) { return enabled; });
  run_noop({flipper, gated}, 2, 1, 1);
  // Step 0: enabled in before_run, so after_run too (although the flag is false by then).
  // Step 1: disabled in before_run, so no after_run (although the flag is true again).
  EXPECT_EQ(only(*trace, "before_run"), (Trace{"before_run ep=1 ls=0 gs=0"}));
  EXPECT_EQ(only(*trace, "after_run"), (Trace{"after_run ep=1 ls=0 gs=1"}));
}

TEST(EnableCallbackIf, DoesNotGateSetupBeforeTrainAfterTrainOrTrigger) {
  auto trace = std::make_shared<Trace>();
  auto gated = std::make_shared<EnableCallbackIf>(std::make_shared<TraceCallback>(trace),
                                                  [](const EnableCallbackIf&) { return false; });
  NoOpTrainer trainer;  // outlives the trigger() call below
  trainer.set_handle_signals(false);
  trainer.train({gated}, {}, 2, 1, 1);
  EXPECT_EQ(*trace, (Trace{"setup_graph ep=0 ls=-1 gs=0", "before_train ep=0 ls=-1 gs=0",
                           "after_train ep=1 ls=1 gs=2"}));
  gated->trigger();
  EXPECT_EQ(trace->back(), "trigger ep=1 ls=1 gs=2");
}

TEST(EnableCallbackIf, AnEmptyPredicateIsAnError) {
  EXPECT_THAT(message_of<std::invalid_argument>(
                  [] { EnableCallbackIf(std::make_shared<TriggerRecorder>(nullptr), nullptr); }),
              HasSubstr("EnableCallbackIf: pred is empty"));
}

TEST(EnableCallbackIf, NameWrapsTheInnerName) {
  EnableCallbackIf c(std::make_shared<TriggerRecorder>(nullptr),
                     [](const EnableCallbackIf&) { return true; });
  EXPECT_EQ(c.name(), "EnableCallbackIf-TriggerRecorder");
}

}  // namespace trigger_test
}  // namespace trainpack

namespace trainpack {
namespace trigger_test {

TEST(Wrappers, ANullCallbackIsAnErrorNamingTheWrapper) {
  EXPECT_THAT(message_of<std::invalid_argument>(
                  [] { PeriodicTrigger(nullptr, PeriodicTriggerOptions().every_k_steps(1)); }),
              ::testing::StartsWith("PeriodicTrigger: callback is null"));
  EXPECT_THAT(message_of<std::invalid_argument>(
                  [] { PeriodicCallback(nullptr, PeriodicCallbackOptions().every_k_steps(1)); }),
              ::testing::StartsWith("PeriodicCallback: callback is null"));
  EXPECT_THAT(message_of<std::invalid_argument>(
                  [] { EnableCallbackIf(nullptr, [](const EnableCallbackIf&) { return true; }); }),
              ::testing::StartsWith("EnableCallbackIf: callback is null"));
  EXPECT_THAT(message_of<std::invalid_argument>([] { ProxyCallback(nullptr); }),
              ::testing::StartsWith("ProxyCallback: callback is null"));
}

}  // namespace trigger_test
}  // namespace trainpack

namespace trainpack {
namespace trigger_test {

class EpochOnly : public Callback {
 protected:
  void _trigger() override {}
};
class AfterRunOnly : public Callback {
 protected:
  void _after_run(const StepContext&, const RunValues&) override {}
};

std::vector<Hook> dispatched_hooks(const Callback& cb) {
  std::vector<Hook> out;
  for (int h = 0; h < kNumHooks; ++h) {
    if (cb.overrides(static_cast<Hook>(h))) out.push_back(static_cast<Hook>(h));
  }
  return out;
}

TEST(WrapperDispatch, AnEpochPeriodTriggerStaysOffThePerStepPath) {
  PeriodicTrigger t(std::make_shared<EpochOnly>(), PeriodicTriggerOptions().every_k_epochs(2));
  EXPECT_EQ(dispatched_hooks(t), (std::vector<Hook>{Hook::kTriggerEpoch, Hook::kTrigger}));
}

TEST(WrapperDispatch, AStepPeriodTriggerIsCalledInTriggerStepOnly) {
  PeriodicTrigger t(std::make_shared<EpochOnly>(), PeriodicTriggerOptions().every_k_steps(5));
  EXPECT_EQ(dispatched_hooks(t), (std::vector<Hook>{Hook::kTriggerStep, Hook::kTrigger}));
}

TEST(WrapperDispatch, WrappingAnIdleCallbackCostsNothing) {
  class Idle : public Callback {};
  EXPECT_TRUE(dispatched_hooks(ProxyCallback(std::make_shared<Idle>())).empty());
  EXPECT_TRUE(dispatched_hooks(PeriodicCallback(std::make_shared<Idle>(),
                                                PeriodicCallbackOptions().every_k_steps(3)))
                  .empty());
}

TEST(WrapperDispatch, EnableCallbackIfDecidesInBeforeRunWhenTheInnerNeedsOnlyAfterRun) {
  EnableCallbackIf c(std::make_shared<AfterRunOnly>(),
                     [](const EnableCallbackIf&) { return true; });
  EXPECT_EQ(dispatched_hooks(c), (std::vector<Hook>{Hook::kBeforeRun, Hook::kAfterRun}));
}

TEST(WrapperDispatch, ASubclassOfAProxyThatAddsAHookIsCalledThere) {
  class Counting : public ProxyCallback {
   public:
    using ProxyCallback::ProxyCallback;
    int steps = 0;

   protected:
    void _trigger_step() override { ++steps; }
  };
  auto counting = std::make_shared<Counting>(std::make_shared<EpochOnly>());
  EXPECT_TRUE(counting->overrides(Hook::kTriggerStep));
  run_noop({counting}, 3, 1, 1);
  EXPECT_EQ(counting->steps, 3);
}

}  // namespace trigger_test
}  // namespace trainpack
