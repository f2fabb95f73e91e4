// Test support: a run with the callbacks whose reads of device values the tests of host_read.h
// check (tests/callbacks/host_reads_test.cpp counts them on the CPU, tests/cuda/
// host_sync_cuda_test.cpp makes a GPU throw on a synchronisation): the default callbacks
// (DEFAULT_CALLBACKS, with the ProgressBar configured by the test), the default monitors, the
// main job's callback list (examples/fashion_mnist/main.cpp: InferenceRunner, ModelSaver,
// MinSaver, ScheduledHyperParamSetter, HumanHyperParamSetter, EstimatedTimeLeft,
// ThroughputTracker, GPUUtilizationTracker, InjectShell), plus a step-based
// ScheduledHyperParamSetter of a tensor Graph variable and a MergeAllSummaries under a
// PeriodicTrigger.
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "trainpack/trainpack.h"

namespace trainpack {
namespace testing {

// y = 2 x0 - x1 on `points` fixed points in batches of `batch`, the tensors made on `device` (so
// that feeding them copies nothing).
inline DataFlowPtr regression_points(c10::Device device, int points, int batch) {
  std::vector<Datapoint> list;
  for (int i = 0; i < points; ++i) {
    const float a = static_cast<float>(i % 5) - 2.0f;
    const float b = static_cast<float>(i % 3) - 1.0f;
    list.push_back({torch::tensor({a, b}).to(device), torch::tensor({2 * a - b}).to(device)});
  }
  return std::make_shared<BatchData>(std::make_shared<DataFromList>(list), batch);
}

// One Linear layer that records what the main job's model records, and more: the moving
// summaries "cost" and "abs-error", a scalar summary, a histogram summary and an update op
// (which counts the steps on the device).
class SummarisingRegression : public ModelDesc {
 public:
  SummarisingRegression() {
    torch::manual_seed(3);
    net = torch::nn::Linear(2, 1);
  }
  InputSignature inputs() const override {
    return {InputDesc("x", {-1, 2}), InputDesc("y", {-1, 1})};
  }
  std::shared_ptr<torch::nn::Module> module() override { return net.ptr(); }
  at::Tensor build_graph(TowerContext& ctx, const std::vector<at::Tensor>& in) override {
    const at::Tensor pred = net->forward(in[0]);
    const at::Tensor cost = torch::mse_loss(pred, in[1]);
    ctx.output("cost", cost);
    if (ctx.is_main_training_tower()) {
      const at::Tensor error = (pred - in[1]).abs().mean().detach();
      ctx.add_moving_summary("cost", cost);
      ctx.add_moving_summary("abs-error", error);
      ctx.summary_scalar("bias", net->bias.detach().reshape({}));
      ctx.summary_histogram("pred", pred.detach());
      if (!steps.defined()) steps = at::zeros({}, pred.options().dtype(at::kLong));
      ctx.add_update_op("count-steps", [s = steps] { s.add_(1); });
    }
    return cost;
  }
  std::unique_ptr<torch::optim::Optimizer> optimizer() override {
    return std::make_unique<torch::optim::SGD>(net->parameters(),
                                               torch::optim::SGDOptions(0.05).momentum(0.9));
  }
  torch::nn::Linear net{nullptr};
  at::Tensor steps;  // the update op's count, on the training device
};

// The callbacks of the run, in the main job's order, then the default ones (DEFAULT_CALLBACKS()
// with `bar` as its ProgressBar), and the default monitors. `dir` is the logger directory.
// Before the run, the trainer's graph needs the variable "scale" (add_scale_variable).
struct MainJobLists {
  std::vector<CallbackPtr> callbacks;
  std::vector<CallbackPtr> defaults;
  std::vector<MonitorPtr> monitors;
};

// Every step-based point of "scale" (global steps): distinct values, so that each is a change.
inline ScheduledHyperParamSetter::Schedule scale_schedule() {
  return {{5, 0.5}, {17, 0.25}, {30, 0.125}};
}

// The tensor Graph variable that the step-based setter sets (on `device`).
inline void add_scale_variable(Trainer& trainer, c10::Device device) {
  trainer.graph().add_variable("scale", at::ones({}, at::TensorOptions().device(device)));
}

inline MainJobLists main_job_lists(const std::filesystem::path& dir, DataFlowPtr validation,
                                   ProgressBarOptions bar, int64_t samples_per_step) {
  MainJobLists lists;
  lists.callbacks = {
      std::make_shared<InferenceRunner>(validation,
                                        std::vector<InferencerPtr>{std::make_shared<ScalarStats>(
                                            std::vector<std::string>{"cost"})}),
      std::make_shared<ModelSaver>(),
      std::make_shared<MinSaver>("validation_cost"),
      std::make_shared<ScheduledHyperParamSetter>(
          "learning_rate", ScheduledHyperParamSetter::Schedule{{0, 0.05}, {2, 0.02}}),
      std::make_shared<HumanHyperParamSetter>("learning_rate"),
      std::make_shared<EstimatedTimeLeft>(),
      std::make_shared<ThroughputTracker>(static_cast<double>(samples_per_step)),
      std::make_shared<GPUUtilizationTracker>(),
      std::make_shared<InjectShell>((dir / "INJECT_SHELL.tmp").string()),
      std::make_shared<ScheduledHyperParamSetter>(
          "scale", scale_schedule(), ScheduledHyperParamSetterOptions().step_based(true)),
      // Puts, every 5 steps, the summary materialised at the last epoch end (no new read).
      std::make_shared<PeriodicTrigger>(
          MergeAllSummaries(MergeAllSummariesOptions().run_alone(true)),
          PeriodicTriggerOptions().every_k_steps(5)),
  };
  lists.defaults = DEFAULT_CALLBACKS();
  for (auto& cb : lists.defaults) {
    if (cb->name() == "ProgressBar") cb = std::make_shared<ProgressBar>(std::move(bar));
  }
  lists.monitors = DEFAULT_MONITORS();
  return lists;
}

}  // namespace testing
}  // namespace trainpack
