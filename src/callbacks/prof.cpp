#include "trainpack/callbacks/prof.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/cuda.h>

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "trainpack/core/exceptions.h"
#include "trainpack/core/monitor_base.h"
#include "trainpack/core/trainer.h"
#include "trainpack/detail/cuda_streams.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/nvml.h"

namespace trainpack {
// ---- ThroughputTracker ----

ThroughputTracker::ThroughputTracker(std::optional<double> samples_per_step, Clock clock)
    : samples_per_step_(samples_per_step), clock_(std::move(clock)) {
  set_chief_only(false);
  if (samples_per_step_ && !(*samples_per_step_ > 0)) {
    throw std::invalid_argument(fmt::format(
        "ThroughputTracker: samples_per_step must be positive, got {}", *samples_per_step_));
  }
}

double ThroughputTracker::timer_seconds() const {
  return accumulated_ + (running_ ? now() - running_since_ : 0.0);
}

void ThroughputTracker::reset_mark() {
  accumulated_ = 0;
  if (running_) running_since_ = now();
  last_step_ = global_step();
}

double ThroughputTracker::now() const { return read_clock(clock_, monotonic_seconds); }

void ThroughputTracker::_before_train() { reset_mark(); }

void ThroughputTracker::_before_epoch() {
  if (running_) return;
  running_ = true;
  running_since_ = now();
}

void ThroughputTracker::_after_epoch() {
  if (!running_) return;
  accumulated_ += now() - running_since_;
  running_ = false;
}

void ThroughputTracker::_trigger() {
  const double seconds = timer_seconds();
  const int64_t steps = global_step() - last_step_;
  reset_mark();
  if (!(seconds > 0)) return;
  const double steps_per_sec = static_cast<double>(steps) / seconds;
  if (samples_per_step_) {
    trainer().monitors().put_scalar("Throughput (samples/sec)", steps_per_sec * *samples_per_step_);
  } else {
    trainer().monitors().put_scalar("Throughput (steps/sec)", steps_per_sec);
  }
}

// ---- HostMemoryTracker ----

std::optional<uint64_t> parse_meminfo_available(std::string_view meminfo) {
  // A line "MemAvailable:   12345678 kB".
  constexpr std::string_view kKey = "MemAvailable:";
  size_t pos = 0;
  while (pos < meminfo.size()) {
    size_t end = meminfo.find('\n', pos);
    if (end == std::string_view::npos) end = meminfo.size();
    const std::string_view line = meminfo.substr(pos, end - pos);
    if (line.substr(0, kKey.size()) == kKey) {
      const std::string rest(line.substr(kKey.size()));
      char* parse_end = nullptr;
      const unsigned long long value = std::strtoull(rest.c_str(), &parse_end, 10);
      if (parse_end == rest.c_str()) return std::nullopt;
      const bool kb = std::string_view(parse_end).find("kB") != std::string_view::npos;
      return static_cast<uint64_t>(value) * (kb ? 1024u : 1u);
    }
    pos = end + 1;
  }
  return std::nullopt;
}

std::optional<uint64_t> host_available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return parse_meminfo_available(text.str());
}

std::optional<double> HostMemoryTracker::available_gb() {
  const auto bytes = host_available_memory_bytes();
  if (!bytes) {
    if (!warned_) {
      TP_LOG_WARN("[HostMemoryTracker] Cannot read MemAvailable from /proc/meminfo; not tracking.");
      warned_ = true;
    }
    return std::nullopt;
  }
  return static_cast<double>(*bytes) / (1024.0 * 1024.0 * 1024.0);
}

void HostMemoryTracker::log_free(const char* where) {
  if (const auto gb = available_gb()) {
    TP_LOG_INFO("[HostMemoryTracker] Free RAM in {} is {:.2f} GB.", where, *gb);
  }
}

void HostMemoryTracker::_setup_graph() { log_free("setup_graph()"); }
void HostMemoryTracker::_before_train() { log_free("before_train()"); }

void HostMemoryTracker::_trigger() {
  if (const auto gb = available_gb()) trainer().monitors().put_scalar("HostFreeMemory (GB)", *gb);
}

