// Trainer: the training loop (tensorpack's Trainer and TrainLoop). It owns the callbacks, the
// counters and the Graph, and calls every callback at the moment tensorpack would. The user's
// guide, with the loop step by step and the differences from tensorpack: docs/trainer.md.
//
//   train(...) = setup_callbacks(callbacks, monitors)  every callback's setup_graph, in order
//              + initialize(session_init)              restore state, finalize the graph
//              + main_loop(...)                        before_train, epochs and steps, after_train
//
// A subclass defines one iteration by overriding run_step(); in it, hooked_run(op) runs `op` with
// the callbacks' before_run/after_run around it.
//
// Counters: epoch_num is starting_epoch-1 in before_train and N during epoch N (max_epoch after
// training); local_step is the step in the epoch, -1 from before_epoch until the first step;
// global_step is incremented after every hooked run by MaintainStepCounter, so trigger_step sees
// the incremented value.
//
// Stop signals (handle_signals, on by default): the loop stops at the next step boundary as if
// StopTraining were thrown, every after_train runs, received_signal() tells the caller; a second
// signal ends the process. Promised writes that failed (report_write_failure) make main_loop throw
// WriteFailedError once every after_train ran, unless an error ended training.
//
// With a process group of more than one rank (docs/distributed.md), the ranks stop together at a
// boundary (a signal, request_stop() or a StopTraining outside the step on any rank), must run the
// same loop over the same data, and report a failure to the group before their after_train; only
// the chief runs chief-only callbacks (unless runs_on_every_rank()) and the monitors.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/arg.h>

#include "trainpack/utils/arg.h"

#include "trainpack/core/callback.h"
#include "trainpack/core/callback_group.h"
#include "trainpack/core/distributed.h"
#include "trainpack/core/exceptions.h"
#include "trainpack/core/graph.h"
#include "trainpack/core/monitor_base.h"
#include "trainpack/core/resume_point.h"
#include "trainpack/core/session_init.h"
#include "trainpack/core/step_context.h"
#include "trainpack/core/tower_registry.h"
#include "trainpack/core/write_failures.h"
#include "trainpack/detail/stop_vote.h"

namespace trainpack {

// Arguments of Trainer::train_with_defaults, with tensorpack's defaults.
struct TrainOptions {
  // The user's callbacks, in the order they should run.
  TORCH_ARG(std::vector<CallbackPtr>, callbacks);
  // Appended after `callbacks`; unset: DEFAULT_CALLBACKS(); an empty list (`{}` too): none.
  TRAINPACK_LIST_ARG(CallbackPtr, extra_callbacks);
  // Unset means DEFAULT_MONITORS(); an empty list (`{}` too) means none.
  TRAINPACK_LIST_ARG(MonitorPtr, monitors);
  // Unset means JustCurrentSession.
  TORCH_ARG(std::shared_ptr<SessionInit>, session_init);
  // Required.
  TORCH_ARG(std::optional<int64_t>, steps_per_epoch);
  TORCH_ARG(int64_t, starting_epoch) = 1;
  // The global_step that training starts from (Trainer::set_starting_global_step); unset: 0.
  TORCH_ARG(std::optional<int64_t>, starting_global_step);
  TORCH_ARG(int64_t, max_epoch) = 9999999;
};

// The signals that stop training unless Trainer::set_stop_signals says otherwise: SIGINT, SIGTERM,
// SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2.
std::vector<int> default_stop_signals();

class Trainer {
 public:
  Trainer();
  virtual ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // ---- counters ----
  int64_t epoch_num() const { return epoch_num_; }
  int64_t global_step() const { return global_step_; }
  int64_t local_step() const { return local_step_; }
  int64_t starting_epoch() const { return starting_epoch_; }
  int64_t max_epoch() const { return max_epoch_; }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }

  // ---- resuming (docs/save-load.md) ----
  // The point a checkpoint taken now resumes from: (starting_epoch, 0) before training; from the
  // trigger_step of step s of epoch e on, (e, s + 1), or (e + 1, 0) after the epoch's last step.
  ResumePoint resume_point() const;
  // Makes main_loop continue from `point` (its epoch, step_in_epoch and global_step win over
  // main_loop's arguments; a disagreeing starting_epoch is a warning): set by a restoring
  // SessionInit. `saved_steps_per_epoch` (0: unknown) other than main_loop's is refused there
  // (std::invalid_argument) unless set_allow_changed_input(true), which warns. Throws
  // std::invalid_argument on negative values, std::logic_error once the loop has started.
  void set_resume_point(ResumePoint point, int64_t saved_steps_per_epoch = 0);
  // Whether a resume over another epoch length goes on, with a warning (default: refused).
  void set_allow_changed_input(bool allow) { allow_changed_input_ = allow; }
  // The epoch length of the run that saved the restored point (0: none or unknown).
  int64_t saved_steps_per_epoch() const { return saved_steps_per_epoch_; }
  // Starts global_step at `step` instead of 0 (a restored checkpoint's counters win, with a
  // warning). Throws std::invalid_argument when `step` < 0, std::logic_error once the loop has
  // started.
  void set_starting_global_step(int64_t step);
  // The point set by set_resume_point, if any.
  const std::optional<ResumePoint>& restored_resume_point() const { return restored_; }

