// Hyperparameters and the callbacks that set them (tensorpack's callbacks/param.py).
//
// Public names: HyperParam, GraphVarParam, ObjAttrParam, HyperParamRef, HyperParamSetter,
// HumanHyperParamSetter, ScheduledHyperParamSetter, HyperParamSetterWithFunc,
// StatMonitorParamSetter.
//
// A HyperParam is a named scalar seen through get/set: a Graph variable (`"learning_rate"`, which
// SingleCostTrainer binds to the optimizer's lr) or any getter/setter pair. A HyperParamSetter is
// a callback that computes a new value and sets it. Where a setter takes a param, a string names a
// Graph variable:
//
//   std::make_shared<ScheduledHyperParamSetter>(
//       "learning_rate", std::vector<std::pair<int64_t, double>>{{30, 1e-2}, {60, 1e-3}});
//
// Every setter sets its value in before_train and at every epoch end (via trigger()), unless the
// class says otherwise; wrapped in PeriodicTrigger it sets whenever trigger() is called.
//
// Every param has a range (ValueRange, trainpack/utils/value_range.h): always finite, and for the
// learning rate > 0. A value outside it, from any setter, is refused with a warning naming the
// setter (for hyper.txt the file and line) and the range, and the param keeps its value:
//   [HyperParamSetter] HyperParamSetterWithFunc gives learning_rate = -0.1, outside its range
//   (finite and > 0); keeping learning_rate = 0.1
#pragma once

#include <cstdint>
#include <deque>
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

// A hyperparameter: a named scalar with get/set. `setup_graph` runs in the owning setter's
// setup_graph (to resolve names); the value is read and written from before_train on.
//
// range() is what the setters keep to (any finite value unless the param declares more).
//
// Differences from tensorpack: get_value is const; values are doubles; a range (tensorpack sets
// any value, NaN included).
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

// A Graph variable as a hyperparam, e.g. "learning_rate". The variable is looked up by its exact
// name when the setter's setup_graph runs; reading and writing go through the variable's get/set.
//
//   auto lr = std::make_shared<GraphVarParam>("learning_rate");
//   auto wd = std::make_shared<GraphVarParam>("weight_decay", ValueRange().min(0));
//
// Its range is `range` within the variable's own (Graph::Variable::range; the learning rate's is
// finite and > 0). setup_graph throws std::invalid_argument naming the param when the two leave no
// value.
//
// setup_graph throws std::invalid_argument naming GraphVarParam and the name, and listing the
// variables that exist, when there is no such variable. Setting a non-integral value on an integer
// variable (such as "global_step") throws std::invalid_argument.
//
// Differences from tensorpack: no ':0' tensor suffix (names are Graph names); an integer variable
// accepts a double that holds an integer (tensorpack rejects every Python float).
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

// A hyperparam held anywhere, seen through a getter and a setter.
//
//   ObjAttrParam dropout([&] { return model.dropout; }, [&](double v) { model.dropout = v; },
//                        "dropout", ValueRange().min(0).max_exclusive(1));
//
// Differences from tensorpack: a getter/setter pair replaces (object, attribute name); the
// readable name is required (tensorpack defaults it to the attribute name).
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

// Base of the setters: a callback that, when it runs, asks `_get_value_to_set()` for a value and
// sets the param to it (nothing happens when it returns nullopt).
//
// WHEN: setup_graph resolves the param; before_train sets a value (unless a subclass clears
// enable_before_train_); trigger() sets a value, and by default trigger_epoch calls trigger(), so
// a setter acts at every epoch end. chief_only is false: every worker sets its own copy.
//
// Every change is logged, at most once per epoch:
//   [HyperParamSetter] At global_step=0, learning_rate is set to 0.100000
//   [HyperParamSetter] At global_step=300, learning_rate changes from 0.100000 to 0.010000
// and when a setter puts back a value another setter changed at the same boundary (hyper.txt over
// a schedule), that is logged too, naming the setter, so that the last line about a param says
// what is in effect:
//   [HyperParamSetter] At global_step=300, learning_rate changes from 0.010000 to 0.050000
//   (HumanHyperParamSetter)
//
// State (checkpoints): `last_value` (float64, the last value this setter computed; absent before
// the first), `last_epoch_set` (int64, the epoch of the last logged change, -1 before),
// `applied_epoch` (int64, epoch_num when the setter last ran, -1 before) and `value` (float64, the
// param's value when saved). load_state restores the first three, so a resumed run logs a change
// only where an uninterrupted run would, and sets the param to `value` unless it is a
// GraphVarParam (a Graph variable is restored by the checkpoint itself; any other param, an
// ObjAttrParam, is in no checkpoint but this); a saved `value` outside the param's range is
// refused with a warning and the param keeps its value. The before_train of a resumed run does not
// run the setter again when it already ran at the end of the epoch the checkpoint follows
// (`applied_epoch` == epoch_num): a value computed from the current one (HyperParamSetterWithFunc,
// a subclass's) is not applied twice. HumanHyperParamSetter is the exception: it reads its file
// again, so an edit made while the run was down applies at once.
//
//   class Halve : public HyperParamSetter {
//     using HyperParamSetter::HyperParamSetter;
//     std::optional<double> _get_value_to_set() override { return get_current_value() / 2; }
//   };
//
// Differences from tensorpack: none.
class HyperParamSetter : public Callback {
 public:
  // Throws std::invalid_argument naming the class and `param` when the param is null.
  explicit HyperParamSetter(HyperParamRef param);

