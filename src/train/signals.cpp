#include "trainpack/detail/signals.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

namespace trainpack {
namespace detail {

std::atomic<int> g_pending_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal flag must be lock-free");

namespace {

extern "C" void on_stop_signal(int sig) {
  int expected = 0;
  if (!g_pending_signal.compare_exchange_strong(expected, sig)) {
    // A second signal: the user insists. Default action (terminate) right away.
    ::signal(sig, SIG_DFL);
    ::raise(sig);
  }
}

// The line a notice signal writes, built before the handler is installed (the handler may only
// call async-signal-safe functions: write, signal, raise).
struct Notice {
  int sig;
  char line[200];
};
Notice g_notices[3];

extern "C" void on_notice_signal(int sig) {
  for (const Notice& n : g_notices) {
    if (n.sig != sig) continue;
    ssize_t ignored = ::write(STDERR_FILENO, n.line, strlen(n.line));
    (void)ignored;
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);  // delivered when the handler returns: the default action, termination
}

const char* notice_name(int sig) {
  switch (sig) {
    case SIGALRM:
      return "SIGALRM";
    case SIGVTALRM:
      return "SIGVTALRM";
#ifdef SIGPWR
    case SIGPWR:
      return "SIGPWR";
#endif
    default:
      return "a signal";
  }
}

}  // namespace

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
             notice_name(sig));
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
