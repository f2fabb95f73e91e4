// Hooks (tensorpack's callbacks/hooks.py): StepHook, code that runs around the training steps
// (TensorFlow's SessionRunHook); the adapters HookToCallback and CallbackToHook; the debugger hook
// TensorWatchHook and its callback form LocalDebugHook (tensorpack's TFLocalCLIDebugHook).
// See docs/looking-inside.md, "Hooks and the debugger hook".
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/arg.h>

#include "trainpack/callbacks/console.h"
#include "trainpack/core/callback.h"

namespace trainpack {

class StepHook;
using StepHookPtr = std::shared_ptr<StepHook>;

// tensorpack's (TensorFlow's) SessionRunHook. Every method has an empty default; override the
// ones you need and register the hook with HookToCallback, which calls begin() at setup_graph
// (outside any name scope, before the graph is finalized), after_create_session(trainer) at
// before_train, before_run/after_run around every hooked run (after_run gets the tensors that
// before_run's RunArgs asked for), and end(trainer) at after_train (also after an error).
// Differences from tensorpack: after_create_session and end receive the trainer instead of a
// session and a coordinator; begin() receives nothing (as in TensorFlow).
class StepHook {
 public:
  // The methods, for overrides().
  enum class Method : uint8_t { kBegin, kAfterCreateSession, kBeforeRun, kAfterRun, kEnd };

  StepHook() = default;
  virtual ~StepHook() = default;
  StepHook(const StepHook&) = delete;
  StepHook& operator=(const StepHook&) = delete;

  virtual void begin() {}
  virtual void after_create_session(Trainer& /*trainer*/) {}
  virtual RunArgs before_run(const StepContext& /*ctx*/) { return RunArgs(); }
  virtual void after_run(const StepContext& /*ctx*/, const RunValues& /*values*/) {}
  virtual void end(Trainer& /*trainer*/) {}

  // What logs print for this hook: the class name.
  virtual std::string name() const;

  // True if calling `method` can do anything: this object's class overrides it (found from the
  // vtable, as Callback::overrides does). HookToCallback asks it once, at setup, so that the
  // trainer skips the hooks a StepHook leaves empty. Adapters answer for what they wrap.
  virtual bool overrides(Method method) const;
};

// tensorpack's HookToCallback: a StepHook used as a callback (see StepHook for when each method
// is called). The trainer visits it only in the hooks whose StepHook method the hook overrides
// (asked once at setup); a subclass that overrides more callback hooks is dispatched those too.
// name(): `HookToCallback-<hook name>`. chief_only: false. Errors: std::invalid_argument
// `HookToCallback: hook is null` at construction; an exception from a hook's method stops
// training as a CallbackError naming this adapter.
class HookToCallback : public Callback {
 public:
  explicit HookToCallback(StepHookPtr hook) : HookToCallback(std::move(hook), "HookToCallback") {}

  const StepHookPtr& hook() const { return hook_; }
  std::string name() const override { return "HookToCallback-" + hook_->name(); }
  bool overrides(Hook hook) const override;

 protected:
  // For subclasses: a null `hook` is an error naming `class_name`.
  HookToCallback(StepHookPtr hook, const char* class_name);

  void _setup_graph() override { hook_->begin(); }
  void _before_train() override { hook_->after_create_session(trainer()); }
  RunArgs _before_run(const StepContext& ctx) override { return hook_->before_run(ctx); }
  void _after_run(const StepContext& ctx, const RunValues& values) override {
    hook_->after_run(ctx, values);
  }
  void _after_train() override { hook_->end(trainer()); }

  StepHookPtr hook_;
};

// tensorpack's CallbackToHook: a callback seen as a StepHook. Only before_run and after_run are
// forwarded, to the callback's public methods; its other hooks (setup_graph included) are never
// called through it, so a callback that uses trainer() must also be registered with the trainer.
// name(): `CallbackToHook-<callback name>`. Errors: std::invalid_argument for a null callback.
class CallbackToHook : public StepHook {
 public:
  explicit CallbackToHook(CallbackPtr callback);

  const CallbackPtr& callback() const { return callback_; }
  RunArgs before_run(const StepContext& ctx) override { return callback_->before_run(ctx); }
  void after_run(const StepContext& ctx, const RunValues& values) override {
    callback_->after_run(ctx, values);
  }
  std::string name() const override { return "CallbackToHook-" + callback_->name(); }
  bool overrides(Method method) const override;

