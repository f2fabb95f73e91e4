// The one place where trainpack calls CUDA's runtime through LibTorch: streams, events, CUDA
// graphs and the caching allocator's statistics, behind small wrappers that name no CUDA type.
//
// TRAINPACK_WITH_CUDA (set by CMake when the LibTorch built against has CUDA) is tested in
// src/detail/cuda_streams.cpp only, nowhere else in the library: StagingInput, CudaGraphStep and
// GPUMemoryTracker call these wrappers, so that every line of their logic compiles on every build.
// On a build without it each wrapper throws std::runtime_error saying so ("...: trainpack was
// built without CUDA (TRAINPACK_WITH_CUDA is not defined)"); callers that have a message of their
// own for that case ask built_with_cuda() first. Nothing here allocates on the heap but a
// CudaEvent's first record() and a CudaGraph's creation, so that a step costs what the CUDA calls
// cost.
//
// Internal: users do not call these; they may change in any release.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/util/FunctionRef.h>

#include <cstdint>
#include <memory>

namespace trainpack::detail {

// Whether this build of trainpack has its CUDA code (TRAINPACK_WITH_CUDA was defined).
bool built_with_cuda();

// A CUDA stream of one device (a c10::cuda::CUDAStream, held as the c10::Stream it wraps: a
// value, copied freely).
class CudaStream {
 public:
  // A stream of the device's pool of side streams (c10::cuda::getStreamFromPool, low priority).
  static CudaStream from_pool(c10::DeviceIndex device);
  // The device's current stream (c10::cuda::getCurrentCUDAStream; -1: the current device).
  static CudaStream current(c10::DeviceIndex device);

  // The stream as c10 knows it (device type CUDA).
  const c10::Stream& stream() const { return stream_; }

 private:
  explicit CudaStream(c10::Stream stream) : stream_(stream) {}
  c10::Stream stream_;
};

// The current CUDA device's index (c10::cuda::current_device).
c10::DeviceIndex current_cuda_device();

// Waits on the host until the current device has finished all its work, on every stream
// (c10::cuda::device_synchronize).
void cuda_device_synchronize();

// Runs `fn` with `stream` as the current stream of its device (and that device current), both
// restored afterwards, also when `fn` throws (c10::cuda::CUDAStreamGuard).
void run_on(CudaStream stream, c10::function_ref<void()> fn);

// Runs `fn` on `side` (as run_on), ordered after the work queued on `current` so far and before
// the work queued on `current` afterwards: an event recorded on `current` that `side` waits for,
// then one recorded on `side` that `current` waits for. The host never waits. When `fn` throws,
// the exception leaves at once (`current` does not wait for `side`).
void run_joined(CudaStream current, CudaStream side, c10::function_ref<void()> fn);

// A CUDA event (at::cuda::CUDAEvent, timing off), movable. The event itself is created at the
// first record(), on the device of its stream; block() before any record() does nothing (as
// ATen's). Moved from, it is as a new one.
class CudaEvent {
 public:
  CudaEvent() noexcept;
  ~CudaEvent();
  CudaEvent(CudaEvent&& other) noexcept;
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  // Records the event at the present end of `stream`'s queue (cudaEventRecord).
  void record(CudaStream stream);
  // Makes `stream`'s later work wait for the last record (cudaStreamWaitEvent; the host does not
  // wait).
  void block(CudaStream stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A CUDA graph (at::cuda::CUDAGraph), created empty; movable.
class CudaGraph {
 public:
  CudaGraph();
  ~CudaGraph();
  CudaGraph(CudaGraph&& other) noexcept;
  CudaGraph& operator=(CudaGraph&& other) noexcept;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Starts capturing the work queued on the current stream (its own memory pool, global capture
  // mode: ATen's defaults).
  void capture_begin();
  // Ends the capture and instantiates the graph.
  void capture_end();
  // Launches the captured work on the current stream.
  void replay();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The CUDA caching allocator's statistics of `device`, all pools (StatType::AGGREGATE): the most
// bytes allocated at once since the last reset (c10::cuda::CUDACachingAllocator::getDeviceStats,
// allocated_bytes), and a reset of that peak to the bytes allocated now (resetPeakStats). The
// device's allocator must be initialised (a CUDA tensor was created on it).
int64_t cuda_allocator_peak_bytes(c10::DeviceIndex device);
void cuda_allocator_reset_peak(c10::DeviceIndex device);

}  // namespace trainpack::detail
