// Resource and speed trackers (tensorpack's callbacks/prof.py): ThroughputTracker,
// HostMemoryTracker.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "trainpack/callbacks/base.h"
#include "trainpack/utils/clock.h"

namespace trainpack {

// Puts the training speed into the monitors at every trigger (every epoch end).
//
//   callbacks.push_back(std::make_shared<ThroughputTracker>(/*samples_per_step=*/64));
//
// When: a timer runs from before_epoch to after_epoch only (epoch-end callbacks and before_epoch
// are not counted); before_train resets it and remembers global_step. At each trigger: the steps
// since the last one divided by the timed seconds; the timer and the step mark are reset.
// Puts: `Throughput (steps/sec)`, or with samples_per_step `Throughput (samples/sec)` = steps/sec
// times samples_per_step.
// chief_only: false.
// Errors: std::invalid_argument if samples_per_step is given and not positive.
//
// Differences from tensorpack: a trigger with no time measured since the last one (e.g. in
// before_train, under PeriodicTrigger(before_train=true)) puts nothing (tensorpack divides by
// zero).
class ThroughputTracker : public Callback {
 public:
  // `clock`: seconds from any fixed point (trainpack/testing.h's FakeClock in tests); unset: a
  // steady clock.
  explicit ThroughputTracker(std::optional<double> samples_per_step = std::nullopt,
                             Clock clock = {});

 protected:
  void _before_train() override;
  void _before_epoch() override;
  void _after_epoch() override;
  void _trigger() override;

 private:
  // tensorpack's pausable timer: seconds accumulate only while running.
  double timer_seconds() const;
  double now() const;
  void reset_mark();

  std::optional<double> samples_per_step_;
  Clock clock_;
  double accumulated_ = 0;
  double running_since_ = 0;
  bool running_ = false;
  int64_t last_step_ = 0;
};

// Puts the host's available memory into the monitors at every trigger (every epoch end).
//
//   callbacks.push_back(std::make_shared<HostMemoryTracker>());
//
// When: setup_graph and before_train log it; trigger puts it.
// Logs: `[HostMemoryTracker] Free RAM in setup_graph() is 12.34 GB.` and the same with
// `before_train()`.
// Puts: `HostFreeMemory (GB)` = MemAvailable of /proc/meminfo / 1024^3.
// chief_only: false.
//
// Differences from tensorpack: reads /proc/meminfo instead of psutil; where it cannot be read, a
// warning is logged once and nothing is put.
class HostMemoryTracker : public Callback {
 public:
  HostMemoryTracker() { set_chief_only(false); }

 protected:
  void _setup_graph() override;
  void _before_train() override;
  void _trigger() override;

 private:
  // Available memory in GiB; nullopt (after one warning) where it cannot be read.
  std::optional<double> available_gb();
  void log_free(const char* where);
  bool warned_ = false;
};

// MemAvailable of the text of /proc/meminfo, in bytes; nullopt when there is no such line.
std::optional<uint64_t> parse_meminfo_available(std::string_view meminfo);
// The host's available memory in bytes (MemAvailable of /proc/meminfo), or nullopt.
std::optional<uint64_t> host_available_memory_bytes();

}  // namespace trainpack