  // The value to set now (from `_get_value_to_set`), logging it when it differs from the last
  // value this setter returned. The value is returned (and set by the setter) even if unchanged.
  // A value outside the param's range is refused: a warning naming this setter (name()) and the
  // range, and nullopt.
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
  // Whether a resumed run's before_train sets a value even when the setter already ran at that
  // epoch before the checkpoint (see "State" above).
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

// Sets the param from `<logger dir>/<file_name>`, a file of `name: value` lines that a person can
// edit during training (`learning_rate: 1e-4`). The file is read every time the setter runs:
// before_train and every epoch end (or whenever a wrapper triggers it).
//
//   std::make_shared<HumanHyperParamSetter>("learning_rate");  // reads <logger dir>/hyper.txt
//
//   # comments and blank lines are skipped
//   learning_rate: 1e-4
//
// Lines for other names are allowed (other setters read them); the last line for a name wins. A
// missing file changes nothing, silently. In each of these cases the param keeps its value and a
// warning names the file:
// - a malformed line (not exactly one ':', an empty name, a value that is not a number); the
//   warning names the first such line by its number and counts the others, e.g.
//     HumanHyperParamSetter: /logs/hyper.txt line 2 is not 'name: value'; keeping
//     learning_rate = 0.1
//   (the line is not quoted: the file may hold what the log's readers should not see);
//   (after any bad line, even one for another name: a half-written file is never applied);
// - a value outside the param's range (`learning_rate: nan`, `inf`, `0`, `-1`), naming the line
//   and the range (`... line 1: learning_rate = -1.0 is outside its range (finite and > 0); ...`);
// - no line for the param;
// - a file larger than kMaxFileSize (64 KiB; the warning gives both sizes) or not a regular file
//   (a FIFO, a directory, a symbolic link), which is not read. The file is opened without
//   following a link and without blocking, and checked with fstat before a byte is read: a link
//   planted in a shared directory cannot make the job read a file it was not meant to.
// A warning is not repeated while the file stays the same: an unchanged bad file logs once, not
// at every epoch.
//
// State (checkpoints): HyperParamSetter's; `last_value` is the value last read from the file, so
// a resumed run that reads the same value logs no change (it reads the file in before_train, as
// a fresh run does: a value edited while the run was down applies at once, and is logged as a
// change from the value applied before).
//
// Differences from tensorpack: a warning naming the bad line instead of one `Cannot find <name>
// in <file>`; blank and `#` lines are skipped (tensorpack ignores the whole file for a blank
// line); whitespace around the name is ignored; values outside the param's range are refused; a
// size limit; an absolute `file_name` needs no logger directory; without a logger directory the
// constructor throws std::invalid_argument (tensorpack fails on a None path).
class HumanHyperParamSetter : public HyperParamSetter {
 public:
  // The largest file that is read, in bytes.
  static constexpr int64_t kMaxFileSize = 64 * 1024;

  explicit HumanHyperParamSetter(HyperParamRef param, std::string file_name = "hyper.txt");
  // The file that is read.
  const std::string& path() const { return path_; }

 protected:
  std::optional<double> _get_value_to_set() override;

 private:
  // Logs `message` unless the last warning was for the same `file_state` (the file's content, or
  // its size and time for a file that is not read).
  void warn_once(const std::string& file_state, const std::string& message);

