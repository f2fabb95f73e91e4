// Test support: the tests that need a CUDA GPU (tests/cuda/).
#pragma once

#include <gtest/gtest.h>
#include <torch/cuda.h>

// Skips the test, saying why, unless this LibTorch has CUDA and a GPU is visible. The message is
// what `ctest -L cuda` shows on a machine without one: nothing there ran on a GPU.
#define TRAINPACK_REQUIRE_CUDA()                                                           \
  do {                                                                                     \
    if (!torch::cuda::is_available()) {                                                    \
      GTEST_SKIP() << "needs a CUDA GPU: this LibTorch has no CUDA, or no GPU is visible " \
                      "(torch::cuda::is_available() is false)";                            \
    }                                                                                      \
  } while (false)
