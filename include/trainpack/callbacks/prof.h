// Resource and speed trackers (tensorpack's callbacks/prof.py): ThroughputTracker,
// HostMemoryTracker, GPUUtilizationTracker, GPUMemoryTracker (PeakMemoryTracker).
#pragma once

#include <torch/arg.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "trainpack/core/callback.h"
#include "trainpack/utils/arg.h"
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

class Nvml;

namespace detail {
// How GPUUtilizationTracker picks its devices when none are given: `cuda_visible_devices` (the
// variable's value, null when unset) lists them; else {local_rank} when given (data-parallel
// training); else `devices` stays unset, meaning every GPU NVML reports. When there are none
// (the variable is empty, or lists something other than indices), `none_reason` says why.
struct GPUDeviceChoice {
  std::optional<std::vector<int64_t>> devices;
  std::string none_reason;
};
GPUDeviceChoice choose_gpu_devices(const char* cuda_visible_devices,
                                   std::optional<int64_t> local_rank);
}  // namespace detail

// Options of GPUUtilizationTracker.
struct GPUUtilizationTrackerOptions {
  // The GPUs to watch, by their physical (NVML) index. Unset: CUDA_VISIBLE_DEVICES (a comma
  // list; set but empty means none), else this process's local rank under data-parallel
  // training, else every GPU NVML reports. An empty list is std::invalid_argument.
  TRAINPACK_LIST_ARG(int64_t, devices);
  // Time between two samples within an epoch (tensorpack: 1 s). Tests shorten it.
  TORCH_ARG(std::chrono::milliseconds, period) = std::chrono::seconds(1);
  // How long trigger_epoch waits for the epoch's result (tensorpack: 60 s).
  TORCH_ARG(std::chrono::milliseconds, result_timeout) = std::chrono::seconds(60);
  // The NVML library to load; "": $TRAINPACK_NVML_LIBRARY, else libnvidia-ml.so.1
  // (utils/nvml.h).
  TORCH_ARG(std::string, nvml_library) = "";
};

// Puts the mean GPU utilization (percent) of each watched GPU over each epoch.
//
//   callbacks.push_back(std::make_shared<GPUUtilizationTracker>());
//   callbacks.push_back(std::make_shared<GPUUtilizationTracker>(std::vector<int64_t>{0, 1}));
//
// When: setup_graph picks the devices and loads NVML (utils/nvml.h; loaded at run time, so a
// machine without the NVIDIA driver runs the same program); before_train starts a sampling thread,
// after_train stops and joins it. before_epoch tells the thread to start; it then samples every
// GPU's utilization every `period` (1 s) and sums. after_epoch tells it to stop: at its next
// sample it drops that sample (taken after the epoch's steps ended) unless it is the only one, and
// hands over the mean. trigger_epoch waits for it, at most `result_timeout` (60 s); the wait is
// up to one period, as in tensorpack.
// Puts: `GPUUtil/<device>` per device at trigger_epoch, <device> the physical index as listed.
// chief_only: false.
// Inert (one warning that says why, no thread, puts nothing): NVML cannot be loaded (no driver),
// lacks a function or fails to initialise; no GPU (CUDA_VISIBLE_DEVICES empty, or NVML reports
// none); a device NVML does not know; CUDA_VISIBLE_DEVICES holds something other than indices.
// Errors: std::invalid_argument for an empty device list, a negative device, a negative period
// or a result_timeout that is not positive. A sampling failure during training is logged and stops
// training with StopTraining("GPUUtilizationTracker.worker has failed."); no result within
// result_timeout is a std::runtime_error.
//
// Differences from tensorpack: a thread instead of a process; without NVML or a GPU it warns and
// does nothing instead of failing (so one callback list serves CPU and GPU machines); under
// data-parallel training the local rank is used only when neither the argument nor
// CUDA_VISIBLE_DEVICES says otherwise.
class GPUUtilizationTracker : public Callback {
 public:
  GPUUtilizationTracker() : GPUUtilizationTracker(GPUUtilizationTrackerOptions()) {}
  explicit GPUUtilizationTracker(std::vector<int64_t> devices)
      : GPUUtilizationTracker(GPUUtilizationTrackerOptions().devices(std::move(devices))) {}
  explicit GPUUtilizationTracker(GPUUtilizationTrackerOptions options);
  ~GPUUtilizationTracker() override;

