// Reading a tensor's value on the host: the one place through which trainpack does it, counted.
//
//   const double cost = host_scalar(values[0]);                    // values[0].item<double>()
//   const int64_t wrong = host_scalar<int64_t>(mask.sum());        // .item<int64_t>()
//   const bool finite = host_scalar<bool>(at::isfinite(g).all());  // .item<bool>()
//   const at::Tensor pixels = to_host(image);                      // contiguous, on the CPU
//   const at::Tensor d = to_host(values, at::kDouble);             // converted in the same copy
//
// Why: on a GPU, reading a value (.item(), .cpu(), .to(kCPU), data_ptr of the copy) waits until
// the GPU has computed it: a device-to-host copy and a synchronisation of the stream. Until then
// the host queues no more kernels, so the GPU then idles while the host prepares the next step.
// A model small enough that its step is bound by the host loses, with one such read per step,
// the overlap that makes the GPU fast. The rule, for the default callbacks and monitors and the
// main job's callbacks: a step reads no device value unless that step displays or summarises
// something (a progress-bar draw that shows values, the step MergeAllSummaries materialises, an
// epoch end...). docs/looking-inside.md lists which callbacks read, and on which steps.
//
// Counting: every call below adds one to a process-wide counter, whatever the tensor's device:
// a CPU tensor costs nothing to read, but a test on the CPU counts what would synchronise on a
// GPU. The cost is one relaxed atomic increment.
//
//   HostReadCounter reads;            // a snapshot of host_read_count()
//   trainer.run_step();
//   EXPECT_EQ(reads.count(), 0u);     // the step read nothing
//
// Left out, on purpose: tensors that are on the CPU by construction and hold no device value
// (files being parsed or written, checkpoint contents, the buffers that ranks exchange); reading
// those stays direct.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>

namespace trainpack {

// Reads (calls of host_scalar and to_host) since the process started, in every thread.
uint64_t host_read_count() noexcept;

// The reads since construction (or the last reset()), for tests: a snapshot, so that two of them
// never disturb each other and nothing global is reset. Reads of other threads count too.
class HostReadCounter {
 public:
  HostReadCounter() noexcept : start_(host_read_count()) {}
  uint64_t count() const noexcept { return host_read_count() - start_; }
  void reset() noexcept { start_ = host_read_count(); }

 private:
  uint64_t start_;
};

namespace detail {
void count_host_read() noexcept;
}  // namespace detail

// The value of a one-element tensor as T (double, float, int64_t, int32_t, bool...): t.item<T>(),
// counted. Errors: LibTorch's, for an undefined tensor or one with another number of elements.
template <typename T = double>
T host_scalar(const at::Tensor& t) {
  detail::count_host_read();
  return t.item<T>();
}

// `t` detached, on the CPU and contiguous, counted: a copy when `t` is on a device; `t` itself
// (or a view of it) when it already is on the CPU and contiguous, so do not write into it.
at::Tensor to_host(const at::Tensor& t);
// As above, converted to `dtype` (in the same copy when `t` is on a device).
at::Tensor to_host(const at::Tensor& t, c10::ScalarType dtype);

}  // namespace trainpack
