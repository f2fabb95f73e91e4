#include "trainpack/detail/cuda_streams.h"

#include <memory>
#include <stdexcept>
#include <string>

// TRAINPACK_WITH_CUDA: set by CMake when the LibTorch built against has CUDA. The only test of it
// in the library (see the header).
#ifdef TRAINPACK_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace trainpack::detail {

namespace {

// A CudaStream is made from a CUDAStream only (from_pool, current): no device-type check needed.
c10::cuda::CUDAStream cuda_stream_of(CudaStream stream) {
  return c10::cuda::CUDAStream(c10::cuda::CUDAStream::UNCHECKED, stream.stream());
}

}  // namespace

bool built_with_cuda() { return true; }

CudaStream CudaStream::from_pool(c10::DeviceIndex device) {
  return CudaStream(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device).unwrap());
}

CudaStream CudaStream::current(c10::DeviceIndex device) {
  return CudaStream(c10::cuda::getCurrentCUDAStream(device).unwrap());
}

c10::DeviceIndex current_cuda_device() { return c10::cuda::current_device(); }

void cuda_device_synchronize() { c10::cuda::device_synchronize(); }

void run_on(CudaStream stream, c10::function_ref<void()> fn) {
  c10::cuda::CUDAStreamGuard guard(cuda_stream_of(stream));
  fn();
}

void run_joined(CudaStream current, CudaStream side, c10::function_ref<void()> fn) {
  const c10::cuda::CUDAStream now = cuda_stream_of(current);
  const c10::cuda::CUDAStream s = cuda_stream_of(side);
  at::cuda::CUDAEvent ready;
  ready.record(now);
  ready.block(s);
  {
    c10::cuda::CUDAStreamGuard guard(s);
    fn();
  }
  at::cuda::CUDAEvent done;
  done.record(s);
  done.block(now);
}

struct CudaEvent::Impl {
  at::cuda::CUDAEvent event;
};

void CudaEvent::record(CudaStream stream) {
  if (!impl_) impl_ = std::make_unique<Impl>();
  impl_->event.record(cuda_stream_of(stream));
}

void CudaEvent::block(CudaStream stream) {
  if (impl_) impl_->event.block(cuda_stream_of(stream));  // never recorded: nothing, as ATen's
}

struct CudaGraph::Impl {
  at::cuda::CUDAGraph graph;
};

CudaGraph::CudaGraph() : impl_(std::make_unique<Impl>()) {}
void CudaGraph::capture_begin() { impl_->graph.capture_begin(); }
void CudaGraph::capture_end() { impl_->graph.capture_end(); }
void CudaGraph::replay() { impl_->graph.replay(); }

int64_t cuda_allocator_peak_bytes(c10::DeviceIndex device) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
  return stats.allocated_bytes[0].peak;  // [0]: StatType::AGGREGATE, every pool
}

void cuda_allocator_reset_peak(c10::DeviceIndex device) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(device);
}

}  // namespace trainpack::detail

#else  // !TRAINPACK_WITH_CUDA: every wrapper says that this build has no CUDA

namespace trainpack::detail {

namespace {

[[noreturn]] void throw_built_without_cuda(const char* what) {
  throw std::runtime_error(std::string(what) +
                           ": trainpack was built without CUDA (TRAINPACK_WITH_CUDA is not "
                           "defined)");
}

}  // namespace

bool built_with_cuda() { return false; }

CudaStream CudaStream::from_pool(c10::DeviceIndex /*device*/) {
  throw_built_without_cuda("trainpack::detail::CudaStream::from_pool");
}

CudaStream CudaStream::current(c10::DeviceIndex /*device*/) {
  throw_built_without_cuda("trainpack::detail::CudaStream::current");
}

c10::DeviceIndex current_cuda_device() {
  throw_built_without_cuda("trainpack::detail::current_cuda_device");
}

void cuda_device_synchronize() {
  throw_built_without_cuda("trainpack::detail::cuda_device_synchronize");
}

void run_on(CudaStream /*stream*/, c10::function_ref<void()> /*fn*/) {
  throw_built_without_cuda("trainpack::detail::run_on");
}

void run_joined(CudaStream /*current*/, CudaStream /*side*/, c10::function_ref<void()> /*fn*/) {
  throw_built_without_cuda("trainpack::detail::run_joined");
}

struct CudaEvent::Impl {};

void CudaEvent::record(CudaStream /*stream*/) {
  throw_built_without_cuda("trainpack::detail::CudaEvent::record");
}

void CudaEvent::block(CudaStream /*stream*/) {
  throw_built_without_cuda("trainpack::detail::CudaEvent::block");
}

struct CudaGraph::Impl {};

CudaGraph::CudaGraph() { throw_built_without_cuda("trainpack::detail::CudaGraph"); }
void CudaGraph::capture_begin() {
  throw_built_without_cuda("trainpack::detail::CudaGraph::capture_begin");
}
void CudaGraph::capture_end() {
  throw_built_without_cuda("trainpack::detail::CudaGraph::capture_end");
}
void CudaGraph::replay() { throw_built_without_cuda("trainpack::detail::CudaGraph::replay"); }

int64_t cuda_allocator_peak_bytes(c10::DeviceIndex /*device*/) {
  throw_built_without_cuda("trainpack::detail::cuda_allocator_peak_bytes");
}

void cuda_allocator_reset_peak(c10::DeviceIndex /*device*/) {
  throw_built_without_cuda("trainpack::detail::cuda_allocator_reset_peak");
}

}  // namespace trainpack::detail

#endif  // TRAINPACK_WITH_CUDA

// Both builds: what only moves the implementation around.
namespace trainpack::detail {

CudaEvent::CudaEvent() noexcept = default;
CudaEvent::~CudaEvent() = default;
CudaEvent::CudaEvent(CudaEvent&& other) noexcept = default;
CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept = default;

CudaGraph::~CudaGraph() = default;
CudaGraph::CudaGraph(CudaGraph&& other) noexcept = default;
CudaGraph& CudaGraph::operator=(CudaGraph&& other) noexcept = default;

}  // namespace trainpack::detail
