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
  // Stop at once on a NaN or infinite value (Lightning's check_finite); off: not an improvement.
  TORCH_ARG(bool, check_finite) = true;
  // A stat name that has no value once every validation has run is an error that stops training
  // (Lightning's strict); false: one warning instead (see EarlyStopping).
  TORCH_ARG(bool, strict) = true;
};

// Stops training (StopTraining) when the stat `monitor_stat` has not improved for `patience`
// checks in a row (PyTorch Lightning's EarlyStopping; an addition to tensorpack).
// When: trigger (every epoch end by default). Place it after the stat's producer and after
// ModelSaver (so that the last epoch is saved). A check takes the stat's last (global_step, value)
// from the monitors:
//   - no value: nothing counted. Once every validator (Monitors::add_validator) has put its
//     statistics (with none, at once), strict throws std::runtime_error naming the stat and the
//     stats put (the run fails); strict(false) warns once;
//   - the global_step of the previous check's value: nothing counted (patience counts new values);
//   - with check_finite, a NaN or infinite value: StopTraining at once;
//   - an improvement, `value < best - min_delta` ("min") or `value > best + min_delta` ("max"),
//     strictly (the first finite value always improves), becomes the best and resets the wait
//     count; any other value adds 1 to it, and at `patience` training stops.
// Logs INFO `[EarlyStopping] '<stat>' did not improve (<wait>/<patience>); best <value> at epoch
// <e> (global_step <gs>).` at a check that neither improves nor stops. The StopTraining says
// `EarlyStopping: '<stat>' did not improve by more than <min_delta> for <patience> checks; best
// ...` (or `... is nan at epoch <e>; best ...`). Values print as %.6g.
// State (checkpoints): `best_value`, `best_epoch`, `best_step`, `wait_count`, `last_step`, already
// counting the value this trigger is about to take when ModelSaver saves first: a resumed run
// stops at the same epoch as an uninterrupted one.
// chief_only: true (under data-parallel training its StopTraining stops every rank at the same
// boundary). Errors: std::invalid_argument at construction for an empty monitor_stat, patience <
// 1, a negative or non-finite min_delta, or a mode other than "min" or "max".
// See docs/training-extras.md, "Early stopping".
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
