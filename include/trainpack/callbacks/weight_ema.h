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
  // Average the modules' floating-point buffers too (batch norm's running statistics); integer
  // buffers (num_batches_tracked) are left alone. Off: buffers keep their training values, also
  // while the averages are swapped in.
  TORCH_ARG(bool, buffers) = false;
  // TensorFlow's num_updates: the decay of update n (n = 0 for the first update after the
  // averages were started) is min(decay, (1 + n) / (10 + n)), so that the early averages do
  // not cling to the initial weights.
  TORCH_ARG(bool, warmup) = false;
};

// Keeps an exponential moving average ("shadow") of every trainable parameter of the trainer
// (Graph::trainable_variables, the module's parameters that require a gradient) and, with
// buffers(true), of the floating-point buffers of the trainer's modules (Graph::modules).
//
//   auto ema = std::make_shared<WeightEMA>(0.999);
//   callbacks = {ema,
//                std::make_shared<WithEMAWeights>(ema, std::make_shared<InferenceRunner>(...)),
//                std::make_shared<WithEMAWeights>(ema, std::make_shared<ModelSaver>()),
//                std::make_shared<MinSaver>("val-error-top1")};   // its copy holds the averages
//
// When: setup_graph allocates one shadow tensor per tracked tensor (same shape, dtype and
// device). before_train copies the weights into the shadows (the weights as restored, when a
// checkpoint without this callback's state was loaded; a checkpoint with it restores the
// shadows instead). trigger_step (after every optimizer step) updates each shadow in place,
// under NoGradGuard, with no allocation:
//   shadow = d * shadow + (1 - d) * value      (shadow.mul_(d).add_(value, 1 - d))
// with d = decay, or min(decay, (1 + n) / (10 + n)) with warmup (n: the updates done before).
// Use the averages with SwapInEMAWeights (code) or WithEMAWeights (around another callback).
// State (checkpoints): `num_updates` (int64), `swapped` (int64, 1 when the checkpoint was saved
// while the averages were swapped in, i.e. by a ModelSaver inside WithEMAWeights), and
// `shadow/<name>` for each tracked tensor (<name>: the trainable variable's name, or a buffer's
// checkpoint entry name), in the tensor's own dtype and shape: the exact values, not the float64
// 0-d/1-d form of other callbacks' states. A checkpoint saved swapped holds the averages as its
// model entries (so MinSaver's copy, an export or an evaluation from it uses them) and the
// training weights as the `shadow/` entries; load_state swaps them back, so a resumed run goes
// on with the training weights and the averages exactly as an uninterrupted run.
// chief_only: false (every rank keeps the averages, so that a sharded InferenceRunner validates
// with them on every rank; the ranks' weights are equal, and so are their averages).
// Errors: std::invalid_argument for a decay outside [0, 1] (construction), a trainer without
// trainable variables (setup_graph), a state whose entries do not fit (load_state, naming the
// entry).
//
// Differences from tensorpack: an addition; tensorpack has no weight-average callback (a
// TensorFlow model adds tf.train.ExponentialMovingAverage ops to its graph and restores the
// averages by name for evaluation). Here the averages are swapped into the module in place.
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

// RAII: while it lives, the tracked tensors of the module hold the averages (and the shadows
// the training values); its destructor swaps them back, also when an exception leaves the
// scope. Guards nest: only the outermost swaps. The exchange is exact (copies, no arithmetic)
// and happens under NoGradGuard; it allocates one temporary per tensor, for the moment of its
// exchange.
//
//   { SwapInEMAWeights swap(*ema);  torch::save(net, "net-ema.pt"); }
//
// Errors: std::logic_error when the WeightEMA is not set up yet (before setup_graph).
class SwapInEMAWeights {
 public:
  explicit SwapInEMAWeights(WeightEMA& ema);
  ~SwapInEMAWeights();
  SwapInEMAWeights(const SwapInEMAWeights&) = delete;
  SwapInEMAWeights& operator=(const SwapInEMAWeights&) = delete;

 private:
  WeightEMA& ema_;
};

// Runs another callback with the averages of `ema` swapped in: around its trigger_epoch,
// trigger and after_train (a SwapInEMAWeights each), so that an InferenceRunner validates the
// averaged weights and a ModelSaver saves them (and with them MinSaver/MaxSaver's best copy).
// Every other hook is forwarded unchanged, without a swap. name(): `WithEMAWeights-<inner name>`.
// Its flags (chief_only, runs_on_every_rank) are the inner callback's.
//
//   std::make_shared<WithEMAWeights>(ema, std::make_shared<InferenceRunner>(val, infs))
//
// `ema` must be registered with the same trainer (anywhere in the list).
// Errors: std::invalid_argument for a null `ema` or callback (construction); for a MinSaver or
// MaxSaver (they copy ModelSaver's checkpoint and read no weights: wrap the ModelSaver); and at
// before_train when `ema` is not among the trainer's callbacks.
//
// Differences from tensorpack: an addition (see WeightEMA).
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
