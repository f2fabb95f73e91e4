// Hooks (tensorpack's callbacks/hooks.py): StepHook, the small interface of code that runs around
// the training steps (TensorFlow's SessionRunHook), the adapters HookToCallback and
// CallbackToHook, and a debugger hook, TensorWatchHook, with its callback form LocalDebugHook
// (in place of tensorpack's TFLocalCLIDebugHook).
//
//   // A hook used as a callback:
//   callbacks.push_back(std::make_shared<HookToCallback>(std::make_shared<MyHook>()));
//   // Stop at the first step whose tensors hold a NaN or an Inf, with the tensors in an npz:
//   callbacks.push_back(std::make_shared<LocalDebugHook>());
//
// Hook by hook, HookToCallback calls:
//   setup_graph     hook.begin()                      (outside any name scope)
//   before_train    hook.after_create_session(trainer)
//   before_run      hook.before_run(ctx)              (its RunArgs are the callback's)
//   after_run       hook.after_run(ctx, values)       (the tensors it asked for, same run)
//   after_train     hook.end(trainer)                 (always, also after an error)
// and nothing else. CallbackToHook forwards only before_run and after_run, to the callback's
// public methods, as tensorpack's does.
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

// Code that runs around the training steps: tensorpack's (TensorFlow's) SessionRunHook. Every
// method has an empty default; override the ones you need and register the hook with
// HookToCallback.
//
//   class CostLogger : public trainpack::StepHook {
//    public:
//     RunArgs before_run(const StepContext&) override { return RunArgs::ref(fetch_); }
//     void after_run(const StepContext&, const RunValues& v) override { log(v["cost"]); }
//    private:
//     RunArgs fetch_{"cost"};
//   };
//
// When (through HookToCallback): begin() at setup_graph, before the graph is finalized;
// after_create_session(trainer) at before_train (state restored, graph finalized);
// before_run/after_run around every hooked run; end(trainer) at after_train.
// Differences from tensorpack: after_create_session and end receive the trainer instead of a
// session and a coordinator; begin() receives nothing (as in TensorFlow): a hook that needs the
// trainer there keeps a reference of its own.
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

// A StepHook used as a callback (see the table at the top of this file).
//
//   callbacks.push_back(std::make_shared<HookToCallback>(std::make_shared<MyHook>()));
//
// Dispatch: the trainer calls the adapter only in the hooks whose StepHook method the hook
// overrides (StepHook::overrides, asked once at setup): a hook with only after_run costs nothing
// in before_run, and one with neither is never visited per step. A subclass of HookToCallback
// that overrides more of the callback's hooks is dispatched those too.
// name(): `HookToCallback-<hook name>`. setup_graph enters no name scope: what begin() adds to the
// graph keeps its own name.
// chief_only: false.
// Errors: std::invalid_argument `HookToCallback: hook is null` at construction. An exception from
// a hook's method stops training as a CallbackError naming this adapter and the callback hook.
// Differences from tensorpack: none in timing; tensorpack calls every hook of the adapter, used
// or not.
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

// A callback seen as a StepHook: before_run and after_run call the callback's public
// before_run/after_run; begin, after_create_session and end do nothing (tensorpack's rule: only
// the step methods are forwarded).
//
//   StepHookPtr hook = std::make_shared<CallbackToHook>(callback);
//
// The callback's other hooks are never called through it, setup_graph included: a callback that
// uses trainer() in before_run/after_run must also be registered (set up) with the trainer.
// name(): `CallbackToHook-<callback name>`. overrides(): before_run/after_run when the callback
// overrides them.
// Errors: std::invalid_argument `CallbackToHook: callback is null` at construction.
// Differences from tensorpack: none.
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

