// host_read: every call reads a value to the host and counts one read, whatever the device.
#include "trainpack/utils/host_read.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>

namespace trainpack {
namespace host_read_test {

TEST(HostRead, EachCallCountsOneRead) {
  HostReadCounter reads;
  EXPECT_EQ(reads.count(), 0u);
  EXPECT_EQ(host_scalar(at::full({}, 2.5, at::kFloat)), 2.5);
  EXPECT_EQ(reads.count(), 1u);
  EXPECT_EQ(host_scalar<int64_t>(at::full({1}, 7, at::kLong)), 7);
  EXPECT_EQ(host_scalar<float>(at::full({}, 0.5, at::kDouble)), 0.5f);
  EXPECT_TRUE(host_scalar<bool>(at::ones({3}).gt(0).all()));
  EXPECT_EQ(reads.count(), 4u);
  EXPECT_EQ(to_host(at::arange(3)).numel(), 3);
  EXPECT_EQ(to_host(at::arange(3), at::kDouble).scalar_type(), at::kDouble);
  EXPECT_EQ(reads.count(), 6u);
}

TEST(HostRead, TheCounterIsProcessWideAndASnapshotResets) {
  const uint64_t before = host_read_count();
  HostReadCounter reads;
  host_scalar(at::zeros({}));
  host_scalar(at::zeros({}));
  EXPECT_EQ(host_read_count(), before + 2);
  EXPECT_EQ(reads.count(), 2u);
  reads.reset();
  EXPECT_EQ(reads.count(), 0u);
  to_host(at::zeros({2}));
  EXPECT_EQ(reads.count(), 1u);
  EXPECT_EQ(host_read_count(), before + 3);
}

TEST(HostRead, ToHostIsDetachedContiguousAndOnTheCpu) {
  const at::Tensor w = at::arange(6, at::kFloat).reshape({2, 3}).requires_grad_(true);
  const at::Tensor t = to_host(w.t());  // a transposed view: not contiguous
  EXPECT_TRUE(t.is_cpu());
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_FALSE(t.requires_grad());
  EXPECT_TRUE(t.equal(w.detach().t().contiguous()));
  const at::Tensor d = to_host(w, at::kDouble);
  EXPECT_EQ(d.scalar_type(), at::kDouble);
  EXPECT_EQ(d.data_ptr<double>()[5], 5.0);
}

TEST(HostRead, AFailedReadStillCounts) {
  // The read was attempted (LibTorch throws for a tensor of two elements): counted before it.
  HostReadCounter reads;
  EXPECT_THROW(host_scalar(at::zeros({2})), c10::Error);
  EXPECT_EQ(reads.count(), 1u);
}

}  // namespace host_read_test
}  // namespace trainpack
