#include "trainpack/callbacks/graph.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>

#include "trainpack/core/graph.h"
#include "trainpack/core/trainer.h"
#include "trainpack/utils/logger.h"

namespace trainpack {

RunOp::RunOp(Op op, RunOpOptions options) : options_(options), op_name_("op"), op_(std::move(op)) {
  if (!op_) throw std::invalid_argument("RunOp: op is empty; pass a callable or an op name");
  set_chief_only(false);
}

RunOp::RunOp(std::string op_name, RunOpOptions options)
    : options_(options), op_name_(std::move(op_name)) {
  if (op_name_.empty()) throw std::invalid_argument("RunOp: op_name is empty");
  set_chief_only(false);
}

void RunOp::_setup_graph() {
  if (!op_) op_ = graph().op(op_name_);  // throws, listing the ops that exist
  step_args_ = RunArgs();
  if (options_.run_step()) {
    step_args_.add_op([this] { run(nullptr); });
  }
}

void RunOp::run(const char* /*when*/) {
  if (options_.verbose()) TP_LOG_INFO("Running Op {} ...", op_name_);
  op_();
}

void RunOp::_before_train() {
  if (options_.run_before()) run("before_train");
}

RunArgs RunOp::_before_run(const StepContext& /*ctx*/) {
  return options_.run_step() ? RunArgs::ref(step_args_) : RunArgs();
}

void RunOp::_trigger() {
  if (options_.run_as_trigger()) run("trigger");
}

RunUpdateOps::RunUpdateOps(std::string collection)
    : RunOp([] {}, RunOpOptions().run_before(false).run_as_trigger(false).run_step(true)),
      collection_(std::move(collection)) {
  op_name_ = collection_;
}

void RunUpdateOps::_setup_graph() {
  graph_ops_ = &graph().collection(collection_);
  tower_ = collection_ == Graph::kUpdateOps;
  tower_logged_ = false;
  if (!graph_ops_->empty()) {
    TP_LOG_INFO("Applying collection {} of {} ops.", collection_, graph_ops_->size());
  }
  if (graph_ops_->empty() && !tower_) {
    op_ = [] {};
    options_.run_step(false);  // nothing to run: before_run asks for nothing
  } else {
    op_ = [this] { run_update_ops(); };
  }
  RunOp::_setup_graph();
}

void RunUpdateOps::run_update_ops() {
  for (const auto& op : *graph_ops_) op();
  if (!tower_) return;
  TowerRegistry& registry = trainer().tower_registry();
  registry.run_update_ops();
  if (!tower_logged_) {
    const std::vector<std::string> names = registry.update_op_names();  // empty: no allocation
    if (!names.empty()) {
      tower_logged_ = true;
      TP_LOG_INFO("Applying the training tower's update ops: {}.", fmt::join(names, ", "));
    }
  }
}

}  // namespace trainpack
