#include "trainpack/utils/host_read.h"

#include <ATen/ATen.h>

#include <atomic>

namespace trainpack {
namespace {
// Only ever incremented and read: relaxed ordering is enough for a count.
std::atomic<uint64_t> host_reads{0};
}  // namespace

uint64_t host_read_count() noexcept { return host_reads.load(std::memory_order_relaxed); }

namespace detail {
void count_host_read() noexcept { host_reads.fetch_add(1, std::memory_order_relaxed); }
}  // namespace detail

at::Tensor to_host(const at::Tensor& t) {
  detail::count_host_read();
  return t.detach().to(at::kCPU).contiguous();
}

at::Tensor to_host(const at::Tensor& t, c10::ScalarType dtype) {
  detail::count_host_read();
  return t.detach().to(at::kCPU, dtype).contiguous();
}

}  // namespace trainpack