  // ---- the three phases; each may be called once ----
  void setup_callbacks(const std::vector<CallbackPtr>& callbacks,
                       const std::vector<MonitorPtr>& monitors);
  void initialize(std::shared_ptr<SessionInit> session_init = nullptr);
  // Runs epochs starting_epoch..max_epoch inclusive (none, with a warning, when max_epoch is
  // lower and no resume point was restored).
  void main_loop(int64_t steps_per_epoch, int64_t starting_epoch, int64_t max_epoch);

  void train(const std::vector<CallbackPtr>& callbacks, const std::vector<MonitorPtr>& monitors,
             int64_t steps_per_epoch, int64_t starting_epoch = 1, int64_t max_epoch = 9999999,
             std::shared_ptr<SessionInit> session_init = nullptr);
  // train() with the options and their defaults (TrainOptions). Throws std::invalid_argument
  // when steps_per_epoch is unset. Defined in src/train/defaults.cpp, with the defaults.
  void train_with_defaults(TrainOptions options);

  // Registers one callback before setup_callbacks (a subclass's own, which then precede the step
  // counter). Returns false, skipping it, when it is chief-only and this trainer is not the chief.
  bool register_callback(CallbackPtr callback);

  // ---- the iteration ----
  // One training iteration. The default runs the op set by set_train_op with hooks.
  virtual void run_step();

  // Runs `op` once with the hooks: every before_run (collecting RunArgs), `op(ctx)`, the RunArgs'
  // ops, then every after_run with the tensors it asked for, published by `op` in this run.
  template <typename Op>
  void hooked_run(Op&& op) {
    begin_hooked_run();
    try {
      op(step_context_);
      end_hooked_run();
    } catch (...) {
      tower_registry_.end_step();
      throw;
    }
    tower_registry_.end_step();
  }

  // ---- state ----
  Graph& graph() { return graph_; }
  const Graph& graph() const { return graph_; }
  // What the main training tower recorded this step (summaries, moving summaries, update ops);
  // cleared after every hooked run.
  TowerRegistry& tower_registry() { return tower_registry_; }
  const TowerRegistry& tower_registry() const { return tower_registry_; }
  // The monitors aggregator; valid after setup_callbacks.
  Monitors& monitors() const;
  // The registered callbacks, in order (the group exists after setup_callbacks).
  const std::vector<CallbackPtr>& registered_callbacks() const { return registered_; }

  bool is_chief() const { return is_chief_; }
  void set_is_chief(bool chief) { is_chief_ = chief; }

  // The group of processes training together, or null (then rank() is 0, world_size() 1).
  const ProcessGroupPtr& process_group() const { return process_group_; }
  int64_t rank() const;
  int64_t world_size() const;

  // Asks the loop to stop at the next step (or epoch) boundary.
  void request_stop() { stop_requested_ = true; }
  bool stop_requested() const { return stop_requested_; }

  // Install the stop signals' handlers during main_loop (default: true).
  void set_handle_signals(bool handle) { handle_signals_ = handle; }
  // The signals that stop training at the next step boundary (default: default_stop_signals()).
  void set_stop_signals(std::vector<int> signals) { stop_signals_ = std::move(signals); }
  const std::vector<int>& stop_signals() const { return stop_signals_; }
  // The stop signal received during main_loop, or 0 (set also when it came too late to stop).
  int received_signal() const { return received_signal_; }
  // Whether main_loop trained every epoch up to max_epoch (also when a signal came after that).
  bool finished() const { return finished_; }

  // ---- promised writes (see the top of this file) ----
  // One write that failed: who promised the file, the file, the error, and the global_step.
  using WriteFailure = ::trainpack::WriteFailure;
  // Records that `callback` could not write `path` (`error`: why) at `global_step` (unset: the
  // current step). Logs nothing. On the training thread only (not synchronised).
  void report_write_failure(const std::string& callback, const std::string& path,
                            const std::string& error,
                            std::optional<int64_t> global_step = std::nullopt);
  // The failures reported so far, oldest first (the first kMaxKeptWriteFailures of them).
  const std::vector<WriteFailure>& write_failures() const { return write_failures_.kept(); }
  // How many were reported (all of them, also those not kept).
  int64_t write_failure_count() const { return write_failures_.count(); }
  // WriteFailureLedger::summary(): "3 writes failed (2 files): ...", or "" when none failed.
  std::string write_failure_summary() const;
  static constexpr size_t kMaxKeptWriteFailures = WriteFailureLedger::kMaxKept;

