#include "trainpack/train/cuda_graph.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/sgd.h>

#include <stdexcept>
#include <typeinfo>
#include <utility>

#include "trainpack/train/step_context.h"
#include "trainpack/train/tower_registry.h"
#include "trainpack/utils/demangle.h"
#include "trainpack/utils/logger.h"

// TRAINPACK_WITH_CUDA: set by CMake when the LibTorch built against has CUDA.
#ifdef TRAINPACK_WITH_CUDA
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace trainpack {

std::string cuda_graph_refusal(const torch::optim::Optimizer& optimizer, bool loss_scaling,
                               bool gradient_processors, int64_t accumulate_steps) {
  // SGD's step is in-place arithmetic on the parameters and the momentum buffers with host
  // scalars (the hyper-parameters, captured again when they change). The other optimizers of
  // LibTorch keep host state that changes every step: Adam, AdamW, Adagrad count steps on the
  // host (their bias corrections would stay those of the captured step), RMSprop and LBFGS too.
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer) == nullptr) {
    return fmt::format(
        "the optimizer {} keeps host state that changes every step (a step count, a line "
        "search), which a replayed graph would freeze at the captured step; use torch::optim::SGD "
        "with a CUDA graph, or train this optimizer without one",
        type_name(typeid(optimizer)));
  }
  if (loss_scaling) {
    return "float16's dynamic loss scaling decides on the host, every step, whether the step is "
           "applied (a check for inf/NaN gradients); train in bfloat16 or float32 with a CUDA "
           "graph, or float16 without one";
  }
  if (gradient_processors) {
    return "gradient processors may read gradients on the host (a clip that logs, a NaN check); "
           "train without them, or without a CUDA graph";
  }
  if (accumulate_steps != 1) {
    return fmt::format(
        "gradient accumulation ({} batches per step) is not captured; use accumulate_steps 1 "
        "with a CUDA graph, or train without one",
        accumulate_steps);
  }
  return "";
}

// Used by the CUDA side of CudaGraphStep::run; compiled everywhere, so that a CPU build checks
// them.
namespace {

// The SGD hyper-parameters of every group, in a fixed order: what the captured kernels hold.
[[maybe_unused]] void append_hyper_parameters(const torch::optim::Optimizer& optimizer,
                                              std::vector<double>* out) {
  for (const auto& group : optimizer.param_groups()) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    out->push_back(o.lr());
    out->push_back(o.momentum());
    out->push_back(o.dampening());
    out->push_back(o.weight_decay());
    out->push_back(o.nesterov() ? 1.0 : 0.0);
  }
}

// Whether the hyper-parameters are still those of `captured`; allocates nothing.
[[maybe_unused]] bool same_hyper_parameters(const torch::optim::Optimizer& optimizer,
                                            const std::vector<double>& captured) {
  size_t i = 0;
  for (const auto& group : optimizer.param_groups()) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    if (i + 5 > captured.size()) return false;
    if (captured[i] != o.lr() || captured[i + 1] != o.momentum() ||
        captured[i + 2] != o.dampening() || captured[i + 3] != o.weight_decay() ||
        captured[i + 4] != (o.nesterov() ? 1.0 : 0.0)) {
      return false;
    }
    i += 5;
  }
  return i == captured.size();
}

[[maybe_unused]] std::string shapes_of(const std::vector<at::Tensor>& tensors) {
  std::vector<std::string> shapes;
  for (const auto& t : tensors) {
    shapes.push_back(t.defined() ? fmt::format("[{}]", fmt::join(t.sizes(), ", ")) : "undefined");
  }
  return fmt::format("{}", fmt::join(shapes, " "));
}

[[maybe_unused]] bool same_shapes(const std::vector<at::Tensor>& batch,
                                  const std::vector<at::Tensor>& captured) {
  if (batch.size() != captured.size()) return false;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i].defined() != captured[i].defined()) return false;
    if (!batch[i].defined()) continue;
    if (batch[i].sizes() != captured[i].sizes() ||
        batch[i].scalar_type() != captured[i].scalar_type() ||
        batch[i].device() != captured[i].device()) {
      return false;
    }
  }
  return true;
}

}  // namespace

struct CudaGraphStep::Impl {
  Impl(CudaGraphOptions o, c10::Device d, torch::optim::Optimizer& opt, TowerRegistry& r)
      : options(o), device(d), optimizer(opt), registry(r) {}

  CudaGraphOptions options;
  c10::Device device;
  torch::optim::Optimizer& optimizer;
  TowerRegistry& registry;
  int64_t eager_steps = 0;
  int64_t captures = 0;
  int64_t replays = 0;
  bool fell_back = false;
  std::vector<double> captured_hyper;
  std::vector<at::Tensor> static_inputs;
  std::vector<std::pair<std::string, at::Tensor>> published;  // by the captured step
  TowerRegistry::StepRecord record;                           // of the captured step

  void eager(StepContext& ctx, const std::vector<at::Tensor>& batch, const Body& body) {
    optimizer.zero_grad();
    body(ctx, batch);
  }

  // Drops what refers to the graph's memory, then the graph.
  void release_graph();

#ifdef TRAINPACK_WITH_CUDA
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  std::optional<c10::cuda::CUDAStream> side;

  c10::cuda::CUDAStream side_stream() {
    if (!side) side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
    return *side;
  }

