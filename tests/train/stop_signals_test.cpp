// The signals a scheduler sends before it kills a job: SIGUSR1 and SIGUSR2 (SLURM's --signal,
// Lightning's requeue) stop a training process as SIGTERM does, with the checkpoint of the stop
// step, the log line and the exit status 128 + signal; SIGALRM is announced before its default
// action; the set of stop signals is the trainer's to change. The child is
// tests/train/resume_child (trainpack_resume_child --stop-test).
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "support/child_process.h"
#include "support/sanitizers.h"
#include "support/temp_dir.h"
#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"
#include "trainpack/utils/checkpoint.h"

#ifndef TRAINPACK_RESUME_CHILD
#error "TRAINPACK_RESUME_CHILD (the path of trainpack_resume_child) must be defined"
#endif

namespace trainpack {
namespace stop_signals_test {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct ChildRun {
  std::vector<std::string> lines;  // what it printed on stdout
  std::string log;                 // its stderr (the logger's lines)
  int status = 0;                  // from waitpid
  bool hung = false;               // still running a minute after it started
};

// Runs the child with --stop-test on `dir` and sends it `sig` once it printed "step 3" (a step
// takes 50 ms, the run 40 steps).
ChildRun run_and_signal(const fs::path& dir, int sig) {
  ChildRun run;
  const fs::path err_file = dir / "child-stderr.txt";
  testing::SpawnOptions options;
  options.stderr_file = err_file.string();
  const testing::Spawned child =
      testing::spawn({TRAINPACK_RESUME_CHILD, (dir / "log").string(), "--stop-test"}, options);
  if (child.pid < 0) return run;
  const pid_t pid = child.pid;
  const Clock::time_point give_up = Clock::now() + std::chrono::seconds(60);
  bool sent = false;
  std::string pending;
  for (;;) {
    if (!run.hung && Clock::now() >= give_up) {
      ::kill(pid, SIGKILL);
      run.hung = true;
    }
    if (testing::read_available(child.out_fd, 100, &pending) == testing::ReadResult::kEnd) break;
    for (std::string& line : testing::take_lines(&pending)) {
      run.lines.push_back(std::move(line));
      if (!sent && run.lines.back() == "step 3") {
        ::kill(pid, sig);
        sent = true;
      }
    }
  }
  ::close(child.out_fd);
  while (::waitpid(pid, &run.status, 0) < 0 && errno == EINTR) {
  }
  std::ifstream in(err_file);
  run.log.assign(std::istreambuf_iterator<char>(in), {});
  return run;
}

std::string describe(const ChildRun& run) {
  std::ostringstream out;
  out << (run.hung ? "hung (killed after a minute), " : "") << "status " << run.status
      << ", printed:";
  for (const auto& line : run.lines) out << " [" << line << "]";
  out << "\nits log:\n" << run.log;
  return out.str();
}

// The step of the "stopped <name> <step>" line, or -1.
int64_t stopped_at(const ChildRun& run, const std::string& name) {
  const std::string prefix = "stopped " + name + " ";
  for (const auto& line : run.lines) {
    if (line.rfind(prefix, 0) == 0) return std::stoll(line.substr(prefix.size()));
  }
  return -1;
}

// SIGTERM, and the scheduler's early warnings SIGUSR1 and SIGUSR2: the same clean stop.
TEST(StopSignals, SigusrOneAndTwoStopWithTheCheckpointOfTheStopStepLikeSigterm) {
  TRAINPACK_SKIP_FORK_UNDER_TSAN();
  const fs::path root = testing::make_temp_dir("stop_signals");
  for (const int sig : {SIGTERM, SIGUSR1, SIGUSR2}) {
    const std::string name = stop_signal_name(sig);
    SCOPED_TRACE(name);
    const fs::path dir = root / name;
    fs::create_directories(dir);
    const ChildRun run = run_and_signal(dir, sig);
    ASSERT_FALSE(run.hung) << describe(run);
    // Not killed by the signal's default action: it exits with the conventional status.
    ASSERT_TRUE(WIFEXITED(run.status)) << describe(run);
    EXPECT_EQ(WEXITSTATUS(run.status), 128 + sig) << describe(run);
    EXPECT_EQ(WEXITSTATUS(run.status), exit_code_for_signal(sig));
    const int64_t step = stopped_at(run, name);
    ASSERT_GE(step, 3) << describe(run);
    EXPECT_LT(step, 8) << "it should stop in the first epoch: " << describe(run);
    EXPECT_NE(run.log.find("Detected " + name + " and exiting main loop."), std::string::npos)
        << describe(run);
    EXPECT_NE(run.log.find("Saving a checkpoint at global_step=" + std::to_string(step) +
                           " before exiting on " + name + "."),
              std::string::npos)
        << describe(run);
    EXPECT_TRUE(checkpoint_exists((dir / "log" / ("model-" + std::to_string(step))).string()))
        << describe(run);
  }
  if (!HasFailure()) fs::remove_all(root);
}

// SIGALRM's default action ends the process (a watchdog's alarm must still work), but not
// silently: one line on stderr names it first.
TEST(StopSignals, SigalrmIsAnnouncedThenTakesItsDefaultAction) {
  TRAINPACK_SKIP_FORK_UNDER_TSAN();
  const fs::path root = testing::make_temp_dir("stop_signals_alrm");
  const ChildRun run = run_and_signal(root, SIGALRM);
  ASSERT_FALSE(run.hung) << describe(run);
  ASSERT_TRUE(WIFSIGNALED(run.status)) << describe(run);
  EXPECT_EQ(WTERMSIG(run.status), SIGALRM) << describe(run);
  EXPECT_NE(run.log.find("trainpack: received SIGALRM; its default action ends the process now, "
                         "without a checkpoint (Trainer::set_stop_signals can make it a stop "
                         "signal)\n"),
            std::string::npos)
      << describe(run);
  if (!HasFailure()) fs::remove_all(root);
}

// In one process: the default set, and a set of the program's own.
TEST(StopSignals, TheSetOfStopSignalsIsTheTrainers) {
  NoOpTrainer defaults;
  EXPECT_EQ(defaults.stop_signals(),
            (std::vector<int>{SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}));
  EXPECT_EQ(default_stop_signals(), defaults.stop_signals());
  EXPECT_EQ(exit_code_for_signal(SIGUSR1), 128 + SIGUSR1);
  EXPECT_EQ(stop_signal_name(SIGUSR2), "SIGUSR2");

  // SIGALRM made a stop signal: it stops training at the next step boundary as SIGTERM does.
  NoOpTrainer trainer;
  trainer.set_stop_signals({SIGTERM, SIGALRM});
  auto raiser = std::make_shared<testing::ActionCallback>();
  raiser->trigger_step_fn = [](testing::ActionCallback& self) {
    if (self.global_step() == 2) std::raise(SIGALRM);
  };
  testing::LogCapture log;
  trainer.train({raiser}, {}, 4, 1, 2);
  EXPECT_EQ(trainer.received_signal(), SIGALRM);
  EXPECT_EQ(trainer.global_step(), 2);
  EXPECT_TRUE(log.contains("Detected SIGALRM and exiting main loop."));
  // Every handler is the previous one again after training.
  for (const int sig : {SIGTERM, SIGALRM, SIGUSR1, SIGVTALRM}) {
    struct sigaction current {};
    sigaction(sig, nullptr, &current);
    EXPECT_EQ(current.sa_handler, SIG_DFL) << stop_signal_name(sig);
  }
}

}  // namespace stop_signals_test
}  // namespace trainpack
