#include "trainpack/callbacks/learning_rate_summary.h"

#include <fmt/format.h>
#include <torch/optim/optimizer.h>

#include <stdexcept>
#include <utility>

#include "trainpack/core/graph.h"
#include "trainpack/core/monitor_base.h"
#include "trainpack/core/trainer.h"

namespace trainpack {

LearningRateSummary::LearningRateSummary(LearningRateSummaryOptions options)
    : options_(std::move(options)) {}

namespace {

// `learning_rate[/<optimizer>][/group<k>]` (see the header).
std::string rate_name(const std::string& optimizer, size_t group) {
  std::string name = optimizer.empty() ? "learning_rate" : "learning_rate/" + optimizer;
  if (group > 0) name += fmt::format("/group{}", group);
  return name;
}

}  // namespace

void LearningRateSummary::_setup_graph() {
  if (graph().optimizers().empty()) {
    throw std::invalid_argument(
        "LearningRateSummary: the trainer has no optimizer (graph().optimizers() is empty); "
        "register yours with graph().add_optimizer(name, optimizer), as SingleCostTrainer does");
  }
  name_groups();
}

void LearningRateSummary::name_groups() {
  names_.clear();
  group_counts_.clear();
  for (const auto& [optimizer_name, optimizer] : graph().optimizers()) {
    const auto& groups = optimizer->param_groups();
    for (size_t g = 0; g < groups.size(); ++g) {
      try {
        (void)groups[g].options().get_lr();
      } catch (const std::exception&) {  // LibTorch's message would add a backtrace
        throw std::invalid_argument(fmt::format(
            "LearningRateSummary: parameter group {} of the optimizer '{}' has no learning rate "
            "(its options do not implement OptimizerOptions::get_lr); register an optimizer "
            "whose options do, or leave LearningRateSummary out",
            g, optimizer_name));
      }
      names_.push_back(rate_name(optimizer_name, g));
    }
    group_counts_.push_back(groups.size());
  }
  rates_.assign(names_.size(), 0.0);
}

void LearningRateSummary::read_rates() {
  const auto& optimizers = graph().optimizers();
  bool same = optimizers.size() == group_counts_.size();
  for (size_t i = 0; same && i < optimizers.size(); ++i) {
    same = optimizers[i].second->param_groups().size() == group_counts_[i];
  }
  if (!same) name_groups();  // a group was added since: allocates, once
  size_t n = 0;
  for (const auto& entry : optimizers) {
    for (const auto& group : entry.second->param_groups()) rates_[n++] = group.options().get_lr();
  }
  has_rates_ = true;
}

void LearningRateSummary::put_rates() {
  if (!has_rates_) read_rates();  // no hooked run since the last put
  for (size_t i = 0; i < names_.size(); ++i) trainer().monitors().put_scalar(names_[i], rates_[i]);
  has_rates_ = false;
}

RunArgs LearningRateSummary::_before_run(const StepContext& /*ctx*/) {
  read_rates();
  return RunArgs();
}

void LearningRateSummary::_trigger_step() {
  if (options_.every_step()) put_rates();
}

void LearningRateSummary::_trigger() {
  if (!options_.every_step()) put_rates();
}

}  // namespace trainpack
