// An optimizer's state as checkpoint entries, and its checked restore: the optimizer part of
// collect_training_state / restore_training_state (core/state.h). LibTorch's own optimizers
// (torch::optim::SGD, Adam, AdamW, RMSprop, Adagrad; those classes exactly, not subclasses) are
// stored as one entry per tensor and number under `entry` ("optimizer", or "optimizer/<name>"),
// laid out like PyTorch's state_dict: `<entry>/type`, `<entry>/group_sizes`,
// `<entry>/<g>/<option>`, `<entry>/<g>/<i>/<field>` (docs/save-load.md, "Entries"). Any other
// optimizer is stored as `<entry>` alone, uint8: its torch::serialize archive (Optimizer::save),
// which is restored into any optimizer through Optimizer::load. Why: docs/architecture.md, "The
// training state, to a checkpoint and back".
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainpack/utils/checkpoint.h"

namespace torch {
namespace optim {
class Optimizer;
}  // namespace optim
}  // namespace torch

namespace trainpack {

// True when the state of `optimizer` is stored as entries of their own (the classes above).
bool has_typed_optimizer_state(const torch::optim::Optimizer& optimizer);

// Adds the state of `optimizer` to `state` under `entry`, as described above. Tensors are the
// optimizer's own (detached; moved to the CPU when they are elsewhere), not copies. Throws
// std::logic_error when an entry is already in `state`.
void collect_optimizer_state(const torch::optim::Optimizer& optimizer, const std::string& entry,
                             TensorMap* state);

// The restore of one optimizer: prepare() reads and checks every entry and makes the new state
// (copies of the tensors, on the parameters' devices) without changing the optimizer; apply()
// puts it in.
class OptimizerRestore {
 public:
  // nullopt when `state` holds nothing for `entry` (neither `<entry>` nor `<entry>/type`).
  // Throws std::invalid_argument naming the entry and `source` ("restoring from <source>: ...")
  // when the entries do not fit the optimizer: another optimizer class, another number of
  // parameter groups or of parameters in a group, a missing entry, a state tensor whose shape or
  // dtype is not its parameter's, an option of the wrong dtype or shape, an archive that does not
  // decode.
  static std::optional<OptimizerRestore> prepare(torch::optim::Optimizer& optimizer,
                                                 const std::string& entry, const TensorMap& state,
                                                 const std::string& source);

  OptimizerRestore(OptimizerRestore&&) noexcept;
  OptimizerRestore& operator=(OptimizerRestore&&) noexcept;
  ~OptimizerRestore();

  // The entries of the map that prepare() read (what the restore consists of).
  const std::vector<std::string>& entries() const { return entries_; }

  // True for an archive entry: apply() may still throw.
  bool from_archive() const { return from_archive_; }

  // Typed entries: replaces the optimizer's whole per-parameter state and its groups' options
  // with the checkpoint's (as PyTorch's load_state_dict does); cannot fail. An archive goes
  // through Optimizer::load (the per-parameter state), which throws std::invalid_argument
  // (naming the entry and the source) when the archive does not fit the optimizer.
  void apply();

  class Plan;  // what apply() does; defined in the .cpp

 private:
  OptimizerRestore(std::unique_ptr<Plan> plan, std::vector<std::string> entries);

  std::unique_ptr<Plan> plan_;
  std::vector<std::string> entries_;
  bool from_archive_ = false;
};

}  // namespace trainpack
