// Hyperparameters and the base of the callbacks that set them (tensorpack's callbacks/param.py).
// A HyperParam is a named scalar seen through get/set: a Graph variable ("learning_rate", which
// SingleCostTrainer binds to the optimizer's lr) or a getter/setter pair. A HyperParamSetter is a
// callback that computes a value and sets it; where it takes a param, a string names a Graph
// variable. The setters, by where the value comes from, are in callbacks/human_param.h (a file),
// callbacks/scheduled_param.h (a schedule) and callbacks/stat_monitor_param.h (a stat), which
// this header includes. Every setter sets its value in before_train and at every epoch end (via
// trigger()), unless its class says otherwise; wrapped in PeriodicTrigger, whenever trigger() is
// called.
// Every param has a range (ValueRange, utils/value_range.h: always finite; the learning rate's
// also > 0). A value outside it, from any setter, is refused with a warning naming the setter and
// the range, and the param keeps its value. See docs/schedules.md.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <torch/arg.h>

#include "trainpack/core/callback.h"
#include "trainpack/core/graph.h"
#include "trainpack/utils/value_range.h"

namespace trainpack {

// tensorpack's HyperParam: a named scalar with get/set. setup_graph runs in the owning setter's
// setup_graph (to resolve names); the value is read and written from before_train on. range() is
// what the setters keep to. Differences from tensorpack: get_value is const; values are doubles;
// a range (tensorpack sets any value, NaN included).
class HyperParam {
 public:
  virtual ~HyperParam();
  // Called by the setter's setup_graph; resolves whatever the param needs from the graph.
  virtual void setup_graph(Graph& /*graph*/) {}
  virtual void set_value(double v) = 0;
  virtual double get_value() const = 0;
  // The name that logs print and that HumanHyperParamSetter looks up.
  virtual std::string readable_name() const = 0;
  // The values the setters may set: a setter refuses any other (see the top of this file).
  virtual ValueRange range() const { return ValueRange(); }
};

using HyperParamPtr = std::shared_ptr<HyperParam>;

// tensorpack's GraphVarParam: a Graph variable as a hyperparam, looked up by its exact name (no
// ':0' suffix) when the setter's setup_graph runs. Its range is `range` within the variable's own
// (Graph::Variable::range).
// Errors (std::invalid_argument naming the param): at setup_graph, no such variable (the existing
// ones are listed) or two ranges that leave no value; setting a non-integral value on an integer
// variable ("global_step"). An integer variable accepts a double that holds an integer.
class GraphVarParam : public HyperParam {
 public:
  // Throws std::invalid_argument if `name` is empty.
  explicit GraphVarParam(std::string name, ValueRange range = {});
  void setup_graph(Graph& graph) override;
  // Both throw std::logic_error before setup_graph.
  void set_value(double v) override;
  double get_value() const override;
  std::string readable_name() const override { return name_; }
  // `range` before setup_graph, then within the variable's range.
  ValueRange range() const override { return range_; }

 private:
  const Graph::Variable& resolved(const char* method) const;

  std::string name_;
  ValueRange range_;
  const Graph::Variable* variable_ = nullptr;  // owned by the Graph, valid while it lives
};

// tensorpack's ObjAttrParam: a hyperparam held anywhere, seen through a getter and a setter (in
// place of an object and an attribute name). The readable name is required.
class ObjAttrParam : public HyperParam {
 public:
  // Throws std::invalid_argument if `get` or `set` is empty or `readable_name` is empty.
  ObjAttrParam(std::function<double()> get, std::function<void(double)> set,
               std::string readable_name, ValueRange range = {});
  void set_value(double v) override { set_(v); }
  double get_value() const override { return get_(); }
  std::string readable_name() const override { return readable_name_; }
  ValueRange range() const override { return range_; }

