// Towers: the model code that a trainer runs (tensorpack's tower function and TowerContext). A
// tower function computes the cost from one batch and, while it runs, tells trainpack about the
// tensors it computes through its TowerContext (docs/models.md, "The tower function and its
// TowerContext", shows one):
//
// - `output(name, t)`: a named tensor: what callbacks fetch by name in a training step, what a
//   predictor returns. A name that a callback asks for and the tower never outputs is an error at
//   the first step, listing the names that exist.
// - `summary_scalar/histogram/image(name, t)`: recorded for this step; MergeAllSummaries turns
//   them into monitor data on the steps it chooses (the only host sync), tagged `<name>-summary`,
//   `<name>-histogram` and `<name>` as tensorpack's add_tensor_summary tags them.
// - `add_moving_summary(name, t, decay)`: a scalar whose exponential moving average (decay 0.95,
//   zero-debiased) MovingAverageSummary updates after every step on the tensor's device without a
//   host sync; MergeAllSummaries reads it as `<name>-summary`, which monitors see as `<name>`.
// - `add_update_op(name, op)`: a closure run after the step by RunUpdateOps (tensorpack's
//   UPDATE_OPS); BatchNorm in LibTorch updates its statistics in forward and needs none.
// - `is_training()`: false when the tower runs for inference (predictors, InferenceRunner).
//
// Only the main training tower records summaries, moving summaries and update ops; inference
// towers ignore them, as tensorpack's predict towers do. Everything recorded is held only until
// the end of the step (the trainer clears it), so no tensor outlives its step's autograd graph.
//
// Differences from tensorpack: the tower function runs at every step (LibTorch is eager), so the
// set of summaries is known after the first step; a summary is computed by the tower whether or
// not it is materialised that step.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "trainpack/core/tower_registry.h"  // TowerRegistry
#include "trainpack/input/input_desc.h"     // InputDesc, InputSignature, check_inputs

namespace torch {
namespace nn {
class Module;
}  // namespace nn
}  // namespace torch

namespace trainpack {

class StepContext;

// The context a tower function runs in. Built by the trainer (or a predictor, or an inference
// runner) around each call of the tower function.
class TowerContext {
 public:
  // `step` (may be null): where outputs are published for callbacks to fetch.
  // `registry` (may be null): where summaries go; null for every tower but the main training one.
  TowerContext(std::string name, bool is_training, StepContext* step = nullptr,
               TowerRegistry* registry = nullptr);

  // "tower0" for the training tower, "tower-pred-cpu" / "tower-pred-0" for predictors.
  const std::string& name() const { return name_; }
  bool is_training() const { return is_training_; }
  // True for the tower whose summaries are recorded (tensorpack's is_main_training_tower).
  bool is_main_training_tower() const { return is_training_ && registry_ != nullptr; }

  // Publishes a named tensor (see the top of this file).
  void output(std::string_view name, const at::Tensor& tensor);

  void summary_scalar(std::string_view name, const at::Tensor& tensor);
  void summary_histogram(std::string_view name, const at::Tensor& tensor);
  // `tensor`: an image or a batch of images (HW, HWC or NHWC), as Monitors::put_image takes it.
  void summary_image(std::string_view name, const at::Tensor& tensor, int64_t max_outputs = 3);
  void add_moving_summary(std::string_view name, const at::Tensor& tensor, double decay = 0.95);
  void add_update_op(std::string_view name, std::function<void()> op);

  // The module this tower runs: the training module, or its replica in a predictor or an
  // inference tower on another device. A tower function that may run on replicas takes its
  // module from here (`ctx.module_as<NetImpl>()`) instead of capturing it. Throws
  // std::logic_error when the context has no module.
  torch::nn::Module& module() const;
  template <typename ModuleImpl>
  ModuleImpl& module_as() const {
    auto* m = dynamic_cast<ModuleImpl*>(&module());
    if (m == nullptr) throw_module_type_mismatch();
    return *m;
  }
  // Set by whoever builds the context.
  void set_module(torch::nn::Module* module) { module_ = module; }
  // Whether the tower function asked for module() (replicas require it).
  bool module_used() const { return module_used_; }

  // For predictors and inference runners: outputs whose name is in `names` are stored in
  // `(*out)[i]` (resized to names.size()). Both must outlive the tower call.
  void collect_outputs(const std::vector<std::string>* names, std::vector<at::Tensor>* out);
  // After the tower function ran in inference (predictors, inference runners): outputs the
  // returned cost as "cost" unless the tower output a "cost" of its own, as a training step
  // publishes it. So ScalarStats("cost") and a predictor asking for "cost" see what training
  // calls the cost. An undefined `cost` outputs nothing.
  void output_returned_cost(const at::Tensor& cost);
  // After the tower function ran in collect mode: throws std::invalid_argument
  // "<who>: the tower did not output '<name>'<why>; it outputs: a, b" for the first collected
  // name it did not output.
  void check_collected_outputs(const std::string& who, const std::string& why = "") const;
  // After the tower function ran on a replica: throws std::invalid_argument naming `who` and
  // `device` when the tower did not take its module from module()/module_as().
  void check_module_used(const std::string& who, const std::string& device) const;

  // Every name given to output() during this call, for error messages (tracked only when the
  // context has no StepContext; a training step's StepContext tracks its own).
  const std::set<std::string, std::less<>>& output_names() const { return output_names_; }

 private:
  std::string name_;
  bool is_training_;
  StepContext* step_;
  TowerRegistry* registry_;
  const std::vector<std::string>* collect_names_ = nullptr;
  std::vector<at::Tensor>* collected_ = nullptr;
  std::set<std::string, std::less<>> output_names_;
  torch::nn::Module* module_ = nullptr;
  mutable bool module_used_ = false;

  [[noreturn]] void throw_module_type_mismatch() const;
};

// A tower function: computes the cost of one batch (the inputs in the order of the signature).
// In inference towers (predictors, InferenceRunner) a defined returned tensor is the output
// "cost" unless the tower output one itself; it may be undefined there.
using TowerFunc = std::function<at::Tensor(TowerContext&, const std::vector<at::Tensor>&)>;

}  // namespace trainpack
