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

// tensorpack's ThroughputTracker: puts the training speed at every trigger (every epoch end by
// default): `Throughput (steps/sec)`, or with samples_per_step `Throughput (samples/sec)`. Only
// the time from before_epoch to after_epoch counts (not the epoch-end callbacks); each trigger
// divides the steps since the last one by that time and starts again. A trigger with no time
// measured since the last one puts nothing (tensorpack divides by zero). chief_only: false.
// Errors: std::invalid_argument if samples_per_step is given and not positive.
class ThroughputTracker : public Callback {
 public:
  // `clock`: seconds from any fixed point (FakeClock in tests); unset: a steady clock.
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

// tensorpack's HostMemoryTracker: puts `HostFreeMemory (GB)` (MemAvailable of /proc/meminfo /
// 1024^3) at every trigger (every epoch end by default), and logs `[HostMemoryTracker] Free RAM in
// setup_graph() is 12.34 GB.` (and `before_train()`). Where /proc/meminfo cannot be read: one
// warning, nothing put (tensorpack uses psutil). chief_only: false.
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
  // The NVML library to load; "": $TRAINPACK_NVML_LIBRARY, else libnvidia-ml.so.1.
  TORCH_ARG(std::string, nvml_library) = "";
};

// tensorpack's GPUUtilizationTracker: puts `GPUUtil/<device>`, the mean utilization (percent) of
// each watched GPU over each epoch, at trigger_epoch.
// When: setup_graph picks the devices and loads NVML at run time (utils/nvml.h); before_train
// starts a sampling thread (after_train joins it), which samples every `period` during each epoch
// (the sample after after_epoch is dropped unless it is the only one); trigger_epoch waits for the
// mean, at most `result_timeout` (in practice up to one period). chief_only: false.
// Inert, with one warning saying why: NVML cannot be loaded or initialised, no GPU, a device NVML
// does not know, a CUDA_VISIBLE_DEVICES that is not a list of indices.
// Errors: std::invalid_argument for an empty device list, a negative device or period, or a
// result_timeout that is not positive. A sampling failure stops training with
// StopTraining("GPUUtilizationTracker.worker has failed."); no result in time: std::runtime_error.
// See docs/looking-inside.md, "GPUUtilizationTracker".
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

// tensorpack's GPUMemoryTracker (PeakMemoryTracker): puts `PeakMemory(MB)/gpu:<i>`, the peak bytes
// the CUDA caching allocator had allocated / 1e6, on the last step of each epoch: its after_run
// reads each device's peak and resets it, so each value is the peak since the previous one.
// chief_only: false. Inert (the warning `GPUMemoryTracker only supports GPU!` at setup_graph, and
// no per-step cost) without CUDA or a visible GPU. Errors: std::invalid_argument for an empty
// device list or a negative device. Differences from tensorpack: the peak is reset at each
// reading; devices are indices only (not "/gpu:0").
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