  std::string path_;
  std::optional<std::string> warned_state_;  // the file state of the last warning
};

struct ScheduledHyperParamSetterOptions {
  // "" (set only at the scheduled points) or "linear" (interpolate between them, never after the
  // last one).
  TORCH_ARG(std::string, interp) = "";
  // The schedule's points are global steps instead of epochs.
  TORCH_ARG(bool, step_based) = false;
  // When training starts past a scheduled point and the param does not hold the value the
  // schedule gives there, set it (otherwise only warn).
  TORCH_ARG(bool, set_at_beginning) = true;
};

// Sets the param by a schedule of (point, value) pairs. A point is an epoch: `(N, v)` sets v when
// epoch N has finished, so it holds from epoch N+1, and `(0, v)` sets v in before_train when
// training starts at epoch 1. With step_based, a point is a global step: `(S, v)` sets v in the
// trigger_step where global_step (after the increment) is S.
//
// WHEN: before_train (the value at the current point: epoch starting_epoch-1, or the current
// global step), then epoch-based: trigger_epoch, for the finished epoch (never in trigger_step);
// step-based: trigger_step (never at the epoch end). Points between scheduled ones get a value
// only with interp "linear"; points after the last one get none (the last value is not set again).
//
//   std::make_shared<ScheduledHyperParamSetter>(
//       "learning_rate", ScheduledHyperParamSetter::Schedule{{0, 0.1}, {30, 0.01}, {60, 1e-3}});
//
// At before_train it also checks the value that the schedule gives for the current point (the
// last scheduled value at or before it, or the interpolated one); if the param holds another
// value it warns
//   According to scheduler ScheduledHyperParamSetter(schedule=[...]), parameter 'learning_rate'
//   should become 0.01 at the current point (epoch35). However its current value is 0.1.
// and then sets it (set_at_beginning, logging `Setting 'learning_rate' to 0.01.`) or warns to
// check the initialization.
//
// Also at before_train, once per run: an epoch-based schedule (not step_based) whose points lie
// after the trainer's max_epoch, which are never set, is warned about, naming them, max_epoch and
// the last value the schedule does set:
//   [ScheduledHyperParamSetter(schedule=[(0, 0.1), (150, 0.01)])] the schedule's point 150 is
//   after max_epoch=100, so its value is never set (a point N is an epoch, set when epoch N
//   ends); the last value it sets is learning_rate = 0.1, at the start. Shorten the schedule or
//   raise max_epoch; if the points are global steps, pass
//   ScheduledHyperParamSetterOptions().step_based(true).
// With interp "linear" the last value is the one interpolated at max_epoch (`..., at the end of
// epoch 100 (interpolated towards point 150)`); with no point up to max_epoch, `it sets no value
// during training`. A point equal to max_epoch is set at the last epoch's end and is not warned
// about (a run resumed with a larger max_epoch trains with it).
//
// State (checkpoints): HyperParamSetter's (the schedule itself is configuration), saved under
// `ScheduledHyperParamSetter(<param>)` (state_key), not under name(), which lists the schedule: a
// run resumed at epoch N neither logs nor sets the value of point N-1 again, and logs the next
// change as a change ("changes from 0.01 to 0.001"). Resumed with another schedule (a run
// extended with a larger max_epoch whose schedule depends on it), the run continues by epoch:
// the value the checkpoint holds stands (a warning names both values) instead of the start-up
// check setting the new schedule's value for that point, and the new schedule's later points
// apply when they come.
//
// Differences from tensorpack: the schedule must be strictly increasing and its points >= 0
// (tensorpack sorts it and keeps the first of equal points; here an unsorted schedule is an error,
// since it is almost always a typo); a scheduled 0.0 counts in the start-up check (tensorpack
// ignores it; docs/tensorpack-differences.md #3); the start-up warning of a step-based schedule
// names the step (`step 150`; tensorpack prints the bare word `step`); points after max_epoch are
// warned about (tensorpack never sets them, silently).
class ScheduledHyperParamSetter : public HyperParamSetter {
 public:
  using Schedule = std::vector<std::pair<int64_t, double>>;

  // Throws std::invalid_argument naming the class and the argument for a null param, an empty
  // schedule, a negative point, points that are not strictly increasing, or an unknown interp.
  ScheduledHyperParamSetter(HyperParamRef param, Schedule schedule,
                            ScheduledHyperParamSetterOptions options = {});

