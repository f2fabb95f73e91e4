// trainpack/testing.h: what a user needs to test their own callbacks without a model.
//
//   - TraceCallback records every hook call as "hook ep=E ls=L gs=G" (epoch_num, local_step,
//     global_step at that moment), so that a timing test is one comparison of lists;
//   - ActionCallback is a callback made of one function per hook;
//   - LogCapture collects what is logged while it lives;
//   - FakeClock drives the time-based callbacks' clocks by hand;
//   - run_noop runs a NoOpTrainer (hooks and counters, no model) over a list of callbacks.
//
// Nothing here depends on a test framework; docs/callbacks.md ("Testing a callback") has a
// complete example.
#pragma once

#include <fmt/format.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "trainpack/core/callback.h"
#include "trainpack/core/trainer.h"
#include "trainpack/utils/clock.h"
#include "trainpack/utils/logger.h"

namespace trainpack {
namespace testing {

using Trace = std::vector<std::string>;

// "hook ep=E ls=L gs=G", prefixed by `tag:` when the tag is not empty.
inline std::string trace_line(const std::string& tag, const char* hook, const Trainer& t) {
  return fmt::format("{}{} ep={} ls={} gs={}", tag.empty() ? "" : tag + ":", hook, t.epoch_num(),
                     t.local_step(), t.global_step());
}

// Records every hook (including trigger, which the default trigger_epoch calls).
class TraceCallback : public Callback {
 public:
  explicit TraceCallback(std::shared_ptr<Trace> trace, std::string tag = "")
      : trace_(std::move(trace)), tag_(std::move(tag)) {}
  void record(const char* hook) { trace_->push_back(trace_line(tag_, hook, trainer())); }

 protected:
  void _setup_graph() override { record("setup_graph"); }
  void _before_train() override { record("before_train"); }
  void _before_epoch() override { record("before_epoch"); }
  void _after_epoch() override { record("after_epoch"); }
  RunArgs _before_run(const StepContext&) override {
    record("before_run");
    return RunArgs();
  }
  void _after_run(const StepContext&, const RunValues&) override { record("after_run"); }
  void _trigger_step() override { record("trigger_step"); }
  void _trigger_epoch() override {
    record("trigger_epoch");
    Callback::_trigger_epoch();
  }
  void _trigger() override { record("trigger"); }
  void _after_train() override { record("after_train"); }

  std::shared_ptr<Trace> trace_;
  std::string tag_;
};

// Records only trigger() calls (for the wrappers' tests).
class TriggerRecorder : public Callback {
 public:
  explicit TriggerRecorder(std::shared_ptr<Trace> trace) : trace_(std::move(trace)) {}

 protected:
  void _trigger() override { trace_->push_back(trace_line("", "trigger", trainer())); }
  std::shared_ptr<Trace> trace_;
};

// A callback made of functions, one per hook (unset ones do nothing); each gets the callback, so
// it can read the counters (self.global_step()), the trainer and, in before_run/after_run, the
// step's context and values. Overrides every hook.
//
//   auto probe = std::make_shared<ActionCallback>();
//   probe->run_args = RunArgs({"cost"});
//   probe->after_run_fn = [&](ActionCallback& self) {
//     costs.push_back((*self.values)["cost"].item<double>());
//   };
class ActionCallback : public Callback {
 public:
  using Fn = std::function<void(ActionCallback&)>;
  Fn setup_graph_fn, before_train_fn, before_epoch_fn, after_epoch_fn, before_run_fn, after_run_fn,
      trigger_step_fn, trigger_epoch_fn, trigger_fn, after_train_fn;
  const StepContext* ctx = nullptr;   // the context of the run in progress (before/after_run)
  RunArgs run_args;                   // what before_run returns: the tensors/ops to ask for
  const RunValues* values = nullptr;  // in after_run_fn: the tensors asked for, of this run

 protected:
  static void call(const Fn& f, ActionCallback& self) {
    if (f) f(self);
  }
  void _setup_graph() override { call(setup_graph_fn, *this); }
  void _before_train() override { call(before_train_fn, *this); }
  void _before_epoch() override { call(before_epoch_fn, *this); }
  void _after_epoch() override { call(after_epoch_fn, *this); }
  RunArgs _before_run(const StepContext& c) override {
    ctx = &c;
    call(before_run_fn, *this);
    return run_args;
  }
  void _after_run(const StepContext& c, const RunValues& v) override {
    ctx = &c;
    values = &v;
    call(after_run_fn, *this);
    values = nullptr;
  }
  void _trigger_step() override { call(trigger_step_fn, *this); }
  void _trigger_epoch() override {
    call(trigger_epoch_fn, *this);
    Callback::_trigger_epoch();
  }
  void _trigger() override { call(trigger_fn, *this); }
  void _after_train() override { call(after_train_fn, *this); }
};

// Collects the messages logged while it lives (warnings prefixed "WRN ", errors "ERR ").
//
//   LogCapture log;
//   run_noop({callback}, 2, 1, 1);
//   EXPECT_TRUE(log.contains("WRN ..."));
class LogCapture {
 public:
  LogCapture() {
    id_ = logger::add_sink([this](logger::Level level, std::string_view msg) {
      lines_.push_back(std::string(level == logger::Level::kWarning ? "WRN "
                                   : level == logger::Level::kError ? "ERR "
                                                                    : "") +
                       std::string(msg));
    });
  }
  ~LogCapture() { logger::remove_sink(id_); }
  const std::vector<std::string>& lines() const { return lines_; }
  bool contains(const std::string& text) const {
    for (const auto& l : lines_) {
      if (l.find(text) != std::string::npos) return true;
    }
    return false;
  }

 private:
  int id_;
  std::vector<std::string> lines_;
};

// A clock that moves only when told: what the time-based callbacks' `clock` argument takes
// (ThroughputTracker, EstimatedTimeLeft, ProgressBarOptions::clock, ModelSaverOptions::clock), so
// that a test of timing sleeps for nothing and gives the same result every time. Copies share
// the time; the Clock it converts to stays valid after this object is gone.
//
//   FakeClock clock;
//   auto speed = std::make_shared<ThroughputTracker>(std::nullopt, clock);
//   ActionCallback tick;  tick.trigger_step_fn = [&](ActionCallback&) { clock.advance(0.5); };
class FakeClock {
 public:
  explicit FakeClock(double start_seconds = 0)
      : seconds_(std::make_shared<double>(start_seconds)) {}
  double now() const { return *seconds_; }
  void advance(double seconds) { *seconds_ += seconds; }
  void set(double seconds) { *seconds_ = seconds; }
  // The Clock the callbacks take.
  operator Clock() const {  // NOLINT(google-explicit-constructor): passed where a Clock is
    return [seconds = seconds_] { return *seconds; };
  }

 private:
  std::shared_ptr<double> seconds_;
};

// Runs a fresh NoOpTrainer with `callbacks`, no monitors and signal handling off.
inline void run_noop(std::vector<CallbackPtr> callbacks, int64_t steps_per_epoch,
                     int64_t starting_epoch, int64_t max_epoch) {
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train(callbacks, {}, steps_per_epoch, starting_epoch, max_epoch);
}

}  // namespace testing
}  // namespace trainpack
