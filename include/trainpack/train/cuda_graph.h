// The training step as a CUDA graph: captured once, replayed every step with one launch.
// Public names: CudaGraphOptions, CudaGraphStep.
//
//   trainpack::SimpleTrainer trainer(torch::kCUDA);
//   trainer.set_cuda_graph(trainpack::CudaGraphOptions().warmup_steps(3));
//   // or: TrainConfig().cuda_graph(trainpack::CudaGraphOptions())
//
// On a GPU a small model's step is bound by the host: every operator of the forward, the
// backward and the optimizer step costs a launch. A CUDA graph records those launches once and
// replays them with one call, so the host's cost of a step no longer grows with the operators.
//
// How a step runs (SimpleTrainer, and DataParallelTrainer in a world of one):
// 1. The first `warmup_steps` steps run eager on a side stream (what CUDA graphs need before a
//    capture: lazy initialisation, cuBLAS workspaces, the optimizer's state created).
// 2. The next step copies its batch into static input tensors, drops the gradients, and captures
//    the tower, the backward and the optimizer's step on the side stream; then replays the graph.
//    Everything the tower published (ctx.output, the cost), its summaries, moving summaries and
//    update ops are recorded while it is captured.
// 3. Every later step copies its batch into the static inputs (device to device, no host sync),
//    replays the graph, and hands the recorded tensors to the callbacks again: what they fetch
//    are the graph's outputs, overwritten by the next replay (clone one to keep it longer).
// A hyper-parameter of the optimizer (the learning rate of a schedule, momentum, weight decay)
// is part of the captured kernels: when one changes, the next step captures the graph again
// (logged at DEBUG), which costs about one eager step.
//
// Optimizers: torch::optim::SGD's step is captured as it is. LibTorch's Adam and AdamW count
// steps on the host, which a replay would freeze: in a graph their step is ATen's fused kernel
// (_fused_adam_, _fused_adamw_; LibTorch 2.0 and later) on the same moment tensors, with the
// step counts as device tensors, and the host counts advanced after every replay (checkpoints
// hold the right ones).
//
// What a graph cannot hold is refused when training starts (std::invalid_argument naming it):
// another optimizer (RMSprop, Adagrad, LBFGS and user-defined ones keep host state), float16's
// dynamic loss scaling (a host decision every step), gradient processors and gradient
// accumulation. What
// only makes a graph pointless falls back to eager, with one warning: a CPU device (no graph
// there), a data-parallel world of more than one process, and a batch whose shapes differ from
// the captured ones (training goes on eager from that step).
//
// Checkpoints are the same as eager ones: the parameters, the optimizer's buffers and the
// counters live in the same tensors. A resumed run warms up and captures again.
//
// Differences from PyTorch's torch.cuda.graphs.make_graphed_callables: the whole step
// (optimizer included) is one graph, and the trainer decides when to capture again.
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
