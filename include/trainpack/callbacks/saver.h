// Saving checkpoints during training (tensorpack's callbacks/saver.py): ModelSaver, and MinSaver
// / MaxSaver, which keep a copy of the checkpoint with the best value of a stat.
//
// Public names: ModelSaverOptions, ModelSaver, MinSaverOptions, MinSaver, MaxSaverOptions,
// MaxSaver. The files they write are described in trainpack/utils/checkpoint.h and, for users,
// in docs/save-load.md.
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
  // Besides those, keep one checkpoint every this many hours of training (TensorFlow Saver's
  // rule, see ModelSaver). 0 preserves every checkpoint that max_to_keep drops, as TF does.
  TORCH_ARG(double, keep_checkpoint_every_n_hours) = 0.5;
  // Where to write; unset: the logger directory at construction. Created if missing.
  TORCH_ARG(std::optional<std::string>, checkpoint_dir);
  // Which state to save, in tensorpack's terms. Only the whole training state is supported:
  // {"GLOBAL_VARIABLES"} (the default; TensorFlow's key string "variables" is accepted too), i.e.
  // everything collect_training_state returns (core/state.h). Any other collection is
  // std::invalid_argument: there is no subset of the state that a resume could work from.
  TORCH_ARG(std::vector<std::string>, var_collections) = {"GLOBAL_VARIABLES"};
  // fsync every file and the directory (off only for benchmarks and tests).
  TORCH_ARG(bool, fsync) = true;
  // When training stopped on SIGINT/SIGTERM, save a checkpoint at the stop step in after_train
  // (unless one was saved at that step already).
  TORCH_ARG(bool, save_on_signal) = true;
  // Seconds since the Unix epoch, for the save times (the index's timestamps and the hours
  // rule); unset: the wall clock. Tests inject one.
  TORCH_ARG(Clock, clock);
  // Write checkpoints on ModelSaver's own writer thread (the default): the training thread takes
  // a snapshot of the state and goes on while the writer writes, fsyncs, renames and indexes it
  // (see ModelSaver). false: save() does everything on the training thread and returns when the
  // checkpoint is durable, as tensorpack's saver does.
  TORCH_ARG(bool, async) = true;
  // Called with the checkpoint's prefix (`<dir>/model-<gs>`) on the thread that writes it, just
  // before it is written (with async: the writer thread). For tests: a hook that sleeps or blocks
  // holds the save in flight; an exception it throws fails the save as a write error would.
  TORCH_ARG(std::function<void(const std::string&)>, before_write);
};

