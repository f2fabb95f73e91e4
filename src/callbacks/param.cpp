#include "trainpack/callbacks/param.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "trainpack/core/callback_state.h"
#include "trainpack/core/trainer.h"
#include "trainpack/detail/param_setters.h"
#include "trainpack/utils/float_repr.h"
#include "trainpack/utils/logger.h"

namespace trainpack {
namespace {

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
  if (before && !detail::is_close(*before, *v)) {
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

}  // namespace trainpack
