// Callbacks: the ordered group that the trainer calls, and CallbackTimeLogger, the slow-callback
// report printed after each epoch.
//
// The group calls each hook on its callbacks in registration order. At setup it works out, per
// hook, which callbacks override it; a hook is dispatched only to those, so a callback that does
// not override a hook costs nothing there. `trigger_epoch` is timed per callback: when the round
// takes 2 s or more, it logs `Callbacks took X.XXX sec in total. <name>: <time>; ...` naming the
// callbacks that took over 30% of it and over 1 s (the line ends after `in total. ` when none
// does). `after_train` is isolated: a callback that throws is logged as ERR `Exception in
// <name>.after_train(): <what>` and the others still run. Users need this class only to write a
// trainer-like driver.
//
// A StopTraining thrown in trigger_epoch ends the round there, but the monitors later in the list
// (and the Monitors collector) still run their trigger_epoch first: the epoch was trained, so it
// gets its stats.json entry and its event-file scalars.
//
// Differences from tensorpack: an exception thrown by a hook reaches the trainer as a
// CallbackError naming the callback and the hook (StopTraining passes through unchanged); the
// monitors record an epoch whose end was stopped (tensorpack skips them, losing that epoch's
// statistics).
#pragma once

#include <array>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "trainpack/core/callback.h"
#include "trainpack/core/exceptions.h"

namespace trainpack {

// Collects per-callback durations of one trigger_epoch round and logs the slow ones.
class CallbackTimeLogger {
 public:
  void add(std::string name, double seconds);
  double total() const { return total_; }
  // The line that log() would print, or "" when the round took under 2 s.
  std::string message() const;
  void log() const;

 private:
  std::vector<std::pair<std::string, double>> times_;
  double total_ = 0;
};

class Callbacks {
 public:
  explicit Callbacks(std::vector<CallbackPtr> callbacks);

  // Calls every callback's setup_graph in order, then builds the per-hook dispatch lists.
  void setup_graph(Trainer& trainer);
  void before_train() {
    dispatch(Hook::kBeforeTrain, [](Callback& cb) { cb.before_train(); });
  }
  void before_epoch() {
    dispatch(Hook::kBeforeEpoch, [](Callback& cb) { cb.before_epoch(); });
  }
  void after_epoch() {
    dispatch(Hook::kAfterEpoch, [](Callback& cb) { cb.after_epoch(); });
  }
  void trigger_step() {
    dispatch(Hook::kTriggerStep, [](Callback& cb) { cb.trigger_step(); });
  }
  void trigger_epoch();
  // Every callback's after_train; an exception is logged with the callback's name and the next
  // callback still runs. Returns the number of callbacks that threw.
  int after_train();

  // The callbacks that override `hook`, in order (built by setup_graph).
  const std::vector<Callback*>& dispatch_list(Hook hook) const {
    return lists_[static_cast<int>(hook)];
  }
  const std::vector<CallbackPtr>& callbacks() const { return callbacks_; }

  // Runs `fn` on every callback of `hook`'s list; an exception other than StopTraining is
  // rethrown as a CallbackError naming the callback (with the original nested).
  template <typename Fn>
  void dispatch(Hook hook, Fn&& fn) {
    const auto& list = dispatch_list(hook);
    size_t i = 0;
    try {
      for (; i < list.size(); ++i) fn(*list[i]);
    } catch (...) {
      rethrow_named(*list[i], hook);
    }
  }

  // Rethrows the exception in flight; anything but StopTraining or an already named
  // CallbackError is wrapped in a CallbackError naming `callback`.
  [[noreturn]] static void rethrow_named(const Callback& callback, Hook hook);

 private:
  std::vector<CallbackPtr> callbacks_;
  std::array<std::vector<Callback*>, kNumHooks> lists_;
};

}  // namespace trainpack