// Saves the training state as the checkpoint `<dir>/model-<global_step>` and updates the
// directory's `checkpoint` index (the latest, and the checkpoints this run keeps).
//
//   callbacks.push_back(std::make_shared<ModelSaver>());  // every epoch, into the logger dir
//   callbacks.push_back(std::make_shared<PeriodicTrigger>(
//       std::make_shared<ModelSaver>(ModelSaverOptions().max_to_keep(3)),
//       PeriodicTriggerOptions().every_k_steps(500)));
//
// When: trigger (every epoch end by default; wrap it in PeriodicTrigger for another period),
// and after_train when training was stopped by a signal (save_on_signal). At most one save per
// global_step in a run: a trigger at a step that was already saved does nothing.
// What a save does, in this order (a crash at any point leaves a usable directory):
//   1. on the training thread: wait for the previous save if it is still being written (at most
//      one save is in flight), then take a snapshot of the state: collect_training_state(trainer)
//      (parameters, buffers, optimizer state, graph variables, counters, RNG states, callback
//      states) with every tensor cloned, so that the snapshot stays the state of this step while
//      the optimizer updates the parameters in place; hand it to the writer thread and return;
//   2. on the writer thread: write it as `model-<gs>.data`, checksum trailer included
//      (write_checkpoint: temporary file, fsync, rename, directory fsync);
//   3. append `model-<gs>` to the tracked list (a name already there moves to the end) and
//      replace the `checkpoint` index file (last, atomically, through its swap file
//      `checkpoint.previous`: write_checkpoint_index);
//   4. only then delete the checkpoints that retention drops;
//   5. log `Model saved to <dir>/model-<gs>.`: the checkpoint is durable and indexed.
// With async(false), steps 2-5 run on the training thread too, before save() returns (no
// snapshot copy: the state is written before training goes on).
// The writer thread belongs to the ModelSaver: setup_graph starts it (a save after after_train
// starts it again); after_train and the destructor wait for the save in flight and join it.
// Saving on another thread moves the disk's time off the training thread, which only pays for the
// snapshot (for the main job's state about 0.2 ms of a 2.2 ms save with fsync: BENCHMARKS.md,
// "Checkpoints").
// A crash or SIGKILL loses at most the save in flight: the index names only durable checkpoints.
// Waiting for a save: flush() (on the training thread). after_train waits for the save in flight
// and for its own save on a signal before it returns; MinSaver/MaxSaver wait for the trainer's
// ModelSavers (wait_for_model_savers) before they read the index, so they see the checkpoint of
// their step; the console's `save` waits too. Anything else that reads a checkpoint during
// training, right after a save, calls one of them first.
// Retention (TensorFlow Saver's): when the tracked list is longer than max_to_keep, its oldest
// entry leaves it; that checkpoint stays on disk (untracked) if it was saved later than
// `next_keep_time` (construction time + keep_checkpoint_every_n_hours; advanced by that much
// each time one is kept), otherwise its file is deleted. The latest checkpoint is never
// deleted. A new run (a new ModelSaver) starts with an empty tracked list, so checkpoints of
// earlier runs in the directory are never deleted.
// Errors: a save that fails (disk full, file-size limit, permission, any std::exception while
// collecting or writing) logs ERR `Exception in ModelSaver! <reason>` naming the file (at once,
// from the thread that failed); training goes on, the `checkpoint` index still names the last
// good checkpoint, and no partial or temporary file is left. The failure is reported to the
// trainer (Trainer::report_write_failure, with the save's global_step: `model-<gs>.data`, or
// `checkpoint` when the index could not be written) on the training thread, since the trainer's
// record of failures is not synchronised: when the training thread next waits for the writer (the
// next save, flush(), a MinSaver's trigger, after_train at the latest). So the run ends with
// WriteFailedError after every after_train (a failed save at a signal included). Construction
// throws std::invalid_argument for max_to_keep < 0, a negative or non-finite
// keep_checkpoint_every_n_hours and an unsupported var_collections. setup_graph creates the
// directory (std::runtime_error when it cannot: not at construction, so that a ModelSaver skipped
// on a rank other than the chief creates nothing), and throws std::invalid_argument("ModelSaver: no
// directory was given and the logger directory is not set; pass one with
// ModelSaverOptions().checkpoint_dir(dir), or call trainpack::logger::set_logger_dir(dir) first")
// when neither a directory nor a logger directory was given (it is checked there, not at
// construction, because a non-chief worker never sets it up; tensorpack's text is "Please provide
// 'checkpoint_dir' for ModelSaver, or use logger.set_logger_dir()"). chief_only: true.
//
// Differences from tensorpack:
// - A checkpoint is one file, `model-<gs>.data` (torch::pickle_save of a str -> Tensor dict;
//   Python's `torch.load` reads it; its zip comment holds the CRC-32C and entry count), not
//   TensorFlow's `.data-00000-of-00001` + `.index`; no `graph-*.meta` is exported.
// - Checkpoints hold the whole training state (callback states and the data position included),
//   so a resume continues exactly; every file is fsynced and renamed into place, and each
//   checkpoint is checksummed (tensorpack relies on TF's saver, which does neither).
// - Any exception during a save is logged and ignored (tensorpack catches only IOError,
//   PermissionDenied, ResourceExhausted and AlreadyExists); a failed save deletes nothing.
// - save_on_signal (new): a checkpoint at the step where SIGINT/SIGTERM stopped training.
// - Checkpoints are written on a thread of the ModelSaver's own (async, the default), from a
//   snapshot; tensorpack's saver writes on the training thread (async(false) does that).
// - max_to_keep = 0 tracks (lists in the index) every checkpoint of the run; TF lists only the
//   latest then.
class ModelSaver : public Callback {
 public:
  explicit ModelSaver(ModelSaverOptions options = {});
  // Waits for the save in flight (its failure is logged, but no longer reported: the trainer may
  // be gone) and joins the writer thread.
  ~ModelSaver() override;
  ModelSaver(const ModelSaver&) = delete;
  ModelSaver& operator=(const ModelSaver&) = delete;

