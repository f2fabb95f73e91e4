// Test support for the input sources' tests: datapoints of two components, batches of them, and
// the check that two runs delivered the same batches.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/ATen.h>

#include "trainpack/input/dataflow.h"
#include "trainpack/input/input_desc.h"

namespace trainpack {
namespace testing {

// Datapoints {x: float [2] = (i, -i), y: long i} for i in [0, n).
inline std::vector<Datapoint> xy_points(int64_t n) {
  std::vector<Datapoint> out;
  for (int64_t i = 0; i < n; ++i) {
    const auto v = static_cast<double>(i);
    out.push_back({at::tensor({v, -v}, at::kFloat), at::scalar_tensor(i, at::kLong)});
  }
  return out;
}

// The signature of batches of xy_points.
inline const InputSignature kXYBatchSignature = {InputDesc("x", {-1, 2}),
                                                 InputDesc("y", {-1}, at::kLong)};

// 10 xy_points shuffled (seeded) in batches of 2: 5 batches a pass, each pass in its own order.
inline DataFlowPtr shuffled_xy_batches() {
  return std::make_shared<BatchData>(
      std::make_shared<DataFromList>(xy_points(10), DataFromListOptions().shuffle(true).seed(5)),
      2);
}

// `a` and `b` hold as many batches, each of as many components, of the same dtypes and values
// (printed when they differ).
inline void expect_same_batches(const std::vector<std::vector<at::Tensor>>& a,
                                const std::vector<std::vector<at::Tensor>>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    ASSERT_EQ(a[k].size(), b[k].size()) << "batch " << k;
    for (size_t c = 0; c < a[k].size(); ++c) {
      EXPECT_EQ(a[k][c].scalar_type(), b[k][c].scalar_type()) << "batch " << k;
      EXPECT_TRUE(a[k][c].equal(b[k][c])) << "batch " << k << " component " << c << ":\n"
                                          << a[k][c] << "\nvs\n"
                                          << b[k][c];
    }
  }
}

}  // namespace testing
}  // namespace trainpack
