// Callback (tensorpack's Callback): everything other than the training iterations lives in one.
//
// The trainer calls each hook at a fixed moment (see docs/callbacks.md for the full timeline):
//
//   setup_graph(trainer)           once, before the graph is finalized: register ops, resolve names
//   before_train()                 once, after the graph is finalized (and a checkpoint restored)
//   for each epoch:
//     before_epoch()
//     for each step:
//       before_run(ctx)   ┐        around every hooked run of the step: ask for tensors/ops,
//       after_run(ctx, v) ┘        receive them from that same step
//       trigger_step()             after every step, with the incremented global_step
//     after_epoch()
//     trigger_epoch()              by default calls trigger()
//   after_train()                  always, even after an error
//
// A subclass overrides the protected `_hook` virtuals; the public methods of the same name
// without the underscore call them (and are what the trainer and wrappers call). A hook that a
// subclass does not override costs nothing: the trainer works out once, at setup, which
// callbacks override which hooks and calls only those. docs/callbacks.md shows how to write one.
//
// Differences from tensorpack: none in timing. `name()` plays the role of `__str__` (the class
// name); a hook that throws is reported with the callback's name (see Callbacks).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trainpack/core/step_context.h"

namespace trainpack {

class Callback;
class Graph;
class Trainer;

using CallbackPtr = std::shared_ptr<Callback>;

// A callback's resumable state: named tensors (scalars as 0-d tensors), saved in every checkpoint
// by ModelSaver and handed back by the restoring SessionInit (docs/save-load.md).
using CallbackState = std::map<std::string, at::Tensor>;

// The hooks of a callback, for override detection and dispatch lists.
enum class Hook : uint8_t {
  kSetupGraph,
  kBeforeTrain,
  kBeforeEpoch,
  kBeforeRun,
  kAfterRun,
  kTriggerStep,
  kAfterEpoch,
  kTriggerEpoch,
  kTrigger,
  kAfterTrain,
};
constexpr int kNumHooks = 10;
const char* hook_name(Hook hook);

// A callback is held by std::shared_ptr (CallbackPtr); enable_shared_from_this lets
// set_chief_only return that pointer, so it chains where a CallbackPtr is expected.
class Callback : public std::enable_shared_from_this<Callback> {
 public:
  Callback() = default;
  virtual ~Callback() = default;
  Callback(const Callback&) = delete;
  Callback& operator=(const Callback&) = delete;

  // ---- the hooks, called by the trainer (and by wrappers) ----
  void setup_graph(Trainer& trainer);
  void before_train() { _before_train(); }
  void before_epoch() { _before_epoch(); }
  void after_epoch() { _after_epoch(); }
  RunArgs before_run(const StepContext& ctx) { return _before_run(ctx); }
  void after_run(const StepContext& ctx, const RunValues& values) { _after_run(ctx, values); }
  void trigger_step() { _trigger_step(); }
  void trigger_epoch() { _trigger_epoch(); }
  void trigger() { _trigger(); }
  void after_train() { _after_train(); }

  // ---- properties ----
  // Whether only the chief worker runs this callback (tensorpack's default: true).
  bool chief_only() const { return chief_only_; }
  // tensorpack's `set_chief_only(v=True)`: sets the flag and returns this callback, so that it
  // chains on the pointer:
  //
  //   callbacks.push_back(std::make_shared<MyCallback>()->set_chief_only(false));
  //
  // The returned pointer shares ownership with the std::shared_ptr that holds the callback; it
  // is empty when none does yet (in a constructor, which may call it to set its default).
  CallbackPtr set_chief_only(bool v = true) {
    chief_only_ = v;
    return weak_from_this().lock();
  }

  // Under data-parallel training (docs/distributed.md): whether a chief-only callback still runs
  // on every rank, because it takes part in collectives and only its results are the chief's
  // (InferenceRunner shards the validation set over the ranks; the summary callbacks average the
  // training scalars over them). Default: false. Without a process group it changes nothing.
  bool runs_on_every_rank() const { return runs_on_every_rank_; }

