// Test support: a callback that records every hook call as "(hook ep=E ls=L gs=G)" lines, and
// helpers to run a NoOpTrainer over a list of callbacks.
#pragma once

#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "trainpack/callbacks/base.h"
#include "trainpack/train/trainer.h"

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

// Runs a fresh NoOpTrainer with `callbacks`, no monitors and signal handling off.
inline void run_noop(std::vector<CallbackPtr> callbacks, int64_t steps_per_epoch,
                     int64_t starting_epoch, int64_t max_epoch) {
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train(callbacks, {}, steps_per_epoch, starting_epoch, max_epoch);
}

}  // namespace testing
}  // namespace trainpack
