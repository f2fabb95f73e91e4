// The Graph: the trainer's registry of named things, tensorpack's `tf.Graph` for an eager world.
//
// During setup (the trainer's `setup_graph` and every callback's `setup_graph`) components
// register named variables (a tensor, or a get/set pair such as the optimizer's learning rate),
// named ops (closures) and collections of closures (`UPDATE_OPS`, `MOVING_SUMMARY_OPS`, ...).
// The trainer calls `finalize()` before `before_train`; any change after that throws
// `std::logic_error` naming the caller, which catches "ops created inside the loop" as
// tensorpack's finalized graph does.
//
//   graph.add_variable("learning_rate", [&] { return lr; }, [&](double v) { lr = v; });
//   graph.add_op("reset_ema", [&] { ema.reset(); });
//   graph.add_to_collection(Graph::kUpdateOps, [&] { update_stats(); });
//
// Names added inside a `Graph::NameScope` get its prefix (`"SyncVariables/sync"`), as ops
// created under a callback's name scope do in tensorpack.
//
// Differences from tensorpack: variables are scalars seen through get/set (or a tensor); there
// is no dataflow graph, so an "op" is any closure.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "trainpack/utils/value_range.h"

namespace torch {
namespace nn {
class Module;
}  // namespace nn
namespace optim {
class Optimizer;
}  // namespace optim
}  // namespace torch

namespace trainpack {

class Graph {
 public:
  using Op = std::function<void()>;

  // Collection keys that tensorpack's callbacks use.
  static constexpr const char* kUpdateOps = "UPDATE_OPS";
  static constexpr const char* kMovingSummaryOps = "MOVING_SUMMARY_OPS";
  static constexpr const char* kSummaries = "summaries";

  // A named variable: a get/set pair over a scalar, or a tensor (then get/set read and fill it).
  struct Variable {
    std::function<double()> get;
    std::function<void(double)> set;
    at::Tensor tensor;        // defined for tensor variables
    bool is_floating = true;  // an integer variable rejects non-integral values
    // The values a HyperParamSetter may set (GraphVarParam::range); the variable's own set does
    // not check it.
    ValueRange range;
  };

  // Registers a scalar variable seen through `get`/`set`, whose hyperparameter setters keep to
  // `range` (the learning rate: `ValueRange().min_exclusive(0)`). Throws std::invalid_argument if
  // the name is taken, std::logic_error after finalize().
  void add_variable(const std::string& name, std::function<double()> get,
                    std::function<void(double)> set, bool is_floating = true,
                    ValueRange range = {});
  // Registers a tensor variable; `get`/`set` read and fill a one-element tensor.
  void add_variable(const std::string& name, at::Tensor tensor);

  bool has_variable(const std::string& name) const;
  // Throws std::invalid_argument naming the variable and listing those that exist.
  const Variable& variable(const std::string& name) const;
  std::vector<std::string> variable_names() const;

  void add_op(const std::string& name, Op op);
  bool has_op(const std::string& name) const;
  // Throws std::invalid_argument naming the op and listing those that exist.
  const Op& op(const std::string& name) const;
  std::vector<std::string> op_names() const;

  // Trainable tensors (the module's parameters), registered by the trainer at setup, in order;
  // CheckNumerics and the savers read them. Throws std::invalid_argument if the name is taken.
  void add_trainable_variable(const std::string& name, at::Tensor tensor);
  const std::vector<std::pair<std::string, at::Tensor>>& trainable_variables() const {
    return trainable_;
  }

  // The global state that ModelSaver saves and the SessionInit family restores (tensorpack's
  // GLOBAL_VARIABLES): modules (their parameters and buffers) and optimizers (their state and
  // parameter groups), registered by the trainer at setup under a name that prefixes their
  // entries in a checkpoint ("" for the single module of a SingleCostTrainer: its entries are
  // the module's own names, e.g. "conv1.weight"; a GAN trainer registers "gen" and "discrim").
  // The graph keeps the pointers: the objects must outlive the trainer's use of them. Throws
  // std::invalid_argument if the name is taken or the pointer is null, std::logic_error after
  // finalize().
  void add_module(const std::string& name, std::shared_ptr<torch::nn::Module> module);
  void add_optimizer(const std::string& name, torch::optim::Optimizer* optimizer);
  const std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>>& modules() const {
    return modules_;
  }
  const std::vector<std::pair<std::string, torch::optim::Optimizer*>>& optimizers() const {
    return optimizers_;
  }

  void add_to_collection(const std::string& key, Op op);
  // The closures registered under `key`, in registration order (empty if none).
  const std::vector<Op>& collection(const std::string& key) const;

  // After this, every add_* throws std::logic_error.
  void finalize();
  bool finalized() const { return finalized_; }

  // The prefix currently applied to new names ("" outside any scope).
  const std::string& current_scope() const { return scope_; }

  // RAII: names added while it lives are prefixed with `scope/` (scopes nest).
  class NameScope {
   public:
    // With `from_root`, the scope starts at the root instead of nesting in the current one.
    NameScope(Graph& graph, const std::string& scope, bool from_root = false);
    ~NameScope();
    NameScope(const NameScope&) = delete;
    NameScope& operator=(const NameScope&) = delete;

   private:
    Graph& graph_;
    std::string saved_;
  };

 private:
  void check_mutable(const char* what, const std::string& name) const;
  // Adds a variable under the current scope and returns its full name.
  std::string insert_variable(const std::string& name, Variable variable);
  std::string scoped(const std::string& name) const;

  std::map<std::string, Variable> variables_;
  std::map<std::string, Op> ops_;
  std::map<std::string, std::vector<Op>> collections_;
  std::vector<std::pair<std::string, at::Tensor>> trainable_;
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> modules_;
  std::vector<std::pair<std::string, torch::optim::Optimizer*>> optimizers_;
  std::string scope_;
  bool finalized_ = false;
};

}  // namespace trainpack
