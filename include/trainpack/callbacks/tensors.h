// Callbacks that look at tensors of the training step or of the graph (tensorpack's
// ProcessTensors, DumpTensors, DumpTensorAsImage and CheckNumerics from callbacks/graph.py, and
// TensorPrinter from callbacks/steps.py). `trainpack/callbacks/graph.h` includes this header, so
// a tensorpack user finds them where tensorpack keeps them.
//
//   callbacks.push_back(std::make_shared<TensorPrinter>(std::vector<std::string>{"cost"}));
//   callbacks.push_back(std::make_shared<DumpTensors>(std::vector<std::string>{"logits"}));
//   callbacks.push_back(std::make_shared<DumpParamAsImage>("conv0/W"));
//   callbacks.push_back(std::make_shared<CheckNumerics>());
//
// "Tensors of the step" are the names the step function publishes (`ctx.publish(name, t)`, see
// core/step_context.h): they are fetched in a hooked run and handed over in after_run of that
// same run. A name the step does not publish stops training at the first step that asks for it,
// with an error that names the callback and lists the names the step publishes.
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

// Fetches the named tensors of the step in every hooked run and calls `fn` with their values,
// in the order of `names`, in after_run of that same run.
//
//   callbacks.push_back(std::make_shared<ProcessTensors>(
//       std::vector<std::string>{"cost", "accuracy"},
//       [](const std::vector<at::Tensor>& v) { record(v[0].item<double>(), v[1]); }));
//
// When: before_run of every hooked run asks for `names` (the request is built once: no
// allocation per step); after_run calls `fn`. In after_run, global_step already counts this
// step (the step counter runs first). The values are the step's own tensors (not copies, still
// on their device, possibly requiring grad): copy what you keep; the callback drops its
// references once `fn` returns.
// chief_only: true.
// Errors: std::invalid_argument at construction for an empty `names`, an empty name or an empty
// `fn`; an exception from `fn` stops training as a CallbackError naming the callback (after_run).
//
// Differences from tensorpack: `fn` receives a vector instead of one positional argument per
// tensor.
class ProcessTensors : public Callback {
 public:
  using Fn = std::function<void(const std::vector<at::Tensor>&)>;
  ProcessTensors(std::vector<std::string> names, Fn fn);

  const std::vector<std::string>& names() const { return args_.fetches(); }

 protected:
  // For subclasses that override process() instead of passing `fn`; `class_name` is used in
  // error messages.
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

// Logs `<name>: <value>` for each of `names`, at every hooked run.
//
//   callbacks.push_back(std::make_shared<TensorPrinter>(std::vector<std::string>{"cost", "lr"}));
//   // cost: 0.693147
//   // logits: [[0.1, -2.5], [3, 0]]
//
// Values are formatted by format_tensor_value (below): a scalar as `%.6g` (`0.693147`, `1e-07`,
// `nan`), integers in full, booleans as True / False; a tensor as nested brackets (`[[1, 2],
// [3, 4]]`), with only the first and last 3 entries of each dimension (and `...` between) when
// it holds more than 1000 values, as numpy summarizes.
// When: every hooked run (a ProcessTensors); reading the values waits for the step's device.
// chief_only: true.
// Errors: as ProcessTensors.
//
// Differences from tensorpack: the values are printed in the format above rather than by numpy's
// str (`[[1. 2.] [3. 4.]]`). No warning at construction: tensorpack's "Using tf.Print in the
// graph is much faster than TensorPrinter!" has no LibTorch counterpart (printing inside the step
// function costs the same device sync).
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

// Writes the named tensors of the step to `<dir>/DumpTensor-<global_step>.npz` at every hooked
// run, one array per name (numpy: `np.load(path)["cost"]`).
//
//   callbacks.push_back(std::make_shared<DumpTensors>(std::vector<std::string>{"logits", "fc/W"}));
//
// When: every hooked run (a ProcessTensors); the file is written in after_run, where global_step
// already counts the step: a fresh run writes DumpTensor-1.npz, DumpTensor-2.npz, ... The keys
// are the given names, in order; values keep their dtype and shape (moved to the CPU). Each file
// is written with write_npz (temporary file, fsync, rename). The file name holds no user string
// (the names are keys inside the file, which may hold '/': `fc/W`).
// chief_only: true.
// Errors (std::invalid_argument at construction): as ProcessTensors; no `dir` and no logger
// directory (call logger::set_logger_dir first, or set DumpTensorsOptions().dir); a name that
// cannot be an npz key (a leading '/', a '..' component, a NUL byte) or a repeated name. Later:
// the directory cannot be created (before_train) or a file cannot be written, or a tensor has a
// dtype npz cannot hold (after_run): training stops with the path or the dtype named.
//
// Differences from tensorpack: `dir` can be given; the directory is created at before_train if
// missing; names are checked at construction; files are replaced atomically.
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
  // File name prefix and monitor tag; unset means the tensor name. The file name takes it through
  // safe_file_name_component (trainpack/utils/file_names.h): '/', '\' and control characters
  // become '_', and so does a leading '.', so a name never leaves the directory or hides a file.
  TORCH_ARG(std::optional<std::string>, prefix);
  // Applied to the value before scaling (e.g. a transpose to HWC, or a slice).
  TORCH_ARG(MapFn, map_func);
  // Pixel = clip(value * scale, 0, 255), truncated to uint8.
  TORCH_ARG(double, scale) = 255;
  // Where the files go; unset means the logger directory, read at construction.
  TORCH_ARG(std::optional<std::string>, dir);
};

