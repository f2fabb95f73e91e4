// Saving checkpoints during training (tensorpack's callbacks/saver.py): ModelSaver. See
// docs/save-load.md for the files it writes and how a run resumes from them.
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

#include "trainpack/callbacks/min_saver.h"  // MinSaver and MaxSaver, once declared here
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

}  // namespace trainpack