 private:
  CallbackPtr callback_;
};

// ---- the debugger hook ----

// A tensor filter: true when the tensor `name` (of the step) is what the debugger looks for.
using TensorFilter = std::function<bool(const std::string& name, const at::Tensor& tensor)>;

// The built-in filter (tfdbg's has_inf_or_nan): true when a floating-point or complex tensor holds
// a NaN or an infinity; false for integer and boolean tensors. Reads one bool from the tensor's
// device (a sync).
bool has_inf_or_nan(const std::string& name, const at::Tensor& tensor);

// What the debugger does when a filter fires, after logging and writing the npz.
enum class DebugAction {
  kConsoleIfTerminal,  // the training console when stdin is a terminal; else as kStop
  kStop,               // stop training at this step's boundary, naming the tensor and the file
  kLogAndContinue,     // nothing more: training goes on
};

struct TensorWatchHookOptions {
  // The tensors to watch, by the names the step publishes; empty: every tensor the step
  // publishes (learned from the first hooked run, see TensorWatchHook).
  TORCH_ARG(std::vector<std::string>, names);
  TORCH_ARG(DebugAction, action) = DebugAction::kConsoleIfTerminal;
  // Whether the built-in has_inf_or_nan filter is installed.
  TORCH_ARG(bool, inf_or_nan_filter) = true;
  // At most this many npz files are written (then hits are only logged, with one warning); it
  // matters with kLogAndContinue, where a NaN can come back at every step. >= 1.
  TORCH_ARG(int64_t, max_dumps) = 10;
  // Where `debug-step-<global_step>.npz` goes; unset: the logger directory, read at construction.
  TORCH_ARG(std::optional<std::string>, dir);
  // Whether a person can answer the console (kConsoleIfTerminal); unset: stdin_is_terminal(),
  // asked at each hit.
  TORCH_ARG(std::optional<bool>, terminal);
  // The console's streams and prompt (callbacks/console.h).
  TORCH_ARG(ConsoleOptions, console);
};
using LocalDebugHookOptions = TensorWatchHookOptions;

// Watches the tensors the step publishes and runs filters on them after every hooked run (the
// built-in has_inf_or_nan first, then the user's in the order added). Use it through
// LocalDebugHook.
// When: before_run asks for the watched names. Without `names`, the first hooked run at each
// position in a step learns the names published in it (logged once) and is not watched itself.
// On a hit (the first filter that fires for a tensor): one WRN line per hit naming the tensor,
// the filter, global_step (counting this step), shape, dtype and NaN/Inf/finite statistics; the
// run's watched tensors written to `<dir>/debug-step-<global_step>.npz` (atomic; at most
// max_dumps files); then by `action`: kLogAndContinue, nothing more; kStop, or kConsoleIfTerminal
// without a terminal, ERR `TensorWatchHook: <reason>. Stopping training.` and a stop request at
// this step's boundary (the step's after_run and trigger_step, then every after_train, run);
// kConsoleIfTerminal on a terminal: act(trainer), called between steps, opens the console.
// Cost: each filter reads from the device (has_inf_or_nan: one sync per watched floating tensor).
// Errors: std::invalid_argument at construction for an empty or repeated name, max_dumps < 1, no
// `dir` and no logger directory; in add_tensor_filter for an empty or taken name or an empty
// function. A name the step does not publish stops training at the first step. A file that cannot
// be written is logged (ERR) and reported as a failed write; the action still follows.
// See docs/looking-inside.md, "The debugger hook"; docs/tensorpack-differences.md (tfdbg).
class TensorWatchHook : public StepHook {
 public:
  explicit TensorWatchHook(TensorWatchHookOptions options = TensorWatchHookOptions());

  // Adds a filter run after the built-in one (tfdbg's add_tensor_filter). See the errors above.
  void add_tensor_filter(const std::string& filter_name, TensorFilter filter);

  // Opens the console for the last hit, if one waits for it (kConsoleIfTerminal on a terminal).
  // Call it between steps, on the training thread.
  void act(Trainer& trainer);
  // Whether a hit waits for act() (the console).
  bool action_pending() const { return pending_; }

  const TensorWatchHookOptions& options() const { return options_; }
  const std::string& dir() const { return dir_; }
  // The npz files written so far, oldest first.
  const std::vector<std::string>& dumps() const { return dumps_; }

  void after_create_session(Trainer& trainer) override;
  RunArgs before_run(const StepContext& ctx) override;
  void after_run(const StepContext& ctx, const RunValues& values) override;

 private:
  struct Filter {
    std::string name;
    TensorFilter fn;
  };
  // Learns the names published by the run at `position_` (the "every tensor" mode).
  void learn_names(const StepContext& ctx);
  // Writes the npz of this run; returns its path, or "" (with the reason in `why_not`).
  std::string dump(Trainer& trainer, const RunValues& values, std::string& why_not);

  TensorWatchHookOptions options_;
  std::string dir_;
  std::vector<Filter> filters_;
  RunArgs fixed_;                   // `names`, when given (built once)
  std::vector<RunArgs> learned_;    // the "every tensor" mode: one per position in a step
  std::vector<std::string> known_;  // every name learned so far
  size_t position_ = 0;             // the position of the current run in its step
  int64_t last_epoch_ = -1, last_local_step_ = -1;
  std::vector<std::pair<size_t, size_t>> hits_;  // (value index, filter index), reused
  std::vector<std::string> dumps_;
  bool dumps_exhausted_logged_ = false;
  bool pending_ = false;
  std::string reason_;
};

// tensorpack's TFLocalCLIDebugHook: HookToCallback around a TensorWatchHook that calls
// TensorWatchHook::act at trigger_step, so that on a terminal the training console opens between
// the steps (a checkpoint saved there resumes after this step). Without a terminal, or with
// kStop, training ends at the boundary of the step with the hit. Writes
// `<dir>/debug-step-<global_step>.npz` on a hit. chief_only: true. Errors: as TensorWatchHook.
class LocalDebugHook : public HookToCallback {
 public:
  explicit LocalDebugHook(LocalDebugHookOptions options = LocalDebugHookOptions());

  // Forwarded to the TensorWatchHook.
  void add_tensor_filter(const std::string& filter_name, TensorFilter filter) {
    watch().add_tensor_filter(filter_name, std::move(filter));
  }
  TensorWatchHook& watch() const { return static_cast<TensorWatchHook&>(*hook_); }
  std::string name() const override { return "LocalDebugHook"; }

 protected:
  void _trigger_step() override { watch().act(trainer()); }
};

}  // namespace trainpack
