// The training state as a name -> tensor map: what ModelSaver writes into a checkpoint and what
// the restoring SessionInits (SaverRestore, DictRestore) put back. docs/save-load.md lists the
// entries for users.
//
//   TensorMap state = collect_training_state(trainer);    // ModelSaver
//   RestoreReport r = restore_training_state(trainer, state, RestoreOptions());  // SaverRestore
//
// Entries (all on the CPU):
//   <module>/<name>, or <name> for a module registered as ""   parameters and buffers
//                                                               (Graph::add_module)
//   optimizer[/<name>]/...            the state of the optimizer registered as <name> (none
//                                     for ""): for torch::optim::SGD, Adam, AdamW, RMSprop and
//                                     Adagrad, entries of their own (core/optimizer_state.h):
//                                     .../type, .../group_sizes, .../<group>/<option> (lr, ...),
//                                     .../<group>/<param index>/<field> (momentum_buffer, step,
//                                     exp_avg, ...);
//   optimizer[/<name>]                for other optimizers, uint8: the optimizer's
//                                     torch::serialize archive (Optimizer::save)
//   variable/<name>                   float64 0-d: every Graph variable but global_step
//   trainer/global_step, trainer/epoch, trainer/step_in_epoch   int64 0-d: resume_point()
//   rng/cpu                           uint8: the default CPU generator's state
//   rng/cuda:<i>                      uint8: each CUDA device's default generator (when built
//                                     with CUDA and a GPU is there)
//   callback/<key>/<entry>            what Callback::state() returned; <key> is the callback's
//                                     name(), with "#2", "#3", ... for the 2nd, 3rd callback of
//                                     the same name in the registered order
//
// Only module entries and Graph variables are "model" entries: restoring reports those that are
// missing; the others (optimizer, counters, RNG, callbacks) are training-only, as tensorpack
// leaves optimizer slots out of its warnings, and are reported in one line when absent.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <torch/arg.h>

#include "trainpack/core/resume_point.h"
#include "trainpack/utils/checkpoint.h"

namespace trainpack {

class Trainer;

// Everything the trainer can resume from, as described at the top of this file, as tensors in
// checkpoint_form (utils/checkpoint.h). Called between steps (or in before_train/after_train) on
// the training thread.
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
  // Accept a map that matches only some of the model's tensors (tensorpack's behaviour: the
  // missing and unused names are warnings). Off (the default): a map that matches fewer than
  // half of the model's parameter tensors (those not in `ignore`; a tensor of another shape or
  // dtype does not match) is refused, naming the source and the unmatched names, and a shape or
  // dtype mismatch is an error. On: mismatched tensors are skipped with a warning each.
  TORCH_ARG(bool, partial) = false;
  // Refuse a map that lacks any of the model's parameter tensors (not in `ignore`), naming them:
  // resuming a run from a checkpoint that misses a layer would train that layer from fresh
  // random weights without a word. Off (the default): missing tensors are reported (missing) and
  // logged. AutoResumeTrainConfig turns it on. Ignored with `partial`.
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

// Puts `state` into the trainer (refused, see RestoreOptions::partial, when it matches fewer
// than half of the model's parameter tensors): parameters and buffers (copied in place under
// NoGradGuard, on their device), optimizer state, Graph variables, RNG states, callback states
// (Callback::load_state with the entries under its key, the prefix removed) and, with
// restore_counters, the resume point. Call from a SessionInit's run_init (before before_train).
// Logs the missing and unused names as tensorpack does ("The following variables are in the
// graph, but not found in the checkpoint: a, b"). Throws std::invalid_argument naming the entry
// and the source, before anything is changed, on a shape or dtype mismatch of a parameter or
// buffer and on optimizer entries that do not fit the optimizer (another class, other numbers of
// parameter groups or parameters, a state tensor unlike its parameter, a missing entry); and on
// an optimizer archive that Optimizer::load refuses (archives are loaded before anything else is
// changed). An optimizer's entries are restored together or not at all: ignoring any of them
// (e.g. "optimizer/") ignores all. Typed entries replace the optimizer's whole per-parameter
// state and its groups' options, as PyTorch's load_state_dict does; an archive restores what
// LibTorch's Optimizer::load does (the per-parameter state).
RestoreReport restore_training_state(Trainer& trainer, const TensorMap& state,
                                     const RestoreOptions& options = {});

// The resume point a training state holds (its trainer/* entries): where a run restored from it
// continues. nullopt when the state has no counters (e.g. a weights-only dict). Throws
// std::invalid_argument naming the entry, the value and `source` when one is not an integer
// scalar or is out of range: global_step and step_in_epoch in [0, 2^53], epoch in [1, 2^53]
// (2^53: the largest integer stats.json holds exactly; a forged INT64_MAX would overflow). A
// step_in_epoch beyond the run's steps_per_epoch is refused by the trainer when it starts.
std::optional<ResumePoint> saved_resume_point(const TensorMap& state,
                                              const std::string& source = "the checkpoint");

// True for a model entry of a checkpoint: a name outside trainpack's own prefixes (optimizer,
// variable/, trainer/, rng/, callback/).
bool is_model_entry(const std::string& entry);

// The model entries of `state` whose floating-point values are not all finite (NaN or inf): a
// checkpoint saved after training diverged. Empty when all are finite.
std::vector<std::string> non_finite_model_entries(const TensorMap& state);

}  // namespace trainpack
