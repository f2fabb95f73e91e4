// CudaGraphStep: the training step as a CUDA graph, captured once and replayed every step with one
// launch, so that the host's cost of a step no longer grows with the operators. Enabled with
// `trainer.set_cuda_graph(CudaGraphOptions())` or `TrainConfig().cuda_graph(...)`.
//
// A step: the first `warmup_steps` run eager on a side stream; the next copies its batch into
// static inputs and captures the tower, the backward and the optimizer's step, then replays;
// every later step copies its batch (device to device, no host sync) and replays. What the tower
// published is recorded at the capture: the tensors callbacks fetch are the graph's outputs,
// overwritten by the next replay (clone one to keep it). A changed optimizer hyper-parameter (a
// schedule's learning rate) makes the next step capture again (logged at DEBUG).
//
// Optimizers: SGD as it is; Adam and AdamW through ATen's fused kernels (LibTorch 2.0 and later)
// on the same moment tensors, with the host step counts advanced after every replay. Refused at
// the start of training (std::invalid_argument naming it): another optimizer, float16's dynamic
// loss scaling, gradient processors, gradient accumulation. Eager with one warning: a CPU device,
// a data-parallel world of more than one, a batch whose shapes differ from the captured ones.
// Checkpoints are the same as eager ones. docs/gpu.md, "The step as a CUDA graph", has the rest.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/arg.h>

namespace torch::optim {
class Optimizer;
}

namespace trainpack {

class StepContext;
class TowerRegistry;

// How a step of an optimizer is captured: kSgd as it is, kAdam and kAdamW through ATen's fused
// kernels; kOther is refused.
enum class CudaGraphOptimizer { kSgd, kAdam, kAdamW, kOther };
CudaGraphOptimizer cuda_graph_optimizer_kind(const torch::optim::Optimizer& optimizer);

struct CudaGraphOptions {
  // Eager steps before the capture (PyTorch's recipe warms up for 3 on a side stream). >= 1.
  TORCH_ARG(int64_t, warmup_steps) = 3;
};

// Why a step cannot be captured, or an empty string when it can: checks the optimizer (by its
// concrete type) and the step's features. Used by the trainer when training starts.
std::string cuda_graph_refusal(const torch::optim::Optimizer& optimizer, bool loss_scaling,
                               bool gradient_processors, int64_t accumulate_steps);

// Runs a trainer's steps as a CUDA graph (see the top of this file). The trainer calls run() once
// per step, inside its hooked run; `body` runs the tower and the backward on the batch it is
// given (no zero_grad, no optimizer step: run() does those, eager or captured). The optimizer
// must pass cuda_graph_refusal (std::invalid_argument otherwise).
// On a build whose LibTorch has no CUDA, run() always runs eager (the trainer never creates one
// for a CPU device).
class CudaGraphStep {
 public:
  using Body = std::function<void(StepContext&, const std::vector<at::Tensor>&)>;

  CudaGraphStep(CudaGraphOptions options, c10::Device device, torch::optim::Optimizer& optimizer,
                TowerRegistry& registry);
  ~CudaGraphStep();
  CudaGraphStep(const CudaGraphStep&) = delete;
  CudaGraphStep& operator=(const CudaGraphStep&) = delete;

  // One step on `batch` (tensors on the device). `global_step` names the step in messages.
  void run(StepContext& ctx, const std::vector<at::Tensor>& batch, const Body& body,
           int64_t global_step);

  // How many times the step was captured (0 before the first capture); how many steps replayed
  // a graph; whether training has gone back to eager for good (shapes changed).
  int64_t captures() const;
  int64_t replays() const;
  bool fell_back() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainpack
