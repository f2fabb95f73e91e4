#include "trainpack/callbacks/param.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include <sys/stat.h>

#include "trainpack/core/callback_state.h"
#include "trainpack/core/trainer.h"
#include "trainpack/utils/file_io.h"
#include "trainpack/utils/float_repr.h"
#include "trainpack/utils/humanize.h"
#include "trainpack/utils/hyper_txt.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/output_dir.h"

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

// numpy.isclose(a, b) with its defaults (rtol 1e-5, atol 1e-8).
bool is_close(double a, double b) { return std::fabs(a - b) <= 1e-8 + 1e-5 * std::fabs(b); }

HyperParamPtr checked_param(const HyperParamRef& ref, const char* class_name) {
  HyperParamPtr p = ref.get();
  if (!p) throw std::invalid_argument(fmt::format("{}: param is null", class_name));
  return p;
}

}  // namespace

// ---- HyperParam ----

HyperParam::~HyperParam() = default;

GraphVarParam::GraphVarParam(std::string name, ValueRange range)
    : name_(std::move(name)), range_(std::move(range)) {
  if (name_.empty()) throw std::invalid_argument("GraphVarParam: name is empty");
}

void GraphVarParam::setup_graph(Graph& graph) {
  try {
    variable_ = &graph.variable(name_);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("GraphVarParam('{}'): {}", name_, e.what()));
  }
  try {
    range_ = range_.intersect(variable_->range);
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument(
        fmt::format("GraphVarParam('{}'): its range ({}) leaves no value of the variable's ({})",
                    name_, range_.str(), variable_->range.str()));
  }
}

const Graph::Variable& GraphVarParam::resolved(const char* method) const {
  if (variable_ == nullptr) {
    throw std::logic_error(fmt::format(
        "GraphVarParam('{}').{} was called before setup_graph; the variable is resolved in the "
        "setter's setup_graph",
        name_, method));
  }
  return *variable_;
}

void GraphVarParam::set_value(double v) {
  const Graph::Variable& var = resolved("set_value");
  if (!var.is_floating && !(std::isfinite(v) && std::trunc(v) == v)) {
    throw std::invalid_argument(fmt::format(
        "GraphVarParam: HyperParam {} has an integer type. Cannot update it using float values "
        "(got {}).",
        name_, v));
  }
  var.set(v);
}

double GraphVarParam::get_value() const { return resolved("get_value").get(); }

ObjAttrParam::ObjAttrParam(std::function<double()> get, std::function<void(double)> set,
                           std::string readable_name, ValueRange range)
    : get_(std::move(get)),
      set_(std::move(set)),
      readable_name_(std::move(readable_name)),
      range_(std::move(range)) {
  if (!get_) throw std::invalid_argument("ObjAttrParam: get is empty");
  if (!set_) throw std::invalid_argument("ObjAttrParam: set is empty");
  if (readable_name_.empty()) throw std::invalid_argument("ObjAttrParam: readable_name is empty");
}

HyperParamRef::HyperParamRef(std::string graph_var)
    : param_(std::make_shared<GraphVarParam>(std::move(graph_var))) {}
HyperParamRef::HyperParamRef(const char* graph_var)
    : HyperParamRef(std::string(graph_var == nullptr ? "" : graph_var)) {}
HyperParamRef::HyperParamRef(HyperParamPtr param) : param_(std::move(param)) {}

// ---- HyperParamSetter ----

HyperParamSetter::HyperParamSetter(HyperParamRef param)
    : HyperParamSetter(std::move(param), "HyperParamSetter") {}

HyperParamSetter::HyperParamSetter(HyperParamRef param, const char* class_name)
    : param_(checked_param(param, class_name)) {
  set_chief_only(false);
}

