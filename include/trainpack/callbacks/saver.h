// Saving checkpoints during training (tensorpack's callbacks/saver.py): ModelSaver, MinSaver and
// MaxSaver. See docs/save-load.md for the files they write and how a run resumes from them.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <torch/arg.h>

#include "trainpack/core/callback.h"
#include "trainpack/utils/checkpoint.h"
#include "trainpack/utils/clock.h"

namespace trainpack {

struct ModelSaverOptions {
  // How many of this run's checkpoints to keep (the newest); 0 keeps them all.
  TORCH_ARG(int64_t, max_to_keep) = 10;
  // Besides those, keep one checkpoint every this many hours (TensorFlow Saver's rule); 0 keeps
  // every checkpoint that max_to_keep drops, as TF does.
  TORCH_ARG(double, keep_checkpoint_every_n_hours) = 0.5;
  // Where to write; unset: the logger directory at construction. Created if missing.
  TORCH_ARG(std::optional<std::string>, checkpoint_dir);
  // Only {"GLOBAL_VARIABLES"} (or TensorFlow's "variables"): the whole training state. Anything
  // else is std::invalid_argument: no subset of the state can be resumed from.
  TORCH_ARG(std::vector<std::string>, var_collections) = {"GLOBAL_VARIABLES"};
  // fsync every file and the directory (off only for benchmarks and tests).
  TORCH_ARG(bool, fsync) = true;
  // Save the stop step in after_train when SIGINT/SIGTERM stopped training (if not saved yet).
  TORCH_ARG(bool, save_on_signal) = true;
  // Seconds since the Unix epoch, for the save times; unset: the wall clock (tests inject one).
  TORCH_ARG(Clock, clock);
  // Write on ModelSaver's own writer thread from a snapshot of the state (see ModelSaver). false:
  // save() writes on the training thread and returns when the checkpoint is durable (tensorpack's).
  TORCH_ARG(bool, async) = true;
  // For tests: called with the prefix `<dir>/model-<gs>` on the writing thread, before it writes.
  TORCH_ARG(std::function<void(const std::string&)>, before_write);
};

// tensorpack's ModelSaver: saves the training state (collect_training_state) as the checkpoint
// `<dir>/model-<global_step>.data` and updates the directory's `checkpoint` index.
// When: trigger (every epoch end by default; wrap it in PeriodicTrigger for another period), and
// after_train when SIGINT/SIGTERM stopped training (save_on_signal); at most once per global_step.
// With async, the training thread waits for the save in flight (at most one), hands a snapshot
// (every tensor cloned) to the writer thread (started at setup_graph, joined by after_train and
// the destructor) and goes on; the writer writes the file (fsync, rename), replaces the index,
// then deletes what retention drops, and logs `Model saved to <dir>/model-<gs>.` A crash loses at
// most the save in flight. To read a checkpoint right after a save, call flush() first.
// Retention (TensorFlow Saver's): past max_to_keep the oldest tracked checkpoint is deleted unless
// keep_checkpoint_every_n_hours keeps it; never the latest one, nor an earlier run's.
// Errors: a failed save logs ERR `Exception in ModelSaver! <reason>`, leaves the index on the last
// good checkpoint, and training goes on; the run ends with WriteFailedError (reported when the
// training thread next waits for the writer). std::invalid_argument for bad options, and at
// setup_graph without a directory or logger directory; std::runtime_error when setup_graph cannot
// create the directory. chief_only: true.
// See docs/save-load.md, "ModelSaver" and "Crash safety".
class ModelSaver : public Callback {
 public:
  explicit ModelSaver(ModelSaverOptions options = {});
  // Waits for the save in flight (a failure is logged, not reported) and joins the writer thread.
  ~ModelSaver() override;
  ModelSaver(const ModelSaver&) = delete;
  ModelSaver& operator=(const ModelSaver&) = delete;

  // The directory checkpoints go to ("" until known: unset and no logger directory).
  const std::string& checkpoint_dir() const { return dir_; }
  // The checkpoints this run tracks (what the index lists), oldest first, with their save times.
  const std::vector<std::pair<std::string, double>>& tracked() const { return tracked_; }

  // Saves now, as trigger() does, on the training thread. async: true when this step's snapshot
  // was handed to the writer (flush() says whether it was written); async(false): true when it was
  // written and indexed. false when the step was saved already or the save failed (logged).
  bool save();
  // Waits until the save in flight, if any, is durable and indexed, and reports its failure to
  // the trainer. Returns false when that save failed.
  bool flush();

 protected:
  void _setup_graph() override;
  void _before_train() override;
  void _trigger() override { save(); }
  void _after_train() override;

 private:
  // One save: the snapshot, the index to write, what retention deletes, the outcome (saver.cpp).
  struct Save;

  double now() const;
  void start_writer();
  void stop_writer();
  void writer_loop();
  // Writes `save` (file, index, retention), on whichever thread runs it; logs, never throws.
  void write(Save& save) const;
  // On the training thread: commits a written save's tracked list, or reports its failure.
  bool finish(const Save& save);

  ModelSaverOptions options_;
  std::string dir_;
  std::vector<std::pair<std::string, double>> tracked_;
  double next_keep_time_ = 0;
  double last_preserved_ = 0;
  std::optional<int64_t> last_saved_step_;

  // The writer thread. pending_ and the flags are guarded by mutex_; the Save is the writer's
  // from hand-over until written_ is set.
  std::thread writer_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::shared_ptr<Save> pending_;
  bool taken_ = false;    // the writer has started on pending_
  bool written_ = false;  // the writer is done with pending_
  bool stop_ = false;
};

// Waits, on the training thread, for the saves in flight of every ModelSaver among the trainer's
// callbacks (wrapped ones included) and reports their failures: then each directory's `checkpoint`
// index names the last save's checkpoint, if it was written. Returns false when one failed.
bool wait_for_model_savers(const Trainer& trainer);

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
