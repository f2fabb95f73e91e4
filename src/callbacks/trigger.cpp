#include "trainpack/callbacks/trigger.h"

#include <fmt/format.h>

#include <stdexcept>
#include <utility>

#include "trainpack/core/trainer.h"

namespace trainpack {
namespace {

// Periods are positive, or 0 for "not set".
void check_periods(const char* class_name, int64_t every_k_steps, int64_t every_k_epochs) {
  for (auto [arg, value] : {std::pair<const char*, int64_t>{"every_k_steps", every_k_steps},
                            std::pair<const char*, int64_t>{"every_k_epochs", every_k_epochs}}) {
    if (value < 0) {
      throw std::invalid_argument(
          fmt::format("{}: {} must be positive (or 0 for unset), got {}", class_name, arg, value));
    }
  }
}

}  // namespace

PeriodicTrigger::PeriodicTrigger(CallbackPtr triggerable, PeriodicTriggerOptions options)
    : ProxyCallback(std::move(triggerable), "PeriodicTrigger"), options_(options) {
  check_periods("PeriodicTrigger", options_.every_k_steps(), options_.every_k_epochs());
  if (options_.every_k_steps() == 0 && options_.every_k_epochs() == 0 && !options_.before_train()) {
    throw std::invalid_argument(
        "PeriodicTrigger: every_k_steps and every_k_epochs are both unset and before_train is "
        "false, which disables the triggerable; set every_k_steps or every_k_epochs");
  }
}

bool PeriodicTrigger::overrides(Hook hook) const {
  static const PeriodicTrigger reference(detail::unowned_plain_callback(),
                                         PeriodicTriggerOptions().every_k_steps(1));
  if (overrides_beyond(reference, hook)) return true;  // a subclass adds behaviour
  const bool triggers = callback_->overrides(Hook::kTrigger);
  switch (hook) {
    case Hook::kBeforeTrain:
      return callback_->overrides(Hook::kBeforeTrain) || (options_.before_train() && triggers);
    case Hook::kTriggerStep:
      return callback_->overrides(Hook::kTriggerStep) || (options_.every_k_steps() > 0 && triggers);
    case Hook::kTriggerEpoch:
      return options_.every_k_epochs() > 0 && triggers;
    default:
      return callback_->overrides(hook);
  }
}

void PeriodicTrigger::_before_train() {
  callback_->before_train();
  if (options_.before_train()) callback_->trigger();
}

void PeriodicTrigger::_trigger_step() {
  callback_->trigger_step();
  const int64_t k = options_.every_k_steps();
  if (k > 0 && global_step() % k == 0) callback_->trigger();
}

void PeriodicTrigger::_trigger_epoch() {
  const int64_t k = options_.every_k_epochs();
  if (k > 0 && epoch_num() % k == 0) callback_->trigger();
}

EnableCallbackIf::EnableCallbackIf(CallbackPtr callback, Predicate pred)
    : EnableCallbackIf(std::move(callback), std::move(pred), "EnableCallbackIf") {}

EnableCallbackIf::EnableCallbackIf(CallbackPtr callback, Predicate pred, const char* class_name)
    : ProxyCallback(std::move(callback), class_name), pred_(std::move(pred)) {
  if (!pred_) throw std::invalid_argument("EnableCallbackIf: pred is empty");
}

bool EnableCallbackIf::overrides(Hook hook) const {
  static const EnableCallbackIf reference(detail::unowned_plain_callback(),
                                          [](const EnableCallbackIf&) { return true; });
  if (overrides_beyond(reference, hook)) return true;  // a subclass adds behaviour
  if (hook == Hook::kBeforeRun) {
    return callback_->overrides(Hook::kBeforeRun) || callback_->overrides(Hook::kAfterRun);
  }
  return callback_->overrides(hook);
}

void EnableCallbackIf::_before_epoch() {
  if (pred_(*this)) callback_->before_epoch();
}

void EnableCallbackIf::_after_epoch() {
  if (pred_(*this)) callback_->after_epoch();
}

RunArgs EnableCallbackIf::_before_run(const StepContext& ctx) {
  enabled_in_run_ = pred_(*this);
  return enabled_in_run_ ? ProxyCallback::_before_run(ctx) : RunArgs();
}

void EnableCallbackIf::_after_run(const StepContext& ctx, const RunValues& values) {
  if (enabled_in_run_) ProxyCallback::_after_run(ctx, values);
}

void EnableCallbackIf::_trigger_step() {
  if (pred_(*this)) callback_->trigger_step();
}

void EnableCallbackIf::_trigger_epoch() {
  if (pred_(*this)) callback_->trigger_epoch();
}

namespace {

PeriodicCallbackOptions checked(PeriodicCallbackOptions options) {
  check_periods("PeriodicCallback", options.every_k_steps(), options.every_k_epochs());
  if (options.every_k_steps() == 0 && options.every_k_epochs() == 0) {
    throw std::invalid_argument(
        "PeriodicCallback: every_k_steps and every_k_epochs are both unset; set at least one");
  }
  return options;
}

}  // namespace

PeriodicCallback::PeriodicCallback(CallbackPtr callback, PeriodicCallbackOptions options)
    : EnableCallbackIf(
          std::move(callback),
          [o = checked(options)](const EnableCallbackIf& self) {
            const Trainer& t = self.trainer();
            const int64_t ks = o.every_k_steps();
            const int64_t ke = o.every_k_epochs();
            if (ks > 0 && t.global_step() % ks == 0) return true;
            if (ke > 0 && t.epoch_num() % ke == 0) return true;
            if (ke > 0 && t.local_step() == t.steps_per_epoch() - 1 &&
                t.epoch_num() == t.max_epoch())
              return true;
            return false;
          },
          "PeriodicCallback") {}

}  // namespace trainpack
