// Failures, bad arguments, call-once guards, the chief filter and signals.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>

#include "support/sanitizers.h"
#include "trainpack/callbacks/steps.h"
#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"
#include "trainpack/train/defaults.h"

namespace trainpack {
namespace trainer_errors_test {

using testing::ActionCallback;
using ::testing::HasSubstr;
using testing::LogCapture;
using testing::run_noop;
using testing::Trace;
using testing::TraceCallback;

// Asserts that `fn` throws E whose message contains every fragment.
template <typename E, typename Fn>
void expect_throw_with(Fn&& fn, std::initializer_list<const char*> fragments) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception";
  } catch (const E& e) {
    for (const char* f : fragments) EXPECT_THAT(e.what(), HasSubstr(f));
  }
}

class ThrowsInAfterTrain : public Callback {
 protected:
  void _after_train() override { throw std::runtime_error("after_train broke"); }
};

TEST(TrainerErrors, AThrowingAfterTrainDoesNotStopTheOthers) {
  auto trace = std::make_shared<Trace>();
  LogCapture log;
  run_noop({std::make_shared<ThrowsInAfterTrain>(), std::make_shared<TraceCallback>(trace)}, 1, 1,
           1);
  EXPECT_EQ(trace->back(), "after_train ep=1 ls=0 gs=1");
  EXPECT_TRUE(log.contains("ERR Exception in ThrowsInAfterTrain.after_train(): after_train broke"));
}

TEST(TrainerErrors, AFailingCallbackStopsTrainingWithItsNameAndAfterTrainStillRuns) {
  auto trace = std::make_shared<Trace>();
  auto failing = std::make_shared<ActionCallback>();
  failing->trigger_step_fn = [](ActionCallback& self) {
    if (self.global_step() == 3) throw std::invalid_argument("bad value");
  };
  LogCapture log;
  try {
    run_noop({failing, std::make_shared<TraceCallback>(trace)}, 2, 1, 3);
    FAIL() << "expected CallbackError";
  } catch (const CallbackError& e) {
    EXPECT_EQ(e.callback(), "ActionCallback");
    EXPECT_EQ(e.hook(), "trigger_step");
    EXPECT_STREQ(e.what(), "Callback ActionCallback failed in trigger_step: bad value");
    try {
      std::rethrow_if_nested(e);
      FAIL() << "the original exception should be nested";
    } catch (const std::invalid_argument& original) {
      EXPECT_STREQ(original.what(), "bad value");
    }
  }
  EXPECT_TRUE(log.contains("ERR Training failed at global_step=3"));
  EXPECT_EQ(trace->back(), "after_train ep=2 ls=0 gs=3");
}

class FailingStepTrainer : public Trainer {
 public:
  void run_step() override {
    hooked_run([](StepContext&) { throw std::runtime_error("step exploded"); });
  }
};

TEST(TrainerErrors, AFailingStepPropagatesUnchangedAfterAfterTrain) {
  auto trace = std::make_shared<Trace>();
  FailingStepTrainer trainer;
  trainer.set_handle_signals(false);
  LogCapture log;
  EXPECT_THROW(trainer.train({std::make_shared<TraceCallback>(trace)}, {}, 2, 1, 1),
               std::runtime_error);
  EXPECT_TRUE(log.contains("ERR Training failed at global_step=0"));
  EXPECT_EQ(trace->back(), "after_train ep=1 ls=0 gs=0");
}

TEST(TrainerErrors, TrainingTwiceIsAnError) {
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train({}, {}, 1, 1, 1);
  expect_throw_with<std::logic_error>([&] { trainer.train({}, {}, 1, 1, 1); },
                                      {"Method NoOpTrainer.setup_callbacks can only be called "
                                       "once per object!"});
}

TEST(TrainerErrors, RegisteringAfterSetupIsAnError) {
  NoOpTrainer trainer;
  trainer.setup_callbacks({}, {});
  expect_throw_with<std::logic_error>(
      [&] { trainer.register_callback(std::make_shared<TraceCallback>(nullptr)); },
      {"Cannot register more callbacks after trainer was setup!"});
}

class SomeMonitor : public MonitorBase {};

TEST(TrainerErrors, AMonitorPassedAsACallbackIsAnError) {
  NoOpTrainer trainer;
  expect_throw_with<std::invalid_argument>(
      [&] { trainer.setup_callbacks({std::make_shared<SomeMonitor>()}, {}); },
      {"SomeMonitor is a monitor", "'callbacks'", "'monitors'"});
}

