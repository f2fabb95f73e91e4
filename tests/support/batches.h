// Test support for the input sources' tests: the check that two runs delivered the same batches.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include <ATen/ATen.h>

namespace trainpack {
namespace testing {

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
