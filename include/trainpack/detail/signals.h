// SIGINT/SIGTERM/SIGHUP/SIGQUIT handling for the training loop. The handler only records the signal; the loop
// polls it at step boundaries. A second signal while one is pending restores the default action
// and re-raises, so a second Ctrl-C ends the process at once.
#pragma once

#include <signal.h>

#include <atomic>

namespace trainpack {
namespace detail {

// The pending signal (0 if none). Lock-free, read on every step.
extern std::atomic<int> g_pending_signal;

inline int pending_signal() { return g_pending_signal.load(std::memory_order_relaxed); }

// Installs the handlers for its lifetime (when `enable`), restoring the previous ones after;
// clears the pending signal on both ends. A signal that was ignored stays ignored.
class SignalHandlerScope {
 public:
  explicit SignalHandlerScope(bool enable);
  ~SignalHandlerScope();
  SignalHandlerScope(const SignalHandlerScope&) = delete;
  SignalHandlerScope& operator=(const SignalHandlerScope&) = delete;

 private:
  static void install(int sig, const struct sigaction& action, struct sigaction* previous);

  bool enabled_;
  struct Saved;
  Saved* saved_ = nullptr;
};

}  // namespace detail
}  // namespace trainpack
