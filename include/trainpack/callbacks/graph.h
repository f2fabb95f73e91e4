// Callbacks that run ops of the Graph (tensorpack's callbacks/graph.py): RunOp and RunUpdateOps.
// An op is a closure, or the name of one in the Graph, not a TF op. This header also includes
// callbacks/tensors.h, where the other callbacks of tensorpack's graph.py are.
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

// tensorpack's RunOp: runs an op (a closure, or a named op of the Graph) before training, at every
// trigger and/or with every step. chief_only: false.
// When: setup_graph looks up an op name (the exact, full name, e.g. "ResetAccumulator/reset") and
// builds the per-step request once; before_train runs it if run_before; before_run of every hooked
// run, if run_step, returns a RunArgs whose op runs after the step function and before any
// after_run (before global_step is incremented); trigger() runs it if run_as_trigger.
// Logs: with verbose, `Running Op ema_update ...` (`Running Op op ...` for a closure).
// Errors: std::invalid_argument at construction for an empty op or name; at setup_graph for an
// unknown name (listing the ops that exist); an exception from the op stops training as a
// CallbackError naming RunOp and the hook.
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

// tensorpack's RunUpdateOps: runs the closures of a Graph collection (default UPDATE_OPS) with
// every step and, for the default collection, the update ops the training tower records in that
// step (TowerContext::add_update_op, in the order first recorded). Register the closures before
// the callbacks are set up (`graph().add_to_collection(Graph::kUpdateOps, f)`). Logs `Applying
// collection UPDATE_OPS of N ops.` at setup when the collection is not empty, and once, after the
// first step whose tower recorded some, `Applying the training tower's update ops: a, b.` A step
// allocates nothing. A closure that throws stops training as a CallbackError naming RunUpdateOps.
// chief_only: false. A default callback (the last). See docs/summaries.md, "RunUpdateOps".
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