  // The devices watched, once set up (empty while inert).
  const std::vector<int64_t>& devices() const { return devices_; }
  // False when set up without NVML or a GPU (after the warning).
  bool enabled() const { return enabled_; }

 protected:
  void _setup_graph() override;
  void _before_train() override;
  void _before_epoch() override;
  void _after_epoch() override;
  void _trigger_epoch() override;
  void _after_train() override;

 private:
  // The devices to watch when none were given; nullopt (after the warning) when there are none.
  std::optional<std::vector<int64_t>> guess_devices();
  void disable(const std::string& why);
  // True from before_train to after_train when enabled: the sampling thread runs.
  bool sampling() const;
  void stop_sampler();

  GPUUtilizationTrackerOptions options_;
  std::vector<int64_t> devices_;
  bool enabled_ = false;
  std::shared_ptr<Nvml> nvml_;

  // The sampling thread and what it shares with the callback (src/callbacks/prof.cpp).
  struct Sampler;
  std::unique_ptr<Sampler> sampler_;
};

// Where GPUMemoryTracker reads the allocator's statistics: the CUDA caching allocator's by default
// (cuda_caching_allocator_stats()); tests pass their own.
class GPUMemoryStats {
 public:
  virtual ~GPUMemoryStats() = default;
  // The most bytes allocated on `device` at once since the last reset_peak (or the start).
  virtual int64_t peak_bytes(int64_t device) = 0;
  // Starts a new peak from the bytes allocated now.
  virtual void reset_peak(int64_t device) = 0;
};

// The CUDA caching allocator's statistics (c10::cuda::CUDACachingAllocator::getDeviceStats,
// allocated_bytes, all pools; resetPeakStats), or null when this LibTorch was built without CUDA
// or no GPU is visible.
std::shared_ptr<GPUMemoryStats> cuda_caching_allocator_stats();

// Puts the peak GPU memory in use (the CUDA caching allocator's) on the last step of each epoch.
//
//   callbacks.push_back(std::make_shared<GPUMemoryTracker>());            // device 0
//
// When: in the hooked runs of the step with local_step == steps_per_epoch - 1, after_run reads
// each device's peak and resets it, so each value is the peak since the previous one (the first:
// since the process started).
// Puts: `PeakMemory(MB)/gpu:<i>` = peak bytes / 1e6 (decimal MB, as tensorpack), at that step.
// chief_only: false.
// Inert (the warning `GPUMemoryTracker only supports GPU!` at setup_graph; it then costs nothing
// per step): this LibTorch has no CUDA, or no GPU is visible.
// Errors: std::invalid_argument for an empty device list or a negative device.
//
// Differences from tensorpack: the peak is reset at each reading (tensorpack's MaxBytesInUse is
// the peak since the start); devices are indices only (tensorpack also takes "/gpu:0").
class GPUMemoryTracker : public Callback {
 public:
  // `stats`: where the statistics come from; null: cuda_caching_allocator_stats().
  explicit GPUMemoryTracker(std::vector<int64_t> devices = {0},
                            std::shared_ptr<GPUMemoryStats> stats = nullptr);

  bool enabled() const { return stats_ != nullptr; }
  // Inert: the run hooks are not called at all.
  bool overrides(Hook hook) const override;

 protected:
  void _setup_graph() override;
  RunArgs _before_run(const StepContext& ctx) override;
  void _after_run(const StepContext& ctx, const RunValues& values) override;

 private:
  std::vector<int64_t> devices_;
  std::vector<std::string> keys_;  // `PeakMemory(MB)/gpu:<i>` of each device
  std::shared_ptr<GPUMemoryStats> stats_;
  bool read_this_run_ = false;
};

// tensorpack's other name for GPUMemoryTracker.
using PeakMemoryTracker = GPUMemoryTracker;

}  // namespace trainpack
