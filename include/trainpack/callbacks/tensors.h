// Callbacks that look at tensors of the training step or of the graph (tensorpack's
// ProcessTensors, DumpTensors, DumpTensorAsImage and CheckNumerics from callbacks/graph.py, and
// TensorPrinter from callbacks/steps.py; callbacks/graph.h includes this header). "Tensors of the
// step" are the names the step function publishes (`ctx.publish`, core/step_context.h), fetched
// in a hooked run and handed over in after_run of that run. A name the step does not publish
// stops training at the first step that asks for it, naming the callback and the names published.
// See docs/looking-inside.md, "Tensors of the step".
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/arg.h>

#include "trainpack/core/callback.h"

namespace trainpack {

// tensorpack's ProcessTensors: fetches the named tensors of the step in every hooked run and calls
// `fn` with their values, in the order of `names`, in after_run of that run (where global_step
// already counts the step). The values are the step's own tensors (on their device, possibly
// requiring grad): copy what you keep. The request is built once: no allocation per step.
// chief_only: true. Errors: std::invalid_argument at construction for an empty `names`, an empty
// name or an empty `fn`; an exception from `fn` stops training as a CallbackError.
// Differences from tensorpack: `fn` receives a vector, not one argument per tensor.
class ProcessTensors : public Callback {
 public:
  using Fn = std::function<void(const std::vector<at::Tensor>&)>;
  ProcessTensors(std::vector<std::string> names, Fn fn);

  const std::vector<std::string>& names() const { return args_.fetches(); }

 protected:
  // For subclasses that override process() instead of passing `fn` (`class_name`: for errors).
  ProcessTensors(std::vector<std::string> names, const char* class_name);

  // Called in after_run with the values of `names()` from this run. Default: calls `fn`.
  virtual void process(const std::vector<at::Tensor>& values);

  RunArgs _before_run(const StepContext& ctx) override;
  void _after_run(const StepContext& ctx, const RunValues& values) override;

 private:
  RunArgs args_;                    // built once; before_run returns a reference to it
  std::vector<at::Tensor> values_;  // one slot per name, reused every run
  Fn fn_;
};

// tensorpack's TensorPrinter: logs `<name>: <value>` for each of `names` at every hooked run
// (reading a value waits for the step's device), formatted by format_tensor_value: a scalar as
// `%.6g`, integers in full, booleans as True/False, a tensor as nested brackets, summarized as
// numpy does beyond 1000 values. chief_only: true. Errors: as ProcessTensors.
// Differences from tensorpack: this format, not numpy's str; no "use tf.Print" warning.
class TensorPrinter : public ProcessTensors {
 public:
  explicit TensorPrinter(std::vector<std::string> names);

 protected:
  void process(const std::vector<at::Tensor>& values) override;
};

// The text TensorPrinter logs for `tensor` (see TensorPrinter). An undefined tensor gives
// `<undefined>`; a complex or other non-real dtype gives `<tensor of dtype D and shape [..]>`.
std::string format_tensor_value(const at::Tensor& tensor);

struct DumpTensorsOptions {
  // Where the files go; unset means the logger directory, read at construction.
  TORCH_ARG(std::optional<std::string>, dir);
};

// tensorpack's DumpTensors: writes the named tensors of the step to
// `<dir>/DumpTensor-<global_step>.npz` at every hooked run (in after_run: a fresh run writes
// DumpTensor-1.npz first), one array per name, keyed by the name, with its dtype and shape, on
// the CPU; atomically (write_npz). The directory is created at before_train. chief_only: true.
// Errors: std::invalid_argument at construction as ProcessTensors, and for no `dir` and no logger
// directory, a repeated name, or one that cannot be an npz key (a leading '/', a '..' component,
// a NUL byte). A directory that cannot be created (before_train), a file that cannot be written
// or a dtype npz cannot hold (after_run) stops training, naming the path or the dtype.
class DumpTensors : public ProcessTensors {
 public:
  explicit DumpTensors(std::vector<std::string> names,
                       DumpTensorsOptions options = DumpTensorsOptions());

  const std::string& dir() const { return dir_; }

 protected:
  void _before_train() override;
  void process(const std::vector<at::Tensor>& values) override;