// ---- GPUUtilizationTracker ----

namespace detail {

GPUDeviceChoice choose_gpu_devices(const char* cuda_visible_devices,
                                   std::optional<int64_t> local_rank) {
  GPUDeviceChoice choice;
  if (cuda_visible_devices) {
    const std::string value = cuda_visible_devices;
    if (value.empty()) {
      choice.none_reason = "CUDA_VISIBLE_DEVICES is empty, so no GPU is visible";
      return choice;
    }
    std::vector<int64_t> devices;
    std::stringstream items(value);
    std::string item;
    while (std::getline(items, item, ',')) {
      const size_t first = item.find_first_not_of(" \t");
      const size_t last = item.find_last_not_of(" \t");
      item = first == std::string::npos ? "" : item.substr(first, last - first + 1);
      if (item.empty() || item.size() > 9 ||
          item.find_first_not_of("0123456789") != std::string::npos) {
        choice.none_reason = fmt::format(
            "CUDA_VISIBLE_DEVICES={} does not list GPU indices (give the devices to "
            "GPUUtilizationTracker)",
            value);
        return choice;
      }
      devices.push_back(std::stoll(item));
    }
    choice.devices = std::move(devices);
    return choice;
  }
  if (local_rank) choice.devices = std::vector<int64_t>{*local_rank};
  return choice;
}

}  // namespace detail

struct GPUUtilizationTracker::Sampler {
  std::shared_ptr<Nvml> nvml;
  std::vector<nvml::Device> handles;
  std::chrono::milliseconds period{1000};

  std::mutex mutex;
  std::condition_variable cv;
  bool start = false;  // before_epoch's signal; the thread clears it when it starts sampling
  bool stop = false;   // after_epoch's signal; the thread clears it when it hands the mean over
  bool exit = false;   // after_train: the thread returns at once
  bool done = false;   // the thread returned
  // One entry per epoch: the means, or nullopt when sampling failed.
  std::deque<std::optional<std::vector<double>>> results;
  std::thread thread;

  void run();
};

// tensorpack's worker, with a condition variable for its events.
void GPUUtilizationTracker::Sampler::run() {
  const size_t n = handles.size();
  std::unique_lock<std::mutex> lock(mutex);
  auto finish = [&] {
    done = true;
    cv.notify_all();
  };
  for (;;) {
    cv.wait(lock, [&] { return start || exit; });
    if (exit) return finish();
    start = false;
    cv.notify_all();  // after_epoch waits until the start was taken
    std::vector<double> sum(n, 0.0), sample(n, 0.0);
    int64_t count = 0;
    for (;;) {
      // Sleeps one period; only after_train wakes it early (a stop is seen after the sample).
      if (cv.wait_for(lock, period, [&] { return exit; })) return finish();
      lock.unlock();
      std::string error;
      try {
        for (size_t i = 0; i < n; ++i) sample[i] = nvml->gpu_utilization(handles[i]);
      } catch (const std::exception& e) {
        error = e.what();
      }
      lock.lock();
      if (!error.empty()) {
        TP_LOG_ERROR("Exception in GPUUtilizationTracker.worker: {}", error);
        results.emplace_back(std::nullopt);
        return finish();
      }
      for (size_t i = 0; i < n; ++i) sum[i] += sample[i];
      ++count;
      if (exit) return finish();
      if (stop) {
        stop = false;
        // The last sample was taken after the epoch's steps ended (usually lower): drop it,
        // unless it is the only one.
        if (count > 1) {
          for (size_t i = 0; i < n; ++i) sum[i] -= sample[i];
          --count;
        }
        for (double& s : sum) s /= static_cast<double>(count);
        results.emplace_back(std::move(sum));
        cv.notify_all();
        break;
      }
    }
  }
}