  // What logs print for this callback: the class name (tensorpack's `__str__`).
  virtual std::string name() const;
  // The name its state is saved under in a checkpoint (`callback/<state_key>/<entry>`; a repeat
  // gets `#2`, `#3`). Default: name(). A callback whose name() shows its configuration (a
  // schedule's values) returns a stable key, so that a run resumed with another configuration
  // still finds its state.
  virtual std::string state_key() const { return name(); }

  // The name scope that setup_graph enters (at the graph's root): the one set, or the class
  // name without '_'.
  std::string name_scope() const;
  void set_name_scope(std::string scope) { name_scope_ = std::move(scope); }

  // True if calling `hook` on this callback can do anything: its class overrides the hook (for
  // trigger_epoch: overrides `_trigger_epoch`, or keeps the default, which calls an overridden
  // `_trigger`). The trainer dispatches each hook only to the callbacks for which this is true.
  // Wrappers override it to answer for the callback they wrap.
  virtual bool overrides(Hook hook) const;

  // ---- resumable state (checkpoints) ----
  // What this callback needs to continue exactly after a restart: a schedule's last value,
  // MinSaver's best, EMA values, an input's position. Empty by default (nothing is saved).
  // Called by ModelSaver when it saves (between hooks, on the training thread).
  virtual CallbackState state() const { return {}; }
  // Called by the restoring SessionInit after setup_graph and before before_train, with what
  // state() returned when the checkpoint was saved. Default: ignores it. A state that does not
  // fit (a missing key, a wrong shape) is std::invalid_argument naming the callback and the key.
  virtual void load_state(const CallbackState& /*state*/) {}

  // ---- access, valid from setup_graph on ----
  Trainer& trainer() const;
  Graph& graph() const;
  bool is_set_up() const { return trainer_ != nullptr; }
  int64_t epoch_num() const;
  int64_t global_step() const;
  int64_t local_step() const;

 protected:
  virtual void _setup_graph() {}
  virtual void _before_train() {}
  virtual void _before_epoch() {}
  virtual void _after_epoch() {}
  virtual RunArgs _before_run(const StepContext& /*ctx*/) { return RunArgs(); }
  virtual void _after_run(const StepContext& /*ctx*/, const RunValues& /*values*/) {}
  virtual void _trigger_step() {}
  // Default: calls trigger(), so that a callback with only `_trigger` runs at every epoch end.
  virtual void _trigger_epoch() { trigger(); }
  virtual void _trigger() {}
  virtual void _after_train() {}

  // See runs_on_every_rank(); a callback that cooperates across ranks sets it in its constructor.
  void set_runs_on_every_rank(bool v = true) { runs_on_every_rank_ = v; }

  // Monitors set this to false: their setup_graph enters no name scope.
  bool enter_name_scope_ = true;

  // True if this object's class overrides the hook's virtual beyond the class of `reference`
  // (an object of a base class). Wrappers use it to notice a subclass that adds behaviour.
  bool overrides_beyond(const Callback& reference, Hook hook) const;

 private:
  friend class ProxyCallback;

