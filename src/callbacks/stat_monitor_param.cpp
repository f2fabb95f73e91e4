#include "trainpack/callbacks/stat_monitor_param.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>

#include "trainpack/core/callback_state.h"
#include "trainpack/core/trainer.h"
#include "trainpack/utils/float_repr.h"
#include "trainpack/utils/logger.h"

namespace trainpack {
namespace {

// Python's str(round(v, 3)): correctly rounded to 3 decimals, printed in the shortest form.
std::string python_round3(double v) {
  if (!std::isfinite(v)) return python_float_repr(v);
  const std::string rounded = fmt::format("{:.3f}", v);
  double r = v;
  std::from_chars(rounded.data(), rounded.data() + rounded.size(), r);
  return python_float_repr(r);
}

}  // namespace

// ---- StatMonitorParamSetter ----

StatMonitorParamSetter::StatMonitorParamSetter(HyperParamRef param, std::string stat_name,
                                               std::function<double(double)> value_func,
                                               double threshold, int64_t last_k,
                                               StatMonitorParamSetterOptions options)
    : HyperParamSetter(std::move(param), "StatMonitorParamSetter"),
      stat_name_(std::move(stat_name)),
      value_func_(std::move(value_func)),
      threshold_(threshold),
      last_k_(0),
      options_(options) {
  if (stat_name_.empty()) throw std::invalid_argument("StatMonitorParamSetter: stat_name is empty");
  if (!value_func_) throw std::invalid_argument("StatMonitorParamSetter: value_func is empty");
  if (last_k < 1) {
    throw std::invalid_argument(
        fmt::format("StatMonitorParamSetter: last_k must be >= 1, got {}", last_k));
  }
  if (std::isnan(threshold)) {
    throw std::invalid_argument("StatMonitorParamSetter: threshold is NaN");
  }
  last_k_ = static_cast<size_t>(last_k);
  enable_before_train_ = false;
}

CallbackState StatMonitorParamSetter::state() const {
  CallbackState s = setter_state();
  std::vector<int64_t> steps;
  std::vector<double> values;
  for (const auto& [step, value] : history_) {
    steps.push_back(step);
    values.push_back(value);
  }
  s["history_steps"] = state_vector(steps);
  s["history_values"] = state_vector(values);
  return s;
}

void StatMonitorParamSetter::load_state(const CallbackState& state) {
  const std::string who = name();
  check_state_keys(who, state,
                   {"last_value", "last_epoch_set", "applied_epoch", "value", "history_steps",
                    "history_values"});
  const std::vector<int64_t> steps = state_ints(who, state, "history_steps");
  const std::vector<double> values = state_doubles(who, state, "history_values");
  if (steps.size() != values.size()) {
    throw std::invalid_argument(fmt::format(
        "{}: the saved state entries 'history_steps' and 'history_values' should have the same "
        "length, but have {} and {}",
        who, steps.size(), values.size()));
  }
  load_setter_state(state);
  history_.clear();
  const size_t first = steps.size() > last_k_ ? steps.size() - last_k_ : 0;
  for (size_t i = first; i < steps.size(); ++i) history_.emplace_back(steps[i], values[i]);
}

std::optional<double> StatMonitorParamSetter::_get_value_to_set() {
  const Monitors::History& all = trainer().monitors().get_history(stat_name_);
  if (all.empty()) {
    TP_LOG_WARN("[StatMonitorParamSetter] No history data available for key '{}'.", stat_name_);
    return std::nullopt;
  }
  const std::pair<int64_t, double> last = all.back();
  if (!history_.empty() && last.first == history_.back().first) {
    TP_LOG_WARN(
        "StatMonitorParamSetter is triggered, but no new data has been added since last time.");
    return std::nullopt;
  }
  history_.push_back(last);
  if (history_.size() > last_k_) history_.pop_front();
  if (history_.size() < last_k_) return std::nullopt;

  const double first = history_.front().second;
  double lo = first;
  double hi = first;
  for (const auto& entry : history_) {
    lo = std::min(lo, entry.second);
    hi = std::max(hi, entry.second);
  }
  if (!options_.reverse()) {
    if (lo < first - threshold_) return std::nullopt;  // decreased enough
  } else {
    if (hi > first + threshold_) return std::nullopt;  // increased enough
  }
  std::string values;
  for (const auto& entry : history_) {
    if (!values.empty()) values += ',';
    values += python_round3(entry.second);
  }
  history_.clear();
  TP_LOG_INFO("[StatMonitorParamSetter] Triggered, history of {}: {}", stat_name_, values);
  return value_func_(get_current_value());
}

}  // namespace trainpack