TEST(TrainerErrors, NegativeStepsPerEpochIsAnError) {
  expect_throw_with<std::invalid_argument>([] { run_noop({}, -1, 1, 1); },
                                           {"Trainer::main_loop", "steps_per_epoch", "-1"});
}

TEST(TrainerErrors, NegativeMaxEpochIsAnError) {
  expect_throw_with<std::invalid_argument>([] { run_noop({}, 1, 1, -2); },
                                           {"Trainer::main_loop", "max_epoch", "-2"});
}

TEST(TrainerErrors, StartingEpochBelowOneIsAnError) {
  expect_throw_with<std::invalid_argument>([] { run_noop({}, 1, 0, 2); },
                                           {"Trainer::main_loop", "starting_epoch", "0"});
}

TEST(TrainerErrors, TrainWithDefaultsRequiresStepsPerEpoch) {
  NoOpTrainer trainer;
  expect_throw_with<std::invalid_argument>([&] { trainer.train_with_defaults(TrainOptions()); },
                                           {"train_with_defaults", "steps_per_epoch"});
}

TEST(TrainerErrors, RunStepWithoutATrainOpSaysWhatToDo) {
  Trainer trainer;
  trainer.set_handle_signals(false);
  expect_throw_with<std::logic_error>([&] { trainer.train({}, {}, 1, 1, 1); },
                                      {"Trainer::set_train_op()", "Trainer::run_step()"});
}

TEST(TrainerErrors, ANullCallbackIsAnError) {
  NoOpTrainer trainer;
  expect_throw_with<std::invalid_argument>([&] { trainer.setup_callbacks({nullptr}, {}); },
                                           {"setup_callbacks", "null"});
}

// ---- train_with_defaults ----

TEST(TrainWithDefaults, AppendsDefaultCallbacksAndMonitorsUnlessEmptyListsAreGiven) {
  NoOpTrainer with_defaults;
  with_defaults.set_handle_signals(false);
  with_defaults.train_with_defaults(TrainOptions().steps_per_epoch(1).max_epoch(1));
  // MaintainStepCounter, the default callbacks, the default monitors, Monitors.
  EXPECT_EQ(with_defaults.registered_callbacks().size(),
            2 + DEFAULT_CALLBACKS().size() + DEFAULT_MONITORS().size());
  EXPECT_EQ(with_defaults.monitors().monitors().size(), DEFAULT_MONITORS().size());

  NoOpTrainer without;
  without.set_handle_signals(false);
  without.train_with_defaults(TrainOptions()
                                  .steps_per_epoch(1)
                                  .max_epoch(1)
                                  .extra_callbacks(std::vector<CallbackPtr>{})
                                  .monitors(std::vector<MonitorPtr>{}));
  EXPECT_EQ(without.registered_callbacks().size(), 2u);
}

TEST(TrainWithDefaults, DefaultsAreTensorpacksInItsOrder) {
  auto callbacks = DEFAULT_CALLBACKS();
  ASSERT_EQ(callbacks.size(), 4u);
  EXPECT_EQ(callbacks[0]->name(), "MovingAverageSummary");
  EXPECT_EQ(callbacks[1]->name(), "ProgressBar");
  EXPECT_EQ(callbacks[2]->name(), "MergeAllSummaries_RunWithOp");
  EXPECT_EQ(callbacks[3]->name(), "RunUpdateOps");
  LogCapture log;  // no logger directory: the writers fall back to NoOpMonitors and say so
  auto monitors = DEFAULT_MONITORS();
  ASSERT_EQ(monitors.size(), 3u);
  EXPECT_EQ(monitors[0]->name(), "NoOpMonitor(TFEventWriter)");
  EXPECT_EQ(monitors[1]->name(), "NoOpMonitor(JSONWriter)");
  EXPECT_EQ(monitors[2]->name(), "ScalarPrinter");
  EXPECT_TRUE(log.contains("WRN logger directory was not set. Ignore TFEventWriter."));
  EXPECT_TRUE(log.contains("WRN logger directory was not set. Ignore JSONWriter."));
}

