// StartProcOrThread, StoppableThread and ChildProcess: what is started in
// before_train is stopped in after_train, also when training fails, and nothing is left running.
#include "trainpack/callbacks/concurrency.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"
#include "trainpack/utils/logger.h"

namespace trainpack {
namespace concurrency_test {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::run_noop;

// Records the lines logged while it exists (sinks may be called from other threads).
class LogCapture {
 public:
  LogCapture() {
    id_ = logger::add_sink([this](logger::Level level, std::string_view message) {
      std::lock_guard<std::mutex> lock(mutex_);
      lines_.emplace_back(level, std::string(message));
    });
  }
  ~LogCapture() { logger::remove_sink(id_); }

  // The messages logged at `level`, in order.
  std::vector<std::string> at(logger::Level level) const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> out;
    for (const auto& [l, m] : lines_) {
      if (l == level) out.push_back(m);
    }
    return out;
  }
  bool has(logger::Level level, const std::string& text) const {
    for (const auto& m : at(level)) {
      if (m.find(text) != std::string::npos) return true;
    }
    return false;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::pair<logger::Level, std::string>> lines_;
  int id_;
};

// True when `pid` names no process any more (it was reaped: no zombie either).
bool process_gone(pid_t pid) { return ::kill(pid, 0) == -1 && errno == ESRCH; }

// The hexadecimal signal mask `field` (SigBlk, SigIgn, ...) of /proc/<pid>/status.
uint64_t proc_signal_mask(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      return std::stoull(line.substr(field.size() + 1), nullptr, 16);
    }
  }
  return 0;
}
uint64_t signal_bit(int sig) { return uint64_t{1} << (sig - 1); }