std::optional<double> HyperParamSetter::get_value_to_set() {
  std::optional<double> ret = _get_value_to_set();
  if (ret && !param_->range().contains(*ret)) {
    refuse(*ret);
    return std::nullopt;
  }
  if (ret && ret != last_value_) {
    own_value_changed_ = true;
    if (epoch_num() != last_epoch_set_) {  // at most one line per epoch
      if (!last_value_) {
        TP_LOG_INFO("[HyperParamSetter] At global_step={}, {} is set to {:.6f}", global_step(),
                    param_->readable_name(), *ret);
      } else {
        TP_LOG_INFO("[HyperParamSetter] At global_step={}, {} changes from {:.6f} to {:.6f}",
                    global_step(), param_->readable_name(), *last_value_, *ret);
      }
    }
    last_epoch_set_ = epoch_num();
    last_value_ = ret;
  }
  return ret;
}

void HyperParamSetter::refuse(double value) {
  // Once per step and value: ScheduledHyperParamSetter's before_train meets the value twice.
  const auto same = [&](const std::pair<int64_t, double>& r) {
    return r.first == global_step() &&
           (r.second == value || (std::isnan(r.second) && std::isnan(value)));
  };
  if (last_refused_ && same(*last_refused_)) return;
  last_refused_ = std::make_pair(global_step(), value);
  const std::string pname = param_->readable_name();
  TP_LOG_WARN("[HyperParamSetter] {} gives {} = {}, outside its range ({}); keeping {} = {}",
              name(), pname, python_float_repr(value), param_->range().str(), pname,
              python_float_repr(get_current_value()));
}

double HyperParamSetter::get_current_value() const { return param_->get_value(); }

void HyperParamSetter::set_param() {
  applied_epoch_ = epoch_num();
  own_value_changed_ = false;
  const std::optional<double> v = get_value_to_set();
  if (!v) return;
  // Another setter changed the param at this boundary and this one, running later, puts its own
  // value back (hyper.txt over a schedule): the log's last word on the param must be what is in
  // effect, so the change is logged here too, naming this setter. The current value is read only
  // for that comparison (a tensor-backed Graph variable reads a device value), so that a
  // step-based setter that sets nothing at a step reads nothing.
  const std::optional<double> before =
      own_value_changed_ ? std::nullopt : std::optional<double>(param_->get_value());
  param_->set_value(*v);
  if (before && !is_close(*before, *v)) {
    TP_LOG_INFO("[HyperParamSetter] At global_step={}, {} changes from {:.6f} to {:.6f} ({})",
                global_step(), param_->readable_name(), *before, *v, name());
  }
}

void HyperParamSetter::_setup_graph() { param_->setup_graph(graph()); }

CallbackState HyperParamSetter::setter_state() const {
  CallbackState s;
  if (last_value_) s["last_value"] = state_scalar(*last_value_);
  s["last_epoch_set"] = state_scalar(last_epoch_set_);
  s["applied_epoch"] = state_scalar(applied_epoch_);
  s["value"] = state_scalar(get_current_value());
  return s;
}

void HyperParamSetter::load_setter_state(const CallbackState& state) {
  const std::string who = name();
  const int64_t last_epoch_set = state_int(who, state, "last_epoch_set");
  const int64_t applied_epoch = state_int(who, state, "applied_epoch");
  const double value = state_double(who, state, "value");
  std::optional<double> last_value;
  if (find_state(state, "last_value") != nullptr) {
    last_value = state_double(who, state, "last_value");
  }
  last_value_ = last_value;
  last_epoch_set_ = last_epoch_set;
  applied_epoch_ = applied_epoch;
  resumed_ = true;
  // A Graph variable comes back with the checkpoint (or was left out of the restore on purpose);
  // any other param is in no checkpoint but this one.
  if (dynamic_cast<const GraphVarParam*>(param_.get()) != nullptr) return;
  if (!param_->range().contains(value)) {
    const std::string pname = param_->readable_name();
    TP_LOG_WARN("[{}] the saved value {} = {} is outside its range ({}); keeping {} = {}", who,
                pname, python_float_repr(value), param_->range().str(), pname,
                python_float_repr(get_current_value()));
    return;
  }
  param_->set_value(value);
}

CallbackState HyperParamSetter::state() const { return setter_state(); }

void HyperParamSetter::load_state(const CallbackState& state) {
  check_state_keys(name(), state, {"last_value", "last_epoch_set", "applied_epoch", "value"});
  load_setter_state(state);
}