 private:
  std::string dir_;
  std::vector<std::pair<std::string, at::Tensor>> arrays_;  // reused every run
};
using DumpTensor = DumpTensors;

struct DumpTensorAsImageOptions {
  using MapFn = std::function<at::Tensor(const at::Tensor&)>;
  // File name prefix and monitor tag; unset means the tensor name. In the file name it is made a
  // safe file name component (utils/file_names.h): no '/', '\', control character or leading '.'.
  TORCH_ARG(std::optional<std::string>, prefix);
  // Applied to the value before scaling (e.g. a transpose to HWC, or a slice).
  TORCH_ARG(MapFn, map_func);
  // Pixel = clip(value * scale, 0, 255), truncated to uint8.
  TORCH_ARG(double, scale) = 255;
  // Where the files go; unset means the logger directory, read at construction.
  TORCH_ARG(std::optional<std::string>, dir);
};

// tensorpack's DumpTensorAsImage (DumpParamAsImage): at every trigger (every epoch end by
// default) writes a tensor as PNG images and puts the same images to the monitors.
// The value: a trainable variable of that name (graph().trainable_variables()), read at trigger
// time; otherwise a tensor the step publishes, fetched at the last step of every epoch and dumped
// at the next trigger, which must come before another step runs. Decided at before_train.
// At trigger: map_func, then clip(value * scale, 0, 255) as uint8 (NaN becomes 0); by shape [H,
// W], [H, W, C] (C in 1, 3, 4), [N, H, W] (N grey images) or [N, H, W, C]; image k goes to
// `<dir>/<prefix>-ep<epoch:03d>-<k>.png` (k from 0), and monitors().put_image(prefix, images)
// gets the same uint8 NHWC images. chief_only: true.
// Errors: std::invalid_argument at construction for an empty tensor name or prefix, a scale that
// is not finite, no `dir` and no logger directory. At trigger, stopping training: another shape,
// no value fetched since the last step (a step tensor outside an epoch's end), a write failure.
// See docs/looking-inside.md, "Tensors of the step", and docs/tensorpack-differences.md #6.
class DumpTensorAsImage : public Callback {
 public:
  explicit DumpTensorAsImage(std::string tensor_name,
                             DumpTensorAsImageOptions options = DumpTensorAsImageOptions());

  const std::string& tensor_name() const { return tensor_name_; }
  const std::string& prefix() const { return prefix_; }

 protected:
  void _before_train() override;
  RunArgs _before_run(const StepContext& ctx) override;
  void _after_run(const StepContext& ctx, const RunValues& values) override;
  void _trigger() override;

 private:
  enum class Source { kUnresolved, kVariable, kStep };

  std::string tensor_name_;
  DumpTensorAsImageOptions options_;
  std::string prefix_;
  std::string file_prefix_;
  std::string dir_;
  Source source_ = Source::kUnresolved;
  at::Tensor variable_;      // Source::kVariable
  RunArgs fetch_;            // Source::kStep: built once
  at::Tensor fetched_;       // the value fetched in the last step of the epoch
  int64_t fetched_at_ = -1;  // global_step seen in that after_run
};
using DumpParamAsImage = DumpTensorAsImage;

struct CheckNumericsOptions {
  // Check at every trigger (every epoch end by default).
  TORCH_ARG(bool, run_as_trigger) = true;
  // Check after every hooked run (the variables, and `names`).
  TORCH_ARG(bool, run_step) = false;
  // Tensors the step publishes, checked after every hooked run; needs run_step(true).
  TORCH_ARG(std::vector<std::string>, names);
};

// tensorpack's CheckNumerics: checks that every trainable variable of the graph (and, with
// run_step, the named tensors of the step) holds only finite values; stops training otherwise.
// When: before_train (always, as in tensorpack), every trigger with run_as_trigger, and after_run
// of every hooked run with run_step. One isfinite().all() and one device sync per tensor. WRN at
// before_train when the graph has no trainable variables. chief_only: true.
// Errors: std::runtime_error `CheckNumerics['w']: Tensor had NaN values (2 NaN, 0 Inf of 6
// values) in trainable variable 'w' at global_step 3`, which stops training as a CallbackError;
// std::invalid_argument at construction for an empty name, or names without run_step.
class CheckNumerics : public Callback {
 public:
  explicit CheckNumerics(CheckNumericsOptions options = CheckNumericsOptions());

  const CheckNumericsOptions& options() const { return options_; }
  // Without run_step, before_run / after_run are not dispatched at all.
  bool overrides(Hook hook) const override;

 protected:
  void _before_train() override;
  RunArgs _before_run(const StepContext& ctx) override;
  void _after_run(const StepContext& ctx, const RunValues& values) override;
  void _trigger() override;

 private:
  void check_variables() const;
  void check(const at::Tensor& t, const std::string& name, const char* what) const;

  CheckNumericsOptions options_;
  RunArgs fetch_;  // built once
};

}  // namespace trainpack
