// The hyperparameter setters that follow a plan fixed before training (tensorpack's
// callbacks/param.py): ScheduledHyperParamSetter, by (epoch or step, value) points, and
// HyperParamSetterWithFunc, by a function of the epoch. The params and the base,
// HyperParamSetter, are in callbacks/param.h. Worked runs: docs/schedules.md.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/arg.h>

#include "trainpack/callbacks/param.h"

namespace trainpack {

struct ScheduledHyperParamSetterOptions {
  // "" (set only at the scheduled points) or "linear" (interpolate between them).
  TORCH_ARG(std::string, interp) = "";
  // The schedule's points are global steps instead of epochs.
  TORCH_ARG(bool, step_based) = false;
  // At before_train, set the schedule's value for the current point if the param differs.
  TORCH_ARG(bool, set_at_beginning) = true;
};

// tensorpack's ScheduledHyperParamSetter: sets the param by a schedule of (point, value) pairs. A
// point is an epoch: `(N, v)` sets v when epoch N has finished (`(0, v)`: in before_train at epoch
// 1); with step_based, a global step: `(S, v)` sets v in the trigger_step where global_step is S.
// When: before_train (the current point), then trigger_epoch (epoch-based) or trigger_step
// (step-based), never both. Between points only with interp "linear"; after the last, nothing.
// At before_train: if the param does not hold the schedule's value for the current point (the
// last point at or before it, or interpolated), a warning, then set_at_beginning sets it (else a
// second warning); epoch points after max_epoch, never set, are warned about once.
// State (checkpoints): HyperParamSetter's, under state_key() `ScheduledHyperParamSetter(<param>)`
// (name() lists the schedule): a run resumed with another schedule keeps the checkpoint's value,
// with a warning, and takes the new schedule's later points.
// See docs/schedules.md (worked runs, the messages, the differences from tensorpack).
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

// tensorpack's HyperParamSetterWithFunc: sets the param to `func(epoch_num, current_value)`.
// When: before_train with epoch_num = starting_epoch - 1 (0 for a fresh run: a function that
// decays on even epochs decays once before training, as in tensorpack), and every epoch end with
// the finished epoch's number. A resumed run continues from the saved value and does not apply
// func(N, x) again in before_train after epoch N.
class HyperParamSetterWithFunc : public HyperParamSetter {
 public:
  using Func = std::function<double(int64_t epoch_num, double current_value)>;
  // Throws std::invalid_argument naming the class and the argument: a null param, an empty func.
  HyperParamSetterWithFunc(HyperParamRef param, Func func);

 protected:
  std::optional<double> _get_value_to_set() override;

 private:
  Func func_;
};

}  // namespace trainpack
