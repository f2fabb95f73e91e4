// Gradient processors (tensorpack's tfutils/gradproc.py: GradientProcessor, GlobalNormClip,
// MapGradient, SummaryGradient, CheckGradient): what happens to the gradients between backward
// and the optimizer step. docs/gradients.md shows them in use.
//
// When: SingleCostTrainer (and every trainer derived from it) runs the processors in the given
// order on the training thread, once per optimizer step: after backward (and, under data-parallel
// training, after the gradients' all-reduce) and before optimizer().step(). With no processor set
// the step does exactly what it did before (one emptiness test).
//
// The gradients are the module's trainable parameters (those with requires_grad), under their
// named_parameters() names ("fc1.weight", "features.0.bias"), in that order. A parameter that got
// no gradient this step has an undefined grad(); processors skip it. Differences from tensorpack
// (docs/tensorpack-differences.md #59-63): the processors change grad() in place, so "dropping" a
// gradient sets it undefined (the optimizer skips that parameter), and they are given to the
// trainer instead of wrapping the optimizer.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace trainpack {

class StepContext;
class MergeAllSummaries_RunWithOp;  // NOLINT(readability-identifier-naming)
class MergeAllSummaries_RunAlone;   // NOLINT(readability-identifier-naming)

// One trainable parameter and its gradient as a processor sees it.
struct NamedGradient {
  std::string name;      // the named_parameters() name
  at::Tensor parameter;  // the parameter itself (a processor must not change its value)

  // This step's gradient; undefined when the parameter got none.
  const at::Tensor& grad() const { return parameter.grad(); }
  // Replaces this step's gradient (same shape, dtype and device); an undefined tensor means no
  // update of this parameter this step.
  void set_grad(const at::Tensor& grad) const { parameter.mutable_grad() = grad; }
};
using NamedGradients = std::vector<NamedGradient>;

// tensorpack's GradientProcessor. A subclass overrides _process, which changes the gradients in
// place (grad().mul_(...), or set_grad). The list is built once by the trainer and is the same
// object at every step, in the same order, so a processor can work out per-parameter state
// (regex matches, buffers) at its first call and reuse it: the common path should allocate
// nothing. A processor that throws stops training: the exception leaves train() after every
// callback's after_train ran, as any error of the step does.
class GradientProcessor {
 public:
  virtual ~GradientProcessor();
  // Processes this step's gradients (under NoGradGuard). `step`: the hooked run in progress
  // (step.trainer() gives the trainer, its global_step and its monitors).
  void process(const NamedGradients& grads, StepContext& step);
  // The class name ("GlobalNormClip"), used in messages.
  virtual std::string name() const;

 protected:
  virtual void _process(const NamedGradients& grads, StepContext& step) = 0;
};

using GradientProcessorPtr = std::shared_ptr<GradientProcessor>;

// Runs `processors` in order on `grads` (nothing when the list is empty).
void apply_gradient_processors(const std::vector<GradientProcessorPtr>& processors,
                               const NamedGradients& grads, StepContext& step);

// tensorpack's GlobalNormClip, with torch::nn::utils::clip_grad_norm_'s formula: the global norm
// is the L2 norm of all gradients together, and every gradient is multiplied by
// min(1, max_norm / (global_norm + 1e-6)) (tensorpack's differs by the 1e-6). No host sync, and
// no allocation per step when all gradients share one dtype and device. global_norm() and
// clip_coefficient() are the last step's, 0-dim tensors on the gradients' device (reading one is
// a host sync), undefined before the first step. Errors: std::invalid_argument when max_norm is
// not finite and > 0.
class GlobalNormClip : public GradientProcessor {
 public:
  explicit GlobalNormClip(double max_norm);
  double max_norm() const { return max_norm_; }
  const at::Tensor& global_norm() const { return total_; }
  // The last step's coefficient min(1, max_norm / (global_norm + 1e-6)), as global_norm().
  const at::Tensor& clip_coefficient() const { return coef_; }

 protected:
  void _process(const NamedGradients& grads, StepContext& step) override;

 private:
  double max_norm_;
  at::Tensor norms_;               // one norm per parameter
  std::vector<at::Tensor> slots_;  // norms_[i] as 0-dim views, built once
  at::Tensor total_;               // the global norm
  at::Tensor denom_;               // global norm + 1e-6
  at::Tensor coef_;                // the clip coefficient
};

