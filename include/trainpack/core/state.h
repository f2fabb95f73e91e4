// The training state as a name -> tensor map, all on the CPU: what ModelSaver writes into a
// checkpoint (collect_training_state) and what SaverRestore and DictRestore put back
// (restore_training_state). Its entries (module parameters and buffers, the optimizers' state,
// Graph variables, the counters, RNG states, callback states) are listed in docs/save-load.md,
// "Entries"; the optimizers' in core/optimizer_state.h.
//
// Only module entries and Graph variables are "model" entries: restoring reports those that are
// missing; the others are training-only (as tensorpack leaves optimizer slots out of its
// warnings), reported in one line when absent.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <torch/arg.h>

#include "trainpack/core/resume_point.h"
#include "trainpack/utils/checkpoint.h"

namespace trainpack {

class Trainer;

// Everything the trainer can resume from, as tensors in checkpoint_form (utils/checkpoint.h).
// Called between steps (or in before_train/after_train) on the training thread.
TensorMap collect_training_state(const Trainer& trainer);

struct RestoreOptions {
  // Names (exact entries, or prefixes ending in '/', e.g. "optimizer/") not to restore even when
  // the map has them; each one present is logged (tensorpack's "Variable {name} in the graph
  // will not be loaded from the checkpoint!").
  TORCH_ARG(std::vector<std::string>, ignore);
  // Restore trainer/* as the trainer's resume point (Trainer::set_resume_point). Off: weights
  // only, training starts at the configured epoch.
  TORCH_ARG(bool, restore_counters) = true;
  // Where the map came from, for messages ("checkpoint train_log/x/model-600", "dict").
  TORCH_ARG(std::string, source) = "the checkpoint";
  // Accept a map that matches only some of the model's tensors (tensorpack's behaviour):
  // mismatched tensors are skipped with a warning each. Off (the default): a map that matches
  // fewer than half of the model's parameter tensors not in `ignore` (another shape or dtype does
  // not match) is refused, naming the source and the unmatched names, and a mismatch is an error.
  TORCH_ARG(bool, partial) = false;
  // Refuse a map that lacks any of the model's parameter tensors not in `ignore`, naming them (a
  // resumed layer would otherwise start from fresh random weights without a word). Off (the
  // default): they are reported and logged. AutoResumeTrainConfig turns it on; `partial` wins.
  TORCH_ARG(bool, require_all) = false;
};

// What restore_training_state did. Names are map entries.
struct RestoreReport {
  std::vector<std::string> restored;    // put into the trainer
  std::vector<std::string> ignored;     // present, but in RestoreOptions::ignore
  std::vector<std::string> missing;     // model entries the trainer has and the map lacks
  std::vector<std::string> mismatched;  // present, of another shape or dtype (partial only)
  std::vector<std::string> unused;      // map entries the trainer has nothing for
  std::vector<std::string> missing_training_only;  // optimizer/trainer/rng/callback entries
};

// Puts `state` into the trainer: parameters and buffers (copied in place under NoGradGuard, on
// their device), optimizer state, Graph variables, RNG states, callback states (load_state with
// the entries under its key, the prefix removed) and, with restore_counters, the resume point.
// Call from a SessionInit's run_init. Logs the missing and unused names as tensorpack does. Throws
// std::invalid_argument naming the entry and the source, before anything is changed: a map
// refused by `partial`, a shape or dtype mismatch of a parameter or buffer, optimizer entries
// that do not fit the optimizer, an archive that Optimizer::load refuses. An optimizer's entries
// are restored together or not at all (ignoring any ignores all); typed entries replace its
// per-parameter state and its groups' options, as PyTorch's load_state_dict does.
RestoreReport restore_training_state(Trainer& trainer, const TensorMap& state,
                                     const RestoreOptions& options = {});

// The resume point a training state holds (its trainer/* entries), or nullopt when it has none.
// Throws std::invalid_argument naming the entry, the value and `source` when one is not an
// integer scalar or is out of range: global_step and step_in_epoch in [0, 2^53], epoch in
// [1, 2^53] (stats.json holds integers up to 2^53 exactly).
std::optional<ResumePoint> saved_resume_point(const TensorMap& state,
                                              const std::string& source = "the checkpoint");

// True for a model entry of a checkpoint: a name outside trainpack's own prefixes (optimizer,
// variable/, trainer/, rng/, callback/).
bool is_model_entry(const std::string& entry);

// The model entries of `state` whose floating-point values are not all finite (NaN or inf): a
// checkpoint saved after training diverged. Empty when all are finite.
std::vector<std::string> non_finite_model_entries(const TensorMap& state);

}  // namespace trainpack
