// trainpack_timeout_child: the process that session_run_timeout_test.cpp watches end. It trains a
// trainer without a model (hooks and counters only) with a SessionRunTimeout, logging into
// <log dir>; the step at global_step <hang at> never returns (it sleeps forever, as a rank stuck
// in a collective does). Before blocking it prints `hanging at global_step <n>` on stdout.
//
//   trainpack_timeout_child <log dir> <timeout_in_ms> <grace_period_ms> <hang at>
//
// Exit status: SessionRunTimeout::kExitCode (124) when the watchdog ended it, as expected; 0 when
// training finished (the hang did not happen); 1 on an error (printed to stderr); 2 on bad
// arguments. TORCHELASTIC_ERROR_FILE, when set, is where the watchdog writes its message.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <thread>

#include "trainpack/callbacks/session_run_timeout.h"
#include "trainpack/core/trainer.h"
#include "trainpack/utils/logger.h"

#include "programs/programs.h"

namespace timeout_child {

using namespace trainpack;  // NOLINT(google-build-using-namespace): a test program

// The report line's file descriptor: the original stdout (main sends the logger's lines, which go
// to stdout, to stderr).
int g_report_fd = STDOUT_FILENO;

class HangingTrainer : public Trainer {
 public:
  explicit HangingTrainer(int64_t hang_at) : hang_at_(hang_at) {}
  void run_step() override {
    hooked_run([this](StepContext&) {
      if (global_step() != hang_at_) return;
      const std::string line = "hanging at global_step " + std::to_string(global_step()) + "\n";
      if (::write(g_report_fd, line.data(), line.size()) < 0) std::perror("write");
      while (true) std::this_thread::sleep_for(std::chrono::hours(1));
    });
  }

 private:
  int64_t hang_at_;
};

}  // namespace timeout_child

// The program's main, run by trainpack_test_programs (tests/programs/main.cpp) when it is started
// as trainpack_timeout_child.
int timeout_child_main(int argc, char** argv) {
  using namespace timeout_child;  // NOLINT(google-build-using-namespace): its own helpers
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s <log dir> <timeout_in_ms> <grace_period_ms> <hang at>\n",
                 argv[0]);
    return 2;
  }
  try {
    // The logger's lines go to stderr: stdout carries the one report line.
    g_report_fd = ::dup(STDOUT_FILENO);
    if (g_report_fd < 0 || ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
      std::perror("trainpack_timeout_child: dup");
      return 1;
    }
    logger::set_logger_dir(argv[1], 'k');
    auto timeout = std::make_shared<SessionRunTimeout>(
        std::atoll(argv[2]),
        SessionRunTimeoutOptions().grace_period(std::chrono::milliseconds(std::atoll(argv[3]))));
    HangingTrainer trainer(std::atoll(argv[4]));
    trainer.train({timeout}, {}, /*steps_per_epoch=*/5, /*starting_epoch=*/1, /*max_epoch=*/2);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainpack_timeout_child: %s\n", e.what());
    return 1;
  }
}