  // The directory checkpoints go to ("" until known: unset and no logger directory).
  const std::string& checkpoint_dir() const { return dir_; }
  // The checkpoints this run tracks, oldest first, with their save times: what the index lists.
  // A save in flight joins the list when the training thread collects it (flush() first).
  const std::vector<std::pair<std::string, double>>& tracked() const { return tracked_; }

  // Saves now, as trigger() does (a step already saved in this run is skipped; the save in
  // flight, if any, is waited for first). On the training thread. With async (the default):
  // returns true when the snapshot of this step was handed to the writer (whether it is then
  // written, flush() says); false when the step was saved already or the snapshot failed (logged
  // and reported). With async(false): returns true when the checkpoint was written and indexed;
  // on failure logs the error and returns false.
  bool save();
  // Waits until the save in flight, if any, is durable and indexed (or failed), on the training
  // thread, and reports its failure to the trainer. Returns false when that save failed, true
  // otherwise (also when nothing was in flight).
  bool flush();

 protected:
  void _setup_graph() override;
  void _before_train() override;
  void _trigger() override { save(); }
  void _after_train() override;

 private:
  // One save: the snapshot, the index to write and what retention deletes afterwards, and, once
  // written, the outcome (saver.cpp).
  struct Save;

  double now() const;
  void start_writer();
  void stop_writer();
  void writer_loop();
  // Writes `save` (steps 2-5 of the header), on whichever thread runs it; logs, never throws.
  void write(Save& save) const;
  // On the training thread, after `save` was written: commits its tracked list, or reports its
  // failure. Returns whether it was written.
  bool finish(const Save& save);

  ModelSaverOptions options_;
  std::string dir_;
  std::vector<std::pair<std::string, double>> tracked_;
  double next_keep_time_ = 0;
  double last_preserved_ = 0;
  std::optional<int64_t> last_saved_step_;

  // The writer thread and the save handed to it. pending_ and the flags are guarded by mutex_;
  // the Save itself is the writer's from hand-over until written_ is set, then the training
  // thread's again.
  std::thread writer_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::shared_ptr<Save> pending_;
  bool taken_ = false;    // the writer has started on pending_
  bool written_ = false;  // the writer is done with pending_
  bool stop_ = false;
};

// Waits, on the training thread, for the saves in flight of every ModelSaver among the trainer's
// callbacks (wrapped ones included) and reports their failures: afterwards the `checkpoint` index
// of each directory names the checkpoint of the last save, if it was written. Returns false when
// one of them failed. MinSaver/MaxSaver call it before they read the index.
bool wait_for_model_savers(const Trainer& trainer);

struct MinSaverOptions {
  // Keep the maximum instead of the minimum (MaxSaver sets it).
  TORCH_ARG(bool, reverse) = false;
  // File name (in checkpoint_dir) of the copy: `<filename>.data`. Unset:
  // `min-<stat>` (`max-<stat>` with reverse), the stat name made safe for a file name. A file
  // name, not a path: '/' is std::invalid_argument.
  TORCH_ARG(std::optional<std::string>, filename);
  // The directory of the ModelSaver's checkpoints, where the copy goes too; unset: the logger
  // directory at construction.
  TORCH_ARG(std::optional<std::string>, checkpoint_dir);
  // fsync the copy and the directory.
  TORCH_ARG(bool, fsync) = true;
  // A stat name that has no value once every validation has run is an error that stops training
  // (Lightning's strict=True); false: one warning instead (see "A stat that never comes" below).
  TORCH_ARG(bool, strict) = true;
};

