// SessionRunTimeout: a late run fails training, a hung run is ended (through an injected
// end_process), bad arguments. session_run_timeout_process_test.cpp: a hung process ends.
#include "trainpack/callbacks/session_run_timeout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support/errors.h"
#include "support/step_trainer.h"
#include "trainpack/callbacks/steps.h"
#include "trainpack/core/exceptions.h"
#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"

namespace trainpack {
namespace session_run_timeout_test {

using ::testing::HasSubstr;
using testing::LogCapture;
using ::testing::MatchesRegex;
using testing::message_of;
using testing::StepTrainer;
using testing::Trace;
using testing::TraceCallback;

// The SessionRunTimeoutError nested in the CallbackError that `train` throws; fails the test and
// returns null when it is not one.
std::shared_ptr<SessionRunTimeoutError> train_expecting_timeout(Trainer& trainer,
                                                                std::vector<CallbackPtr> callbacks,
                                                                int64_t steps_per_epoch,
                                                                int64_t max_epoch) {
  try {
    trainer.train(callbacks, {}, steps_per_epoch, 1, max_epoch);
  } catch (const CallbackError& e) {
    EXPECT_EQ(e.callback(), "SessionRunTimeout");
    EXPECT_EQ(e.hook(), "after_run");
    try {
      std::rethrow_if_nested(e);
    } catch (const SessionRunTimeoutError& inner) {
      EXPECT_THAT(e.what(), HasSubstr(inner.what()));
      return std::make_shared<SessionRunTimeoutError>(inner);
    } catch (...) {
    }
    ADD_FAILURE() << "no SessionRunTimeoutError nested in: " << e.what();
    return nullptr;
  }
  ADD_FAILURE() << "training did not fail";
  return nullptr;
}

TEST(SessionRunTimeout, IsChiefOnlyWithTensorpacksArgument) {
  SessionRunTimeout timeout(1000);
  EXPECT_TRUE(timeout.chief_only());
  EXPECT_EQ(timeout.timeout_in_ms(), 1000);
  EXPECT_EQ(timeout.options().grace_period(), std::chrono::seconds(60));
  EXPECT_EQ(SessionRunTimeout::kExitCode, 124);
}

TEST(SessionRunTimeout, ANonPositiveTimeoutIsAnError) {
  for (int64_t bad : {0, -1, -1000}) {
    EXPECT_EQ(message_of<std::invalid_argument>([&] { SessionRunTimeout t(bad); }),
              "SessionRunTimeout: timeout_in_ms must be > 0 (the longest a hooked run may take, "
              "in milliseconds), got " +
                  std::to_string(bad));
  }
}

TEST(SessionRunTimeout, ANegativeGracePeriodIsAnError) {
  EXPECT_EQ(message_of<std::invalid_argument>([] {
              SessionRunTimeout t(
                  1000, SessionRunTimeoutOptions().grace_period(std::chrono::milliseconds(-1)));
            }),
            "SessionRunTimeout: grace_period must be >= 0 ms (how much longer than timeout_in_ms "
            "a run that has not returned may go on before the process is ended), got -1 ms");
  // Zero is allowed: the process ends as soon as the timeout is over.
  SessionRunTimeout zero(1000, SessionRunTimeoutOptions().grace_period(std::chrono::seconds(0)));
  EXPECT_EQ(zero.options().grace_period().count(), 0);
}

TEST(SessionRunTimeout, ATimeoutBeyondTenToTheTwelveMsIsAnError) {
  EXPECT_EQ(message_of<std::invalid_argument>([] {
              SessionRunTimeout t(1000000000000, SessionRunTimeoutOptions().grace_period(
                                                     std::chrono::milliseconds(1)));
            }),
            "SessionRunTimeout: timeout_in_ms (1000000000000) plus grace_period (1 ms) must be at "
            "most 1000000000000 ms");
  EXPECT_THAT(message_of<std::invalid_argument>([] { SessionRunTimeout t(INT64_MAX); }),
              HasSubstr("must be at most 1000000000000 ms"));
}

TEST(SessionRunTimeout, StepsWithinTheTimeoutNeverFail) {
  auto trace = std::make_shared<Trace>();
  StepTrainer trainer([](StepContext&, int64_t) {});
  trainer.train(
      {std::make_shared<SessionRunTimeout>(60000), std::make_shared<TraceCallback>(trace)}, {}, 25,
      1, 4);
  EXPECT_EQ(trainer.global_step(), 100);
  EXPECT_EQ(trace->back(), "after_train ep=4 ls=24 gs=100");
}

// The step that runs at global_step 3 sleeps 300 ms, three times the timeout; the grace period is
// a minute, so the watchdog never ends the process.
TEST(SessionRunTimeout, ALateStepFailsTrainingNamingTheStepAndTheTime) {
  auto trace = std::make_shared<Trace>();
  StepTrainer trainer([](StepContext&, int64_t gs) {
    if (gs == 3) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  });
  LogCapture log;
  auto error = train_expecting_timeout(
      trainer, {std::make_shared<SessionRunTimeout>(100), std::make_shared<TraceCallback>(trace)},
      10, 2);
  ASSERT_NE(error, nullptr);
  // The step ran to its end and was counted: the trainer's counter, and its line, say 4.
  EXPECT_EQ(error->global_step(), 4);
  EXPECT_GE(error->elapsed_ms(), 300);
  EXPECT_EQ(std::string(error->what()), "Training failed at global_step=4 (the step took " +
                                            std::to_string(error->elapsed_ms()) +
                                            " ms, more than timeout_in_ms=100)");
  EXPECT_TRUE(log.contains("ERR Training failed at global_step=4"));
  // Training stopped at that step (the callbacks after SessionRunTimeout got no after_run of it);
  // every after_train ran.
  EXPECT_EQ(trainer.global_step(), 4);
  ASSERT_GE(trace->size(), 2u);
  EXPECT_EQ((*trace)[trace->size() - 2], "before_run ep=1 ls=3 gs=3");
  EXPECT_EQ(trace->back(), "after_train ep=1 ls=3 gs=4");
}

TEST(SessionRunTimeout, ALateRunInASecondEpochNamesItsGlobalStep) {
  StepTrainer trainer([](StepContext&, int64_t gs) {
    if (gs == 7) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  });
  auto error = train_expecting_timeout(trainer, {std::make_shared<SessionRunTimeout>(50)}, 5, 3);
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(error->global_step(), 8);
  EXPECT_EQ(trainer.epoch_num(), 2);
  EXPECT_EQ(trainer.local_step(), 2);
}

// A run that never returns by itself: it waits until the watchdog's end_process (injected here,
// so that the test process lives on) lets it go, then returns late, and fails as a late run.
TEST(SessionRunTimeout, AHungRunIsEndedAfterTheGracePeriodWithExitCode124) {
  std::mutex m;
  std::condition_variable cv;
  std::vector<int> exit_codes;  // guarded by m
  StepTrainer trainer([&](StepContext&, int64_t gs) {
    if (gs != 2) return;
    std::unique_lock<std::mutex> lock(m);
    // Bounded, so that a watchdog that never fires fails the test instead of hanging it.
    cv.wait_for(lock, std::chrono::seconds(120), [&] { return !exit_codes.empty(); });
  });
  auto timeout =
      std::make_shared<SessionRunTimeout>(50, SessionRunTimeoutOptions()
                                                  .grace_period(std::chrono::milliseconds(100))
                                                  .end_process([&](int code) {
                                                    std::lock_guard<std::mutex> lock(m);
                                                    exit_codes.push_back(code);
                                                    cv.notify_all();
                                                  }));
  LogCapture log;
  auto error = train_expecting_timeout(trainer, {timeout}, 5, 1);
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(error->global_step(), 3);
  {
    std::lock_guard<std::mutex> lock(m);
    EXPECT_EQ(exit_codes, std::vector<int>{124});  // once, with the documented code
  }
  std::string line;
  for (const auto& l : log.lines()) {
    if (l.find("[SessionRunTimeout]") != std::string::npos) line = l;
  }
  EXPECT_THAT(line, MatchesRegex("ERR \\[SessionRunTimeout\\] Training failed at global_step=2 "
                                 "\\(the step has run for [0-9]+ ms without returning, more than "
                                 "timeout_in_ms=50 plus grace_period=100 ms\\); ending the "
                                 "process with exit code 124"));
}

// The watchdog thread is joined in after_train: no thread outlives training.
TEST(SessionRunTimeout, NoThreadOutlivesTraining) {
  auto threads = [] {
    size_t n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
      ++n;
    }
    return n;
  };
  const size_t before = threads();
  size_t during = 0;
  auto probe = std::make_shared<testing::ActionCallback>();
  probe->trigger_step_fn = [&](testing::ActionCallback&) { during = threads(); };
  auto timeout = std::make_shared<SessionRunTimeout>(60000);
  StepTrainer trainer([](StepContext&, int64_t) {});
  trainer.train({timeout, probe}, {}, 1, 1, 1);
  EXPECT_EQ(during, before + 1);
  EXPECT_EQ(threads(), before);
}

}  // namespace session_run_timeout_test
}  // namespace trainpack
