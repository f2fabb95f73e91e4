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
  // How much longer than timeout_in_ms a run that has not returned may go on before the watchdog
  // ends the process (one that returns within it fails training the ordinary way). >= 0.
  TORCH_ARG(std::chrono::milliseconds, grace_period) = std::chrono::seconds(60);
  // What ends the process once a run has hung: called on the watchdog thread with kExitCode,
  // after the message was logged and written to the error file. Unset: std::_Exit(kExitCode). A
  // function that returns leaves the process running, and the watchdog ignores that run (tests).
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

// tensorpack's SessionRunTimeout: fails training when a hooked run takes longer than
// `timeout_in_ms`, and ends the process when a run does not return at all (a collective that
// hangs because another rank died), instead of letting it hang forever.
// When: before_train starts the watchdog thread; before_run notes the run's start (a clock read,
// two atomic stores) and after_run its end; after_train (and the destructor) joins the watchdog.
// The time runs from this callback's before_run to its after_run.
// A run that returns late: after_run throws SessionRunTimeoutError (the step is counted), which
// the trainer handles as any failing callback (CallbackError, every after_train, out of train()).
// A run not returned after timeout_in_ms + grace_period: the watchdog logs ERR `[SessionRunTimeout]
// Training failed at global_step=<gs> (the step has run for <t> ms without returning, ...); ending
// the process with exit code 124`, writes it to TORCHELASTIC_ERROR_FILE when set, and ends the
// process with kExitCode (no destructors, no after_train).
// After a step that threw, it watches until its own after_train: list it before callbacks whose
// after_train is slow. chief_only: true (set_chief_only(false) to watch every rank).
// Errors: std::invalid_argument at construction when timeout_in_ms <= 0, grace_period < 0, or the
// two add up to more than 10^12 ms. See docs/looking-inside.md, "Step timeouts".
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

  // The run in progress, written by the training thread only: its start (steady clock, ns; 0: none)
  // and its global_step. The watchdog reads them as a sequence lock does: start, step, start.
  std::atomic<int64_t> run_start_ns_{0};
  std::atomic<int64_t> run_step_{0};

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;  // guarded by mutex_
  std::thread watchdog_;
};

}  // namespace trainpack
