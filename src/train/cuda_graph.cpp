#include "trainpack/train/cuda_graph.h"

#include <ATen/Functions.h>
#include <ATen/autocast_mode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/sgd.h>

#include <optional>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "trainpack/core/step_context.h"
#include "trainpack/core/tower_registry.h"
#include "trainpack/detail/cuda_streams.h"
#include "trainpack/detail/torch_compat.h"
#include "trainpack/utils/demangle.h"
#include "trainpack/utils/logger.h"

namespace trainpack {

CudaGraphOptimizer cuda_graph_optimizer_kind(const torch::optim::Optimizer& optimizer) {
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer)) return CudaGraphOptimizer::kSgd;
  if (dynamic_cast<const torch::optim::Adam*>(&optimizer)) return CudaGraphOptimizer::kAdam;
  if (dynamic_cast<const torch::optim::AdamW*>(&optimizer)) return CudaGraphOptimizer::kAdamW;
  return CudaGraphOptimizer::kOther;
}

std::string cuda_graph_refusal(const torch::optim::Optimizer& optimizer, bool loss_scaling,
                               bool gradient_processors, int64_t accumulate_steps) {
  // SGD's step is in-place arithmetic on the parameters and the momentum buffers with host
  // scalars (the hyper-parameters, captured again when they change). LibTorch's Adam and AdamW
  // count steps on the host (their bias corrections would stay those of the captured step): in a
  // graph their step is ATen's fused kernel, with the counts on the device. Adagrad, RMSprop and
  // LBFGS keep host state of their own (a step count, a line search).
  const CudaGraphOptimizer kind = cuda_graph_optimizer_kind(optimizer);
  if (kind == CudaGraphOptimizer::kOther) {
    return fmt::format(
        "the optimizer {} keeps host state that changes every step (a step count, a line "
        "search), which a replayed graph would freeze at the captured step; use "
        "torch::optim::SGD, Adam or AdamW with a CUDA graph, or train this optimizer without one",
        type_name(typeid(optimizer)));
  }
  if (kind != CudaGraphOptimizer::kSgd && !compat::kHasFusedAdam) {
    return fmt::format(
        "the optimizer {} is captured through ATen's fused Adam kernels, which this LibTorch "
        "{} lacks (2.0 and later have them); use torch::optim::SGD with a CUDA graph, or a newer "
        "LibTorch",
        type_name(typeid(optimizer)), compat::torch_version());
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

// Used by CudaGraphStep::run on a build with CUDA.
namespace {

// Adam's and AdamW's options have the same fields (and no common base).
template <typename AdamOptions, typename F>
void for_each_adam_hyper_parameter(const AdamOptions& o, F&& f) {
  f(o.lr());
  f(std::get<0>(o.betas()));
  f(std::get<1>(o.betas()));
  f(o.eps());
  f(o.weight_decay());
  f(o.amsgrad() ? 1.0 : 0.0);
}

// The hyper-parameters of one group, in a fixed order: what the captured kernels hold. Calls
// `f` with each value.
template <typename F>
void for_each_hyper_parameter(CudaGraphOptimizer kind,
                              const torch::optim::OptimizerOptions& options, F&& f) {
  if (kind == CudaGraphOptimizer::kSgd) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(options);
    f(o.lr());
    f(o.momentum());
    f(o.dampening());
    f(o.weight_decay());
    f(o.nesterov() ? 1.0 : 0.0);
  } else if (kind == CudaGraphOptimizer::kAdam) {
    for_each_adam_hyper_parameter(static_cast<const torch::optim::AdamOptions&>(options), f);
  } else if (kind == CudaGraphOptimizer::kAdamW) {
    for_each_adam_hyper_parameter(static_cast<const torch::optim::AdamWOptions&>(options), f);
  }
}

void append_hyper_parameters(CudaGraphOptimizer kind, const torch::optim::Optimizer& optimizer,
                             std::vector<double>* out) {
  for (const auto& group : optimizer.param_groups()) {
    for_each_hyper_parameter(kind, group.options(), [&](double v) { out->push_back(v); });
  }
}

// Whether the hyper-parameters are still those of `captured`; allocates nothing.
bool same_hyper_parameters(CudaGraphOptimizer kind, const torch::optim::Optimizer& optimizer,
                           const std::vector<double>& captured) {
  size_t i = 0;
  bool same = true;
  for (const auto& group : optimizer.param_groups()) {
    for_each_hyper_parameter(kind, group.options(), [&](double v) {
      same = same && i < captured.size() && captured[i] == v;
      ++i;
    });
  }
  return same && i == captured.size();
}

std::string shapes_of(const std::vector<at::Tensor>& tensors) {
  std::vector<std::string> shapes;
  for (const auto& t : tensors) {
    shapes.push_back(t.defined() ? fmt::format("[{}]", fmt::join(t.sizes(), ", ")) : "undefined");
  }
  return fmt::format("{}", fmt::join(shapes, " "));
}

bool same_shapes(const std::vector<at::Tensor>& batch, const std::vector<at::Tensor>& captured) {
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

// Named, not anonymous: CudaGraphStep::Impl (a named class) holds it.
namespace cuda_graph_detail {

// Adam's and AdamW's per-parameter state, whichever of the two: the host step count and the
// moment tensors (the two classes have the same fields but no common base).
struct AdamState {
  torch::optim::AdamParamState* adam = nullptr;
  torch::optim::AdamWParamState* adamw = nullptr;
  int64_t step() const { return adam ? adam->step() : adamw->step(); }
  void advance() {
    if (adam) {
      adam->step(adam->step() + 1);
    } else {
      adamw->step(adamw->step() + 1);
    }
  }
  const at::Tensor& exp_avg() const { return adam ? adam->exp_avg() : adamw->exp_avg(); }
  const at::Tensor& exp_avg_sq() const { return adam ? adam->exp_avg_sq() : adamw->exp_avg_sq(); }
  const at::Tensor& max_exp_avg_sq() const {
    return adam ? adam->max_exp_avg_sq() : adamw->max_exp_avg_sq();
  }
};

}  // namespace cuda_graph_detail
using cuda_graph_detail::AdamState;

struct CudaGraphStep::Impl {
  Impl(CudaGraphOptions o, c10::Device d, torch::optim::Optimizer& opt, TowerRegistry& r)
      : options(o), device(d), optimizer(opt), registry(r), kind(cuda_graph_optimizer_kind(opt)) {}

  CudaGraphOptions options;
  c10::Device device;
  torch::optim::Optimizer& optimizer;
  TowerRegistry& registry;
  CudaGraphOptimizer kind;
  int64_t eager_steps = 0;
  int64_t captures = 0;
  int64_t replays = 0;
  bool fell_back = false;
  std::vector<double> captured_hyper;
  std::vector<at::Tensor> static_inputs;
  std::vector<std::pair<std::string, at::Tensor>> published;  // by the captured step
  TowerRegistry::StepRecord record;                           // of the captured step

  // Adam/AdamW in a graph: per group, the parameters the captured step updates, their state, and
  // their step counts as float32 device tensors (what the fused kernels take). The host counts
  // advance with every replay, so that checkpoints and eager steps see the right ones.
  struct AdamGroup {
    std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps;
    std::vector<AdamState> states;
    double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
    bool amsgrad = false;
  };
  std::vector<AdamGroup> adam_groups;

  void eager(StepContext& ctx, const std::vector<at::Tensor>& batch, const Body& body) {
    optimizer.zero_grad();
    body(ctx, batch);
    optimizer.step();
  }

  // Drops what refers to the graph's memory, then the graph.
  void release_graph();

  // The rest runs on a build with CUDA only (detail/cuda_streams.h); run() runs every step eager
  // on a build without it.
  std::optional<detail::CudaGraph> graph;
  std::optional<detail::CudaStream> side;

  detail::CudaStream side_stream() {
    if (!side) side = detail::CudaStream::from_pool(device.index());
    return *side;
  }

  // Runs `fn` on the side stream, ordered after and before the current stream's work (events
  // only: the host never waits).
  template <typename Fn>
  void on_side_stream(Fn&& fn) {
    const detail::CudaStream current = detail::CudaStream::current(device.index());
    const detail::CudaStream s = side_stream();
    detail::run_joined(current, s, fn);
  }

  // Before the capture (outside it: a tensor made inside would be made again at every replay):
  // each group's Adam state and its step counts on the device, from the host counts.
  void prepare_adam() {
    adam_groups.clear();
    for (auto& group : optimizer.param_groups()) {
      AdamGroup g;
      std::vector<double> h;  // lr, beta1, beta2, eps, weight_decay, amsgrad
      for_each_hyper_parameter(kind, group.options(), [&](double v) { h.push_back(v); });
      g.lr = h.at(0);
      g.beta1 = h.at(1);
      g.beta2 = h.at(2);
      g.eps = h.at(3);
      g.weight_decay = h.at(4);
      g.amsgrad = h.at(5) != 0.0;
      using StateMap = std::decay_t<decltype(optimizer.state())>;
      for (auto& p : group.params()) {
        auto found = optimizer.state().find(compat::optimizer_state_key<StateMap>(p));
        // A parameter the warm-up steps never updated (no gradient) has no state: like Adam's
        // own step, the captured one leaves it alone.
        if (found == optimizer.state().end()) continue;
        AdamState st;
        if (kind == CudaGraphOptimizer::kAdam) {
          st.adam = static_cast<torch::optim::AdamParamState*>(found->second.get());
        } else {
          st.adamw = static_cast<torch::optim::AdamWParamState*>(found->second.get());
        }
        g.params.push_back(p);
        g.states.push_back(st);
        g.exp_avgs.push_back(st.exp_avg());
        g.exp_avg_sqs.push_back(st.exp_avg_sq());
        if (g.amsgrad) g.max_exp_avg_sqs.push_back(st.max_exp_avg_sq());
        g.steps.push_back(at::full({}, static_cast<double>(st.step()),
                                   at::TensorOptions().dtype(at::kFloat).device(p.device())));
      }
      adam_groups.push_back(std::move(g));
    }
  }

  // The optimizer's step inside the capture.
  void captured_optimizer_step() {
    if (kind == CudaGraphOptimizer::kSgd) {
      optimizer.step();
      return;
    }
    for (auto& g : adam_groups) {
      g.grads.clear();
      for (const auto& p : g.params) g.grads.push_back(p.grad());
      if (g.params.empty()) continue;
      at::_foreach_add_(g.steps, 1);
      // compat::kHasFusedAdam: cuda_graph_refusal refuses Adam and AdamW on older LibTorches.
      if (kind == CudaGraphOptimizer::kAdam) {
        compat::fused_adam_(g.params, g.grads, g.exp_avgs, g.exp_avg_sqs, g.max_exp_avg_sqs,
                            g.steps, g.lr, g.beta1, g.beta2, g.weight_decay, g.eps, g.amsgrad,
                            /*maximize=*/false);
      } else {
        compat::fused_adamw_(g.params, g.grads, g.exp_avgs, g.exp_avg_sqs, g.max_exp_avg_sqs,
                             g.steps, g.lr, g.beta1, g.beta2, g.weight_decay, g.eps, g.amsgrad,
                             /*maximize=*/false);
      }
    }
  }

  // After a replay: the host step counts follow the device's.
  void advance_host_steps() {
    for (auto& g : adam_groups) {
      for (auto& st : g.states) st.advance();
    }
  }

  void capture(StepContext& ctx, const std::vector<at::Tensor>& batch, const Body& body,
               int64_t global_step, const char* why) {
    release_graph();
    captured_hyper.clear();
    append_hyper_parameters(kind, optimizer, &captured_hyper);
    // As torch.cuda.graph does before a capture: nothing queued earlier (on any stream) may still
    // use memory that the capture's allocations could take. One wait, at a capture only.
    detail::cuda_device_synchronize();
    on_side_stream([&] {
      static_inputs.clear();
      for (const auto& t : batch) static_inputs.push_back(t.defined() ? t.clone() : t);
      if (kind != CudaGraphOptimizer::kSgd) prepare_adam();
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
      detail::CudaGraph g;
      g.capture_begin();
      try {
        body(ctx, static_inputs);
        captured_optimizer_step();
      } catch (...) {
        ctx.set_publish_recorder(nullptr);
        at::autocast::set_autocast_cache_enabled(cache);
        try {
          g.capture_end();
        } catch (...) {  // the body's error is the one to report
        }
        throw;
      }
      g.capture_end();
      ctx.set_publish_recorder(nullptr);
      at::autocast::set_autocast_cache_enabled(cache);
      graph = std::move(g);
    });
    record = registry.step_record();
    ++captures;
    TP_LOG_DEBUG("[CudaGraph] captured the step at global_step {} ({})", global_step, why);
    graph->replay();  // the capture recorded the step; this runs it
    advance_host_steps();
    ++replays;
  }

  void replay(StepContext& ctx, const std::vector<at::Tensor>& batch) {
    for (size_t i = 0; i < batch.size(); ++i) {
      if (batch[i].defined()) static_inputs[i].copy_(batch[i], /*non_blocking=*/true);
    }
    graph->replay();
    advance_host_steps();
    ++replays;
    for (const auto& p : published) ctx.publish(p.first, p.second);
    registry.replay_step(record);
  }
};

void CudaGraphStep::Impl::release_graph() {
  published.clear();
  record = TowerRegistry::StepRecord();
  static_inputs.clear();
  adam_groups.clear();
  graph.reset();
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
  const std::string refusal = cuda_graph_refusal(optimizer, false, false, 1);
  if (!refusal.empty()) throw std::invalid_argument("CudaGraphStep: " + refusal);
}

CudaGraphStep::~CudaGraphStep() = default;

void CudaGraphStep::run(StepContext& ctx, const std::vector<at::Tensor>& batch, const Body& body,
                        int64_t global_step) {
  Impl& m = *impl_;
  if (!detail::built_with_cuda()) {  // no graph: the trainer never makes a step for a CPU device
    m.eager(ctx, batch, body);
    return;
  }
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
  if (!same_hyper_parameters(m.kind, m.optimizer, m.captured_hyper)) {
    m.capture(ctx, batch, body, global_step, "a hyper-parameter of the optimizer changed");
    return;
  }
  m.replay(ctx, batch);
}

int64_t CudaGraphStep::captures() const { return impl_->captures; }
int64_t CudaGraphStep::replays() const { return impl_->replays; }
bool CudaGraphStep::fell_back() const { return impl_->fell_back; }

}  // namespace trainpack
