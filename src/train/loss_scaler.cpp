#include "trainpack/train/loss_scaler.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "trainpack/utils/host_read.h"

namespace trainpack {

LossScaler::LossScaler(LossScalerOptions options) : options_(options) {
  if (!(std::isfinite(options_.init_scale()) && options_.init_scale() > 0)) {
    throw std::invalid_argument(fmt::format("LossScaler: init_scale must be finite and > 0, got {}",
                                            options_.init_scale()));
  }
  if (!(std::isfinite(options_.growth_factor()) && options_.growth_factor() > 1)) {
    throw std::invalid_argument(fmt::format(
        "LossScaler: growth_factor must be finite and > 1, got {}", options_.growth_factor()));
  }
  if (!(options_.backoff_factor() > 0 && options_.backoff_factor() < 1)) {
    throw std::invalid_argument(fmt::format("LossScaler: backoff_factor must be in (0, 1), got {}",
                                            options_.backoff_factor()));
  }
  if (options_.growth_interval() < 1) {
    throw std::invalid_argument(fmt::format("LossScaler: growth_interval must be >= 1, got {}",
                                            options_.growth_interval()));
  }
  scale_ = options_.init_scale();
}

at::Tensor LossScaler::scale(const at::Tensor& cost) const { return cost * scale_; }

bool LossScaler::unscale(const NamedGradients& grads) {
  c10::NoGradGuard no_grad;
  const double inv_scale = 1.0 / scale_;
  bool on_cuda = false;
  for (const auto& g : grads) {
    if (g.grad().defined() && g.grad().is_cuda()) {
      on_cuda = true;
      break;
    }
  }
  bool finite = true;
  if (on_cuda) {
    // PyTorch's fused kernel: one launch for all gradients, found_inf set on the device.
    cuda_grads_.clear();
    for (const auto& g : grads) {
      if (g.grad().defined() && g.grad().numel() > 0) cuda_grads_.push_back(g.grad());
    }
    const auto device = cuda_grads_.front().device();
    at::Tensor found_inf = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(device));
    at::Tensor inv = at::full({1}, inv_scale, at::TensorOptions().dtype(at::kFloat).device(device));
    at::_amp_foreach_non_finite_check_and_unscale_(cuda_grads_, found_inf, inv);
    finite = host_scalar<float>(found_inf) == 0.0f;  // whether to step: needed now, every step
    cuda_grads_.clear();
  } else {
    finite = check_and_unscale_cpu(grads, inv_scale);
  }
  last_found_inf_ = !finite;
  return finite;
}

bool LossScaler::check_and_unscale_cpu(const NamedGradients& grads, double inv_scale) {
  if (!sums_.defined() || sums_.numel() != static_cast<int64_t>(grads.size())) {
    sums_ = at::zeros({static_cast<int64_t>(grads.size())}, at::kDouble);
  }
  sums_.zero_();
  for (size_t i = 0; i < grads.size(); ++i) {
    const at::Tensor& g = grads[i].grad();
    if (!g.defined() || g.numel() == 0) continue;
    g.mul_(inv_scale);
    // A sum is non-finite exactly when an element is (an inf or a NaN never sums back to a finite
    // value); summing into a slot of one buffer leaves a single host read for the whole check.
    at::Tensor slot = sums_[static_cast<int64_t>(i)];
    at::sum_out(slot, g, c10::nullopt, /*keepdim=*/false, at::kDouble);
  }
  return host_scalar<bool>(at::isfinite(sums_).all());
}

bool LossScaler::update() {
  if (last_found_inf_) {
    scale_ *= options_.backoff_factor();
    growth_tracker_ = 0;
    ++skipped_steps_;
    last_found_inf_ = false;
    return true;
  }
  if (++growth_tracker_ >= options_.growth_interval()) {
    const double grown = scale_ * options_.growth_factor();
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  }
  return false;
}

void LossScaler::set_scale(double scale) {
  if (!(std::isfinite(scale) && scale > 0)) {
    throw std::invalid_argument(
        fmt::format("LossScaler: the loss scale must be finite and > 0, got {}", scale));
  }
  scale_ = scale;
}

void LossScaler::set_growth_tracker(int64_t good_steps) {
  if (good_steps < 0) {
    throw std::invalid_argument(
        fmt::format("LossScaler: the growth tracker must be >= 0, got {}", good_steps));
  }
  growth_tracker_ = good_steps;
}

}  // namespace trainpack
