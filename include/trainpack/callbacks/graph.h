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

#include <torch/arg.h>

#include "trainpack/callbacks/base.h"

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
// RunUpdateOps runs batch-norm updates. Logs "Applying collection UPDATE_OPS of N ops." when the
// collection is not empty. chief_only: false. A default callback.
class RunUpdateOps : public RunOp {
 public:
  explicit RunUpdateOps(std::string collection = "UPDATE_OPS");

 protected:
  void _setup_graph() override;

 private:
  std::string collection_;
};

}  // namespace trainpack
