// Wrappers that change when a callback runs: PeriodicTrigger, EnableCallbackIf, PeriodicCallback.
//
//   // Save every 2 epochs instead of every epoch:
//   std::make_shared<PeriodicTrigger>(saver, PeriodicTriggerOptions().every_k_epochs(2));
//   // Run a callback's step hooks only every 100 global steps:
//   std::make_shared<PeriodicCallback>(printer, PeriodicCallbackOptions().every_k_steps(100));
//
// PeriodicTrigger schedules the inner callback's `trigger()` only: the inner `trigger_epoch()` is
// never called (so a callback that works in an overridden `_trigger_epoch` does nothing under it),
// and `every_k_steps` is checked in trigger_step against the incremented global_step.
// PeriodicCallback gates every hook (except setup_graph, before_train, after_train and trigger);
// its predicate sees whatever the counters hold at the gated call: in before_run the global step
// before the increment, in trigger_step the one after. With every_k_steps=2, before/after_run are
// enabled in the runs that start at global_step 0, 2, 4, ... and trigger_step at 2, 4, 6, ...
//
// All three are ProxyCallbacks: they copy the inner callback's chief_only flag when constructed
// (set the flag first, then wrap), are named `<Wrapper>-<inner name>`, log nothing of their own,
// and are dispatched a hook only when it can reach the inner callback. A null inner callback is
// std::invalid_argument `ProxyCallback: callback is null`.
//
// Differences from tensorpack: none in timing (docs/tensorpack-differences.md #2: kept). A period
// is 0 for "not set"; a negative period is an error.
#pragma once

#include <cstdint>
#include <functional>

#include <torch/arg.h>

#include "trainpack/core/callback.h"

namespace trainpack {

struct PeriodicTriggerOptions {
  // Call trigger() when global_step (after the increment) is a multiple of it; 0: never.
  TORCH_ARG(int64_t, every_k_steps) = 0;
  // Call trigger() after epochs whose number is a multiple of it; 0: never.
  TORCH_ARG(int64_t, every_k_epochs) = 0;
  // Also call trigger() once in before_train.
  TORCH_ARG(bool, before_train) = false;
};

// PeriodicTrigger, hook by hook (what it calls on the inner callback):
//   before_train    before_train(), then trigger() if options.before_train (epoch_num =
//                   starting_epoch - 1)
//   trigger_step    trigger_step() (always), then trigger() if every_k_steps is set and the
//                   incremented global_step is a multiple of it (k = 3: global steps 3, 6, 9, ...)
//   trigger_epoch   NOT trigger_epoch(); trigger() if every_k_epochs is set and epoch_num is a
//                   multiple of it (k = 2: the ends of epochs 2, 4, ...; no "also after the last
//                   epoch" rule)
//   other hooks     the same hook (always)
// When both periods match at an epoch's last step, trigger() runs twice. A callback with both
// `_trigger_epoch` and `_trigger` (an epoch-based ScheduledHyperParamSetter) loses its epoch-end
// logic under it and runs only `_trigger` at the scheduled times.
// Errors (std::invalid_argument): `PeriodicTrigger: every_k_steps must be positive (or 0 for
// unset), got -1` (the same for every_k_epochs); `PeriodicTrigger: every_k_steps and
// every_k_epochs are both unset and before_train is false, which disables the triggerable; set
// every_k_steps or every_k_epochs`.
class PeriodicTrigger : public ProxyCallback {
 public:
  // Throws std::invalid_argument if a period is negative, or if no period is set and
  // before_train is false (the triggerable would never run).
  PeriodicTrigger(CallbackPtr triggerable, PeriodicTriggerOptions options);
  std::string name() const override { return "PeriodicTrigger-" + callback_->name(); }
  // Only the hooks that can reach the inner callback: trigger_step when it has step hooks or a
  // step period, trigger_epoch only with an epoch period, the rest as the inner callback needs.
  bool overrides(Hook hook) const override;

 protected:
  void _before_train() override;
  void _trigger_step() override;
  void _trigger_epoch() override;

 private:
  PeriodicTriggerOptions options_;
};

// Forwards the gated hooks (before_epoch, after_epoch, before_run, trigger_step, trigger_epoch)
// only while `pred(*this)` is true; setup_graph, before_train, after_train and trigger are always
// forwarded. before_run remembers its decision, and after_run follows it without evaluating the
// predicate again. The predicate receives the wrapper: `self.epoch_num()`, `self.global_step()`,
// `self.local_step()`, `self.trainer()`.
//   std::make_shared<EnableCallbackIf>(
//       cb, [](const EnableCallbackIf& self) { return self.epoch_num() >= 10; });
// Errors: an empty predicate is std::invalid_argument `EnableCallbackIf: pred is empty`.
class EnableCallbackIf : public ProxyCallback {
 public:
  using Predicate = std::function<bool(const EnableCallbackIf&)>;
  EnableCallbackIf(CallbackPtr callback, Predicate pred);
  std::string name() const override { return "EnableCallbackIf-" + callback_->name(); }
  // As the inner callback needs, and before_run whenever it needs after_run (before_run makes
  // the decision that after_run follows).
  bool overrides(Hook hook) const override;

 protected:
  void _before_epoch() override;
  void _after_epoch() override;
  RunArgs _before_run(const StepContext& ctx) override;
  void _after_run(const StepContext& ctx, const RunValues& values) override;
  void _trigger_step() override;
  void _trigger_epoch() override;
  EnableCallbackIf(CallbackPtr callback, Predicate pred, const char* class_name);

 private:
  Predicate pred_;
  bool enabled_in_run_ = false;
};

struct PeriodicCallbackOptions {
  // Enable when global_step is a multiple of it; 0: not set.
  TORCH_ARG(int64_t, every_k_steps) = 0;
  // Enable during epochs whose number is a multiple of it, and at the end of the last epoch;
  // 0: not set.
  TORCH_ARG(int64_t, every_k_epochs) = 0;
};

// EnableCallbackIf with tensorpack's periodic predicate, evaluated with the counters of each gated
// call: (k_s and gs % k_s == 0) or (k_e and ep % k_e == 0) or (k_e and ls == spe-1 and
// ep == max_epoch). It can only make a callback less frequent. every_k_epochs(2) over 3 epochs of
// 2 steps: every hook of epoch 2, then, in epoch 3, the last step's before_run / after_run /
// trigger_step, after_epoch and trigger_epoch; not before_epoch of epoch 3 (local_step is -1
// there: docs/tensorpack-differences.md #1). With only every_k_steps, the inner trigger_epoch runs
// only at epochs that end on a multiple of k.
// Errors (std::invalid_argument): `PeriodicCallback: every_k_steps must be positive (or 0 for
// unset), got -1` (the same for every_k_epochs); `PeriodicCallback: every_k_steps and
// every_k_epochs are both unset; set at least one`.
class PeriodicCallback : public EnableCallbackIf {
 public:
  // Throws std::invalid_argument if a period is negative or neither is set.
  PeriodicCallback(CallbackPtr callback, PeriodicCallbackOptions options);
  std::string name() const override { return "PeriodicCallback-" + callback_->name(); }
};

}  // namespace trainpack
