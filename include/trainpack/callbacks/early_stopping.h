// Stopping training when a statistic stops improving (PyTorch Lightning's EarlyStopping; tensorpack
// has no such callback): EarlyStoppingOptions, EarlyStopping.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <torch/arg.h>

#include "trainpack/core/callback.h"

namespace trainpack {

struct EarlyStoppingOptions {
  // How many checks in a row without an improvement stop training (>= 1).
  TORCH_ARG(int64_t, patience) = 3;
  // By how much a value must beat the best to count as an improvement (>= 0).
  TORCH_ARG(double, min_delta) = 0.0;
  // "min": lower is better (an error, a loss); "max": higher is better (an accuracy).
  TORCH_ARG(std::string, mode) = "min";
  // Stop at once on a NaN or infinite value (Lightning's check_finite). Off: such a value is
  // just not an improvement.
  TORCH_ARG(bool, check_finite) = true;
  // A stat name that has no value once every validation has run is an error that stops training
  // (Lightning's strict); false: one warning instead. See "no value" below.
  TORCH_ARG(bool, strict) = true;
};

// Stops training (throws StopTraining) when the stat `monitor_stat` has not improved for
// `patience` checks in a row.
//
//   callbacks = {std::make_shared<InferenceRunner>(...),  // puts "val-error-top1"
//                std::make_shared<ModelSaver>(),
//                std::make_shared<EarlyStopping>(
//                    "val-error-top1", EarlyStoppingOptions().patience(5).min_delta(0.001))};
//
// When: trigger (every epoch end by default). Place it after the callback that puts the stat (it
// reads the stat put in the same round) and after ModelSaver (so that the last epoch is saved
// before training stops). A check takes the last (global_step, value) of
// `trainer().monitors().get_history(monitor_stat)`:
//   - no value at all: nothing counted. The name is checked at the first such check once every
//     validation has run, that is when every validator declared to the monitors
//     (Monitors::add_validator: every InferenceRunner, wrapped or not, and callbacks of your own
//     that declare themselves) has put its statistics at least once in this run
//     (Monitors::validators_have_run); with no validator, at the first check. Before that the
//     stat's validation has not run yet (a runner every few epochs, or after EarlyStopping in the
//     list), and nothing is said. At the check, with strict (the default), std::runtime_error,
//     which stops training (not a StopTraining: the run fails):
//       EarlyStopping: 'val-eror' has not been put by global_step=2 (epoch 1), though every
//       validation has run (InferenceRunner). The stats put so far: cost, val-error. Check the
//       name, and that the callback that puts it comes before EarlyStopping in the callbacks; or,
//       for a stat that comes later, pass EarlyStoppingOptions().strict(false) to warn instead
//     (without validators: `..., and no callback validates (none called Monitors::add_validator,
//     as InferenceRunner does) to put it later.`); with strict(false), one WRN `[EarlyStopping]
//     '<stat>' has not been put by ... Training goes on (strict(false)).`, never repeated;
//   - the same global_step as the value the previous check took (the producer did not run since,
//     e.g. it runs every 2 epochs): nothing counted, silently: patience counts checks that saw a
//     new value, as Lightning counts validation runs;
//   - otherwise, with check_finite and a NaN or infinite value: StopTraining at once;
//   - otherwise an improvement is `value < best - min_delta` ("min") or `value > best + min_delta`
//     ("max"), strictly, with best = +inf ("min") or -inf ("max") before the first value
//     (Lightning's rule: the first finite value always improves; an improvement of exactly
//     min_delta does not count; a NaN never improves). An improvement makes the value the best,
//     remembers its epoch and global_step and sets the wait count to 0; any other value adds 1
//     to it, and when the count reaches `patience` training stops.
// Logs: INFO `[EarlyStopping] '<stat>' did not improve (<wait count>/<patience>); best <value> at
// epoch <e> (global_step <gs>).` at each check without an improvement that does not stop.
// Stops with StopTraining(`EarlyStopping: '<stat>' did not improve by more than <min_delta> for
// <patience> checks; best <value> at epoch <e> (global_step <gs>)`), or for a non-finite value
// `EarlyStopping: '<stat>' is nan at epoch <e>; best <value> at epoch <e> (global_step <gs>)`; the
// loop logs it as `Training was stopped by exception <message>.`. Values print as %.6g.
// State (checkpoints): `best_value` (float64; +inf/-inf before the first value), `best_epoch` and
// `best_step` (int64, -1 before the first value), `wait_count` (int64) and `last_step` (int64,
// the global_step of the last value taken; -1 none). ModelSaver may run before this trigger at
// the same epoch end: state() then already includes the value this trigger is about to take (the
// stat's last value, when put at the current global_step and not taken yet), so a run resumed
// from that checkpoint counts it once, as an uninterrupted run does. A resumed run therefore
// stops at the same epoch as an uninterrupted one. (A run resumed from the checkpoint of the
// epoch where training stopped, its count already at patience, trains on to the next check,
// which stops it unless the value improves.)
// chief_only: true (the chief's monitors hold the stat; under data-parallel training a
// StopTraining thrown at an epoch end on the chief stops every rank at the same boundary).
// Errors: std::invalid_argument at construction for an empty monitor_stat, patience < 1, a
// negative or non-finite min_delta, and a mode other than "min" or "max", naming the option.
//
// Differences from tensorpack: an addition (tensorpack has no EarlyStopping). From Lightning's:
// checked at trigger (an epoch end) instead of at a validation end; no stopping_threshold or
// divergence_threshold; strict checks the name once every validator has run (Lightning checks it
// at every validation end); the best epoch is in the message and the checkpoint.
class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(std::string monitor_stat, EarlyStoppingOptions options = {});

  const std::string& monitor_stat() const { return stat_; }
  const EarlyStoppingOptions& options() const { return options_; }
  // The best value so far and its epoch and global_step (nullopt before the first value).
  std::optional<double> best_value() const;
  int64_t best_epoch() const { return best_epoch_; }
  int64_t best_step() const { return best_step_; }
  // Checks in a row without an improvement.
  int64_t wait_count() const { return wait_; }

  CallbackState state() const override;
  void load_state(const CallbackState& state) override;

 protected:
  void _trigger() override;

 private:
  // The counters after taking `value` (put at `step`, seen at epoch `epoch`).
  struct Counters {
    double best;
    int64_t best_epoch;
    int64_t best_step;
    int64_t wait;
    int64_t last_step;
  };
  Counters counters() const { return {best_, best_epoch_, best_step_, wait_, last_step_}; }
  Counters take(Counters c, int64_t step, double value, int64_t epoch) const;
  bool improves(double value, double best) const;
  // Throws (strict) or warns once when the stat has no value though every validation has run.
  void check_missing_stat();
  std::string best_text(const Counters& c) const;

  std::string stat_;
  EarlyStoppingOptions options_;
  bool max_mode_ = false;
  double best_;
  int64_t best_epoch_ = -1;
  int64_t best_step_ = -1;
  int64_t wait_ = 0;
  int64_t last_step_ = -1;
  bool warned_missing_ = false;  // check_missing_stat has warned
};

}  // namespace trainpack
