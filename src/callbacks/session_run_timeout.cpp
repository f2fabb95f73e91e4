#include "trainpack/callbacks/session_run_timeout.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <utility>

#include "trainpack/core/trainer.h"
#include "trainpack/utils/error_file.h"
#include "trainpack/utils/logger.h"

namespace trainpack {

namespace {

// timeout_in_ms + grace_period at most this: their sum in nanoseconds, added to a steady-clock
// reading, stays far from int64's end.
constexpr int64_t kMaxLimitMs = 1000000000000;  // 10^12 ms, about 31 years
constexpr int64_t kNsPerMs = 1000000;

// steady_clock in nanoseconds (clock_gettime through the vDSO: no system call).
inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::chrono::steady_clock::time_point steady_time_point(int64_t ns) {
  return std::chrono::steady_clock::time_point(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::nanoseconds(ns)));
}

}  // namespace

SessionRunTimeoutError::SessionRunTimeoutError(int64_t global_step, int64_t elapsed_ms,
                                               int64_t timeout_in_ms)
    : std::runtime_error(
          fmt::format("Training failed at global_step={} (the step took {} ms, more than "
                      "timeout_in_ms={})",
                      global_step, elapsed_ms, timeout_in_ms)),
      global_step_(global_step),
      elapsed_ms_(elapsed_ms) {}

SessionRunTimeout::SessionRunTimeout(int64_t timeout_in_ms, SessionRunTimeoutOptions options)
    : timeout_ms_(timeout_in_ms), options_(std::move(options)) {
  if (timeout_in_ms <= 0) {
    throw std::invalid_argument(fmt::format(
        "SessionRunTimeout: timeout_in_ms must be > 0 (the longest a hooked run may take, in "
        "milliseconds), got {}",
        timeout_in_ms));
  }
  const int64_t grace = options_.grace_period().count();
  if (grace < 0) {
    throw std::invalid_argument(fmt::format(
        "SessionRunTimeout: grace_period must be >= 0 ms (how much longer than timeout_in_ms a "
        "run that has not returned may go on before the process is ended), got {} ms",
        grace));
  }
  if (timeout_in_ms > kMaxLimitMs || grace > kMaxLimitMs - timeout_in_ms) {
    throw std::invalid_argument(fmt::format(
        "SessionRunTimeout: timeout_in_ms ({}) plus grace_period ({} ms) must be at most {} ms",
        timeout_in_ms, grace, kMaxLimitMs));
  }
}

SessionRunTimeout::~SessionRunTimeout() { stop_watchdog(); }

void SessionRunTimeout::_before_train() {
  stop_watchdog();  // a callback trained twice gets a fresh watchdog
  error_file_ = torchrun_error_file_from_environment();
  message_prefix_ =
      trainer().world_size() > 1 ? fmt::format("rank {}: ", trainer().rank()) : std::string();
  run_start_ns_.store(0, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = false;
  }
  watchdog_ = std::thread([this] { watch(); });
}

RunArgs SessionRunTimeout::_before_run(const StepContext& /*ctx*/) {
  const int64_t start = now_ns();
  // The writer's half of a sequence lock: the step is written after the last run's "0" (its
  // release store orders them) and before this run's start. (Release stores, not fences:
  // ThreadSanitizer does not model fences; on x86 both are plain moves.)
  run_step_.store(global_step(), std::memory_order_release);
  run_start_ns_.store(start, std::memory_order_release);
  return RunArgs();
}

void SessionRunTimeout::_after_run(const StepContext& /*ctx*/, const RunValues& /*values*/) {
  const int64_t start = run_start_ns_.load(std::memory_order_relaxed);
  const int64_t end = now_ns();
  run_start_ns_.store(0, std::memory_order_release);
  if (start == 0) return;  // a wrapper ran after_run without before_run
  const int64_t elapsed_ms = (end - start) / kNsPerMs;
  if (elapsed_ms > timeout_ms_)
    throw SessionRunTimeoutError(global_step(), elapsed_ms, timeout_ms_);
}

void SessionRunTimeout::_after_train() {
  run_start_ns_.store(0, std::memory_order_release);
  stop_watchdog();
}

void SessionRunTimeout::stop_watchdog() {
  if (!watchdog_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  watchdog_.join();
}

void SessionRunTimeout::watch() {
  const int64_t limit_ms = timeout_ms_ + options_.grace_period().count();
  const int64_t limit_ns = limit_ms * kNsPerMs;
  int64_t handled = 0;  // the start of a hung run whose end_process returned
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    const int64_t start = run_start_ns_.load(std::memory_order_acquire);
    if (start == 0 || start == handled) {
      // No run, or one already reported: a run that starts now is looked at within limit_ms,
      // before it can be late.
      wake_.wait_for(lock, std::chrono::milliseconds(limit_ms));
      continue;
    }
    // The reader's half of the sequence lock: the step belongs to `start` only if no other run
    // began while it was read.
    const int64_t step = run_step_.load(std::memory_order_acquire);
    if (run_start_ns_.load(std::memory_order_relaxed) != start) continue;
    const int64_t now = now_ns();
    if (now - start < limit_ns) {
      wake_.wait_until(lock, steady_time_point(start + limit_ns));
      continue;
    }
    handled = start;
    lock.unlock();
    end_hung_run(step, (now - start) / kNsPerMs);
    lock.lock();
  }
}

void SessionRunTimeout::end_hung_run(int64_t global_step, int64_t elapsed_ms) {
  const std::string message = fmt::format(
      "Training failed at global_step={} (the step has run for {} ms without returning, more "
      "than timeout_in_ms={} plus grace_period={} ms); ending the process with exit code {}",
      global_step, elapsed_ms, timeout_ms_, options_.grace_period().count(), kExitCode);
  TP_LOG_ERROR("[SessionRunTimeout] {}", message);
  if (!error_file_.empty()) {
    try {
      write_torchrun_error_file(error_file_, message_prefix_ + "SessionRunTimeout: " + message);
    } catch (const std::exception& e) {
      TP_LOG_WARN("Could not write torchrun's error file {}: {}", error_file_, e.what());
    }
  }
  std::fflush(nullptr);
  if (options_.end_process()) {
    options_.end_process()(kExitCode);
  } else {
    std::_Exit(kExitCode);
  }
}

}  // namespace trainpack