GPUUtilizationTracker::GPUUtilizationTracker(GPUUtilizationTrackerOptions options)
    : options_(std::move(options)) {
  set_chief_only(false);
  if (const auto& devices = options_.devices()) {
    if (devices->empty()) {
      throw std::invalid_argument(
          "[GPUUtilizationTracker] No GPU device given! (devices is an empty list; leave it unset "
          "to use CUDA_VISIBLE_DEVICES or every GPU)");
    }
    for (int64_t d : *devices) {
      if (d < 0) {
        throw std::invalid_argument(
            fmt::format("GPUUtilizationTracker: devices has {}; a GPU index must be >= 0", d));
      }
    }
  }
  if (options_.period().count() < 0) {
    throw std::invalid_argument(fmt::format("GPUUtilizationTracker: period must be >= 0 ms, got {}",
                                            options_.period().count()));
  }
  if (options_.result_timeout().count() <= 0) {
    throw std::invalid_argument(
        fmt::format("GPUUtilizationTracker: result_timeout must be positive, got {} ms",
                    options_.result_timeout().count()));
  }
}

GPUUtilizationTracker::~GPUUtilizationTracker() { stop_sampler(); }

void GPUUtilizationTracker::disable(const std::string& why) {
  TP_LOG_WARN("[GPUUtilizationTracker] Not tracking GPU utilization: {}.", why);
  enabled_ = false;
  devices_.clear();
  nvml_.reset();
}

void GPUUtilizationTracker::_setup_graph() {
  std::optional<std::vector<int64_t>> devices = options_.devices();
  if (!devices) {
    std::optional<int64_t> local_rank;
    if (const auto& group = trainer().process_group(); group && group->distributed()) {
      local_rank = group->local_rank();
    }
    auto choice = detail::choose_gpu_devices(std::getenv("CUDA_VISIBLE_DEVICES"), local_rank);
    if (!choice.none_reason.empty()) return disable(choice.none_reason);
    devices = std::move(choice.devices);
  }
  try {
    nvml_ = Nvml::open(options_.nvml_library());
  } catch (const NvmlError& e) {
    return disable(e.what());
  }
  try {
    if (!devices) {  // every GPU NVML reports
      const unsigned count = nvml_->device_count();
      if (count == 0) return disable("NVML reports no GPU");
      if (count > 1) {
        TP_LOG_WARN(
            "[GPUUtilizationTracker] Both devices and CUDA_VISIBLE_DEVICES are None! Will monitor "
            "all {} visible GPUs!",
            count);
      }
      devices.emplace();
      for (unsigned i = 0; i < count; ++i) devices->push_back(i);
    }
    sampler_ = std::make_unique<Sampler>();
    sampler_->nvml = nvml_;
    sampler_->period = options_.period();
    for (int64_t d : *devices) sampler_->handles.push_back(nvml_->device(static_cast<unsigned>(d)));
  } catch (const NvmlError& e) {
    sampler_.reset();
    return disable(e.what());
  }
  devices_ = std::move(*devices);
  enabled_ = true;
}

bool GPUUtilizationTracker::sampling() const {
  return enabled_ && sampler_ && sampler_->thread.joinable();
}

void GPUUtilizationTracker::_before_train() {
  if (!enabled_ || !sampler_ || sampler_->thread.joinable()) return;
  sampler_->thread = std::thread([s = sampler_.get()] { s->run(); });
}

void GPUUtilizationTracker::_before_epoch() {
  if (!sampling()) return;
  std::lock_guard<std::mutex> lock(sampler_->mutex);
  sampler_->start = true;
  sampler_->cv.notify_all();
}

void GPUUtilizationTracker::_after_epoch() {
  if (!sampling()) return;
  std::unique_lock<std::mutex> lock(sampler_->mutex);
  // tensorpack busy-waits here; the thread takes the start within microseconds.
  sampler_->cv.wait(lock, [s = sampler_.get()] { return !s->start || s->done; });
  sampler_->stop = true;
}