TEST(TrainWithDefaults, PassesCountersThrough) {
  auto trace = std::make_shared<Trace>();
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train_with_defaults(TrainOptions()
                                  .callbacks({std::make_shared<TraceCallback>(trace)})
                                  .steps_per_epoch(3)
                                  .starting_epoch(2)
                                  .max_epoch(2));
  EXPECT_EQ(trace->back(), "after_train ep=2 ls=2 gs=3");
}

// ---- registration order and the chief filter ----

class Tagged : public Callback {
 public:
  explicit Tagged(bool chief_only) { set_chief_only(chief_only); }
};

TEST(TrainerRegistration, OrderIsCounterThenCallbacksThenMonitorsThenMonitors) {
  NoOpTrainer trainer;
  auto a = std::make_shared<Tagged>(false);
  auto b = std::make_shared<Tagged>(true);
  auto m = std::make_shared<SomeMonitor>();
  trainer.setup_callbacks({a, b}, {m});
  const auto& r = trainer.registered_callbacks();
  ASSERT_EQ(r.size(), 5u);
  EXPECT_NE(dynamic_cast<MaintainStepCounter*>(r[0].get()), nullptr);
  EXPECT_EQ(r[1], a);
  EXPECT_EQ(r[2], b);
  EXPECT_EQ(r[3], m);
  EXPECT_EQ(r[4].get(), &trainer.monitors());
}

TEST(TrainerRegistration, ANonChiefSkipsChiefOnlyCallbacksWithAWarning) {
  NoOpTrainer trainer;
  trainer.set_is_chief(false);
  auto everywhere = std::make_shared<Tagged>(false);
  auto chief = std::make_shared<Tagged>(true);
  LogCapture log;
  trainer.setup_callbacks({everywhere, chief}, {});
  const auto& r = trainer.registered_callbacks();
  EXPECT_EQ(std::count(r.begin(), r.end(), everywhere), 1);
  EXPECT_EQ(std::count(r.begin(), r.end(), chief), 0);
  EXPECT_TRUE(log.contains("WRN Callback Tagged is chief-only, skipped."));
}

TEST(TrainerRegistration, CallbacksAreChiefOnlyByDefault) {
  EXPECT_TRUE(TraceCallback(nullptr).chief_only());
  EXPECT_FALSE(MaintainStepCounter().chief_only());
  TraceCallback unowned(nullptr);
  unowned.set_chief_only(false);
  EXPECT_FALSE(unowned.chief_only());
}

TEST(TrainerRegistration, SetChiefOnlyChainsOnACallbackPtr) {
  auto trace = std::make_shared<Trace>();
  // The result goes straight into the list: it is the same callback, flag set.
  std::vector<CallbackPtr> list{std::make_shared<TraceCallback>(trace)->set_chief_only(false)};
  ASSERT_EQ(list.size(), 1u);
  ASSERT_NE(list[0], nullptr);
  EXPECT_NE(dynamic_cast<TraceCallback*>(list[0].get()), nullptr);
  EXPECT_FALSE(list[0]->chief_only());
  EXPECT_TRUE(list[0]->set_chief_only()->chief_only());
  EXPECT_EQ(list[0]->set_chief_only(true), list[0]);
  // A non-chief trainer keeps it once the flag is cleared through the chain.
  NoOpTrainer trainer;
  trainer.set_is_chief(false);
  trainer.setup_callbacks({list[0]->set_chief_only(false)}, {});
  const auto& r = trainer.registered_callbacks();
  EXPECT_EQ(std::count(r.begin(), r.end(), list[0]), 1);
}

TEST(TrainerRegistration, SetChiefOnlyInAConstructorReturnsNoPointerButSetsTheFlag) {
  EXPECT_FALSE(std::make_shared<Tagged>(false)->chief_only());
  Tagged on_stack(false);
  EXPECT_EQ(on_stack.set_chief_only(true), nullptr);
  EXPECT_TRUE(on_stack.chief_only());
}

// ---- signals ----

class SignalAt : public Callback {
 public:
  SignalAt(int sig, int64_t step) : sig_(sig), step_(step) {}

 protected:
  void _trigger_step() override {
    if (global_step() == step_) std::raise(sig_);
  }
  int sig_;
  int64_t step_;
};

