// Trainer: the training loop. It owns the callbacks, the counters and the Graph, and calls every
// callback at the moment tensorpack would (docs/trainer.md).
//
//   train(callbacks, monitors, steps_per_epoch, starting_epoch, max_epoch)
//     = setup_callbacks(callbacks, monitors)   every callback's setup_graph, in order
//     + initialize(session_init)               restore state, finalize the graph
//     + main_loop(...)                         before_train, the epochs and steps, after_train
//
// A subclass defines one iteration by overriding `run_step()`; inside it, `hooked_run(op)` runs
// `op` with the callbacks' before_run/after_run around it (a plain call of `op` runs no hooks).
//
//   class MyTrainer : public trainpack::Trainer {
//     void run_step() override {
//       hooked_run([&](trainpack::StepContext& ctx) {
//         auto loss = compute_loss();
//         ctx.publish("cost", loss);
//         loss.backward(); opt.step();
//       });
//     }
//   };
//
// Counters (tensorpack's TrainLoop): epoch_num is starting_epoch-1 in before_train and N during
// epoch N (it stays max_epoch after training); local_step is the 0-based step in the epoch,
// assigned before run_step; global_step is incremented after every hooked run by the built-in
// MaintainStepCounter (the first callback after the trainer's own), so trigger_step sees the
// incremented value.
//
// The stop signals, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 unless
// set_stop_signals says otherwise (handle_signals, on by default): the handler only sets a flag;
// the loop stops at the next step boundary as if StopTraining were raised, every after_train runs
// (ModelSaver saves a checkpoint of the stop step), and `received_signal()` tells the caller, who
// can exit with `exit_code_for_signal()` (130 / 143 / 129 / 131 / 138 / 140). A second signal
// while the first is pending terminates the process at once. SIGALRM, SIGVTALRM and SIGPWR, when
// not stop signals and without a handler of the program's own, write one line to stderr naming
// the signal, then take their default action (the process ends, without a checkpoint).
//
// Promised writes: a callback that cannot write a file it promised (ModelSaver's checkpoint,
// MinSaver's copy, stats.json, the event file) logs an ERROR, reports it with
// report_write_failure, and training goes on (as in tensorpack). When training ends, after every
// callback's after_train ran, main_loop throws WriteFailedError summarising the failures, so that
// a run whose checkpoints or statistics were not written never ends as a success. A stop by a
// signal still ends so (received_signal() stays set); an error that ended training wins, with the
// failures logged.
//
// Data-parallel training (a trainer with a process group of more than one rank, such as
// DataParallelTrainer; docs/distributed.md): the ranks decide together, at every step boundary,
// whether to stop, so that all stop at the same boundary: a signal or request_stop() on any rank
// stops every rank there. A StopTraining thrown by a callback outside the step (before_train,
// before_epoch, trigger_step, after_epoch, trigger_epoch) on one rank is held until that boundary;
// one thrown inside the step (run_step, before_run, after_run) must be thrown on every rank (an
// exhausted input of equal shards is). At start, the ranks check that they run the same loop
// (steps_per_epoch, max_epoch) over the same data (data_description(): another seed, data set or
// batch size is an error naming this rank's). When training fails on a rank, the rank reports it to
// the group (ProcessGroup::report_failure) before its after_train, so that the others, whose next
// collective fails, name it. On a rank other than the chief, chief-only callbacks are skipped
// (unless Callback::runs_on_every_rank()) and so are the monitors: files and logs are the chief's.
//
// Differences from tensorpack (numbers of docs/tensorpack-differences.md): local_step is -1 from
// before_epoch until the first step of each epoch (#1); a stop requested during an epoch's last
// step does not start the next epoch (#14); signals stop training cleanly instead of raising
// KeyboardInterrupt (#15).
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
  // Appended after `callbacks`; unset means DEFAULT_CALLBACKS(); an empty list (`{}` too) means
  // none.
  TRAINPACK_LIST_ARG(CallbackPtr, extra_callbacks);
  // Unset means DEFAULT_MONITORS(); an empty list (`{}` too) means none.
  TRAINPACK_LIST_ARG(MonitorPtr, monitors);
  // Unset means JustCurrentSession.
  TORCH_ARG(std::shared_ptr<SessionInit>, session_init);
  // Required.
  TORCH_ARG(std::optional<int64_t>, steps_per_epoch);
  TORCH_ARG(int64_t, starting_epoch) = 1;
  // The global_step that training starts from (Trainer::set_starting_global_step); unset: 0.
  // With starting_epoch, this starts a run part-way without a checkpoint, as tensorpack's
  // starting_epoch and a restored global_step do. A checkpoint's counters win over both.
  TORCH_ARG(std::optional<int64_t>, starting_global_step);
  TORCH_ARG(int64_t, max_epoch) = 9999999;
};