// Keeps a copy of the checkpoint taken when `monitor_stat` reached a new minimum (MaxSaver: a new
// maximum), for picking the best model after training.
//
//   callbacks = {..., std::make_shared<InferenceRunner>(...),  // puts "val-error-top1"
//                std::make_shared<ModelSaver>(),
//                std::make_shared<MinSaver>("val-error-top1")};
//   // -> <logger dir>/min-val-error-top1.data
//
// Needs a ModelSaver writing to the same directory earlier in the callback list, and the
// producer of the stat earlier still: both must have run at the same step. setup_graph checks
// the first: when the trainer's callbacks (wrapped ones included) hold ModelSavers writing to
// this directory and every one of them comes after this MinSaver, it throws
// std::invalid_argument("MinSaver comes before ModelSaver in the callbacks, but it copies the
// checkpoint that ModelSaver saves at the same epoch end: put MinSaver after ModelSaver, e.g.
// {InferenceRunner, ModelSaver, MinSaver}") naming the two callbacks as the list names them
// (`PeriodicTrigger-MinSaver` for a wrapped one), before training starts; with that order
// tensorpack fails after the first epoch with "Do you forget to use ModelSaver?".
// When: trigger (every epoch end by default). It takes the last (global_step, value) that
// `trainer().monitors().get_history(monitor_stat)` holds (returning at once if there is none,
// or if the value is NaN); when the value is strictly lower (higher for MaxSaver) than the best
// so far, or there is no best yet, it waits for the saves in flight of the trainer's ModelSavers
// (wait_for_model_savers: ModelSaver's save of this step may still be on its writer thread, and
// its failure is reported then), and reads the directory's `checkpoint` index: if the latest
// checkpoint is exactly `model-<that global_step>`, it is copied (copy_checkpoint: checked,
// atomic) to `<dir>/<filename>`, the best becomes (step, value), and INFO `Model at
// global_step=<step> with minimum <stat>=<value, %.5g> saved.` is logged. Otherwise WARN
// `[MinSaver] New minimum '<stat>' found at global_step=<step>, but the latest checkpoint is
// <path>.` and WARN `MinSaver will do nothing this time. The callbacks may have inconsistent
// frequency or wrong order.`, and the best is not changed. (These three messages say MinSaver
// and `[MinSaver]` for MaxSaver too, as tensorpack's do; `maximum` replaces `minimum`.)
// state()/load_state(): the best (`best_step`, int64; `best_value`, float64), so that a resumed
// run keeps comparing against it. ModelSaver, which runs first, saves this state before this
// trigger has looked at the new value; so state() also holds the value this trigger is about to
// consider (`pending_step`, `pending_value`: the stat's last value when it was put at the
// current step, is better than the best, and this trigger has not run at this step yet), and
// load_state takes it as the best only if the copy really happened: `<filename>.data` has the
// same checksum trailer as `model-<pending_step>.data` in the directory
// (checkpoint_fingerprint). A run resumed from the
// checkpoint of its best epoch therefore keeps that epoch as the best.
// A copy that was promised but not made is never left for good:
// - the run that found the new best stopped before the copy was made (SIGKILL, a crash): the
//   checkpoint records it as pending and the copy is not there, so the resumed run makes it in
//   before_train from `model-<pending_step>.data` (INFO `... copied now.`); if that checkpoint is
//   gone or damaged, WARN says the copy cannot be made and the best stays as it was;
// - the copy failed (disk full, a file-size limit): it is retried at every later trigger while
//   no better value comes (and recorded as pending in the checkpoints meanwhile, so a resume
//   retries it too); until it succeeds the failure stands, and the run ends with
//   WriteFailedError, not a success.
// A stat that never comes (a misspelt name, a producer after MinSaver in the list): the name is
// checked at the first trigger that finds no value for it once every validation has run, that is
// when every validator declared to the monitors (Monitors::add_validator: every InferenceRunner,
// wrapped or not, and callbacks of your own that declare themselves) has put its statistics at
// least once in this run (Monitors::validators_have_run); with no validator, at the first
// trigger. Before that, a stat without a value is one whose validation has not run yet (a runner
// every few epochs, a runner after MinSaver in the list), and nothing is said. At the check,
// with strict (the default) MinSaver throws std::runtime_error, which stops training:
//   MinSaver: 'val-eror' has not been put by global_step=2 (epoch 1), though every validation has
//   run (InferenceRunner). The stats put so far: cost, val-error. Check the name, and that the
//   callback that puts it comes before MinSaver in the callbacks; or, for a stat that comes
//   later, pass MinSaverOptions().strict(false) to warn instead
// (without validators: `..., and no callback validates (none called Monitors::add_validator, as
// InferenceRunner does) to put it later.`); with strict(false), one WARN `[MinSaver] '<stat>' has
// not been put by ... Check the name, and that the callback that puts it comes before MinSaver
// in the callbacks. Training goes on (strict(false)).` and, at after_train, if it never had a
// value, WARN `[MinSaver] '<stat>' was never put during training: <copy> was not written. The
// stats that were put: <names>.`, also when the check never came (a validator that never ran;
// not after the strict error).
// Errors: when the checkpoint of the stat's step is missing because ModelSaver's save of that
// step failed (the trainer recorded it), ERR `[MinSaver] New minimum '<stat>'=<value> found at
// global_step=<step>, but its checkpoint could not be saved (<error>), so it was not copied to
// <copy>.`; the copy is reported as a failed write (the run ends with WriteFailedError), the best
// is not changed and training goes on. Otherwise, no `checkpoint` index in the directory is
// std::runtime_error("[MinSaver] Cannot find a checkpoint state. Do you forget to use
// ModelSaver?"), which stops training as in tensorpack. A malformed index is an ERR line; a
// failed copy (disk full, a corrupt checkpoint) is an ERR line and a reported failed write; the
// best is not changed and training goes on. Construction: std::invalid_argument for an empty stat
// name or a filename that is not a plain file name; setup_graph: std::invalid_argument when neither
// a directory nor a logger directory was given. chief_only: true.
//
// Differences from tensorpack (docs/tensorpack-differences.md #5, fixed):
// - the latest checkpoint must be `model-<step>` exactly (tensorpack tests whether its path ends
//   with the step's digits, so step 50 matched `model-150`), and only its own checkpoint
//   file is copied (tensorpack's `path*` glob also copied `model-500.*`);
// - the best is updated only when the copy succeeded (tensorpack updated it first, so a skipped
//   copy lost the best checkpoint for good);
// - the copy is `min-<stat>.data` with '/' and control characters of the stat replaced
//   by '_' (and a leading '.' of the stat too);
// - the best is part of the checkpoint (state()), so a resumed run keeps it; a NaN value is never
//   a new best;
// - a stat name that never comes is an error (strict) or a warning, and a MinSaver placed before
//   its ModelSaver is an error at setup (tensorpack says nothing of the first, and fails after the
//   first epoch on the second).
class MinSaver : public Callback {
 public:
  explicit MinSaver(std::string monitor_stat, MinSaverOptions options = {});

