// SessionRunTimeout: a time limit on every hooked run, kept by a watchdog thread (tensorpack's
// callbacks/steps.py SessionRunTimeout, which puts a timeout into the RunOptions of every session
// run). Public names: SessionRunTimeoutOptions, SessionRunTimeout, SessionRunTimeoutError.
// docs/looking-inside.md ("Step timeouts") shows it at work.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include <torch/arg.h>

#include "trainpack/core/callback.h"

namespace trainpack {

struct SessionRunTimeoutOptions {
  // How much longer than timeout_in_ms a hooked run that has not returned may go on before the
  // watchdog ends the process. A run that returns within it fails training with
  // SessionRunTimeoutError instead, the ordinary way. >= 0.
  TORCH_ARG(std::chrono::milliseconds, grace_period) = std::chrono::seconds(60);
  // What ends the process once a run has hung: called on the watchdog thread with
  // SessionRunTimeout::kExitCode, after the message was logged and written to torchrun's error
  // file. Unset: std::_Exit(kExitCode) (no destructors, no atexit handlers: the training thread
  // is still blocked). A function that returns leaves the process running and the watchdog
  // ignores that run from then on (tests use this).
  TORCH_ARG(std::function<void(int exit_code)>, end_process);
};

// A hooked run that took longer than timeout_in_ms but returned. what():
// `Training failed at global_step=4 (the step took 1234 ms, more than timeout_in_ms=1000)`.
class SessionRunTimeoutError : public std::runtime_error {
 public:
  SessionRunTimeoutError(int64_t global_step, int64_t elapsed_ms, int64_t timeout_in_ms);
  // The trainer's global_step when the late run was noticed (see SessionRunTimeout).
  int64_t global_step() const { return global_step_; }
  // How long the run took, in whole milliseconds (> timeout_in_ms).
  int64_t elapsed_ms() const { return elapsed_ms_; }

 private:
  int64_t global_step_;
  int64_t elapsed_ms_;
};

// Fails training when a hooked run (a step, for the usual one run per step) takes longer than
// `timeout_in_ms`, and ends the process when a run does not return at all (a collective that
// hangs because another rank died or diverged), instead of letting it hang forever.
//
//   callbacks.push_back(std::make_shared<SessionRunTimeout>(/*timeout_in_ms=*/30000));
//   callbacks.push_back(std::make_shared<SessionRunTimeout>(
//       30000, SessionRunTimeoutOptions().grace_period(std::chrono::seconds(10))));
//
// When: before_train starts the watchdog thread; before_run notes the run's start (a steady-clock
// read and two atomic stores: no lock, no allocation, no system call) and after_run its end;
// after_train (and the destructor) stops and joins the watchdog. The time measured runs from this
// callback's before_run to its after_run: the step function plus the hooks of the callbacks
// between them.
// A run that returns late: after_run throws SessionRunTimeoutError, `Training failed at
// global_step=<gs> (the step took <t> ms, more than timeout_in_ms=<timeout>)`, where <gs> is the
// trainer's global_step at that moment, the number the trainer's own `Training failed at
// global_step=<gs>` line prints; the step has run to its end, so it is counted. The trainer
// handles it as any failing callback: CallbackError naming SessionRunTimeout and after_run (the
// SessionRunTimeoutError nested), every callback's after_train, then out of train().
// A run that has not returned after timeout_in_ms + grace_period: the watchdog logs, writes the
// error file and ends the process with exit code kExitCode (124, the status timeout(1) uses).
// Lines logged so far are in log.log (it is flushed line by line); files that other callbacks
// write in steps (stats.json, the event file) hold what they had written before.
// Logs: ERR `[SessionRunTimeout] Training failed at global_step=<gs> (the step has run for <t> ms
// without returning, more than timeout_in_ms=<timeout> plus grace_period=<grace> ms); ending the
// process with exit code 124`, <gs> being the global_step the run started at (never finished).
// Writes: that message, after `SessionRunTimeout: ` (and `rank <r>: ` first in a group of several
// ranks), to torchrun's error file when TORCHELASTIC_ERROR_FILE is set (utils/error_file.h).
// chief_only: true (set_chief_only(false) to watch every rank of a data-parallel run).
// Errors: std::invalid_argument at construction when timeout_in_ms <= 0, grace_period < 0, or the
// two add up to more than 10^12 ms.
//
// Differences from tensorpack: TensorFlow cancels a run at its deadline; a C++ step cannot be
// cancelled, so a late run that returns fails training once it returned (its global_step is
// counted, one more than tensorpack prints), and one that never returns ends the process after the
// grace period, which tensorpack does not have. After a step that threw, the watchdog keeps
// watching until this callback's after_train: list it before callbacks whose after_train is slow.
class SessionRunTimeout : public Callback {
 public:
  // The exit code of a process ended by the watchdog, as timeout(1)'s.
  static constexpr int kExitCode = 124;

  explicit SessionRunTimeout(int64_t timeout_in_ms, SessionRunTimeoutOptions options = {});
  ~SessionRunTimeout() override;

  int64_t timeout_in_ms() const { return timeout_ms_; }
  const SessionRunTimeoutOptions& options() const { return options_; }

 protected:
  void _before_train() override;
  RunArgs _before_run(const StepContext& ctx) override;
  void _after_run(const StepContext& ctx, const RunValues& values) override;
  void _after_train() override;

 private:
  void watch();  // the watchdog thread
  void stop_watchdog();
  // Logs, writes the error file and ends the process (watchdog thread).
  void end_hung_run(int64_t global_step, int64_t elapsed_ms);

  const int64_t timeout_ms_;
  SessionRunTimeoutOptions options_;
  std::string error_file_;      // TORCHELASTIC_ERROR_FILE at before_train, or ""
  std::string message_prefix_;  // "rank <r>: " in a group of several ranks

  // The run in progress, written by the training thread only: its start (steady clock, ns; 0
  // when no run is in progress) and the global_step it started at. The watchdog reads the pair as
  // a sequence lock does: start, step, start again.
  std::atomic<int64_t> run_start_ns_{0};
  std::atomic<int64_t> run_step_{0};

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;  // guarded by mutex_
  std::thread watchdog_;
};

}  // namespace trainpack
