// Callbacks that run ops of the Graph: RunOp and RunUpdateOps.
//
//   // Run a closure before training and after every epoch:
//   std::make_shared<RunOp>([&] { sync_weights(); });
//   // Run a named op of the graph with every step:
//   std::make_shared<RunOp>("ema_update", RunOpOptions().run_before(false).run_step(true));
//
// Differences from tensorpack: an op is a closure (or the name of one in the Graph), not a TF op.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <torch/arg.h>

#include "trainpack/callbacks/tensors.h"  // ProcessTensors, DumpTensors, CheckNumerics, ...
#include "trainpack/core/callback.h"

namespace trainpack {

struct RunOpOptions {
  // Run once in before_train.
  TORCH_ARG(bool, run_before) = true;
  // Run at every trigger (every epoch end by default).
  TORCH_ARG(bool, run_as_trigger) = true;
  // Run along with every hooked step (after the step function, before after_run).
  TORCH_ARG(bool, run_step) = false;
  // Log "Running Op <name> ..." before each run.
  TORCH_ARG(bool, verbose) = false;
};

// Runs an op (a closure, or a named op of the Graph resolved at setup_graph) before training,
// at every trigger and/or with every step. chief_only: false.
// When: setup_graph looks up an op name (the exact, full name, e.g. "ResetAccumulator/reset") and
// builds the per-step request once; before_train (epoch_num = starting_epoch - 1) runs it if
// run_before; before_run of every hooked run, if run_step, returns a RunArgs whose op runs in that
// same run after the step function and before any after_run (it sees the step's results, before
// global_step is incremented); trigger() runs it if run_as_trigger.
// Logs: with verbose, `Running Op ema_update ...` (`Running Op op ...` for a closure).
// Errors: std::invalid_argument at construction `RunOp: op is empty; pass a callable or an op
// name` / `RunOp: op_name is empty`; at setup_graph, an unknown name is `Graph: 'nope' is not an
// op in the graph. Ops that exist: ...`; an exception from the op stops training as a
// CallbackError naming RunOp and the hook.
// Differences from tensorpack: tensorpack's "callable that returns the op, called at setup" is
// replaced by registering a named op in the Graph during setup; a step op runs right after the
// step function in the same hooked run instead of being fetched in the same session.run.
class RunOp : public Callback {
 public:
  using Op = std::function<void()>;
  explicit RunOp(Op op, RunOpOptions options = RunOpOptions());
  // `op_name` must name an op in the trainer's Graph by setup_graph; otherwise setup_graph
  // throws std::invalid_argument listing the ops that exist.
  explicit RunOp(std::string op_name, RunOpOptions options = RunOpOptions());
  explicit RunOp(const char* op_name, RunOpOptions options = RunOpOptions())
      : RunOp(std::string(op_name), options) {}

  const RunOpOptions& options() const { return options_; }

 protected:
  void _setup_graph() override;
  void _before_train() override;
  RunArgs _before_run(const StepContext& ctx) override;
  void _trigger() override;
  void run(const char* when);

  RunOpOptions options_;
  std::string op_name_;
  Op op_;
  RunArgs step_args_;  // built once: the op to run with each step
};

// Runs the closures of a Graph collection (default UPDATE_OPS) with every step, as tensorpack's
// RunUpdateOps runs batch-norm updates, and, for the default collection, the update ops the
// training tower records in that step (TowerContext::add_update_op, in the order first
// recorded). Logs "Applying collection UPDATE_OPS of N ops." at setup when the Graph collection
// is not empty, and once, after the first hooked run in which the tower has recorded some,
// "Applying the training tower's update ops: name1, name2." A step allocates nothing.
// Register the closures before setup_callbacks (in the trainer's constructor) or in the
// setup_graph of a callback registered before it:
// `graph().add_to_collection(Graph::kUpdateOps, [&] { ... });`. With another collection that is
// empty it does nothing with the step (its before_run still returns an empty request). A closure
// that throws stops training as a CallbackError naming RunUpdateOps in before_run.
// chief_only: false. A default callback (the last).
//
// Differences from tensorpack: the ops are closures; the tower's update ops are recorded at
// every step (LibTorch is eager), so they are logged after the first step, not at setup; with
// another collection that is empty it runs nothing with the step (tensorpack: a no-op).
class RunUpdateOps : public RunOp {
 public:
  explicit RunUpdateOps(std::string collection = "UPDATE_OPS");

 protected:
  void _setup_graph() override;

 private:
  void run_update_ops();

  std::string collection_;
  const std::vector<Op>* graph_ops_ = nullptr;
  bool tower_ = false;  // the default collection: the tower's update ops run too
  bool tower_logged_ = false;
};

}  // namespace trainpack