 private:
  std::function<double()> get_;
  std::function<void(double)> set_;
  std::string readable_name_;
  ValueRange range_;
};

// A setter's param argument: a Graph variable name (made into a GraphVarParam) or a HyperParam.
class HyperParamRef {
 public:
  HyperParamRef(std::string graph_var);  // NOLINT(google-explicit-constructor)
  HyperParamRef(const char* graph_var);  // NOLINT(google-explicit-constructor)
  HyperParamRef(HyperParamPtr param);    // NOLINT(google-explicit-constructor)
  // Any shared_ptr to a HyperParam subclass (`std::make_shared<ObjAttrParam>(...)`).
  template <typename T, typename = std::enable_if_t<std::is_base_of<HyperParam, T>::value>>
  HyperParamRef(std::shared_ptr<T> param)  // NOLINT(google-explicit-constructor)
      : HyperParamRef(HyperParamPtr(std::move(param))) {}
  // The param; null only if a null HyperParamPtr was given (setters reject it).
  HyperParamPtr get() const { return param_; }

 private:
  HyperParamPtr param_;
};

// tensorpack's HyperParamSetter, the base of the setters: when it runs, it asks
// `_get_value_to_set()` for a value and sets the param to it (nullopt: nothing happens).
// When: setup_graph resolves the param; before_train sets a value (unless a subclass clears
// enable_before_train_); trigger() sets one, at every epoch end by default. chief_only: false
// (every worker sets its own copy).
// Logs each change at most once per epoch (`[HyperParamSetter] At global_step=300, learning_rate
// changes from 0.100000 to 0.010000`), and a value it puts back after another setter changed it
// at the same boundary, naming itself (`... (HumanHyperParamSetter)`): the last line about a
// param is the value in effect.
// State (checkpoints): `last_value`, `last_epoch_set`, `applied_epoch`, and `value` (the param's
// value). A resumed run logs a change only where an uninterrupted one would; gets `value` back
// unless the param is a GraphVarParam (the checkpoint holds the variable; a value out of range is
// refused); and does not run the setter again in before_train when it ran at the end of the
// epoch the checkpoint follows (HumanHyperParamSetter does, to read its file again).
// To write one, override _get_value_to_set (docs/schedules.md, "Writing a setter").
class HyperParamSetter : public Callback {
 public:
  // Throws std::invalid_argument naming the class and `param` when the param is null.
  explicit HyperParamSetter(HyperParamRef param);

  // The value to set now (from `_get_value_to_set`), logging it when it differs from the last
  // value this setter returned; nullopt, with a warning, for a value outside the param's range.
  std::optional<double> get_value_to_set();
  // The param's current value.
  double get_current_value() const;
  const HyperParam& param() const { return *param_; }

  // See "State" above. load_state throws std::invalid_argument naming the callback and the entry
  // on a state that does not fit.
  CallbackState state() const override;
  void load_state(const CallbackState& state) override;

 protected:
  // For subclasses: `class_name` is what argument errors name.
  HyperParamSetter(HyperParamRef param, const char* class_name);

  // The value to set now, or nullopt to leave the param as it is.
  virtual std::optional<double> _get_value_to_set() = 0;

  // Sets the value (if any) to the param.
  void set_param();

  // Logs that `value` is outside the param's range and is not set (once per step and value).
  void refuse(double value);

  // The base's state entries (for subclasses that add their own), and restoring them from a
  // state whose other entries the subclass checks.
  CallbackState setter_state() const;
  void load_setter_state(const CallbackState& state);

  // Whether load_state ran and before_train has not yet (a resumed run's start).
  bool resumed_from_state() const { return resumed_; }

  // Whether before_train sets a value.
  bool enable_before_train_ = true;
  // Whether a resumed run's before_train sets a value even when the setter already ran then.
  bool rerun_at_resume_ = false;

  void _setup_graph() override;
  void _before_train() override;
  void _trigger() override;

  HyperParamPtr param_;

 private:
  std::optional<double> last_value_;
  int64_t last_epoch_set_ = -1;
  int64_t applied_epoch_ = -1;  // epoch_num when set_param last ran
  bool resumed_ = false;        // load_state ran, before_train has not
  // This setter's own value changed in set_param's call (its change is logged there, once per
  // epoch); otherwise a change of the param is another setter's undone.
  bool own_value_changed_ = false;
  std::optional<std::pair<int64_t, double>> last_refused_;  // (global_step, value) last refused
};

}  // namespace trainpack

// The setters, once declared here (they include this header, so they come last).
#include "trainpack/callbacks/human_param.h"
#include "trainpack/callbacks/scheduled_param.h"
#include "trainpack/callbacks/stat_monitor_param.h"
