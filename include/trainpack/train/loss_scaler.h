// LossScaler: dynamic loss scaling for float16 training (PyTorch's torch.cuda.amp.GradScaler,
// which LibTorch's C++ API does not have). float16 cannot hold gradients below about 6e-8, so
// the cost is multiplied by a large scale before backward and the gradients divided by it after;
// when that overflows, the step is skipped and the scale shrinks.
//
//   LossScaler scaler;                              // SingleCostTrainer makes one for float16
//   scaler.scale(cost).backward();
//   if (scaler.unscale(grads)) { processors..., optimizer.step(); }   // false: inf/NaN, skip
//   scaler.update();
//
// The sequence, with GradScaler's defaults and rules: the scale starts at init_scale (65536);
// after a step whose unscaled gradients hold an inf or a NaN, the optimizer step is skipped and
// the scale is multiplied by backoff_factor (0.5), and the count of good steps restarts; after
// growth_interval (2000) good steps in a row, it is multiplied by growth_factor (2) (unless that
// would make it infinite). With factors that are powers of two, scaling and unscaling are exact.
//
// SingleCostTrainer keeps its scaler's state in the graph variables `loss_scale` and
// `loss_scale_growth_tracker`, so that ModelSaver saves them and a resumed run continues with
// the same scale.
//
// Cost: unscale() is one multiplication per gradient and one host read per step (whether the
// step is skipped must be known on the host, as in GradScaler.step); on CUDA the check and the
// multiplication are PyTorch's fused _amp_foreach_non_finite_check_and_unscale_.
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