  Trainer* trainer_ = nullptr;
  bool chief_only_ = true;
  bool runs_on_every_rank_ = false;
  std::string name_scope_;
};

namespace detail {
// A callback that overrides nothing (the reference for override detection), and a non-owning
// pointer to it (the inner callback of wrappers' reference objects).
const Callback& plain_callback();
CallbackPtr unowned_plain_callback();
}  // namespace detail

// A callback that forwards every hook to another one. Base of the wrappers (PeriodicTrigger,
// EnableCallbackIf, ...) and of your own (override the hooks to change, call the base for the
// others). The inner callback's chief_only and runs_on_every_rank flags are copied at construction
// (later changes to it are not seen). The inner callback's setup_graph enters its own name scope
// from the graph's root, as if it were registered directly (its ops are `<InnerClass>/<op>`).
// name(): `Proxy-<inner name>`. A null callback is std::invalid_argument `ProxyCallback: callback
// is null`.
class ProxyCallback : public Callback {
 public:
  explicit ProxyCallback(CallbackPtr callback)
      : ProxyCallback(std::move(callback), "ProxyCallback") {}
  std::string name() const override { return "Proxy-" + callback_->name(); }
  const CallbackPtr& inner() const { return callback_; }
  // A hook is dispatched to the proxy when the inner callback needs it (or a subclass of the
  // proxy overrides it): wrapping an idle callback costs nothing either.
  bool overrides(Hook hook) const override;
  // The wrapped callback's state: wrapping changes when a callback runs, not what it keeps. Its key
  // is name() with the inner callback's state_key() in place of its name ("PeriodicTrigger-" +
  // the inner key), so that a stable inner key stays stable wrapped.
  std::string state_key() const override {
    const std::string outer = name(), inner = callback_->name();
    if (outer.size() < inner.size() ||
        outer.compare(outer.size() - inner.size(), inner.size(), inner) != 0) {
      return outer;
    }
    return outer.substr(0, outer.size() - inner.size()) + callback_->state_key();
  }
  CallbackState state() const override { return callback_->state(); }
  void load_state(const CallbackState& state) override { callback_->load_state(state); }

 protected:
  void _setup_graph() override;
  void _before_train() override { callback_->before_train(); }
  void _before_epoch() override { callback_->before_epoch(); }
  void _after_epoch() override { callback_->after_epoch(); }
  RunArgs _before_run(const StepContext& ctx) override { return callback_->_before_run(ctx); }
  void _after_run(const StepContext& ctx, const RunValues& values) override {
    callback_->_after_run(ctx, values);
  }
  void _trigger_step() override { callback_->trigger_step(); }
  void _trigger_epoch() override { callback_->trigger_epoch(); }
  void _trigger() override { callback_->trigger(); }
  void _after_train() override { callback_->after_train(); }

  // For wrappers: a null `callback` is an error naming `class_name`.
  ProxyCallback(CallbackPtr callback, const char* class_name);

  CallbackPtr callback_;
};

// A callback made of functions: each given function is called with the callback itself (so it
// can read the counters and the trainer) at setup_graph (inside the name scope CallbackFactory),
// before_train, trigger (every epoch end by default, or whenever a wrapper triggers it) and
// after_train (always, also after an error). A hook without a function does nothing.
// chief_only: true (Callback's default). name(): the hooks given, `CallbackFactory(before_train,
// trigger)`, or `CallbackFactory()` (tensorpack prints the functions' reprs).
//
//   trainer_callbacks.push_back(std::make_shared<CallbackFactory>(
//       CallbackFactoryOptions().before_train([](CallbackFactory&) { load_vocab(); })));
class CallbackFactory;
struct CallbackFactoryOptions {
  using Fn = std::function<void(CallbackFactory&)>;
  CallbackFactoryOptions& setup_graph(Fn f) {
    setup_graph_ = std::move(f);
    return *this;
  }
  CallbackFactoryOptions& before_train(Fn f) {
    before_train_ = std::move(f);
    return *this;
  }
  CallbackFactoryOptions& trigger(Fn f) {
    trigger_ = std::move(f);
    return *this;
  }
  CallbackFactoryOptions& after_train(Fn f) {
    after_train_ = std::move(f);
    return *this;
  }
  Fn setup_graph_, before_train_, trigger_, after_train_;
};

class CallbackFactory : public Callback {
 public:
  explicit CallbackFactory(CallbackFactoryOptions options);
  // `CallbackFactory(before_train, trigger)`: the hooks that were given.
  std::string name() const override;

 protected:
  void _setup_graph() override { call(options_.setup_graph_); }
  void _before_train() override { call(options_.before_train_); }
  void _trigger() override { call(options_.trigger_); }
  void _after_train() override { call(options_.after_train_); }

 private:
  void call(const CallbackFactoryOptions::Fn& f) {
    if (f) f(*this);
  }
  CallbackFactoryOptions options_;
};

}  // namespace trainpack