// Watches the tensors the step publishes, runs filters on them after every hooked run, and on a
// hit logs the tensor with its statistics, writes the run's watched tensors to an npz, then opens
// the training console or stops training (DebugAction). Use it through LocalDebugHook.
//
//   auto hook = std::make_shared<TensorWatchHook>(TensorWatchHookOptions().names({"cost"}));
//   hook->add_tensor_filter("too_large", [](const std::string&, const at::Tensor& t) {
//     return t.abs().max().item<double>() > 1e6;
//   });
//
// When: before_run asks for the watched names. With `names` empty, the first hooked run at each
// position in a step (one per step for the built-in trainers) asks for nothing and learns the
// names published in it (logged once at INFO); every later run at that position watches them,
// so the first step is not watched: give `names` to watch it. after_run runs every filter (the
// built-in one first, then the user's in the order added) on every watched tensor of the run; the
// first filter that fires for a tensor is a hit. On hits:
//   Logs (WRN, one line per hit): `TensorWatchHook: tensor 'cost' failed has_inf_or_nan at
//   global_step=3 (epoch 2, local step 0): shape [], dtype float32, 1 values: 1 NaN, 0 Inf;
//   finite: none` (or `finite: min -1, max 2, mean 0.5`). global_step counts this step, as every
//   callback sees it in after_run (the first step is 1).
//   Writes: `<dir>/debug-step-<global_step>.npz` (numpy.load opens it): every watched tensor of
//   the run under its name, on the CPU, with its dtype and shape (bfloat16 as float32; a dtype npz
//   cannot hold, such as complex, is left out and named in the log). Atomic (write_npz).
//   Then by `action`: kLogAndContinue nothing more; kStop, or kConsoleIfTerminal without a
//   terminal: ERR `TensorWatchHook: <reason>. Stopping training.` (the reason names the tensor,
//   the filter, the step and the npz file) and a stop request (StepContext::request_stop):
//   training ends at this step's boundary, after every callback's after_run and trigger_step of
//   the step, then every after_train (on every rank under data-parallel training);
//   kConsoleIfTerminal on a terminal: the console waits for act(trainer), which is called between
//   steps (LocalDebugHook calls it at trigger_step) and opens the training console with the
//   reason; its `stop` requests the stop as above.
// Cost: the fetches keep the step's tensors alive until after_run; each filter reads from the
// device (has_inf_or_nan: one sync per watched floating tensor). A debugging tool, not for
// production runs.
// Errors: std::invalid_argument at construction for an empty name or a repeated one in `names`,
// max_dumps < 1, no `dir` and no logger directory; add_tensor_filter for an empty name, a name
// already added (`has_inf_or_nan` included, while installed) or an empty function. A watched name
// the step does not publish stops training at the first step (the trainer's error listing the
// names it publishes). A file that cannot be written is logged (ERR) and reported as a failed
// write (Trainer::report_write_failure); the action still follows.
// Differences from tensorpack (docs/tensorpack-differences.md, "Hooks and the debugger hook"):
// TensorFlow's tfdbg is replaced by this hook (no curses UI: the training console); it watches
// published tensors, not every tensor of the graph; a hit stops training with a stop request at
// the step's boundary, not with an exception.
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

// tensorpack's TFLocalCLIDebugHook: HookToCallback around a TensorWatchHook, chief-only, that
// opens the training console at trigger_step of the step with a hit.
//
//   auto debug = std::make_shared<LocalDebugHook>(LocalDebugHookOptions().names({"cost"}));
//   debug->add_tensor_filter("negative", [](const std::string&, const at::Tensor& t) {
//     return t.lt(0).any().item<bool>();
//   });
//   callbacks.push_back(debug);
//
// When: as TensorWatchHook (before_run/after_run of every hooked run), plus trigger_step, which
// calls TensorWatchHook::act: on a terminal (kConsoleIfTerminal), the training console opens with
// the reason, between the steps, so that a checkpoint saved there resumes after this step. Without
// a terminal, or with kStop, training ends at the boundary of the step with the hit, with ERR
// `TensorWatchHook: Tensor 'cost' failed has_inf_or_nan at global_step=3 (epoch 1, local step 2);
// the step's tensors are in <dir>/debug-step-3.npz. Stopping training.`; every after_train runs.
// Writes: `<dir>/debug-step-<global_step>.npz` on a hit.
// chief_only: true.
// Errors: as TensorWatchHook.
// Differences from tensorpack: see TensorWatchHook; tensorpack's hook takes tfdbg's arguments.
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