void GPUUtilizationTracker::_trigger_epoch() {
  if (!sampling()) return;
  std::optional<std::vector<double>> means;
  {
    std::unique_lock<std::mutex> lock(sampler_->mutex);
    Sampler* s = sampler_.get();
    s->cv.wait_for(lock, options_.result_timeout(), [s] { return !s->results.empty() || s->done; });
    if (s->results.empty()) {
      throw std::runtime_error(
          s->done ? "GPUUtilizationTracker.worker dies unexpectedly. This is a bug."
                  : "GPUUtilizationTracker.worker is stuck. This is a bug.");
    }
    means = std::move(s->results.front());
    s->results.pop_front();
  }
  if (!means) throw StopTraining("GPUUtilizationTracker.worker has failed.");
  for (size_t i = 0; i < devices_.size(); ++i) {
    trainer().monitors().put_scalar(fmt::format("GPUUtil/{}", devices_[i]), (*means)[i]);
  }
}

void GPUUtilizationTracker::_after_train() {
  stop_sampler();
  sampler_.reset();
  nvml_.reset();  // nvmlShutdown
}

void GPUUtilizationTracker::stop_sampler() {
  if (!sampler_ || !sampler_->thread.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(sampler_->mutex);
    sampler_->exit = true;
    sampler_->cv.notify_all();
  }
  sampler_->thread.join();
}

// ---- GPUMemoryTracker ----

namespace {

// On a build with CUDA only (detail/cuda_streams.h): cuda_caching_allocator_stats() returns none
// on a build without it.
class CudaCachingAllocatorStats : public GPUMemoryStats {
 public:
  int64_t peak_bytes(int64_t device) override {
    init(device);
    return detail::cuda_allocator_peak_bytes(static_cast<c10::DeviceIndex>(device));
  }
  void reset_peak(int64_t device) override {
    init(device);
    detail::cuda_allocator_reset_peak(static_cast<c10::DeviceIndex>(device));
  }

 private:
  // The allocator's per-device state exists once CUDA is initialised: creating a CUDA tensor does
  // that (a model on the GPU already did).
  void init(int64_t device) {
    if (initialised_) return;
    at::empty({0}, at::TensorOptions().device(at::kCUDA, static_cast<c10::DeviceIndex>(device)));
    initialised_ = true;
  }
  bool initialised_ = false;
};

}  // namespace

std::shared_ptr<GPUMemoryStats> cuda_caching_allocator_stats() {
  if (detail::built_with_cuda() && torch::cuda::is_available()) {
    return std::make_shared<CudaCachingAllocatorStats>();
  }
  return nullptr;
}

GPUMemoryTracker::GPUMemoryTracker(std::vector<int64_t> devices,
                                   std::shared_ptr<GPUMemoryStats> stats)
    : devices_(std::move(devices)), stats_(std::move(stats)) {
  set_chief_only(false);
  if (devices_.empty()) {
    throw std::invalid_argument(
        "GPUMemoryTracker: devices is an empty list; give at least one GPU index (default {0})");
  }
  for (int64_t d : devices_) {
    if (d < 0) {
      throw std::invalid_argument(
          fmt::format("GPUMemoryTracker: devices has {}; a GPU index must be >= 0", d));
    }
    keys_.push_back(fmt::format("PeakMemory(MB)/gpu:{}", d));
  }
}

bool GPUMemoryTracker::overrides(Hook hook) const {
  if ((hook == Hook::kBeforeRun || hook == Hook::kAfterRun) && is_set_up() && !stats_) {
    return false;
  }
  return Callback::overrides(hook);
}

void GPUMemoryTracker::_setup_graph() {
  if (stats_) return;
  stats_ = cuda_caching_allocator_stats();
  if (!stats_) TP_LOG_WARN("GPUMemoryTracker only supports GPU!");
}

RunArgs GPUMemoryTracker::_before_run(const StepContext& /*ctx*/) {
  read_this_run_ = stats_ && local_step() == trainer().steps_per_epoch() - 1;
  return RunArgs();
}

void GPUMemoryTracker::_after_run(const StepContext& /*ctx*/, const RunValues& /*values*/) {
  if (!read_this_run_) return;
  read_this_run_ = false;
  for (size_t i = 0; i < devices_.size(); ++i) {
    const int64_t bytes = stats_->peak_bytes(devices_[i]);
    stats_->reset_peak(devices_[i]);
    trainer().monitors().put_scalar(keys_[i], static_cast<double>(bytes) / 1e6);
  }
}

}  // namespace trainpack