// The signals that stop training unless Trainer::set_stop_signals says otherwise: SIGINT, SIGTERM,
// SIGHUP, SIGQUIT, and SIGUSR1 and SIGUSR2, which schedulers send some time before they kill a job
// (SLURM's --signal, PyTorch Lightning's requeue).
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
  // The point a checkpoint taken now resumes from: before training, (starting_epoch, 0); after
  // step s of epoch e ran (from its trigger_step on), (e, s + 1), or (e + 1, 0) after the
  // epoch's last step.
  ResumePoint resume_point() const;
  // Makes main_loop continue from `point` instead of (starting_epoch, 0): set by a restoring
  // SessionInit in initialize(). The loop then starts at epoch point.epoch (before_train sees
  // epoch_num = point.epoch - 1), runs that epoch's steps from point.step_in_epoch on, and
  // global_step starts at point.global_step. The checkpoint's counters are the truth: a
  // starting_epoch other than 1 that disagrees is a warning naming both
  // (docs/tensorpack-differences.md #7). Throws std::invalid_argument on negative or inconsistent
  // values, std::logic_error once the loop has started. `saved_steps_per_epoch` is the epoch
  // length of the run that saved the point (0: unknown, as in checkpoints of older versions):
  // main_loop refuses another one (its epochs and the position in them would be reinterpreted)
  // with std::invalid_argument naming both, unless set_allow_changed_input(true), which warns.
  void set_resume_point(ResumePoint point, int64_t saved_steps_per_epoch = 0);
  // Whether a resume over another epoch length goes on (with a warning) instead of being refused;
  // TrainConfig().allow_changed_input sets it, with the input's own check of its dataflow.
  void set_allow_changed_input(bool allow) { allow_changed_input_ = allow; }
  // The epoch length of the run that saved the restored point (0: none or unknown).
  int64_t saved_steps_per_epoch() const { return saved_steps_per_epoch_; }
  // Starts global_step at `step` instead of 0 (call before main_loop; train_with_defaults calls
  // it for TrainOptions::starting_global_step). Together with main_loop's starting_epoch this
  // starts a run part-way without a checkpoint: the first step is step 0 of starting_epoch and
  // sees global_step == `step`. A restored checkpoint's counters win, with a warning naming both
  // when they disagree. Throws std::invalid_argument when `step` < 0, std::logic_error once the
  // loop has started.
  void set_starting_global_step(int64_t step);
  // The point set by set_resume_point, if any.
  const std::optional<ResumePoint>& restored_resume_point() const { return restored_; }

  // ---- the three phases; each may be called once ----
  void setup_callbacks(const std::vector<CallbackPtr>& callbacks,
                       const std::vector<MonitorPtr>& monitors);
  void initialize(std::shared_ptr<SessionInit> session_init = nullptr);
  // Runs epochs starting_epoch..max_epoch inclusive. A fresh run (no restored resume point) with
  // max_epoch < starting_epoch runs no epoch, only before_train and after_train, and warns so.
  void main_loop(int64_t steps_per_epoch, int64_t starting_epoch, int64_t max_epoch);

  void train(const std::vector<CallbackPtr>& callbacks, const std::vector<MonitorPtr>& monitors,
             int64_t steps_per_epoch, int64_t starting_epoch = 1, int64_t max_epoch = 9999999,
             std::shared_ptr<SessionInit> session_init = nullptr);
  // Runs train() with options.callbacks() followed by options.extra_callbacks()
  // (DEFAULT_CALLBACKS() when unset), options.monitors() (DEFAULT_MONITORS() when unset) and,
  // when set, options.starting_global_step(). Throws std::invalid_argument when steps_per_epoch is
  // unset. Defined in src/train/defaults.cpp, with the defaults, so that the loop's own source
  // needs no concrete callback.
  void train_with_defaults(TrainOptions options);

  // Registers one callback, before setup_callbacks (a subclass's setup registers its own this
  // way, so they precede the step counter). Returns false when the callback is chief-only and
  // this trainer is not the chief (it is then skipped with a warning).
  bool register_callback(CallbackPtr callback);

  // ---- the iteration ----
  // One training iteration. The default runs the op set by set_train_op with hooks.
  virtual void run_step();

  // Runs `op` once with the callbacks' hooks: before_run of every callback that overrides it
  // (collecting RunArgs), then `op(ctx)`, then the RunArgs ops, then after_run with the tensors
  // each callback asked for, published by `op` in this same run.
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

  // The group of processes training together (see the top of this file), or null when this
  // trainer trains alone. rank() is 0 and world_size() 1 without one.
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
  // The stop signal received during main_loop, or 0. Set also when it arrived too late to stop
  // anything (during the last step or after_train).
  int received_signal() const { return received_signal_; }
  // Whether main_loop trained every epoch up to max_epoch (true also when a signal arrived after
  // the last step: it stopped nothing, so the run is complete, not interrupted).
  bool finished() const { return finished_; }

  // ---- promised writes (see the top of this file) ----
  // One write that failed: who promised the file, the file, the error, and the global_step.
  using WriteFailure = ::trainpack::WriteFailure;
  // Records that `callback` could not write `path` (`error`: the reason, e.g. the exception's
  // what()) at `global_step` (unset: the current step; a write finished on another thread is
  // reported later with the step it was of). Logs nothing: the caller logs its ERROR line. Any
  // time, from any hook, on the training thread (it is not synchronised: a callback that writes
  // on a thread of its own hands the failure back to the training thread, as ModelSaver does).
  void report_write_failure(const std::string& callback, const std::string& path,
                            const std::string& error,
                            std::optional<int64_t> global_step = std::nullopt);
  // The failures reported so far, oldest first (the first kMaxKeptWriteFailures of them).
  const std::vector<WriteFailure>& write_failures() const { return write_failures_.kept(); }
  // How many were reported (all of them, also those not kept).
  int64_t write_failure_count() const { return write_failures_.count(); }
  // "3 writes failed (2 files): <path> (ModelSaver, 2 failures), ...; the first error: <error>",
  // or "" when none failed.
  std::string write_failure_summary() const;
  static constexpr size_t kMaxKeptWriteFailures = WriteFailureLedger::kMaxKept;

 protected:
  // The op that the default run_step runs with hooks.
  void set_train_op(StepFn op) { train_op_ = std::move(op); }
  // Sets the step counter (when restoring a checkpoint, before training starts).
  void set_global_step(int64_t step) { global_step_ = step; }
  // Makes this trainer a member of `group` (before setup_callbacks): the chief is rank 0.
  void set_process_group(ProcessGroupPtr group);
  // Called at the end of initialize(), after the SessionInit ran and the graph was finalized: a
  // data-parallel trainer brings every rank to the chief's state here. Default: nothing.
  virtual void _after_initialize() {}
  // What the training input reads (InputSource::describe()), which every rank of a data-parallel
  // run must agree on at start (another seed or data set would shard other data). Default: ""
  // (a trainer without an input; nothing is compared).
  virtual std::string data_description() const { return ""; }
  // Throws std::logic_error("Method <Class>.<method> can only be called once per object!") on
  // a second call with the same flag.
  void call_once(bool& flag, const char* method) const;

 private:
  friend class MaintainStepCounter;

  void begin_hooked_run();
  void end_hooked_run();
  // True when the loop must stop now; throws StopTraining when a signal arrived. With a process
  // group, every rank takes part and all get the same answer (see the top of this file).
  bool should_stop();
  // The ranks' vote at a step boundary (detail::StopVote::vote): throws StopTraining when every
  // rank stops now, returns true when a rank requested a stop.
  bool vote_to_stop(int local_signal, bool epoch_end);
  // Throws std::invalid_argument when the ranks were given different loops, or inputs that read
  // different data (data_description()).
  void check_same_loop_on_every_rank(int64_t steps_per_epoch, int64_t max_epoch);
  // Inside a catch block: tells the group that this rank fails with the current exception.
  void report_failure_to_group() noexcept;
  // Tells the group (under data-parallel training) or torchrun's error file (one process under a
  // launcher that sets TORCHELASTIC_ERROR_FILE) that this run failed with `message`.
  void report_failure_message(const std::string& message, bool own_failure) noexcept;
  // Runs `hooks` (callbacks outside the step); with a process group, a StopTraining it throws is
  // held until the next boundary's vote instead of ending this rank alone.
  template <typename Fn>
  void run_stoppable(Fn&& hooks);

  // ---- main_loop, step by step ----
  // Throws std::invalid_argument / std::logic_error for arguments main_loop cannot run with.
  void check_loop_arguments(int64_t steps_per_epoch, int64_t starting_epoch,
                            int64_t max_epoch) const;
  // Where the loop starts: (starting_epoch, 0) at the starting global_step, or the restored
  // resume point (which then sets global_step; a starting_epoch or starting global_step that
  // disagrees is a warning).
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

// The conventional exit status of a process stopped by `signal` (128 + signal: 130 for SIGINT,
// 143 for SIGTERM, 129 for SIGHUP, 131 for SIGQUIT, 138 for SIGUSR1, 140 for SIGUSR2 on Linux), or
// 0 when `signal` is 0.
int exit_code_for_signal(int signal);

// "SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGVTALRM",
// "SIGPWR", else "signal <n>".
std::string stop_signal_name(int signal);

}  // namespace trainpack
