#include "trainpack/callbacks/scheduled_param.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>

#include "trainpack/core/trainer.h"
#include "trainpack/detail/param_setters.h"
#include "trainpack/utils/float_repr.h"
#include "trainpack/utils/humanize.h"
#include "trainpack/utils/logger.h"

namespace trainpack {

// ---- ScheduledHyperParamSetter ----

ScheduledHyperParamSetter::ScheduledHyperParamSetter(HyperParamRef param, Schedule schedule,
                                                     ScheduledHyperParamSetterOptions options)
    : HyperParamSetter(std::move(param), "ScheduledHyperParamSetter"),
      schedule_(std::move(schedule)),
      options_(std::move(options)) {
  if (schedule_.empty()) {
    throw std::invalid_argument("ScheduledHyperParamSetter: schedule is empty");
  }
  for (size_t i = 0; i < schedule_.size(); ++i) {
    if (schedule_[i].first < 0) {
      throw std::invalid_argument(
          fmt::format("ScheduledHyperParamSetter: schedule[{}] = ({}, {}) has a negative point", i,
                      schedule_[i].first, python_float_repr(schedule_[i].second)));
    }
    if (i > 0 && schedule_[i].first <= schedule_[i - 1].first) {
      throw std::invalid_argument(
          fmt::format("ScheduledHyperParamSetter: schedule points must be strictly increasing, but "
                      "schedule[{}] = ({}, {}) does not come after schedule[{}] = ({}, {})",
                      i, schedule_[i].first, python_float_repr(schedule_[i].second), i - 1,
                      schedule_[i - 1].first, python_float_repr(schedule_[i - 1].second)));
    }
  }
  if (!options_.interp().empty() && options_.interp() != "linear") {
    throw std::invalid_argument(
        fmt::format("ScheduledHyperParamSetter: interp must be \"\" or \"linear\", got \"{}\"",
                    options_.interp()));
  }
  // name() describes the schedule; the graph name scope stays the class name.
  set_name_scope("ScheduledHyperParamSetter");
}

std::string ScheduledHyperParamSetter::name() const {
  std::string out = "ScheduledHyperParamSetter(schedule=[";
  for (size_t i = 0; i < schedule_.size(); ++i) {
    if (i > 0) out += ", ";
    out += fmt::format("({}, {})", schedule_[i].first, python_float_repr(schedule_[i].second));
  }
  return out + "])";
}

std::optional<double> ScheduledHyperParamSetter::value_at(int64_t point) const {
  const std::pair<int64_t, double>* last = nullptr;
  for (const auto& entry : schedule_) {
    if (entry.first == point) return entry.second;  // exactly at a scheduled point
    if (entry.first > point) {
      if (last == nullptr || options_.interp().empty()) return std::nullopt;
      // Same arithmetic as tensorpack, so interpolated values are bit-identical.
      return static_cast<double>(point - last->first) * 1. /
                 static_cast<double>(entry.first - last->first) * (entry.second - last->second) +
             last->second;
    }
    last = &entry;
  }
  return std::nullopt;  // after the last point: no extrapolation
}

int64_t ScheduledHyperParamSetter::current_point() const {
  return options_.step_based() ? global_step() : epoch_num();
}

std::optional<double> ScheduledHyperParamSetter::_get_value_to_set() {
  return value_at(current_point());
}

void ScheduledHyperParamSetter::_before_train() {
  const bool resumed = resumed_from_state();
  HyperParamSetter::_before_train();
  check_value_at_beginning(resumed);
  warn_points_after_max_epoch();
}

void ScheduledHyperParamSetter::warn_points_after_max_epoch() const {
  if (options_.step_based()) return;  // global steps: max_epoch does not bound them
  const int64_t max_epoch = trainer().max_epoch();
  std::vector<int64_t> late;
  for (const auto& entry : schedule_) {
    if (entry.first > max_epoch) late.push_back(entry.first);
  }
  if (late.empty()) return;
  // The last value set during training: at max_epoch when interpolated (towards the first late
  // point), else at the last scheduled point up to max_epoch.
  std::optional<std::pair<int64_t, double>> last;
  if (!options_.interp().empty()) {
    if (const auto v = value_at(max_epoch)) last = std::make_pair(max_epoch, *v);
  } else {
    for (const auto& entry : schedule_) {
      if (entry.first <= max_epoch) last = entry;
    }
  }
  std::string last_text = "it sets no value during training";
  if (last) {
    last_text = fmt::format("the last value it sets is {} = {}, {}{}", param_->readable_name(),
                            format_g(last->second, 7),
                            last->first == 0 ? std::string("at the start")
                                             : fmt::format("at the end of epoch {}", last->first),
                            options_.interp().empty()
                                ? std::string()
                                : fmt::format(" (interpolated towards point {})", late.front()));
  }
  TP_LOG_WARN(
      "[{}] the schedule's point{} {} {} after max_epoch={}, so {} never set (a point N is an "
      "epoch, set when epoch N ends); {}. Shorten the schedule or raise max_epoch; if the points "
      "are global steps, pass ScheduledHyperParamSetterOptions().step_based(true).",
      name(), late.size() == 1 ? "" : "s", fmt::join(late, ", "), late.size() == 1 ? "is" : "are",
      max_epoch, late.size() == 1 ? "its value is" : "their values are", last_text);
}

std::string ScheduledHyperParamSetter::state_key() const {
  // Not name(), which lists the schedule: a run resumed with another schedule (a larger
  // --max-epoch) must find the state of the schedule it continues.
  return fmt::format("ScheduledHyperParamSetter({})", param_->readable_name());
}

void ScheduledHyperParamSetter::_trigger_epoch() {
  if (!options_.step_based()) trigger();
}

void ScheduledHyperParamSetter::_trigger_step() {
  if (options_.step_based()) trigger();
}

void ScheduledHyperParamSetter::check_value_at_beginning(bool resumed) {
  // The value the schedule has given by now: tensorpack takes the last value of value_at(p) over
  // p = 0..point, which is value_at(point) when that exists (an exact or interpolated point), and
  // otherwise the value of the last scheduled point before it. Computed directly here, so that a
  // step-based schedule restored at step 10^6 does not scan every step; a scheduled 0.0 counts
  // (docs/tensorpack-differences.md #3: tensorpack's `value or previous` skipped it).
  const int64_t point = current_point();
  std::optional<double> v = value_at(point);
  if (!v) {
    for (const auto& entry : schedule_) {
      if (entry.first <= point) v = entry.second;
    }
  }
  if (!v) return;
  if (!param_->range().contains(*v)) {  // the schedule's value is refused, not compared
    refuse(*v);
    return;
  }
  const double actual = param_->get_value();
  if (detail::is_close(*v, actual)) return;
  const std::string pname = param_->readable_name();
  const std::string where =
      options_.step_based() ? fmt::format("step {}", point) : fmt::format("epoch{}", point);
  if (resumed) {
    // The checkpoint's value is where the schedule it was trained with had got to; this schedule
    // differs (another --max-epoch, say). The run continues by epoch: what was applied stands, and
    // this schedule takes over from its next point, rather than starting over from its first.
    std::optional<std::pair<int64_t, double>> next;
    for (const auto& entry : schedule_) {
      if (entry.first > point) {
        next = entry;
        break;
      }
    }
    TP_LOG_WARN(
        "[{}] resumed at {} with '{}' = {} as the checkpoint's schedule left it; this schedule "
        "gives {} there (it is not the schedule the checkpoint was trained with). Keeping {}; {}",
        name(), where, pname, format_g(actual, 7), format_g(*v, 7), format_g(actual, 7),
        next ? fmt::format("this schedule sets {} at {} {}.", format_g(next->second, 7),
                           options_.step_based() ? "step" : "the end of epoch", next->first)
             : std::string("this schedule sets nothing more."));
    return;
  }
  TP_LOG_WARN(
      "According to scheduler {}, parameter '{}' should become {} at the current point ({}). "
      "However its current value is {}. ",
      name(), pname, format_g(*v, 7), where, format_g(actual, 7));
  if (options_.set_at_beginning()) {
    TP_LOG_INFO("Setting '{}' to {}.", pname, format_g(*v, 7));
    param_->set_value(*v);
  } else {
    TP_LOG_WARN(
        "If there is no other scheduler being used, you may want to check whether your "
        "initialization of the parameter is as expected");
  }
}

// ---- HyperParamSetterWithFunc ----

HyperParamSetterWithFunc::HyperParamSetterWithFunc(HyperParamRef param, Func func)
    : HyperParamSetter(std::move(param), "HyperParamSetterWithFunc"), func_(std::move(func)) {
  if (!func_) throw std::invalid_argument("HyperParamSetterWithFunc: func is empty");
}

std::optional<double> HyperParamSetterWithFunc::_get_value_to_set() {
  return func_(epoch_num(), get_current_value());
}

}  // namespace trainpack
