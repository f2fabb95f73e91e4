// An exponential moving average of the model's weights (TensorFlow's ExponentialMovingAverage, as
// a callback), and the ways to use it in place of the weights: WeightEMAOptions, WeightEMA,
// SwapInEMAWeights (RAII) and WithEMAWeights (a wrapper callback).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include "trainpack/core/callback.h"

namespace trainpack {

struct WeightEMAOptions {
  // Average the modules' floating-point buffers too (batch norm's running statistics; integer
  // buffers are left alone). Off: buffers keep their training values, also when swapped in.
  TORCH_ARG(bool, buffers) = false;
  // TensorFlow's num_updates: update n (from 0) uses min(decay, (1 + n) / (10 + n)), so that the
  // early averages do not cling to the initial weights.
  TORCH_ARG(bool, warmup) = false;
};

// Keeps an exponential moving average ("shadow") of every trainable parameter of the trainer
// (Graph::trainable_variables) and, with buffers(true), of its modules' floating-point buffers
// (TensorFlow's ExponentialMovingAverage as a callback; an addition to tensorpack).
// When: setup_graph allocates one shadow per tracked tensor (same shape, dtype and device);
// before_train copies the weights into the shadows, unless a checkpoint restored them;
// trigger_step (after every optimizer step) updates each in place under NoGradGuard, without
// allocating: shadow = d * shadow + (1 - d) * value, d = decay (or the warmup's).
// Use the averages with SwapInEMAWeights (code) or WithEMAWeights (around another callback).
// State (checkpoints): `num_updates`, `swapped` (1 when saved while the averages were swapped in,
// by a ModelSaver inside WithEMAWeights) and `shadow/<name>` in each tensor's own dtype and shape.
// A checkpoint saved swapped holds the averages as its model entries and the training weights as
// `shadow/`; load_state swaps them back, so a resumed run continues exactly.
// chief_only: false (the ranks' weights, and averages, are equal; a sharded InferenceRunner
// validates with them on every rank).
// Errors: std::invalid_argument for a decay outside [0, 1] (construction), a trainer without
// trainable variables (setup_graph), a state whose entries do not fit (load_state).
// See docs/training-extras.md, "Weight averages".
class WeightEMA : public Callback {
 public:
  explicit WeightEMA(double decay, WeightEMAOptions options = {});

  double decay() const { return decay_; }
  const WeightEMAOptions& options() const { return options_; }
  // Updates done since the averages were started (or restored with them).
  int64_t num_updates() const { return num_updates_; }
  // The tracked tensors' names and their shadows, in order (after setup_graph). While the
  // averages are swapped in, the shadows hold the training values.
  const std::vector<std::pair<std::string, at::Tensor>>& shadows() const { return shadows_; }
  // Whether the averages are in the module now (inside a SwapInEMAWeights).
  bool swapped() const { return swap_depth_ > 0; }

  CallbackState state() const override;
  void load_state(const CallbackState& state) override;

 protected:
  void _setup_graph() override;
  void _before_train() override;
  void _trigger_step() override;

 private:
  friend class SwapInEMAWeights;
  // Exchanges the values of the tracked tensors and their shadows.
  void exchange();

  double decay_;
  WeightEMAOptions options_;
  std::vector<at::Tensor> tracked_;  // the module's tensors, in the order of shadows_
  std::vector<std::pair<std::string, at::Tensor>> shadows_;
  int64_t num_updates_ = 0;
  bool loaded_ = false;
  int swap_depth_ = 0;
};

// RAII: while it lives, the module's tracked tensors hold the averages (and the shadows the
// training values); its destructor swaps them back, also when an exception leaves the scope.
// Guards nest: only the outermost swaps. The exchange is exact (copies) under NoGradGuard, with
// one temporary per tensor. Errors: std::logic_error when the WeightEMA is not set up yet.
class SwapInEMAWeights {
 public:
  explicit SwapInEMAWeights(WeightEMA& ema);
  ~SwapInEMAWeights();
  SwapInEMAWeights(const SwapInEMAWeights&) = delete;
  SwapInEMAWeights& operator=(const SwapInEMAWeights&) = delete;

 private:
  WeightEMA& ema_;
};

// Runs another callback with the averages of `ema` swapped in around its trigger_epoch, trigger
// and after_train (a SwapInEMAWeights each), so that an InferenceRunner validates the averaged
// weights and a ModelSaver saves them. Every other hook is forwarded without a swap. name():
// `WithEMAWeights-<inner name>`; its flags (chief_only, runs_on_every_rank) are the inner one's.
// `ema` must be registered with the same trainer. Errors: std::invalid_argument for a null `ema`
// or callback, or a MinSaver/MaxSaver (wrap the ModelSaver: they read no weights), at
// construction; and at before_train when `ema` is not among the trainer's callbacks.
class WithEMAWeights : public ProxyCallback {
 public:
  WithEMAWeights(std::shared_ptr<WeightEMA> ema, CallbackPtr callback);
  std::string name() const override { return "WithEMAWeights-" + callback_->name(); }
  // Dispatched when the inner callback is (a swap runs only if the inner hook does), and at
  // before_train, to check that the WeightEMA is registered.
  bool overrides(Hook hook) const override {
    return hook == Hook::kBeforeTrain || callback_->overrides(hook);
  }

 protected:
  void _before_train() override;
  void _trigger_epoch() override;
  void _trigger() override;
  void _after_train() override;

 private:
  std::shared_ptr<WeightEMA> ema_;
};

}  // namespace trainpack
