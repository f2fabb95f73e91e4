// Test support: a callback that records every hook call as "(hook ep=E ls=L gs=G)" lines, and
// helpers to run a NoOpTrainer over a list of callbacks.
#pragma once

#include <fmt/format.h>

#include <functional>
#include <string_view>

#include <memory>
#include <string>
#include <vector>

#include "trainpack/callbacks/base.h"
#include "trainpack/train/trainer.h"
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

// A callback whose hooks run the given functions (unset ones do nothing). Overrides every hook.
class ActionCallback : public Callback {
 public:
  using Fn = std::function<void(ActionCallback&)>;
  Fn setup_graph_fn, before_train_fn, before_epoch_fn, after_epoch_fn, before_run_fn, after_run_fn,
      trigger_step_fn, trigger_epoch_fn, trigger_fn, after_train_fn;
  const StepContext* ctx = nullptr;  // the context of the run in progress (before/after_run)

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
    return RunArgs();
  }
  void _after_run(const StepContext& c, const RunValues&) override {
    ctx = &c;
    call(after_run_fn, *this);
  }
  void _trigger_step() override { call(trigger_step_fn, *this); }
  void _trigger_epoch() override {
    call(trigger_epoch_fn, *this);
    Callback::_trigger_epoch();
  }
  void _trigger() override { call(trigger_fn, *this); }
  void _after_train() override { call(after_train_fn, *this); }
};

// Collects the messages logged while it lives.
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

// Runs a fresh NoOpTrainer with `callbacks`, no monitors and signal handling off.
inline void run_noop(std::vector<CallbackPtr> callbacks, int64_t steps_per_epoch,
                     int64_t starting_epoch, int64_t max_epoch) {
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train(callbacks, {}, steps_per_epoch, starting_epoch, max_epoch);
}

}  // namespace testing
}  // namespace trainpack
