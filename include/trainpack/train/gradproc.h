// Gradient processors (tensorpack's tfutils/gradproc.py): what happens to the gradients between
// backward and the optimizer step. docs/gradients.md tells the whole story.
//
//   trainpack::SimpleTrainer trainer;
//   trainer.set_gradient_processors({std::make_shared<trainpack::CheckGradient>(),
//                                    std::make_shared<trainpack::SummaryGradient>(),
//                                    std::make_shared<trainpack::GlobalNormClip>(5.0)});
//   // or: launch_train_with_config(TrainConfig()...gradient_processors({...}), trainer);
//
//   GradientProcessor   the base class: process(gradients, step) changes the gradients in place
//   GlobalNormClip      scales all gradients so that their global L2 norm is at most max_norm
//   MapGradient         applies a function to the gradients of the parameters a regex matches
//   SummaryGradient     puts each gradient's RMS and histogram to the monitors, at the steps
//                       MergeAllSummaries materialises
//   CheckGradient       stops training with NonFiniteGradientError on a NaN or infinite gradient
//
// When: SingleCostTrainer (and every trainer derived from it) runs the processors in the given
// order on the training thread, once per optimizer step: after backward (and, under data-parallel
// training, after the gradients' all-reduce) and before optimizer().step(). With no processor set
// the step does exactly what it did before (one emptiness test).
//
// The gradients are the module's trainable parameters (those with requires_grad), under their
// named_parameters() names ("fc1.weight", "features.0.bias"), in that order. A parameter that got
// no gradient this step has an undefined grad(); processors skip it.
//
// Differences from tensorpack (docs/tensorpack-differences.md): the processors work in place on
// the parameters' grad() instead of returning a new (grad, var) list, so "dropping" a gradient
// (MapGradient's function returning None) sets it undefined, and the optimizer leaves that
// parameter alone for the step; the processors are given to the trainer (set_gradient_processors
// or TrainConfig::gradient_processors) instead of wrapping the optimizer (apply_grad_processors).
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
// nothing.
//
//   class ScaleBias : public trainpack::GradientProcessor {
//    protected:
//     void _process(const trainpack::NamedGradients& grads, trainpack::StepContext&) override {
//       for (const auto& g : grads)
//         if (g.grad().defined() && g.name.size() > 5 &&
//             g.name.compare(g.name.size() - 5, 5, ".bias") == 0)
//           g.grad().mul_(2);
//     }
//   };
//
// A processor that throws stops training: the exception leaves train() after every callback's
// after_train ran, as any error of the step does.
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
// is the L2 norm of all gradients together, sqrt(sum over parameters of ||g||^2); every gradient
// is multiplied by min(1, max_norm / (global_norm + 1e-6)).
//
//   std::make_shared<GlobalNormClip>(5.0)
//
// Cost: per-parameter norms go into a buffer allocated at the first step, and the clip is a
// multiplication by a device scalar: no host sync and no allocation per step when all gradients
// share one dtype and device (otherwise each odd one costs a temporary).
// global_norm(), clip_coefficient(): the global norm before clipping and the coefficient of the
// last step (0-dim tensors on the gradients' device; reading one is a host sync), undefined
// before the first step.
// Errors: std::invalid_argument when max_norm is not finite and > 0.
//
// Differences from tensorpack: the scale is PyTorch's max_norm / (norm + 1e-6) clamped to 1
// (tf.clip_by_global_norm: max_norm / max(norm, max_norm)); a non-finite global norm makes the
// gradients NaN in both.
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

// tensorpack's MapGradient: applies `fn` to the gradient of every parameter whose name matches
// `regex` (the whole name, ECMAScript syntax: ".*bias" matches "fc1.bias", "fc1" does not match
// "fc1.weight"); the others are unchanged. `fn` returns the new gradient; an undefined tensor
// means no update of that parameter this step. `fn` takes (grad) or (grad, parameter).
//
//   std::make_shared<MapGradient>([](const at::Tensor& g) { return g.clamp(-0.1, 0.1); })
//   std::make_shared<MapGradient>([](const at::Tensor& g) { return g * 0.1; }, "features\\..*")
//
// The regex is matched once, at the first step; if it matches no parameter, a warning says so:
// `[MapGradient] No match was found for regex <regex>.`
// Errors: std::invalid_argument for an empty function or a regex that does not compile;
// std::invalid_argument at the step, naming the parameter, when `fn` returns a tensor of another
// shape.
//
// Differences from tensorpack: the regex must match the whole name (tensorpack appends `$` to it,
// which for an alternation like "a|b" anchors only the last branch).
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
// MapGradient), the scalar `SummaryGradient/<name>/rms` (sqrt(mean(g^2)), in float32 or the
// gradient's float64) and the histogram `SummaryGradient/<name>-grad` of its values, taken at this
// point of the processor list (before the processors after it).
//
//   std::make_shared<SummaryGradient>()
//
// When: only in the hooked runs that a MergeAllSummaries among the trainer's callbacks
// materialises (by default the last step of each epoch, and every `period` steps): there it
// records them in the tower's summaries and MergeAllSummaries puts them to the monitors with the
// tower's own, in the same Summary, at the same global_step (under data-parallel training the
// scalar is the mean over the ranks, as every scalar summary). Any other step costs one boolean
// test per MergeAllSummaries: no computation, no sync, no allocation. Without a MergeAllSummaries
// nothing is put, and a warning says so at the first step.
// Puts (through MergeAllSummaries): scalars `SummaryGradient/<name>/rms`, histograms
// `SummaryGradient/<name>-grad`.
//
// Differences from tensorpack: the RMS put is that step's value (tensorpack puts the moving
// average of the RMS, updated every step); since the summaries are recorded only at due steps,
// MergeAllSummaries' "Summarizing collection 'summaries' of size N" (logged after the first step)
// counts them only if that step was due.
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
// global_step of the step, before the optimizer step: the parameters keep the values of the step
// before, and training stops with that error.
//
//   std::make_shared<CheckGradient>()
//
// Cost: per parameter, its min and max into a buffer allocated at the first step, then one host
// sync per step to read whether all are finite (tensorpack: one check_numerics op per gradient).
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
