// LossScaler: dynamic loss scaling for float16 training (PyTorch's torch.cuda.amp.GradScaler,
// which LibTorch's C++ API does not have): the cost is multiplied by a large scale before backward
// (scale()) and the gradients divided by it after (unscale()); when that overflows, the step is
// skipped and the scale shrinks (update()). See docs/mixed-precision.md, "Dynamic loss scaling
// (float16)".
//
// GradScaler's rules and defaults: the scale starts at init_scale; after a step whose unscaled
// gradients hold an inf or a NaN, the optimizer step is skipped, the scale is multiplied by
// backoff_factor and the count of good steps restarts; after growth_interval good steps in a
// row, it is multiplied by growth_factor (unless that would make it infinite). SingleCostTrainer
// keeps the state in the graph variables `loss_scale` and `loss_scale_growth_tracker`, so that
// checkpoints hold it. unscale() is one multiplication per gradient and one host read per step
// (on CUDA, PyTorch's fused _amp_foreach_non_finite_check_and_unscale_).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include <cstdint>
#include <vector>

#include "trainpack/train/gradproc.h"

namespace trainpack {

struct LossScalerOptions {
  TORCH_ARG(double, init_scale) = 65536.0;
  TORCH_ARG(double, growth_factor) = 2.0;
  TORCH_ARG(double, backoff_factor) = 0.5;
  TORCH_ARG(int64_t, growth_interval) = 2000;
};

class LossScaler {
 public:
  // std::invalid_argument naming the option: init_scale not finite and > 0, growth_factor not
  // > 1, backoff_factor not in (0, 1), growth_interval < 1.
  explicit LossScaler(LossScalerOptions options = {});

  // cost * scale(), the tensor to call backward on.
  at::Tensor scale(const at::Tensor& cost) const;

  // Divides every defined gradient by the scale, in place, and checks them: true when all are
  // finite (the optimizer may step), false when one holds an inf or a NaN (skip the step).
  // Remembers the answer for update().
  bool unscale(const NamedGradients& grads);

  // Adjusts the scale after the step as described at the top of this file, from the last
  // unscale() answer. Returns true when the step was skipped.
  bool update();

  double scale_value() const { return scale_; }
  int64_t growth_tracker() const { return growth_tracker_; }
  // Steps skipped by this object so far (not saved in checkpoints).
  int64_t skipped_steps() const { return skipped_steps_; }
  const LossScalerOptions& options() const { return options_; }

  // Restoring from a checkpoint: a scale that is not finite and > 0, or a negative tracker, is
  // std::invalid_argument naming the value.
  void set_scale(double scale);
  void set_growth_tracker(int64_t good_steps);

 private:
  bool check_and_unscale_cpu(const NamedGradients& grads, double inv_scale);

  LossScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t skipped_steps_ = 0;
  bool last_found_inf_ = false;
  at::Tensor sums_;                     // one slot per gradient, allocated at the first CPU check
  std::vector<at::Tensor> cuda_grads_;  // the CUDA path's gradient list, reused
};

}  // namespace trainpack
