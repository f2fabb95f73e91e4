#include "trainpack/train/gradproc.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <regex>
#include <stdexcept>
#include <utility>

#include "trainpack/callbacks/summary.h"
#include "trainpack/core/callback.h"
#include "trainpack/core/step_context.h"
#include "trainpack/core/trainer.h"
#include "trainpack/utils/demangle.h"
#include "trainpack/utils/host_read.h"
#include "trainpack/utils/logger.h"

namespace trainpack {

namespace {

// Whether `grad` can be written into a slot of `buffer` by an out= operation.
bool fits(const at::Tensor& grad, const at::Tensor& buffer) {
  return grad.scalar_type() == buffer.scalar_type() && grad.device() == buffer.device();
}

// The first defined, non-empty gradient of the list, or nullptr.
const at::Tensor* first_gradient(const NamedGradients& grads) {
  for (const auto& g : grads) {
    if (g.grad().defined() && g.grad().numel() > 0) return &g.grad();
  }
  return nullptr;
}

}  // namespace

// ---- GradientProcessor ----

GradientProcessor::~GradientProcessor() = default;

void GradientProcessor::process(const NamedGradients& grads, StepContext& step) {
  c10::NoGradGuard no_grad;
  _process(grads, step);
}

std::string GradientProcessor::name() const { return class_name(typeid(*this)); }

void apply_gradient_processors(const std::vector<GradientProcessorPtr>& processors,
                               const NamedGradients& grads, StepContext& step) {
  for (const auto& p : processors) p->process(grads, step);
}

// ---- GlobalNormClip ----

GlobalNormClip::GlobalNormClip(double max_norm) : max_norm_(max_norm) {
  if (!(std::isfinite(max_norm) && max_norm > 0)) {
    throw std::invalid_argument(fmt::format(
        "GlobalNormClip: max_norm must be finite and > 0, got {}; pass the largest global "
        "gradient norm to allow, e.g. GlobalNormClip(5.0)",
        max_norm));
  }
}

void GlobalNormClip::_process(const NamedGradients& grads, StepContext& /*step*/) {
  if (slots_.empty()) {  // the first step: one buffer for the per-parameter norms
    const at::Tensor* first = first_gradient(grads);
    if (first == nullptr) return;
    norms_ = at::zeros({static_cast<int64_t>(grads.size())}, first->options());
    slots_.reserve(grads.size());
    for (size_t i = 0; i < grads.size(); ++i) slots_.push_back(norms_.select(0, i));
    total_ = at::zeros({}, first->options());
    denom_ = at::zeros({}, first->options());
    coef_ = at::zeros({}, first->options());
  }
  for (size_t i = 0; i < grads.size(); ++i) {
    const at::Tensor& g = grads[i].grad();
    if (!g.defined()) {
      slots_[i].zero_();
    } else if (fits(g, norms_)) {
      at::linalg_vector_norm_out(slots_[i], g, 2);
    } else {
      slots_[i].copy_(at::linalg_vector_norm(g, 2));
    }
  }
  at::linalg_vector_norm_out(total_, norms_, 2);
  // clip_grad_norm_: max_norm / (total + 1e-6), clamped to at most 1; ATen computes
  // `scalar / tensor` as a tensor filled with the scalar divided by it, so this is the same
  // arithmetic in the gradients' dtype.
  denom_.copy_(total_).add_(1e-6);
  coef_.fill_(max_norm_).div_(denom_).clamp_max_(1.0);
  for (const auto& entry : grads) {
    const at::Tensor& g = entry.grad();
    if (g.defined()) g.mul_(coef_);
  }
}

// ---- MapGradient ----

namespace {

std::regex compile_regex(const std::string& regex, const char* who) {
  try {
    return std::regex(regex, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    throw std::invalid_argument(fmt::format(
        "{}: the regex '{}' does not compile ({}); give an ECMAScript regular expression that "
        "matches whole parameter names, e.g. \".*bias\"",
        who, regex, e.what()));
  }
}

}  // namespace

MapGradient::MapGradient(GradFn fn, std::string regex) : regex_(std::move(regex)) {
  if (!fn) throw std::invalid_argument("MapGradient: the function is empty; pass a callable");
  fn_ = [fn = std::move(fn)](const at::Tensor& grad, const at::Tensor&) { return fn(grad); };
  compile_regex(regex_, "MapGradient");
}

MapGradient::MapGradient(GradParamFn fn, std::string regex)
    : fn_(std::move(fn)), regex_(std::move(regex)) {
  if (!fn_) throw std::invalid_argument("MapGradient: the function is empty; pass a callable");
  compile_regex(regex_, "MapGradient");
}

const std::vector<size_t>& MapGradient::matched(const NamedGradients& grads) {
  if (!matched_once_) {
    const std::regex re = compile_regex(regex_, "MapGradient");
    for (size_t i = 0; i < grads.size(); ++i) {
      if (std::regex_match(grads[i].name, re)) matched_.push_back(i);
    }
    if (matched_.empty()) TP_LOG_WARN("[MapGradient] No match was found for regex {}.", regex_);
    matched_once_ = true;
  }
  return matched_;
}

void MapGradient::_process(const NamedGradients& grads, StepContext& /*step*/) {
  for (size_t i : matched(grads)) {
    const NamedGradient& entry = grads[i];
    const at::Tensor& g = entry.grad();
    if (!g.defined()) continue;
    at::Tensor result = fn_(g, entry.parameter);
    if (result.defined() && !result.sizes().equals(g.sizes())) {
      throw std::invalid_argument(fmt::format(
          "MapGradient: the function returned a gradient of shape [{}] for parameter '{}' of "
          "shape [{}]; return a tensor of the gradient's shape (or an undefined tensor to skip "
          "the update)",
          fmt::join(result.sizes(), ", "), entry.name, fmt::join(g.sizes(), ", ")));
    }
    if (!result.is_same(g)) entry.set_grad(result);
  }
}

// ---- SummaryGradient ----

SummaryGradient::SummaryGradient(std::string regex)
    : matcher_([](const at::Tensor& g) { return g; }, std::move(regex)) {}

void SummaryGradient::_process(const NamedGradients& grads, StepContext& step) {
  Trainer& trainer = step.trainer();
  if (!found_) {
    for (const CallbackPtr& registered : trainer.registered_callbacks()) {
      const Callback* cb = registered.get();
      while (const auto* proxy = dynamic_cast<const ProxyCallback*>(cb)) cb = proxy->inner().get();
      if (const auto* m = dynamic_cast<const MergeAllSummaries_RunWithOp*>(cb))
        with_op_.push_back(m);
      if (const auto* m = dynamic_cast<const MergeAllSummaries_RunAlone*>(cb)) alone_.push_back(m);
    }
    if (with_op_.empty() && alone_.empty()) {
      TP_LOG_WARN(
          "SummaryGradient: no MergeAllSummaries among the callbacks, so the gradient summaries "
          "are never put; add MergeAllSummaries() (DEFAULT_CALLBACKS() has it)");
    }
    for (size_t i : matcher_.matched(grads)) {
      rms_tags_.push_back("SummaryGradient/" + grads[i].name + "/rms-summary");
      hist_tags_.push_back("SummaryGradient/" + grads[i].name + "-grad");
    }
    found_ = true;
  }
  bool due = false;
  for (const auto* m : with_op_) due = due || m->due();
  for (const auto* m : alone_) due = due || m->due();
  if (!due) return;

  TowerRegistry& registry = trainer.tower_registry();
  const std::vector<size_t>& matched = matcher_.matched(grads);
  for (size_t k = 0; k < matched.size(); ++k) {
    const at::Tensor& g = grads[matched[k]].grad();
    if (!g.defined() || g.numel() == 0) continue;
    at::Tensor x = g.scalar_type() == at::kDouble ? g : g.to(at::kFloat);
    registry.record_summary(rms_tags_[k], TowerRegistry::SummaryKind::kScalar,
                            x.square().mean().sqrt());
    registry.record_summary(hist_tags_[k], TowerRegistry::SummaryKind::kHistogram, g.clone());
  }
}

// ---- CheckGradient ----

NonFiniteGradientError::NonFiniteGradientError(std::string parameter, int64_t global_step,
                                               const std::string& what)
    : std::runtime_error(what), parameter_(std::move(parameter)), global_step_(global_step) {}

namespace {

[[noreturn]] void throw_non_finite(const NamedGradient& entry, int64_t global_step) {
  const at::Tensor& g = entry.grad();
  const bool nan = host_scalar<bool>(at::isnan(g).any());
  const bool inf = host_scalar<bool>(at::isinf(g).any());
  const char* kind = nan && inf ? "Inf and NaN" : (nan ? "NaN" : "Inf");
  throw NonFiniteGradientError(
      entry.name, global_step,
      fmt::format("CheckGradient/{} : Tensor had {} values (the gradient of parameter '{}' at "
                  "global_step {}; training stops)",
                  entry.name, kind, entry.name, global_step));
}

bool all_finite(const at::Tensor& g) { return host_scalar<bool>(at::isfinite(g).all()); }

}  // namespace

void CheckGradient::_process(const NamedGradients& grads, StepContext& step) {
  if (slots_.empty()) {  // the first step: one buffer for every gradient's min and max
    const at::Tensor* first = first_gradient(grads);
    if (first == nullptr) return;
    minmax_ = at::zeros({2 * static_cast<int64_t>(grads.size())}, first->options());
    slots_.reserve(2 * grads.size());
    for (size_t i = 0; i < 2 * grads.size(); ++i) slots_.push_back(minmax_.select(0, i));
    scratch_ = at::zeros_like(minmax_);
    flag_ = at::zeros({}, first->options());
  }
  const int64_t global_step = step.trainer().global_step();
  for (size_t i = 0; i < grads.size(); ++i) {
    const at::Tensor& g = grads[i].grad();
    if (!g.defined() || g.numel() == 0) {
      slots_[2 * i].zero_();
      slots_[2 * i + 1].zero_();
    } else if (fits(g, minmax_)) {
      at::aminmax_out(slots_[2 * i], slots_[2 * i + 1], g);  // NaN propagates; inf shows
    } else {
      slots_[2 * i].zero_();
      slots_[2 * i + 1].zero_();
      if (!all_finite(g)) throw_non_finite(grads[i], global_step);
    }
  }
  // 0 * x is 0 for a finite x and NaN for NaN and +-inf: the sum is 0 exactly when all are
  // finite (no overflow, unlike a sum of the values themselves).
  scratch_.copy_(minmax_).mul_(0);
  at::sum_out(flag_, scratch_);
  if (host_scalar(flag_) == 0.0) return;  // the one host sync
  for (const auto& entry : grads) {
    const at::Tensor& g = entry.grad();
    if (g.defined() && g.numel() > 0 && !all_finite(g)) throw_non_finite(entry, global_step);
  }
}

}  // namespace trainpack