// Writes a tensor as PNG images at every trigger (the end of every epoch by default), and puts
// the same images to the monitors.
//
//   callbacks.push_back(std::make_shared<DumpParamAsImage>(
//       "conv0/W", DumpTensorAsImageOptions().prefix("filters").map_func([](const at::Tensor& w) {
//         return w.permute({0, 2, 3, 1});  // [out, in, kh, kw] -> NHWC
//       })));
//
// Where the value comes from (decided at before_train): a trainable variable of the graph with
// that name (graph().trainable_variables(), e.g. a module parameter) is read at trigger time; any
// other name is a tensor the step publishes, fetched in the hooked runs of the last step of every
// epoch (local_step == steps_per_epoch - 1) and dumped at the next trigger, which must come before
// another step runs (the epoch's end).
//
// At trigger: value -> map_func -> clip(value * scale, 0, 255) -> uint8 (NaN becomes 0, +inf
// 255, -inf 0), then by shape: [H, W] one grey image; [H, W, C] with C in 1, 3, 4 one image
// (grey, RGB, RGBA); [N, H, W] with another last dimension N grey images (tensorpack writes such
// a value as one file: docs/tensorpack-differences.md #6); [N, H, W, C] with C in 1, 3, 4 N
// images. Image k is written to `<dir>/<prefix>-ep<epoch:03d>-<k>.png` (k from 0, also for a
// single image: `filters-ep003-0.png`; the prefix is made a safe file name component, see
// `prefix`: `conv/W` gives `conv_W-ep001-0.png`), then `monitors().put_image(prefix, images)`
// receives the same uint8 NHWC images (tags `prefix`, or `prefix/<k>` for several).
// chief_only: true.
// Errors: std::invalid_argument at construction for an empty tensor name or prefix, a scale
// that is not finite, no `dir` and no logger directory. At trigger (training stops, naming the
// callback): a value of another shape (the message names the tensor and its shape); trigger()
// called when no value was fetched since the last step (a step tensor outside an epoch's end,
// e.g. under PeriodicTrigger(every_k_steps) or before training); a file that cannot be written.
//
// Differences from tensorpack (docs/tensorpack-differences.md #6, fixed): every file name carries
// its index (tensorpack: `x-ep003.png`, `x-ep003-1.png`, ...); the monitors receive the scaled,
// clipped uint8 images (tensorpack puts the unscaled value); channels are written as RGB
// (tensorpack writes with OpenCV, which reads them as BGR). A step tensor is fetched from the
// epoch's last step instead of being evaluated by a separate run at trigger time; a 4-D value with
// C not in 1, 3, 4 is an error.
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

// Checks that every trainable variable of the graph (and, with run_step, the named tensors of the
// step) holds only finite values; stops training otherwise.
//
//   callbacks.push_back(std::make_shared<CheckNumerics>());
//   callbacks.push_back(std::make_shared<CheckNumerics>(
//       CheckNumericsOptions().run_step(true).names({"cost"})));
//
// When: before_train (always, as tensorpack's RunOp with run_before), at every trigger if
// run_as_trigger, and in after_run of every hooked run if run_step (variables as updated by the
// step, then `names`). Each tensor costs one isfinite().all() and one device sync.
// Logs: WRN `CheckNumerics: the graph has no trainable variables; there is nothing to check.` at
// before_train when there is nothing to check.
// chief_only: true.
// Errors: a non-finite value throws std::runtime_error
// `CheckNumerics['w']: Tensor had NaN values (2 NaN, 0 Inf of 6 values) in trainable variable
// 'w' at global_step 3` (`Tensor had Inf values` when there is no NaN; `in step tensor 'cost'`
// for a name), which stops training as a CallbackError naming CheckNumerics and the hook.
// std::invalid_argument at construction for an empty name, or names without run_step.
//
// Differences from tensorpack: none in timing (it also runs before training:
// docs/tensorpack-differences.md #13); the `names` option is trainpack's.
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
