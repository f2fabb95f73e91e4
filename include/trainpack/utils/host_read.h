// Reading a tensor's value on the host: the one place through which trainpack does it, counted.
// On a GPU such a read (.item(), .cpu(), .to(kCPU)) waits for the GPU: a device-to-host copy and
// a synchronisation of the stream. The rule, for the default callbacks and monitors and the main
// job's: a step reads no device value unless it displays or summarises something. Why, and which
// callbacks read on which steps: docs/gpu.md, "What waits for the GPU, and when".
//
// Every call below adds one to a process-wide counter (one relaxed atomic increment), whatever the
// tensor's device, so that a test on the CPU counts what would synchronise on a GPU. Tensors that
// are on the CPU by construction (files, checkpoint contents, buffers ranks exchange) are read
// directly, not through here.
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