// Waits up to 2 s for `pred`.
template <typename Pred>
bool wait_for(Pred pred) {
  const auto deadline = Clock::now() + 2s;
  while (!pred()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

std::shared_ptr<ChildProcess> sleeper() {
  return std::make_shared<ChildProcess>(std::vector<std::string>{"sleep", "30"});
}

// A thread that counts until asked to stop.
std::shared_ptr<StoppableThread> counter_thread(std::shared_ptr<std::atomic<int>> count,
                                                std::string name = "counter") {
  return std::make_shared<StoppableThread>(std::move(name), [count](const std::atomic<bool>& stop) {
    while (!stop) {
      ++*count;
      std::this_thread::sleep_for(1ms);
    }
  });
}

// Runs `fn` in one hook of a callback placed after the one under test.
CallbackPtr at_before_train(std::function<void()> fn) {
  return std::make_shared<CallbackFactory>(
      CallbackFactoryOptions().before_train([fn](CallbackFactory&) { fn(); }));
}

class OnStep : public Callback {
 public:
  explicit OnStep(std::function<void()> fn) : fn_(std::move(fn)) {}

 protected:
  void _trigger_step() override { fn_(); }
  std::function<void()> fn_;
};

// ---- StartProcOrThread ----

TEST(StartProcOrThread, StartsAThreadInBeforeTrainAndJoinsItInAfterTrain) {
  auto count = std::make_shared<std::atomic<int>>(0);
  auto thread = counter_thread(count);
  bool alive_at_setup = true;
  bool alive_in_before_train = false;
  auto probe = std::make_shared<CallbackFactory>(
      CallbackFactoryOptions()
          .setup_graph([&](CallbackFactory&) { alive_at_setup = thread->alive(); })
          .before_train([&](CallbackFactory&) { alive_in_before_train = thread->alive(); }));
  run_noop({std::make_shared<StartProcOrThread>(std::vector<StartablePtr>{thread}), probe}, 2, 1,
           1);
  EXPECT_FALSE(alive_at_setup);
  EXPECT_TRUE(alive_in_before_train);
  EXPECT_FALSE(thread->alive());
  EXPECT_TRUE(thread->stop_requested());
  EXPECT_EQ(thread->error(), nullptr);
}

TEST(StartProcOrThread, ThreadRunsDuringTheSteps) {
  auto count = std::make_shared<std::atomic<int>>(0);
  auto thread = counter_thread(count);
  int seen_in_steps = 0;
  bool alive_in_steps = true;
  auto probe = std::make_shared<OnStep>([&] {
    wait_for([&] { return count->load() > 0; });
    seen_in_steps = std::max(seen_in_steps, count->load());
    alive_in_steps = alive_in_steps && thread->alive();
  });
  run_noop({std::make_shared<StartProcOrThread>(std::vector<StartablePtr>{thread}), probe}, 3, 1,
           2);
  EXPECT_GT(seen_in_steps, 0);
  EXPECT_TRUE(alive_in_steps);
  EXPECT_FALSE(thread->alive());
  const int final_count = count->load();
  std::this_thread::sleep_for(5ms);
  EXPECT_EQ(count->load(), final_count);  // it has really ended
}

TEST(StartProcOrThread, ChildProcessIsStoppedAndReapedAfterTraining) {
  auto child = sleeper();
  pid_t pid_in_training = -1;
  bool alive_in_training = false;
  const auto start = Clock::now();
  run_noop(
      {std::make_shared<StartProcOrThread>(std::vector<StartablePtr>{child}), at_before_train([&] {
         pid_in_training = child->pid();
         alive_in_training = child->alive() && !process_gone(child->pid());
       })},
      2, 1, 2);
  EXPECT_LT(Clock::now() - start, 2s);
  ASSERT_GT(pid_in_training, 0);
  EXPECT_TRUE(alive_in_training);
  EXPECT_FALSE(child->alive());
  EXPECT_TRUE(process_gone(pid_in_training));
  int status = 0;
  EXPECT_EQ(::waitpid(pid_in_training, &status, WNOHANG), -1);  // already reaped
  EXPECT_EQ(errno, ECHILD);
  EXPECT_EQ(child->exit_status(), -SIGTERM);
}

TEST(StartProcOrThread, ChildIgnoringSigtermIsKilledAfterTheGracePeriodWithAWarning) {
  auto child = std::make_shared<ChildProcess>(
      std::vector<std::string>{"sh", "-c", "trap '' TERM; exec sleep 30"}, "stubborn");
  LogCapture log;
  const auto start = Clock::now();
  run_noop({std::make_shared<StartProcOrThread>(std::vector<StartablePtr>{child},
                                                StartProcOrThreadOptions().grace(200ms)),
            at_before_train([&] {
              // Wait until the shell has run `trap`, or SIGTERM would end it at once.
              ASSERT_TRUE(wait_for(
                  [&] { return proc_signal_mask(child->pid(), "SigIgn") & signal_bit(SIGTERM); }));
            })},
           1, 1, 1);
  const auto took = Clock::now() - start;
  EXPECT_GE(took, 200ms);
  EXPECT_LT(took, 2s);
  EXPECT_FALSE(child->alive());
  EXPECT_TRUE(process_gone(child->pid()));
  EXPECT_EQ(child->exit_status(), -SIGKILL);
  EXPECT_TRUE(log.has(logger::Level::kWarning,
                      "Process stubborn (pid " + std::to_string(child->pid()) +
                          ") did not exit within 200 ms of SIGTERM; sent SIGKILL."));
  EXPECT_TRUE(log.at(logger::Level::kError).empty());
}

TEST(StartProcOrThread, FailureInALaterBeforeTrainStillStopsTheProcess) {
  auto child = sleeper();
  bool alive_before_failure = false;
  EXPECT_THROW(run_noop({std::make_shared<StartProcOrThread>(std::vector<StartablePtr>{child}),
                         at_before_train([&] {
                           alive_before_failure = child->alive();
                           throw std::runtime_error("boom");
                         })},
                        2, 1, 1),
               CallbackError);
  EXPECT_TRUE(alive_before_failure);
  EXPECT_FALSE(child->alive());
  EXPECT_TRUE(process_gone(child->pid()));
}

TEST(StartProcOrThread, FailureInAStepStillStopsTheProcessAndTheThread) {
  auto child = sleeper();
  auto count = std::make_shared<std::atomic<int>>(0);
  auto thread = counter_thread(count);
  auto failing = std::make_shared<OnStep>([] { throw std::runtime_error("step failed"); });
  EXPECT_THROW(
      run_noop(
          {std::make_shared<StartProcOrThread>(std::vector<StartablePtr>{child, thread}), failing},
          2, 1, 1),
      CallbackError);
  EXPECT_FALSE(child->alive());
  EXPECT_TRUE(process_gone(child->pid()));
  EXPECT_FALSE(thread->alive());
}

TEST(StartProcOrThread, MissingProgramFailsTrainingNamingItAndStopsWhatHadStarted) {
  auto child = sleeper();
  auto missing = std::make_shared<ChildProcess>(
      std::vector<std::string>{"trainpack-no-such-program", "--flag"});
  // stop_at_last(false) concerns a successful start: a failed start leaves nothing running.
  auto cb = std::make_shared<StartProcOrThread>(std::vector<StartablePtr>{child, missing},
                                                StartProcOrThreadOptions().stop_at_last(false));
  try {
    run_noop({cb}, 1, 1, 1);
    FAIL() << "training should have failed";
  } catch (const CallbackError& e) {
    EXPECT_EQ(e.callback(), "StartProcOrThread");
    EXPECT_NE(std::string(e.what()).find("'trainpack-no-such-program'"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(child->alive());
  EXPECT_TRUE(process_gone(child->pid()));
  EXPECT_FALSE(missing->alive());
  EXPECT_EQ(missing->pid(), -1);
}

TEST(StartProcOrThread, StopAtLastFalseLeavesTheProcessRunningUntilItsDestructor) {
  auto child = sleeper();
  auto cb = std::make_shared<StartProcOrThread>(std::vector<StartablePtr>{child},
                                                StartProcOrThreadOptions().stop_at_last(false));
  run_noop({cb}, 2, 1, 1);
  ASSERT_TRUE(child->alive());
  const pid_t pid = child->pid();
  EXPECT_FALSE(process_gone(pid));
  cb.reset();
  EXPECT_FALSE(process_gone(pid));  // the test still holds the child
  child.reset();                    // the last reference: the destructor stops and reaps it
  EXPECT_TRUE(process_gone(pid));
}

TEST(StartProcOrThread, LogsStartingWithAllNamesAndStoppingForEachAliveItem) {
  auto count = std::make_shared<std::atomic<int>>(0);
  auto thread = counter_thread(count, "counter");
  auto child = std::make_shared<ChildProcess>(std::vector<std::string>{"sleep", "30"}, "napper");
  auto done = std::make_shared<ChildProcess>(std::vector<std::string>{"true"});
  LogCapture log;
  run_noop({std::make_shared<StartProcOrThread>(std::vector<StartablePtr>{thread, child, done}),
            at_before_train([&] { ASSERT_TRUE(wait_for([&] { return !done->alive(); })); })},
           1, 1, 1);
  std::vector<std::string> ours;
  for (const auto& m : log.at(logger::Level::kInfo)) {
    if (m.rfind("Starting ", 0) == 0 || m.rfind("Stopping ", 0) == 0) ours.push_back(m);
  }
  // `true` had already exited: it is not stopped.
  const std::vector<std::string> expected = {"Starting counter, napper, true ...",
                                             "Stopping counter ...", "Stopping napper ..."};
  EXPECT_EQ(ours, expected);
  EXPECT_EQ(done->exit_status(), 0);
}

TEST(StartProcOrThread, ThreadThatIgnoresTheStopFlagIsReportedAndJoinedByItsDestructor) {
  auto release = std::make_shared<std::atomic<bool>>(false);
  auto thread = std::make_shared<StoppableThread>("stubborn", [release](const std::atomic<bool>&) {
    while (!*release) std::this_thread::sleep_for(1ms);
  });
  LogCapture log;
  run_noop({std::make_shared<StartProcOrThread>(std::vector<StartablePtr>{thread},
                                                StartProcOrThreadOptions().grace(50ms))},
           1, 1, 1);
  EXPECT_EQ(log.at(logger::Level::kError),
            std::vector<std::string>{"Cannot join thread stubborn."});
  EXPECT_TRUE(thread->alive());
  *release = true;
  thread.reset();  // joins
}

TEST(StartProcOrThread, IsNotChiefOnly) {
  StartProcOrThread cb({sleeper()});
  EXPECT_FALSE(cb.chief_only());
  EXPECT_EQ(cb.name(), "StartProcOrThread");
}

template <typename Fn>
void expect_invalid_argument(Fn&& fn, const std::vector<std::string>& words) {
  try {
    fn();
    FAIL() << "no std::invalid_argument thrown";
  } catch (const std::invalid_argument& e) {
    for (const auto& w : words) {
      EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
    }
  }
}

TEST(StartProcOrThread, RejectsAnEmptyList) {
  expect_invalid_argument([] { StartProcOrThread cb({}); }, {"StartProcOrThread", "startables"});
}

TEST(StartProcOrThread, RejectsANullEntry) {
  expect_invalid_argument(
      [] {
        StartProcOrThread cb({sleeper(), nullptr});
      },
      {"StartProcOrThread", "startables[1]"});
}

TEST(StartProcOrThread, RejectsANegativeGrace) {
  expect_invalid_argument(
      [] { StartProcOrThread cb({sleeper()}, StartProcOrThreadOptions().grace(-1ms)); },
      {"StartProcOrThread", "grace", "-1"});
}

// ---- ChildProcess ----

TEST(ChildProcess, RejectsEmptyArgv) {
  expect_invalid_argument([] { ChildProcess p({}); }, {"ChildProcess", "argv"});
  expect_invalid_argument([] { ChildProcess p({""}); }, {"ChildProcess", "argv[0]"});
}

TEST(ChildProcess, MissingProgramThrowsNamingTheProgramAndTheReason) {
  ChildProcess p({"trainpack-no-such-program"});
  try {
    p.start();
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(
        e.what(),
        "ChildProcess: cannot start 'trainpack-no-such-program': No such file or directory");
  }
  EXPECT_FALSE(p.alive());
  EXPECT_TRUE(p.stop(10ms));
}

TEST(ChildProcess, NameDefaultsToTheProgram) {
  EXPECT_EQ(ChildProcess({"sleep", "1"}).name(), "sleep");
  EXPECT_EQ(ChildProcess({"sleep", "1"}, "nap").name(), "nap");
}

TEST(ChildProcess, ReportsTheExitCodeOnceItHasEnded) {
  ChildProcess p({"sh", "-c", "exit 3"});
  EXPECT_EQ(p.pid(), -1);
  EXPECT_FALSE(p.exit_status().has_value());
  p.start();
  EXPECT_GT(p.pid(), 0);
  ASSERT_TRUE(wait_for([&] { return !p.alive(); }));
  EXPECT_EQ(p.exit_status(), 3);
  EXPECT_TRUE(process_gone(p.pid()));
  EXPECT_TRUE(p.stop(10ms));  // nothing to do
}

TEST(ChildProcess, StartsWithSigintBlockedSoCtrlCDoesNotEndIt) {
  ChildProcess p({"sleep", "30"});
  p.start();
  EXPECT_TRUE(proc_signal_mask(p.pid(), "SigBlk") & signal_bit(SIGINT));
  EXPECT_FALSE(proc_signal_mask(p.pid(), "SigBlk") & signal_bit(SIGTERM));
  ASSERT_EQ(::kill(p.pid(), SIGINT), 0);
  std::this_thread::sleep_for(50ms);
  EXPECT_TRUE(p.alive());
  EXPECT_TRUE(p.stop(1s));
  EXPECT_EQ(p.exit_status(), -SIGTERM);
}

TEST(ChildProcess, StopWithTheLargestGraceWaitsForTheChild) {
  ChildProcess p({"sleep", "30"});
  p.start();
  EXPECT_TRUE(p.stop(std::chrono::milliseconds::max()));
  EXPECT_EQ(p.exit_status(), -SIGTERM);
}

TEST(ChildProcess, DestructorStopsAndReapsARunningChild) {
  pid_t pid;
  {
    ChildProcess p({"sleep", "30"});
    p.start();
    pid = p.pid();
    EXPECT_FALSE(process_gone(pid));
  }
  EXPECT_TRUE(process_gone(pid));
}

TEST(ChildProcess, StartingTwiceIsALogicError) {
  ChildProcess p({"sleep", "30"});
  p.start();
  EXPECT_THROW(p.start(), std::logic_error);
  EXPECT_TRUE(p.stop(1s));
}

// ---- StoppableThread ----

TEST(StoppableThread, RejectsAnEmptyFunction) {
  expect_invalid_argument([] { StoppableThread t("t", nullptr); }, {"StoppableThread", "fn"});
}

TEST(StoppableThread, StopBeforeStartIsANoOp) {
  StoppableThread t("idle", [](const std::atomic<bool>&) {});
  EXPECT_FALSE(t.alive());
  EXPECT_TRUE(t.stop(0ms));
}

TEST(StoppableThread, ExceptionEscapingFnIsLoggedWithTheNameAndReported) {
  LogCapture log;
  StoppableThread t("thrower",
                    [](const std::atomic<bool>&) { throw std::runtime_error("bad sample"); });
  t.start();
  ASSERT_TRUE(wait_for([&] { return !t.alive(); }));
  EXPECT_TRUE(t.stop(0ms));
  ASSERT_NE(t.error(), nullptr);
  EXPECT_THROW(std::rethrow_exception(t.error()), std::runtime_error);
  EXPECT_EQ(log.at(logger::Level::kError),
            std::vector<std::string>{"Exception in thread thrower: bad sample"});
}

TEST(StoppableThread, StopThatTimesOutReturnsFalseAndTheDestructorJoins) {
  LogCapture log;
  auto release = std::make_shared<std::atomic<bool>>(false);
  std::atomic<bool> finished{false};
  {
    StoppableThread t("slow", [release, &finished](const std::atomic<bool>&) {
      while (!*release) std::this_thread::sleep_for(1ms);
      std::this_thread::sleep_for(20ms);
      finished = true;
    });
    t.start();
    EXPECT_FALSE(t.stop(20ms));
    EXPECT_TRUE(t.alive());
    *release = true;
  }  // the destructor blocks until fn returns
  EXPECT_TRUE(finished);
  EXPECT_EQ(log.at(logger::Level::kError), std::vector<std::string>{"Cannot join thread slow."});
}

TEST(StoppableThread, DestructorRequestsAStopAndJoins) {
  auto count = std::make_shared<std::atomic<int>>(0);
  {
    auto t = counter_thread(count);
    t->start();
    ASSERT_TRUE(wait_for([&] { return count->load() > 0; }));
  }
  const int final_count = count->load();
  std::this_thread::sleep_for(5ms);
  EXPECT_EQ(count->load(), final_count);
}

TEST(StoppableThread, StopWithTheLargestGraceWaitsForTheThread) {
  StoppableThread t("brief", [](const std::atomic<bool>& stop) {
    while (!stop) std::this_thread::sleep_for(1ms);
  });
  t.start();
  EXPECT_TRUE(t.stop(std::chrono::milliseconds::max()));
  EXPECT_FALSE(t.alive());
}

TEST(StoppableThread, StartingTwiceIsALogicError) {
  auto count = std::make_shared<std::atomic<int>>(0);
  auto t = counter_thread(count);
  t->start();
  EXPECT_THROW(t->start(), std::logic_error);
  EXPECT_TRUE(t->stop(1s));
}

}  // namespace concurrency_test
}  // namespace trainpack