  // The best (global_step, value) so far, if any.
  const std::optional<std::pair<int64_t, double>>& best() const { return best_; }
  const std::string& monitor_stat() const { return stat_; }
  // The prefix of the copy: `<dir>/<filename>` (the directory is resolved at construction).
  std::string best_checkpoint_prefix() const;

  CallbackState state() const override;
  // Accepts `best_step`+`best_value` and `pending_step`+`pending_value`, each pair present or
  // absent; anything else is std::invalid_argument naming the callback and the entry.
  void load_state(const CallbackState& state) override;

 protected:
  void _setup_graph() override;
  void _before_train() override;
  void _trigger() override;
  void _after_train() override;

 private:
  // Throws (strict) or warns once when the stat has no value though every validation has run.
  void check_missing_stat();
  // The setup_graph check that this MinSaver comes after a ModelSaver of its directory.
  void check_after_model_saver() const;
  // Copies the latest checkpoint if it was taken at `step`; true when it did.
  bool save(int64_t step, double value);
  // Copies `model-<step>` to the best copy; on failure logs and reports it and returns false.
  bool copy_from(int64_t step, double value);
  // Retries the copy that failed (unsaved_), if any; true when it is made now.
  bool retry_unsaved();
  // The error of the failed save of `step` into this directory that the trainer recorded
  // (Trainer::report_write_failure), if any.
  std::optional<std::string> failed_save(int64_t step) const;
  bool is_better(double value) const;

  std::string stat_;
  MinSaverOptions options_;
  std::string dir_;
  std::string filename_;
  std::optional<std::pair<int64_t, double>> best_;
  // A better (step, value) whose copy is owed: the copy failed, or the run that found it stopped
  // before making it. Compared against as the best; retried until made.
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

// MinSaver for a stat to maximise (tensorpack's `MaxSaver(monitor_stat)` = `MinSaver(stat,
// reverse=True)`): copies to `max-<stat>.data`, logs `... with maximum ...`.
//
//   callbacks.push_back(std::make_shared<MaxSaver>("val-accuracy"));
//
// Differences from tensorpack: those of MinSaver.
class MaxSaver : public MinSaver {
 public:
  explicit MaxSaver(std::string monitor_stat, MaxSaverOptions options = {});
};

}  // namespace trainpack