void HyperParamSetter::_before_train() {
  const bool resumed = resumed_;
  resumed_ = false;
  if (!enable_before_train_) return;
  // Resumed right after this setter ran at the end of epoch epoch_num(): running it again would
  // apply a function of the current value twice.
  if (resumed && applied_epoch_ == epoch_num() && !rerun_at_resume_) return;
  set_param();
}

void HyperParamSetter::_trigger() { set_param(); }

// ---- HumanHyperParamSetter ----

HumanHyperParamSetter::HumanHyperParamSetter(HyperParamRef param, std::string file_name)
    : HyperParamSetter(std::move(param), "HumanHyperParamSetter") {
  if (file_name.empty()) throw std::invalid_argument("HumanHyperParamSetter: file_name is empty");
  const std::filesystem::path file(file_name);
  if (file.is_absolute()) {
    path_ = file.string();
  } else {
    // A relative file_name is in the logger directory.
    const std::string dir =
        resolve_output_dir(std::nullopt, "HumanHyperParamSetter", "an absolute file_name");
    path_ = (std::filesystem::path(dir) / file).string();
  }
  TP_LOG_INFO("Use {} to set hyperparam: '{}'.", path_, param_->readable_name());
  rerun_at_resume_ = true;  // an edit made while the run was down applies at once
}

void HumanHyperParamSetter::warn_once(const std::string& file_state, const std::string& message) {
  if (warned_state_ == file_state) return;  // said already, and the file has not changed since
  warned_state_ = file_state;
  TP_LOG_WARN("HumanHyperParamSetter: {}", message);
}

std::optional<double> HumanHyperParamSetter::_get_value_to_set() {
  const std::string name = param_->readable_name();
  const std::string keeping =
      fmt::format("keeping {} = {}", name, python_float_repr(get_current_value()));

  // Opened without following a symbolic link and without blocking, and checked with fstat before
  // a byte is read: a huge file, a FIFO or a device is never read, and a link planted in a shared
  // directory cannot make the job read (and quote) a file it was not meant to.
  ReadFileOptions options;
  options.max_bytes = static_cast<uint64_t>(kMaxFileSize);
  options.kind = "hyper-parameter file";
  options.follow_symlinks = false;
  std::string text;
  try {
    std::optional<std::string> read = read_file_if_exists(path_, options);
    if (!read) {  // no file: no change
      warned_state_.reset();
      return std::nullopt;
    }
    text = std::move(*read);
  } catch (const FileRefusedError& e) {
    // The reason names the kind of file or its size, never its content.
    warn_once(e.what(), fmt::format("{} {} and is not read; {}", path_, e.reason(), keeping));
    return std::nullopt;
  } catch (const std::exception& e) {
    warn_once(e.what(), fmt::format("{}; {}", e.what(), keeping));
    return std::nullopt;
  }
  const std::string& file_state = text;  // warnings repeat only when the content changes

  const HyperTxtLookup lookup = lookup_hyper_txt(text, name);
  const std::optional<double> found = lookup.value;
  const size_t found_line = lookup.line, first_bad = lookup.first_bad_line,
               bad_count = lookup.bad_lines;
  if (bad_count > 0) {
    const std::string others = bad_count == 1
                                   ? ""
                                   : fmt::format(" ({} more line{} malformed)", bad_count - 1,
                                                 bad_count == 2 ? " is" : "s are");
    // The line is named, not quoted: the file may hold what the log should not (log.log can be
    // more readable than the file).
    warn_once(file_state, fmt::format("{} line {} is not 'name: value'{}; {}", path_, first_bad,
                                      others, keeping));
    return std::nullopt;
  }
  if (!found) {
    warn_once(file_state, fmt::format("cannot find '{}' in {}; {}", name, path_, keeping));
    return std::nullopt;
  }
  if (!param_->range().contains(*found)) {
    warn_once(file_state,
              fmt::format("{} line {}: {} = {} is outside its range ({}); {}", path_, found_line,
                          name, python_float_repr(*found), param_->range().str(), keeping));
    return std::nullopt;
  }
  warned_state_.reset();
  return found;
}

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
  if (is_close(*v, actual)) return;
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
