// Signal handling for the training loop. The stop signals (by default SIGINT, SIGTERM, SIGHUP,
// SIGQUIT, SIGUSR1 and SIGUSR2) only record the signal; the loop polls it at step boundaries. A
// second stop signal while one is pending restores the default action and re-raises, so a second
// Ctrl-C ends the process at once; except under torchrun, where the first repeat of the same
// signal within kLauncherRepeatWindowMs is the launcher forwarding the same Ctrl-C (which the
// terminal also sent to every worker), so that the stop checkpoint is still written. A stop
// signal also tells the console writers not to wait for a reader (process_io.h). The notice signals
// (SIGALRM, SIGVTALRM, SIGPWR, unless they are stop signals) are announced with one line on stderr,
// then take their default action (the process ends, as without trainpack).
#pragma once

#include <signal.h>

#include <atomic>
#include <string>
#include <vector>

namespace trainpack {
namespace detail {

// Under torchrun: how long after a stop signal the same signal is still the same Ctrl-C.
constexpr int64_t kLauncherRepeatWindowMs = 2000;

// The pending signal (0 if none). Lock-free, read on every step.
extern std::atomic<int> g_pending_signal;

inline int pending_signal() { return g_pending_signal.load(std::memory_order_relaxed); }

// The stop signals unless the trainer is told otherwise (Trainer::set_stop_signals): SIGINT,
// SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 (why each: docs/trainer.md, "Signals: Ctrl-C and
// SIGTERM").
const std::vector<int>& default_stop_signals();

// The signals whose default action ends the process and that a scheduler or a timer may send
// (SIGALRM, SIGVTALRM, SIGPWR): announced, then their default action.
const std::vector<int>& notice_signals();

// "SIGINT", "SIGTERM", ..., "SIGPWR", else "signal <n>": the name of `sig` in messages.
std::string signal_name(int sig);

// Installs the handlers for its lifetime (when `enable`), restoring the previous ones after;
// clears the pending signal on both ends. A stop signal that was ignored stays ignored; a notice
// signal is announced only when it had its default action (not ignored, no handler of the
// program's own).
class SignalHandlerScope {
 public:
  explicit SignalHandlerScope(bool enable,
                              const std::vector<int>& stop_signals = default_stop_signals());
  ~SignalHandlerScope();
  SignalHandlerScope(const SignalHandlerScope&) = delete;
  SignalHandlerScope& operator=(const SignalHandlerScope&) = delete;

 private:
  struct Saved;
  Saved* saved_ = nullptr;
};

}  // namespace detail
}  // namespace trainpack
