#include "trainpack/callbacks/early_stopping.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

#include "trainpack/core/callback_state.h"
#include "trainpack/core/exceptions.h"
#include "trainpack/core/monitor_base.h"
#include "trainpack/core/trainer.h"
#include "trainpack/utils/logger.h"

namespace trainpack {

EarlyStopping::EarlyStopping(std::string monitor_stat, EarlyStoppingOptions options)
    : stat_(std::move(monitor_stat)), options_(std::move(options)) {
  if (stat_.empty()) {
    throw std::invalid_argument("EarlyStopping: monitor_stat is empty; name the stat to watch");
  }
  if (options_.patience() < 1) {
    throw std::invalid_argument(fmt::format(
        "EarlyStopping: patience must be >= 1 (the checks without an improvement that stop "
        "training), got {}",
        options_.patience()));
  }
  if (!std::isfinite(options_.min_delta()) || options_.min_delta() < 0) {
    throw std::invalid_argument(fmt::format(
        "EarlyStopping: min_delta must be a finite number >= 0 (the smallest change that "
        "counts as an improvement), got {}",
        options_.min_delta()));
  }
  if (options_.mode() != "min" && options_.mode() != "max") {
    throw std::invalid_argument(fmt::format(
        "EarlyStopping: mode must be \"min\" (lower is better) or \"max\" (higher is better), "
        "got \"{}\"",
        options_.mode()));
  }
  max_mode_ = options_.mode() == "max";
  best_ = max_mode_ ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
}

std::optional<double> EarlyStopping::best_value() const {
  if (best_step_ < 0) return std::nullopt;
  return best_;
}

bool EarlyStopping::improves(double value, double best) const {
  // Lightning's rule: strictly better than the best by more than min_delta.
  return max_mode_ ? value > best + options_.min_delta() : value < best - options_.min_delta();
}

EarlyStopping::Counters EarlyStopping::take(Counters c, int64_t step, double value,
                                            int64_t epoch) const {
  c.last_step = step;
  if (options_.check_finite() && !std::isfinite(value)) return c;  // stops: nothing else changes
  if (improves(value, c.best)) {
    c.best = value;
    c.best_epoch = epoch;
    c.best_step = step;
    c.wait = 0;
  } else {
    ++c.wait;
  }
  return c;
}

std::string EarlyStopping::best_text(const Counters& c) const {
  if (c.best_step < 0) return "no best value yet";
  return fmt::format("best {:.6g} at epoch {} (global_step {})", c.best, c.best_epoch, c.best_step);
}

void EarlyStopping::check_missing_stat() {
  if (warned_missing_) return;
  const std::optional<std::string> problem =
      detail::missing_stat_problem(trainer().monitors(), stat_, global_step(), epoch_num());
  if (!problem) return;  // its validation has not run yet
  if (options_.strict()) {
    throw std::runtime_error(fmt::format(
        "EarlyStopping: {} Check the name, and that the callback that puts it comes before "
        "EarlyStopping in the callbacks; or, for a stat that comes later, pass "
        "EarlyStoppingOptions().strict(false) to warn instead",
        *problem));
  }
  warned_missing_ = true;
  TP_LOG_WARN(
      "[EarlyStopping] {} Check the name, and that the callback that puts it comes before "
      "EarlyStopping in the callbacks. Training goes on (strict(false)).",
      *problem);
}

void EarlyStopping::_trigger() {
  const Monitors::History& history = trainer().monitors().get_history(stat_);
  if (history.empty()) {
    check_missing_stat();
    return;
  }
  const auto [step, value] = history.back();
  if (step == last_step_) return;  // no new value since the last check
  const Counters before = counters();
  const Counters after = take(before, step, value, epoch_num());
  best_ = after.best;
  best_epoch_ = after.best_epoch;
  best_step_ = after.best_step;
  wait_ = after.wait;
  last_step_ = after.last_step;
  if (options_.check_finite() && !std::isfinite(value)) {
    throw StopTraining(fmt::format("EarlyStopping: '{}' is {} at epoch {}; {}", stat_, value,
                                   epoch_num(), best_text(after)));
  }
  if (wait_ >= options_.patience()) {
    throw StopTraining(
        fmt::format("EarlyStopping: '{}' did not improve by more than {} for {} checks; {}", stat_,
                    options_.min_delta(), wait_, best_text(after)));
  }
  if (wait_ > 0) {
    TP_LOG_INFO("[EarlyStopping] '{}' did not improve ({}/{}); {}.", stat_, wait_,
                options_.patience(), best_text(after));
  }
}

CallbackState EarlyStopping::state() const {
  Counters c = counters();
  if (is_set_up()) {
    // The value this trigger is about to take at this step (see the header).
    const Monitors::History& history = trainer().monitors().get_history(stat_);
    if (!history.empty() && history.back().first == global_step() &&
        history.back().first != last_step_) {
      c = take(c, history.back().first, history.back().second, epoch_num());
    }
  }
  return {{"best_value", state_scalar(c.best)},
          {"best_epoch", state_scalar(c.best_epoch)},
          {"best_step", state_scalar(c.best_step)},
          {"wait_count", state_scalar(c.wait)},
          {"last_step", state_scalar(c.last_step)}};
}

void EarlyStopping::load_state(const CallbackState& state) {
  const std::string who = name();
  check_state_keys(who, state,
                   {"best_value", "best_epoch", "best_step", "wait_count", "last_step"});
  const double best = state_double(who, state, "best_value");
  const int64_t best_epoch = state_int(who, state, "best_epoch");
  const int64_t best_step = state_int(who, state, "best_step");
  const int64_t wait = state_int(who, state, "wait_count");
  const int64_t last_step = state_int(who, state, "last_step");
  if (wait < 0) {
    throw std::invalid_argument(fmt::format(
        "{}: the saved state entry 'wait_count' should be >= 0, but it is {}", who, wait));
  }
  best_ = best;
  best_epoch_ = best_epoch;
  best_step_ = best_step;
  wait_ = wait;
  last_step_ = last_step;
}

}  // namespace trainpack