// tensorpack's MapGradient: applies `fn` to the gradient of every parameter whose whole name
// matches `regex` (ECMAScript: ".*bias" matches "fc1.bias", "fc1" does not match "fc1.weight";
// tensorpack's anchors only the end); the others are unchanged. `fn` takes (grad) or
// (grad, parameter) and returns the new gradient; an undefined tensor means no update of that
// parameter this step. The regex is matched once, at the first step, with a warning when it
// matches nothing: `[MapGradient] No match was found for regex <regex>.` Errors:
// std::invalid_argument for an empty function or a regex that does not compile, and at the step,
// naming the parameter, when `fn` returns a tensor of another shape.
class MapGradient : public GradientProcessor {
 public:
  using GradFn = std::function<at::Tensor(const at::Tensor& grad)>;
  using GradParamFn = std::function<at::Tensor(const at::Tensor& grad, const at::Tensor& param)>;

  explicit MapGradient(GradFn fn, std::string regex = ".*");
  explicit MapGradient(GradParamFn fn, std::string regex = ".*");

  const std::string& regex() const { return regex_; }
  // The indices in `grads` of the parameters the regex matches, worked out at the first call
  // (the list is the same at every step); logs the no-match warning then.
  const std::vector<size_t>& matched(const NamedGradients& grads);

 protected:
  void _process(const NamedGradients& grads, StepContext& step) override;

 private:
  GradParamFn fn_;
  std::string regex_;
  bool matched_once_ = false;
  std::vector<size_t> matched_;
};

// tensorpack's SummaryGradient: for each gradient whose parameter matches `regex` (as in
// MapGradient), the scalar `SummaryGradient/<name>/rms` (sqrt(mean(g^2)), that step's value, not
// tensorpack's moving average) and the histogram `SummaryGradient/<name>-grad`, taken at this
// point of the processor list. Only in the hooked runs that a MergeAllSummaries among the
// trainer's callbacks materialises: recorded in the tower's summaries, MergeAllSummaries puts them
// to the monitors with the tower's own (under data-parallel training the scalar is the mean over
// the ranks). Any other step costs one boolean test per MergeAllSummaries. Without a
// MergeAllSummaries nothing is put, and a warning says so at the first step.
class SummaryGradient : public GradientProcessor {
 public:
  explicit SummaryGradient(std::string regex = ".*");

 protected:
  void _process(const NamedGradients& grads, StepContext& step) override;

 private:
  MapGradient matcher_;  // only for its regex matching
  bool found_ = false;   // mergers_ was worked out
  // The trainer's MergeAllSummaries (their due() says whether this hooked run is materialised).
  std::vector<const MergeAllSummaries_RunWithOp*> with_op_;
  std::vector<const MergeAllSummaries_RunAlone*> alone_;
  std::vector<std::string> rms_tags_;  // per matched parameter
  std::vector<std::string> hist_tags_;
};

// A NaN or infinite gradient found by CheckGradient. what():
// "CheckGradient/<name> : Tensor had NaN values (the gradient of parameter '<name>' at
// global_step <g>; training stops)" (tensorpack's tf.check_numerics message, then where).
class NonFiniteGradientError : public std::runtime_error {
 public:
  NonFiniteGradientError(std::string parameter, int64_t global_step, const std::string& what);
  const std::string& parameter() const { return parameter_; }
  int64_t global_step() const { return global_step_; }

 private:
  std::string parameter_;
  int64_t global_step_;
};

// tensorpack's CheckGradient: when a gradient holds a NaN or an infinity, throws
// NonFiniteGradientError naming the first such parameter (in named_parameters() order) and the
// global_step, before the optimizer step: the parameters keep the values of the step before, and
// training stops with that error. Costs one host sync per step.
class CheckGradient : public GradientProcessor {
 public:
  CheckGradient() = default;

 protected:
  void _process(const NamedGradients& grads, StepContext& step) override;

 private:
  at::Tensor minmax_;              // [2 * parameters]: min and max of each gradient
  std::vector<at::Tensor> slots_;  // 0-dim views of minmax_
  at::Tensor scratch_;             // minmax_ * 0
  at::Tensor flag_;                // sum of scratch_: 0 when all are finite
};

}  // namespace trainpack