  // Runs `fn` on the side stream, ordered after and before the current stream's work (events
  // only: the host never waits).
  template <typename Fn>
  void on_side_stream(Fn&& fn) {
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device.index());
    const c10::cuda::CUDAStream s = side_stream();
    at::cuda::CUDAEvent ready;
    ready.record(current);
    ready.block(s);
    {
      c10::cuda::CUDAStreamGuard guard(s);
      fn();
    }
    at::cuda::CUDAEvent done;
    done.record(s);
    done.block(current);
  }

  void capture(StepContext& ctx, const std::vector<at::Tensor>& batch, const Body& body,
               int64_t global_step, const char* why) {
    release_graph();
    captured_hyper.clear();
    append_hyper_parameters(optimizer, &captured_hyper);
    on_side_stream([&] {
      static_inputs.clear();
      for (const auto& t : batch) static_inputs.push_back(t.defined() ? t.clone() : t);
      // The backward inside the graph then allocates the gradients from the graph's pool and
      // writes them (not adds to them) at every replay: no zero_grad in the graph.
      for (auto& group : optimizer.param_groups()) {
        for (auto& p : group.params()) p.mutable_grad() = at::Tensor();
      }
      // Autocast's cache of cast weights would hold tensors of the capture: PyTorch's rule is
      // to capture with the cache off.
      const bool cache = at::autocast::is_autocast_cache_enabled();
      at::autocast::set_autocast_cache_enabled(false);
      published.clear();
      ctx.set_publish_recorder(&published);
      auto g = std::make_unique<at::cuda::CUDAGraph>();
      g->capture_begin();
      try {
        body(ctx, static_inputs);
      } catch (...) {
        ctx.set_publish_recorder(nullptr);
        at::autocast::set_autocast_cache_enabled(cache);
        try {
          g->capture_end();
        } catch (...) {  // the body's error is the one to report
        }
        throw;
      }
      g->capture_end();
      ctx.set_publish_recorder(nullptr);
      at::autocast::set_autocast_cache_enabled(cache);
      graph = std::move(g);
    });
    record = registry.step_record();
    ++captures;
    TP_LOG_DEBUG("[CudaGraph] captured the step at global_step {} ({})", global_step, why);
    graph->replay();  // the capture recorded the step; this runs it
    ++replays;
  }

  void replay(StepContext& ctx, const std::vector<at::Tensor>& batch) {
    for (size_t i = 0; i < batch.size(); ++i) {
      if (batch[i].defined()) static_inputs[i].copy_(batch[i], /*non_blocking=*/true);
    }
    graph->replay();
    ++replays;
    for (const auto& p : published) ctx.publish(p.first, p.second);
    registry.replay_step(record);
  }
#endif
};

void CudaGraphStep::Impl::release_graph() {
  published.clear();
  record = TowerRegistry::StepRecord();
  static_inputs.clear();
#ifdef TRAINPACK_WITH_CUDA
  graph.reset();
#endif
}

CudaGraphStep::CudaGraphStep(CudaGraphOptions options, c10::Device device,
                             torch::optim::Optimizer& optimizer, TowerRegistry& registry)
    : impl_(std::make_unique<Impl>(options, device, optimizer, registry)) {
  if (options.warmup_steps() < 1) {
    throw std::invalid_argument(fmt::format(
        "CudaGraphOptions: warmup_steps must be >= 1 (the optimizer's state must exist before the "
        "capture), got {}",
        options.warmup_steps()));
  }
  if (!device.is_cuda()) {
    throw std::invalid_argument(
        fmt::format("CudaGraphStep: device {} is not a CUDA device", device.str()));
  }
}

CudaGraphStep::~CudaGraphStep() = default;

void CudaGraphStep::run(StepContext& ctx, const std::vector<at::Tensor>& batch, const Body& body,
                        int64_t global_step) {
  Impl& m = *impl_;
#ifdef TRAINPACK_WITH_CUDA
  if (m.fell_back) {
    m.eager(ctx, batch, body);
    return;
  }
  if (m.eager_steps < m.options.warmup_steps()) {
    m.on_side_stream([&] { m.eager(ctx, batch, body); });
    ++m.eager_steps;
    return;
  }
  if (!m.graph) {
    m.capture(ctx, batch, body, global_step, "after the warm-up steps");
    return;
  }
  if (!same_shapes(batch, m.static_inputs)) {
    TP_LOG_WARN(
        "[CudaGraph] the batch of global_step {} has the shapes {}, the captured step {}: a graph "
        "replays fixed shapes, so training goes on eager from here (drop the last partial batch, "
        "e.g. BatchData's remainder=false, to keep the graph)",
        global_step, shapes_of(batch), shapes_of(m.static_inputs));
    m.fell_back = true;
    m.release_graph();
    m.eager(ctx, batch, body);
    return;
  }
  if (!same_hyper_parameters(m.optimizer, m.captured_hyper)) {
    m.capture(ctx, batch, body, global_step, "a hyper-parameter of the optimizer changed");
    return;
  }
  m.replay(ctx, batch);
#else
  (void)global_step;
  m.eager(ctx, batch, body);
#endif
}

int64_t CudaGraphStep::captures() const { return impl_->captures; }
int64_t CudaGraphStep::replays() const { return impl_->replays; }
bool CudaGraphStep::fell_back() const { return impl_->fell_back; }

}  // namespace trainpack
