// Wrappers that change when a callback runs (tensorpack's callbacks/trigger.py):
// PeriodicTrigger, EnableCallbackIf, PeriodicCallback. All three are ProxyCallbacks: they copy the
// inner callback's chief_only flag when constructed (set it first, then wrap), are named
// `<Wrapper>-<inner name>`, log nothing, are dispatched a hook only when it can reach the inner
// callback, and refuse a null inner callback (std::invalid_argument). Timing as in tensorpack
// (docs/tensorpack-differences.md #2). See docs/callbacks.md, "What to do vs. when to do it".
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

// tensorpack's PeriodicTrigger: schedules the inner callback's trigger() only.
//   before_train   before_train(), then trigger() if options.before_train
//   trigger_step   trigger_step(), then trigger() if every_k_steps divides the incremented
//                  global_step (k = 3: global steps 3, 6, 9, ...)
//   trigger_epoch  NOT trigger_epoch(); trigger() if every_k_epochs divides epoch_num
//   other hooks    the same hook
// So a callback that works in `_trigger_epoch` does nothing under it, and when both periods match
// at an epoch's last step trigger() runs twice.
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

// tensorpack's EnableCallbackIf: forwards the gated hooks (before_epoch, after_epoch, before_run,
// trigger_step, trigger_epoch) only while `pred(*this)` is true; setup_graph, before_train,
// after_train and trigger always. after_run follows before_run's decision. The predicate gets the
// wrapper (`self.epoch_num()`, `self.global_step()`, `self.trainer()`). Errors:
// std::invalid_argument `EnableCallbackIf: pred is empty`.
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

// tensorpack's PeriodicCallback: EnableCallbackIf with the predicate (k_s and gs % k_s == 0) or
// (k_e and ep % k_e == 0) or (k_e and ls == spe-1 and ep == max_epoch), evaluated with the
// counters of each gated call (in before_run, gs before the increment; in trigger_step, after).
// It can only make a callback less frequent.
class PeriodicCallback : public EnableCallbackIf {
 public:
  // Throws std::invalid_argument if a period is negative or neither is set.
  PeriodicCallback(CallbackPtr callback, PeriodicCallbackOptions options);
  std::string name() const override { return "PeriodicCallback-" + callback_->name(); }
};

}  // namespace trainpack