TEST(TrainerSignals, SigtermMidEpochStopsAtTheNextStepAndRunsAfterTrain) {
  auto trace = std::make_shared<Trace>();
  NoOpTrainer trainer;  // signal handling is on by default
  LogCapture log;
  trainer.train({std::make_shared<SignalAt>(SIGTERM, 3), std::make_shared<TraceCallback>(trace)},
                {}, 4, 1, 2);
  EXPECT_EQ(trainer.received_signal(), SIGTERM);
  EXPECT_EQ(exit_code_for_signal(trainer.received_signal()), 143);
  // The signalled step completes (its trigger_step reaches later callbacks), nothing after it.
  EXPECT_EQ(Trace(trace->end() - 2, trace->end()),
            (Trace{"trigger_step ep=1 ls=2 gs=3", "after_train ep=1 ls=2 gs=3"}));
  EXPECT_TRUE(log.contains("Detected SIGTERM and exiting main loop."));
  // The handler is removed after training: the default action is back.
  struct sigaction current {};
  sigaction(SIGTERM, nullptr, &current);
  EXPECT_EQ(current.sa_handler, SIG_DFL);
}

TEST(TrainerSignals, SigintGivesExitCode130) {
  NoOpTrainer trainer;
  LogCapture log;
  trainer.train({std::make_shared<SignalAt>(SIGINT, 1)}, {}, 4, 1, 1);
  EXPECT_TRUE(log.contains("Detected Ctrl-C and exiting main loop."));
  EXPECT_EQ(trainer.received_signal(), SIGINT);
  EXPECT_EQ(exit_code_for_signal(trainer.received_signal()), 130);
  EXPECT_EQ(trainer.global_step(), 1);
}

TEST(TrainerSignals, ASecondSignalTerminatesAtOnce) {
  TRAINPACK_SKIP_FORK_UNDER_TSAN();
  EXPECT_EXIT(
      {
        NoOpTrainer trainer;
        auto twice = std::make_shared<ActionCallback>();
        twice->trigger_step_fn = [](ActionCallback&) {
          std::raise(SIGINT);
          std::raise(SIGINT);
        };
        trainer.train({twice}, {}, 4, 1, 1);
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGINT), "");
}

// Under torchrun a Ctrl-C reaches a worker twice (from the terminal, and forwarded by torchrun):
// the first repeat of the same signal within the window is that same Ctrl-C, so training stops
// cleanly (after_train runs, the stop is reported); a third one insists.
TEST(TrainerSignals, UnderTorchrunTheRepeatOfTheSameCtrlCIsAbsorbed) {
  TRAINPACK_SKIP_FORK_UNDER_TSAN();
  EXPECT_EXIT(
      {
        ::setenv("TORCHELASTIC_RUN_ID", "test", 1);
        NoOpTrainer trainer;
        auto twice = std::make_shared<ActionCallback>();
        twice->trigger_step_fn = [](ActionCallback&) {
          std::raise(SIGINT);  // the terminal's
          std::raise(SIGINT);  // torchrun's copy
        };
        trainer.train({twice}, {}, 4, 1, 1);
        std::exit(trainer.received_signal() == SIGINT && trainer.global_step() == 1 ? 7 : 1);
      },
      ::testing::ExitedWithCode(7), "");
  EXPECT_EXIT(
      {
        ::setenv("TORCHELASTIC_RUN_ID", "test", 1);
        NoOpTrainer trainer;
        auto thrice = std::make_shared<ActionCallback>();
        thrice->trigger_step_fn = [](ActionCallback&) {
          for (int i = 0; i < 3; ++i) std::raise(SIGINT);
        };
        trainer.train({thrice}, {}, 4, 1, 1);
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGINT), "");
  // Another signal than the first is never the same Ctrl-C.
  EXPECT_EXIT(
      {
        ::setenv("TORCHELASTIC_RUN_ID", "test", 1);
        NoOpTrainer trainer;
        auto two = std::make_shared<ActionCallback>();
        two->trigger_step_fn = [](ActionCallback&) {
          std::raise(SIGINT);
          std::raise(SIGTERM);
        };
        trainer.train({two}, {}, 4, 1, 1);
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGTERM), "");
}

