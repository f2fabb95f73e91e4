// Keeping the best checkpoint (tensorpack's MinSaver and MaxSaver, callbacks/saver.py): a copy of
// the checkpoint ModelSaver (callbacks/saver.h) took when a stat reached its best value. See
// docs/save-load.md, "MinSaver and MaxSaver".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include <torch/arg.h>

#include "trainpack/core/callback.h"

namespace trainpack {

struct MinSaverOptions {
  // Keep the maximum instead of the minimum (MaxSaver sets it).
  TORCH_ARG(bool, reverse) = false;
  // The copy's file name in checkpoint_dir, without `.data` (a '/' is std::invalid_argument).
  // Unset: `min-<stat>` (`max-<stat>` with reverse), the stat made safe for a file name.
  TORCH_ARG(std::optional<std::string>, filename);
  // The ModelSaver's directory, where the copy goes; unset: the logger directory.
  TORCH_ARG(std::optional<std::string>, checkpoint_dir);
  // fsync the copy and the directory.
  TORCH_ARG(bool, fsync) = true;
  // A stat name that has no value once every validation has run is an error that stops training
  // (Lightning's strict=True); false: one warning instead (see MinSaver).
  TORCH_ARG(bool, strict) = true;
};

// tensorpack's MinSaver: keeps a copy of the checkpoint taken when `monitor_stat` reached a new
// minimum (MaxSaver: maximum), as `<dir>/min-<stat>.data`, to pick the best model afterwards.
// Needs, earlier in the callback list, the stat's producer and a ModelSaver of the same directory,
// triggered at the same step: {InferenceRunner, ModelSaver, MinSaver}.
// When: trigger (every epoch end by default). A last value of the stat strictly better than the
// best (NaN never is) is copied from `model-<its step>` (after wait_for_model_savers) when that
// is the index's latest checkpoint, and becomes the best: INFO `Model at global_step=<step> with
// minimum <stat>=<value> saved.`; otherwise WARN `[MinSaver] New minimum ...` and the best stays.
// State (checkpoints): the best (`best_step`, `best_value`) and the value about to be considered
// (`pending_step`, `pending_value`); a copy owed by a stopped run or a failed copy is made at the
// resume's before_train or retried at later triggers, and is a failed write until made.
// strict: a stat with no value once every validator (Monitors::add_validator) has put its
// statistics stops training with std::runtime_error listing the stats put; strict(false) warns.
// Errors: std::invalid_argument at construction (an empty stat, a filename that is not a plain
// file name) and at setup_graph (no directory; every ModelSaver of the directory comes after it).
// A failed copy, or a checkpoint missing because its save failed: ERR and a failed write; training
// goes on. No `checkpoint` index: std::runtime_error("[MinSaver] Cannot find a checkpoint state.
// Do you forget to use ModelSaver?"), as in tensorpack. chief_only: true.
// See docs/save-load.md, "MinSaver and MaxSaver".
class MinSaver : public Callback {
 public:
  explicit MinSaver(std::string monitor_stat, MinSaverOptions options = {});

  // The best (global_step, value) so far, if any.
  const std::optional<std::pair<int64_t, double>>& best() const { return best_; }
  const std::string& monitor_stat() const { return stat_; }
  // The prefix of the copy: `<dir>/<filename>` (the directory is resolved at construction).
  std::string best_checkpoint_prefix() const;

  CallbackState state() const override;
  // Accepts the entries state() writes; anything else is std::invalid_argument.
  void load_state(const CallbackState& state) override;

 protected:
  void _setup_graph() override;
  void _before_train() override;
  void _trigger() override;
  void _after_train() override;

 private:
  // Throws (strict) or warns once when the stat has no value though every validation has run.
  void check_missing_stat();
  void check_after_model_saver() const;
  // Copies the latest checkpoint if it was taken at `step`; true when it did.
  bool save(int64_t step, double value);
  // Copies `model-<step>` to the best copy; on failure logs and reports it and returns false.
  bool copy_from(int64_t step, double value);
  bool retry_unsaved();
  // The failed save of `step` into this directory that the trainer recorded, if any.
  std::optional<std::string> failed_save(int64_t step) const;
  bool is_better(double value) const;

  std::string stat_;
  MinSaverOptions options_;
  std::string dir_;
  std::string filename_;
  std::optional<std::pair<int64_t, double>> best_;
  // A better (step, value) whose copy is owed (failed, or the run stopped first); retried.
  std::optional<std::pair<int64_t, double>> unsaved_;
  std::optional<int64_t> last_trigger_step_;
  bool found_no_value_ = false;  // a trigger found no value for the stat
  bool warned_missing_ = false;  // check_missing_stat has warned
  bool failed_missing_ = false;  // check_missing_stat has thrown (strict)
};

struct MaxSaverOptions {
  // As MinSaverOptions::filename (default `max-<stat>`).
  TORCH_ARG(std::optional<std::string>, filename);
  TORCH_ARG(std::optional<std::string>, checkpoint_dir);
  TORCH_ARG(bool, fsync) = true;
  // As MinSaverOptions::strict.
  TORCH_ARG(bool, strict) = true;
};

// tensorpack's MaxSaver (`MinSaver(stat, reverse=True)`): MinSaver for a stat to maximise; copies
// to `max-<stat>.data` and logs `... with maximum ...`.
class MaxSaver : public MinSaver {
 public:
  explicit MaxSaver(std::string monitor_stat, MaxSaverOptions options = {});
};

}  // namespace trainpack
