// SessionInit: how a trainer's state is initialised before training (tensorpack's
// `tfutils/sessinit.py`: SessionInit, JustCurrentSession, SaverRestore, DictRestore, ChainInit).
// The trainer calls setup_graph(trainer) and then run_init(trainer) in `Trainer::initialize`,
// after the callbacks' setup_graph and before before_train. SaverRestore and DictRestore put a
// name -> tensor map into the trainer with restore_training_state (core/state.h).
// Differences from tensorpack: there is no session; `run_init` receives the trainer, whose Graph
// variables and modules it restores; the variable initialisers that TF runs first are the
// modules' constructors here.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/arg.h>

#include "trainpack/core/state.h"

namespace trainpack {

class Trainer;

class SessionInit {
 public:
  virtual ~SessionInit() = default;
  // Resolve what the initialiser needs from the trainer's graph (before it is finalized).
  virtual void setup_graph(Trainer& /*trainer*/) {}
  // Apply the initialisation (e.g. load a checkpoint). Runs on the chief only.
  virtual void run_init(Trainer& trainer) = 0;
  // True for the no-op initialiser (a non-chief worker warns when it ignores any other).
  virtual bool is_noop() const { return false; }
  virtual std::string name() const;
};

// Does nothing: the model keeps the values it was constructed with.
class JustCurrentSession : public SessionInit {
 public:
  void run_init(Trainer& /*trainer*/) override {}
  bool is_noop() const override { return true; }
};

struct SaverRestoreOptions {
  // Entries not to restore (exact names, or prefixes ending in '/': "optimizer/" keeps the
  // optimizer as constructed). tensorpack's `ignore`.
  TORCH_ARG(std::vector<std::string>, ignore);
  // Restore the trainer's counters (continue at the checkpoint's epoch and step). Off: load the
  // weights (and everything else) but start training at the configured starting_epoch.
  TORCH_ARG(bool, restore_counters) = true;
  // Load what matches even when it is less than half of the model's parameter tensors (a
  // pretrained backbone): mismatches are warnings, as in tensorpack. Off (the default): such a
  // checkpoint is refused as another model's (RestoreOptions::partial).
  TORCH_ARG(bool, partial) = false;
  // Refuse a checkpoint that lacks any of the model's parameter tensors (RestoreOptions::
  // require_all). AutoResumeTrainConfig sets it unless allow_missing_parameters.
  TORCH_ARG(bool, require_all) = false;
};

// Restores a checkpoint written by ModelSaver (tensorpack's SaverRestore). `path` is a checkpoint
// prefix (`train_log/run1/model-600`), a `checkpoint` index or its directory (the latest),
// resolved at construction (resolve_checkpoint_path; `.data`/`.index` suffixes are corrected with
// a log line); `path()` is the result. run_init logs `Restoring checkpoint from {path} ...`,
// reads and verifies the file (size and checksum) and restores it, reporting the names skipped
// and missing. Weights that are not finite (a run that had diverged) are restored with a warning
// naming them. Errors: no checkpoint at `path` is a CheckpointError naming it (at construction);
// a truncated or corrupt file a CheckpointError naming the file (at run_init, before anything is
// changed); a shape mismatch, or a match of fewer than half of the model's parameter tensors
// without `partial`, std::invalid_argument. Differences from tensorpack: no `prefix` argument;
// the counters, RNG and callback states are restored too (docs/tensorpack-differences.md #7, #32).
class SaverRestore : public SessionInit {
 public:
  explicit SaverRestore(const std::string& path, SaverRestoreOptions options = {});
  void run_init(Trainer& trainer) override;
  // The resolved checkpoint prefix.
  const std::string& path() const { return path_; }
  // What the last run_init did.
  const RestoreReport& report() const { return report_; }

 private:
  std::string path_;
  SaverRestoreOptions options_;
  RestoreReport report_;
};

// Restores from a name -> tensor map (tensorpack's DictRestore), e.g. weights made by another
// program, with the entry names of core/state.h. Logs `Restoring {n} variables from dict ...` and
// the mismatches both ways; the counters only when the map has trainer/* entries. Errors as
// SaverRestore's (nothing is changed). Differences from tensorpack: no ":0" suffixes;
// `ignore_mismatch` is SaverRestoreOptions::partial (which also accepts a dict matching few).
class DictRestore : public SessionInit {
 public:
  explicit DictRestore(TensorMap tensors, SaverRestoreOptions options = {});
  void run_init(Trainer& trainer) override;
  const RestoreReport& report() const { return report_; }

 private:
  TensorMap tensors_;
  SaverRestoreOptions options_;
  RestoreReport report_;
};

// Runs several initialisers in order (tensorpack's ChainInit): a later one overrides what an
// earlier one restored (a pretrained backbone, then a head). Null entries are
// std::invalid_argument at construction.
class ChainInit : public SessionInit {
 public:
  explicit ChainInit(std::vector<std::shared_ptr<SessionInit>> inits);
  void setup_graph(Trainer& trainer) override;
  void run_init(Trainer& trainer) override;
  bool is_noop() const override;
  std::string name() const override;

 private:
  std::vector<std::shared_ptr<SessionInit>> inits_;
};

}  // namespace trainpack
