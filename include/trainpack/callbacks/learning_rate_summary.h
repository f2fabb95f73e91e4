// LearningRateSummary: the learning rates of the trainer's optimizers as monitor data (PyTorch
// Lightning's LearningRateMonitor; an addition to tensorpack). See docs/schedules.md, "Seeing the
// rate in the curves".
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <torch/arg.h>

#include "trainpack/core/callback.h"

namespace trainpack {

struct LearningRateSummaryOptions {
  // Put the rates after every step (trigger_step) instead of at every trigger().
  TORCH_ARG(bool, every_step) = false;
};

// Puts the learning rate of every parameter group of the trainer's optimizers to the monitors
// (PyTorch Lightning's LearningRateMonitor; an addition to tensorpack). Names: `learning_rate` for
// group 0 of the optimizer registered as "" (what the setters set), `learning_rate/group<k>` for
// its group k, and `learning_rate/<name>[/group<k>]` for an optimizer registered under a name.
// Rates are read in before_run: each is the rate the step ran with, whatever the order of this
// callback and the setters.
// When: trigger() (every epoch end by default) puts the rates of the last step before it (of now
// when no step ran since the last put); with every_step, trigger_step puts the rates of the step
// that just ran, and trigger() puts nothing. chief_only: true.
// Errors: std::invalid_argument at setup_graph when the trainer has no optimizer, or a group's
// options have no learning rate (OptimizerOptions::get_lr). See docs/schedules.md.
class LearningRateSummary : public Callback {
 public:
  explicit LearningRateSummary(LearningRateSummaryOptions options = {});

  // The names it puts, one per parameter group (set at setup_graph and when the groups change).
  const std::vector<std::string>& names() const { return names_; }

 protected:
  void _setup_graph() override;
  RunArgs _before_run(const StepContext& ctx) override;
  void _trigger_step() override;
  void _trigger() override;

 private:
  // Names every group (and checks that its options have a rate): names_, group_counts_, rates_.
  void name_groups();
  // Reads every group's rate into rates_ (renaming the groups first if they changed).
  void read_rates();
  void put_rates();

  LearningRateSummaryOptions options_;
  std::vector<std::string> names_;
  std::vector<size_t> group_counts_;  // per optimizer, its groups when named
  std::vector<double> rates_;
  bool has_rates_ = false;  // rates_ were read since the last put
};

}  // namespace trainpack