 protected:
  // The op that the default run_step runs with hooks.
  void set_train_op(StepFn op) { train_op_ = std::move(op); }
  // Sets the step counter (when restoring a checkpoint, before training starts).
  void set_global_step(int64_t step) { global_step_ = step; }
  // Makes this trainer a member of `group` (before setup_callbacks): the chief is rank 0.
  void set_process_group(ProcessGroupPtr group);
  // Called at the end of initialize(), after the SessionInit and the graph's finalize (a
  // data-parallel trainer brings every rank to the chief's state here). Default: nothing.
  virtual void _after_initialize() {}
  // What the input reads (InputSource::describe()), compared across ranks at start. Default: "".
  virtual std::string data_description() const { return ""; }
  // Throws std::logic_error("Method <Class>.<method> can only be called once per object!") on
  // a second call with the same flag.
  void call_once(bool& flag, const char* method) const;

 private:
  friend class MaintainStepCounter;

  void begin_hooked_run();
  void end_hooked_run();
  // True when the loop must stop now; throws StopTraining when a signal arrived. With a process
  // group, a collective (vote_to_stop).
  bool should_stop();
  // The ranks' vote at a step boundary (detail::StopVote::vote): throws StopTraining when every
  // rank stops now, returns true when a rank requested a stop.
  bool vote_to_stop(int local_signal, bool epoch_end);
  // Throws std::invalid_argument when the ranks differ in their loop or data_description().
  void check_same_loop_on_every_rank(int64_t steps_per_epoch, int64_t max_epoch);
  // Inside a catch block: tells the group that this rank fails with the current exception.
  void report_failure_to_group() noexcept;
  // Tells the group, or else torchrun's error file (TORCHELASTIC_ERROR_FILE), that this run failed.
  void report_failure_message(const std::string& message, bool own_failure) noexcept;
  // Runs `hooks` (outside the step); with a process group, holds a StopTraining until the vote.
  template <typename Fn>
  void run_stoppable(Fn&& hooks);

  // ---- main_loop, step by step ----
  // Throws std::invalid_argument / std::logic_error for arguments main_loop cannot run with.
  void check_loop_arguments(int64_t steps_per_epoch, int64_t starting_epoch,
                            int64_t max_epoch) const;
  // Where the loop starts: (starting_epoch, 0), or the restored resume point.
  ResumePoint loop_start(int64_t steps_per_epoch, int64_t starting_epoch);
  // The epochs from `start` to max_epoch; false when a stop request ended them early.
  bool run_epochs(const ResumePoint& start);
  // One epoch from step `first_step`; false when a stop request ended it before its last step.
  bool run_epoch(int64_t epoch, int64_t first_step);
  // The log line of a training ended by StopTraining (or a signal).
  void log_stop(const StopTraining& e) const;
  // Every callback's after_train once training ended without an error, then a late signal.
  void run_after_train();
  [[noreturn]] void fail_missing_fetch(const std::string& name) const;

  Graph graph_;
  TowerRegistry tower_registry_;
  std::vector<CallbackPtr> registered_;
  std::unique_ptr<Callbacks> callbacks_;
  std::shared_ptr<Monitors> monitors_;

  int64_t epoch_num_ = 0;
  int64_t global_step_ = 0;
  int64_t local_step_ = -1;
  int64_t starting_epoch_ = 1;
  int64_t max_epoch_ = 0;
  int64_t steps_per_epoch_ = 0;
  ResumePoint next_{};                   // resume_point() once the loop runs
  std::optional<ResumePoint> restored_;  // set_resume_point
  int64_t saved_steps_per_epoch_ = 0;    // set_resume_point
  bool allow_changed_input_ = false;
  std::optional<int64_t> starting_global_step_;  // set_starting_global_step
  bool loop_started_ = false;

  StepContext step_context_;
  // RunArgs of this run, one slot per callback in the before_run list.
  std::vector<RunArgs> run_args_;
  // For each callback in the after_run list: its slot in run_args_, or -1.
  std::vector<int> after_run_slots_;
  std::vector<Callback*> before_run_list_;
  std::vector<Callback*> after_run_list_;
  bool any_ops_ = false;

  StepFn train_op_;
  ProcessGroupPtr process_group_;
  detail::StopVote stop_vote_;  // with a process group: the ranks' vote at every boundary
  bool is_chief_ = true;
  bool stop_requested_ = false;
  bool handle_signals_ = true;
  std::vector<int> stop_signals_ = default_stop_signals();
  int received_signal_ = 0;
  bool finished_ = false;
  WriteFailureLedger write_failures_;
  bool setup_callbacks_called_ = false;
  bool setup_done_ = false;  // the callback list is complete; registration is closed
  bool initialize_done_ = false;
  bool main_loop_done_ = false;
};

// Runs hooks and moves the step counter; computes nothing. For testing callbacks.
class NoOpTrainer : public Trainer {
 public:
  void run_step() override {
    hooked_run([](StepContext&) {});
  }
};

// The conventional exit status of a process stopped by `signal`: 128 + signal (130 for SIGINT,
// 143 for SIGTERM), or 0 when `signal` is 0.
int exit_code_for_signal(int signal);

// "SIGINT", "SIGTERM", ..., "SIGPWR", else "signal <n>".
std::string stop_signal_name(int signal);

}  // namespace trainpack
