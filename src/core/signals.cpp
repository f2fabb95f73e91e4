#include "trainpack/detail/signals.h"

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

#include "trainpack/utils/process_io.h"

namespace trainpack {
namespace detail {

std::atomic<int> g_pending_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal flag must be lock-free");

namespace {

// Under a launcher that forwards the signals it gets to its workers (torchrun), a Ctrl-C at a
// terminal reaches a worker twice: from the terminal (the whole foreground process group) and
// from the launcher a moment later. The first repeat of the same signal within this window of
// the first is that same press, not the user insisting. 0: no launcher (every repeat insists).
std::atomic<int64_t> g_same_press_window_ns{0};
std::atomic<int64_t> g_first_signal_ns{0};
std::atomic<bool> g_repeat_absorbed{false};
static_assert(std::atomic<int64_t>::is_always_lock_free, "read in a signal handler");

int64_t monotonic_ns() {  // clock_gettime is async-signal-safe
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

extern "C" void on_stop_signal(int sig) {
  stop_waiting_for_console();  // the stop checkpoint must not wait for a reader of stdout
  int expected = 0;
  if (g_pending_signal.compare_exchange_strong(expected, sig)) {
    g_first_signal_ns.store(monotonic_ns());
    return;
  }
  const int64_t window = g_same_press_window_ns.load();
  if (expected == sig && window > 0 && !g_repeat_absorbed.exchange(true) &&
      monotonic_ns() - g_first_signal_ns.load() <= window) {
    return;  // the launcher's copy of the first signal
  }
  // A second signal: the user insists. Default action (terminate) right away.
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// The line a notice signal writes, built before the handler is installed (the handler may only
// call async-signal-safe functions: write, signal, raise).
struct Notice {
  int sig;
  char line[200];
};
Notice g_notices[3];

extern "C" void on_notice_signal(int sig) {
  // The process is about to end: a stderr that nobody reads must not hold it. The line (shorter
  // than PIPE_BUF) is written only when stderr can take it now (poll is async-signal-safe).
  pollfd err{STDERR_FILENO, POLLOUT, 0};
  const bool writable = ::poll(&err, 1, 0) > 0;
  for (const Notice& n : g_notices) {
    if (n.sig != sig || !writable) continue;
    ssize_t ignored = ::write(STDERR_FILENO, n.line, strlen(n.line));
    (void)ignored;
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);  // delivered when the handler returns: the default action, termination
}

}  // namespace

std::string signal_name(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGUSR2:
      return "SIGUSR2";
    case SIGALRM:
      return "SIGALRM";
    case SIGVTALRM:
      return "SIGVTALRM";
#ifdef SIGPWR
    case SIGPWR:
      return "SIGPWR";
#endif
    default:
      return "signal " + std::to_string(sig);
  }
}

const std::vector<int>& default_stop_signals() {
  static const std::vector<int> signals{SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
  return signals;
}

const std::vector<int>& notice_signals() {
  static const std::vector<int> signals{SIGALRM, SIGVTALRM,
#ifdef SIGPWR
                                        SIGPWR
#endif
  };
  return signals;
}

struct SignalHandlerScope::Saved {
  std::vector<std::pair<int, struct sigaction>> previous;  // for every signal whose handler was set
};

SignalHandlerScope::SignalHandlerScope(bool enable, const std::vector<int>& stop_signals) {
  g_pending_signal.store(0);
  g_repeat_absorbed.store(false);
  // torchrun (torch.distributed.elastic) sets TORCHELASTIC_RUN_ID in every worker's environment.
  g_same_press_window_ns.store(std::getenv("TORCHELASTIC_RUN_ID") != nullptr
                                   ? kLauncherRepeatWindowMs * int64_t{1000000}
                                   : 0);
  if (!enable) return;
  saved_ = new Saved();
  struct sigaction stop {};
  stop.sa_handler = on_stop_signal;
  sigemptyset(&stop.sa_mask);
  stop.sa_flags = SA_RESTART;  // blocking I/O in the step resumes; the loop polls the flag
  for (const int sig : stop_signals) {
    struct sigaction previous {};
    if (sigaction(sig, nullptr, &previous) != 0) continue;
    // A signal that the process ignores (`nohup`, `cmd &` in a script) stays ignored, as in
    // Python.
    if (previous.sa_handler == SIG_IGN) continue;
    if (sigaction(sig, &stop, nullptr) == 0) saved_->previous.emplace_back(sig, previous);
  }
  struct sigaction notice {};
  notice.sa_handler = on_notice_signal;
  sigemptyset(&notice.sa_mask);
  size_t n = 0;
  for (const int sig : notice_signals()) {
    if (std::find(stop_signals.begin(), stop_signals.end(), sig) != stop_signals.end()) continue;
    struct sigaction previous {};
    if (sigaction(sig, nullptr, &previous) != 0) continue;
    // Only the default action: a handler of the program's own (a profiler's SIGVTALRM, a
    // watchdog's SIGALRM) or an ignored signal is left alone.
    if ((previous.sa_flags & SA_SIGINFO) != 0 || previous.sa_handler != SIG_DFL) continue;
    Notice& line = g_notices[n++];
    line.sig = sig;
    snprintf(line.line, sizeof line.line,
             "trainpack: received %s; its default action ends the process now, without a "
             "checkpoint (Trainer::set_stop_signals can make it a stop signal)\n",
             signal_name(sig).c_str());
    if (sigaction(sig, &notice, nullptr) == 0) saved_->previous.emplace_back(sig, previous);
  }
}

SignalHandlerScope::~SignalHandlerScope() {
  if (saved_ != nullptr) {
    for (const auto& [sig, previous] : saved_->previous) sigaction(sig, &previous, nullptr);
    delete saved_;
  }
  g_pending_signal.store(0);
}

}  // namespace detail
}  // namespace trainpack
