#include "trainpack/callbacks/weight_ema.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/GradMode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>
#include <utility>

#include "trainpack/callbacks/saver.h"
#include "trainpack/core/callback_state.h"
#include "trainpack/core/graph.h"
#include "trainpack/core/trainer.h"

namespace trainpack {

namespace {
constexpr const char* kShadowPrefix = "shadow/";
}  // namespace

WeightEMA::WeightEMA(double decay, WeightEMAOptions options)
    : decay_(decay), options_(std::move(options)) {
  if (!(decay >= 0 && decay <= 1)) {
    throw std::invalid_argument(fmt::format(
        "WeightEMA: decay must be in [0, 1] (the weight of the old average; 0.999 is usual), "
        "got {}",
        decay));
  }
  set_chief_only(false);
}

void WeightEMA::_setup_graph() {
  tracked_.clear();
  shadows_.clear();
  c10::NoGradGuard no_grad;
  for (const auto& [name, tensor] : graph().trainable_variables()) {
    tracked_.push_back(tensor);
    shadows_.emplace_back(name, tensor.detach().clone());
  }
  if (options_.buffers()) {
    for (const auto& [module_name, module] : graph().modules()) {
      for (const auto& b : module->named_buffers(/*recurse=*/true)) {
        if (!b.value().defined() || !b.value().is_floating_point()) continue;
        const std::string entry = module_name.empty() ? b.key() : module_name + "/" + b.key();
        tracked_.push_back(b.value());
        shadows_.emplace_back(entry, b.value().detach().clone());
      }
    }
  }
  if (shadows_.empty() || graph().trainable_variables().empty()) {
    throw std::invalid_argument(
        "WeightEMA: the trainer has no trainable variables to average (Graph::trainable_variables "
        "is empty); a SingleCostTrainer registers its module's parameters that require a "
        "gradient, another trainer must call graph().add_trainable_variable");
  }
}

void WeightEMA::_before_train() {
  if (loaded_) return;  // the shadows came from the checkpoint
  c10::NoGradGuard no_grad;
  for (size_t i = 0; i < tracked_.size(); ++i) shadows_[i].second.copy_(tracked_[i]);
  num_updates_ = 0;
}

void WeightEMA::_trigger_step() {
  double d = decay_;
  if (options_.warmup()) {
    const double n = static_cast<double>(num_updates_);
    d = std::min(d, (1 + n) / (10 + n));
  }
  c10::NoGradGuard no_grad;
  // mul_ + add_ rather than lerp_ (one call): LibTorch 1.13's CPU lerp_ measured 2.6x slower
  // (bench/weight_ema.cpp, BENCHMARKS.md).
  for (size_t i = 0; i < tracked_.size(); ++i) {
    shadows_[i].second.mul_(d).add_(tracked_[i], 1 - d);
  }
  ++num_updates_;
}

void WeightEMA::exchange() {
  c10::NoGradGuard no_grad;
  for (size_t i = 0; i < tracked_.size(); ++i) {
    at::Tensor& shadow = shadows_[i].second;
    const at::Tensor value = tracked_[i].clone();
    tracked_[i].copy_(shadow);
    shadow.copy_(value);
  }
}

CallbackState WeightEMA::state() const {
  CallbackState s;
  s["num_updates"] = state_scalar(num_updates_);
  s["swapped"] = state_scalar(static_cast<int64_t>(swapped() ? 1 : 0));
  for (const auto& [name, shadow] : shadows_) s[kShadowPrefix + name] = shadow.detach();
  return s;
}

void WeightEMA::load_state(const CallbackState& state) {
  const std::string who = name();
  if (!is_set_up()) {
    throw std::logic_error(
        "WeightEMA::load_state: call it after setup_graph (the shadows are allocated there)");
  }
  std::set<std::string> expected{"num_updates", "swapped"};
  for (const auto& [name, shadow] : shadows_) expected.insert(kShadowPrefix + name);
  for (const auto& kv : state) {
    if (!expected.count(kv.first)) {
      throw std::invalid_argument(fmt::format(
          "{}: the saved state has an entry '{}' that this callback does not save (a tensor the "
          "model no longer has, or a different option buffers(); it saves num_updates, swapped "
          "and shadow/<tensor name>)",
          who, kv.first));
    }
  }
  const int64_t updates = state_int(who, state, "num_updates");
  const int64_t swapped = state_int(who, state, "swapped");
  if (updates < 0 || (swapped != 0 && swapped != 1)) {
    throw std::invalid_argument(fmt::format(
        "{}: the saved state entries 'num_updates' (>= 0) and 'swapped' (0 or 1) are {} and {}",
        who, updates, swapped));
  }
  // Check every entry before changing anything.
  std::vector<const at::Tensor*> saved;
  for (const auto& [name, shadow] : shadows_) {
    const std::string key = kShadowPrefix + name;
    const at::Tensor& t = require_state(who, state, key);
    if (t.sizes() != shadow.sizes() || t.scalar_type() != shadow.scalar_type()) {
      throw std::invalid_argument(fmt::format(
          "{}: the saved state entry '{}' is a {} tensor of shape {}, but the model's tensor is "
          "a {} tensor of shape {}",
          who, key, c10::toString(t.scalar_type()), fmt::join(t.sizes(), "x"),
          c10::toString(shadow.scalar_type()), fmt::join(shadow.sizes(), "x")));
    }
    saved.push_back(&t);
  }
  c10::NoGradGuard no_grad;
  for (size_t i = 0; i < shadows_.size(); ++i) {
    if (swapped == 1) {
      // The model entries (restored into the module) are the averages; the saved shadows are
      // the training values.
      shadows_[i].second.copy_(tracked_[i]);
      tracked_[i].copy_(*saved[i]);
    } else {
      shadows_[i].second.copy_(*saved[i]);
    }
  }
  num_updates_ = updates;
  loaded_ = true;
}

SwapInEMAWeights::SwapInEMAWeights(WeightEMA& ema) : ema_(ema) {
  if (!ema_.is_set_up()) {
    throw std::logic_error(
        "SwapInEMAWeights: the WeightEMA is not set up (register it with the trainer; the "
        "averages exist from its setup_graph on)");
  }
  if (ema_.swap_depth_++ == 0) ema_.exchange();
}

SwapInEMAWeights::~SwapInEMAWeights() {
  if (--ema_.swap_depth_ == 0) ema_.exchange();
}

WithEMAWeights::WithEMAWeights(std::shared_ptr<WeightEMA> ema, CallbackPtr callback)
    : ProxyCallback(std::move(callback), "WithEMAWeights"), ema_(std::move(ema)) {
  if (!ema_) throw std::invalid_argument("WithEMAWeights: ema is null");
  if (dynamic_cast<const MinSaver*>(callback_.get()) != nullptr) {
    throw std::invalid_argument(fmt::format(
        "WithEMAWeights: {} copies ModelSaver's checkpoint and reads no weights; wrap the "
        "ModelSaver instead (WithEMAWeights(ema, ModelSaver)), so that the checkpoint it copies "
        "holds the averages",
        callback_->name()));
  }
}

void WithEMAWeights::_before_train() {
  bool registered = false;
  for (const auto& cb : trainer().registered_callbacks()) registered = registered || cb == ema_;
  if (!registered || !ema_->is_set_up()) {
    throw std::invalid_argument(
        "WithEMAWeights: its WeightEMA is not among the trainer's callbacks; register it too "
        "(callbacks = {ema, WithEMAWeights(ema, ...)})");
  }
  callback_->before_train();
}

void WithEMAWeights::_trigger_epoch() {
  SwapInEMAWeights swap(*ema_);
  callback_->trigger_epoch();
}

void WithEMAWeights::_trigger() {
  SwapInEMAWeights swap(*ema_);
  callback_->trigger();
}

void WithEMAWeights::_after_train() {
  if (!ema_->is_set_up()) {
    callback_->after_train();
    return;
  }
  SwapInEMAWeights swap(*ema_);
  callback_->after_train();
}

}  // namespace trainpack
