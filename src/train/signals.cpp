#include "trainpack/detail/signals.h"

#include <signal.h>

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

}  // namespace

namespace {
// The signals that stop training at a step boundary: Ctrl-C, a scheduler's or kill's SIGTERM, a
// closed terminal or ssh session (SIGHUP), and Ctrl-\ (SIGQUIT, whose default action would dump
// core and lose the steps since the last checkpoint).
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
constexpr size_t kStopSignalCount = sizeof(kStopSignals) / sizeof(kStopSignals[0]);
}  // namespace

struct SignalHandlerScope::Saved {
  struct sigaction previous[kStopSignalCount];
};

SignalHandlerScope::SignalHandlerScope(bool enable) : enabled_(enable) {
  g_pending_signal.store(0);
  if (!enabled_) return;
  saved_ = new Saved();
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // blocking I/O in the step resumes; the loop polls the flag
  for (size_t i = 0; i < kStopSignalCount; ++i) {
    install(kStopSignals[i], action, &saved_->previous[i]);
  }
}

// A signal that the process ignores (`nohup`, `cmd &` in a script) stays ignored, as in Python.
void SignalHandlerScope::install(int sig, const struct sigaction& action,
                                 struct sigaction* previous) {
  sigaction(sig, nullptr, previous);
  if (previous->sa_handler == SIG_IGN) return;
  sigaction(sig, &action, nullptr);
}

SignalHandlerScope::~SignalHandlerScope() {
  if (enabled_) {
    for (size_t i = 0; i < kStopSignalCount; ++i) {
      sigaction(kStopSignals[i], &saved_->previous[i], nullptr);
    }
    delete saved_;
  }
  g_pending_signal.store(0);
}

}  // namespace detail
}  // namespace trainpack