// A closed terminal (SIGHUP) and Ctrl-\ (SIGQUIT) stop training as SIGTERM does: at the next
// step boundary, after_train running, the previous handler back afterwards.
TEST(TrainerSignals, SighupAndSigquitStopAtTheNextStepLikeSigterm) {
  for (const int sig : {SIGHUP, SIGQUIT}) {
    SCOPED_TRACE(stop_signal_name(sig));
    auto trace = std::make_shared<Trace>();
    NoOpTrainer trainer;
    LogCapture log;
    struct sigaction before {};
    sigaction(sig, nullptr, &before);
    trainer.train({std::make_shared<SignalAt>(sig, 2), std::make_shared<TraceCallback>(trace)}, {},
                  4, 1, 2);
    EXPECT_EQ(trainer.received_signal(), sig);
    EXPECT_EQ(exit_code_for_signal(sig), 128 + sig);
    EXPECT_EQ(trace->back(), "after_train ep=1 ls=1 gs=2");
    EXPECT_TRUE(log.contains("Detected " + stop_signal_name(sig) + " and exiting main loop."));
    // The handler that was there before training is back (SIG_DFL, or one the LibTorch
    // installed: newer ones have handlers of their own for some signals).
    struct sigaction current {};
    sigaction(sig, nullptr, &current);
    EXPECT_EQ(current.sa_handler, before.sa_handler);
  }
  EXPECT_EQ(stop_signal_name(SIGHUP), "SIGHUP");
  EXPECT_EQ(stop_signal_name(SIGQUIT), "SIGQUIT");
  EXPECT_EQ(exit_code_for_signal(SIGHUP), 129);
  EXPECT_EQ(exit_code_for_signal(SIGQUIT), 131);
}

TEST(TrainerSignals, NoSignalMeansExitCodeZero) { EXPECT_EQ(exit_code_for_signal(0), 0); }

}  // namespace trainer_errors_test
}  // namespace trainpack

namespace trainpack {
namespace trainer_errors_test {

TEST(TrainerSignals, ASignalDuringTheLastStepIsStillReported) {
  NoOpTrainer trainer;
  testing::LogCapture log;
  trainer.train({std::make_shared<SignalAt>(SIGTERM, 2)}, {}, 2, 1, 1);
  EXPECT_TRUE(log.contains("Training has finished!"));
  EXPECT_EQ(trainer.received_signal(), SIGTERM);
  // It stopped nothing: the run is complete, which finished() tells the caller.
  EXPECT_TRUE(trainer.finished());
}

TEST(TrainerSignals, ARunStoppedByASignalIsNotFinished) {
  NoOpTrainer trainer;
  trainer.train({std::make_shared<SignalAt>(SIGTERM, 2)}, {}, 2, 1, 3);
  EXPECT_EQ(trainer.received_signal(), SIGTERM);
  EXPECT_EQ(trainer.global_step(), 2);
  EXPECT_FALSE(trainer.finished());
}

TEST(TrainerSignals, ASignalWinsOverAStopRequestInTheSameStep) {
  NoOpTrainer trainer;
  auto both = std::make_shared<testing::ActionCallback>();
  both->trigger_step_fn = [](testing::ActionCallback& self) {
    self.trainer().request_stop();
    std::raise(SIGINT);
  };
  trainer.train({both}, {}, 3, 1, 1);
  EXPECT_EQ(trainer.received_signal(), SIGINT);
}

TEST(TrainerErrors, AGraphChangeInsideTheLoopNamesTheCallback) {
  class Late : public Callback {
   protected:
    void _trigger_epoch() override {
      graph().add_op("late", [] {});
    }
  };
  try {
    testing::run_noop({std::make_shared<Late>()}, 1, 1, 1);
    FAIL();
  } catch (const CallbackError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("Callback Late failed in trigger_epoch: "
                                               "Graph::add_op('late') was called after the "
                                               "graph was finalized"));
  }
}

}  // namespace trainer_errors_test
}  // namespace trainpack

namespace trainpack {
namespace trainer_errors_test {

TEST(TrainerSignals, AnIgnoredSignalStaysIgnored) {
  struct sigaction ignore {
  }, previous{};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGINT, &ignore, &previous);
  NoOpTrainer trainer;
  trainer.train({std::make_shared<SignalAt>(SIGINT, 1)}, {}, 3, 1, 1);
  EXPECT_EQ(trainer.received_signal(), 0);
  EXPECT_EQ(trainer.global_step(), 3);
  struct sigaction after {};
  sigaction(SIGINT, &previous, &after);
  EXPECT_EQ(after.sa_handler, SIG_IGN);
}

}  // namespace trainer_errors_test
}  // namespace trainpack