  // `ScheduledHyperParamSetter(schedule=[(30, 0.01), (60, 0.001)])`, as tensorpack's __str__.
  std::string name() const override;
  // `ScheduledHyperParamSetter(<param>)`: the schedule is not part of it (see State above).
  std::string state_key() const override;
  const Schedule& schedule() const { return schedule_; }
  const ScheduledHyperParamSetterOptions& options() const { return options_; }

  // The value that the schedule sets at `point`, or nullopt (before the first point, after the
  // last one, or between points without interpolation).
  std::optional<double> value_at(int64_t point) const;

 protected:
  std::optional<double> _get_value_to_set() override;
  void _before_train() override;
  void _trigger_epoch() override;
  void _trigger_step() override;

 private:
  int64_t current_point() const;
  void check_value_at_beginning(bool resumed);
  // The before_train warning about epoch points after max_epoch (see the class comment).
  void warn_points_after_max_epoch() const;

  Schedule schedule_;
  ScheduledHyperParamSetterOptions options_;
};

// Sets the param to `func(epoch_num, current_value)`.
//
// WHEN: before_train, with epoch_num = starting_epoch - 1 (0 for a fresh run), and every epoch
// end with the finished epoch's number. So a function that decays on even epochs already decays
// once before training (docs/tensorpack-differences.md #4: kept as in tensorpack).
//
//   std::make_shared<HyperParamSetterWithFunc>(
//       "learning_rate", [](int64_t e, double x) { return e % 2 == 0 ? x * 0.9 : x; });
//
// State (checkpoints): HyperParamSetter's: with `value`, the current value that func is given
// continues from where it was (also for an ObjAttrParam), and a run resumed after the end of
// epoch N does not apply func(N, x) again in before_train.
//
// Differences from tensorpack: none.
class HyperParamSetterWithFunc : public HyperParamSetter {
 public:
  using Func = std::function<double(int64_t epoch_num, double current_value)>;
  // Throws std::invalid_argument naming the class and the argument for a null param or an empty
  // func.
  HyperParamSetterWithFunc(HyperParamRef param, Func func);

 protected:
  std::optional<double> _get_value_to_set() override;

 private:
  Func func_;
};

struct StatMonitorParamSetterOptions {
  // Watch for the stat not increasing enough (instead of not decreasing enough).
  TORCH_ARG(bool, reverse) = false;
};

// Changes the param by `value_func(current_value)` when the stat `stat_name` (from the monitors)
// has not improved over its last `last_k` observations: not reverse, when
// `min(history) >= history[0] - threshold`; reverse, when `max(history) <= history[0] + threshold`.
// After a change the history starts again, so the next change needs last_k new observations.
//
// WHEN: every trigger() (every epoch end by default), never in before_train. Each time it takes the
// latest value of the stat; it must come after the callback that produces the stat. It warns when
// the stat has no value yet (`[StatMonitorParamSetter] No history data available for key 'x'.`)
// or when no value was added since the last trigger; a change logs
// `[StatMonitorParamSetter] Triggered, history of val-error: 0.8,0.9,0.85`.
//
//   // Divide the learning rate by 5 when val-error has not decreased over 5 epochs:
//   std::make_shared<StatMonitorParamSetter>("learning_rate", "val-error",
//                                            [](double x) { return x * 0.2; }, 0, 5);
//
// State (checkpoints): HyperParamSetter's, plus the observations since the last change:
// `history_steps` (int64 [n], the global step of each) and `history_values` (float64 [n]), n <=
// last_k (a longer saved history keeps its last last_k). A resumed run changes the param at the
// same observation as an uninterrupted one.
//
// Differences from tensorpack: arguments are checked.
class StatMonitorParamSetter : public HyperParamSetter {
 public:
  // Throws std::invalid_argument naming the class and the argument for a null param, an empty
  // stat_name, an empty value_func or last_k < 1.
  StatMonitorParamSetter(HyperParamRef param, std::string stat_name,
                         std::function<double(double)> value_func, double threshold, int64_t last_k,
                         StatMonitorParamSetterOptions options = {});

  CallbackState state() const override;
  void load_state(const CallbackState& state) override;

 protected:
  std::optional<double> _get_value_to_set() override;

 private:
  std::string stat_name_;
  std::function<double(double)> value_func_;
  double threshold_;
  size_t last_k_;
  StatMonitorParamSetterOptions options_;
  std::deque<std::pair<int64_t, double>> history_;  // (global_step, value), at most last_k
};

}  // namespace trainpack
