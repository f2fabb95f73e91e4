// detail/torch_compat.h: the version as messages name it, the fused Adam kernels' wrappers where
// this LibTorch lacks them, and the rule that the header states: no other file of the library
// tests the LibTorch version. (Autocast's wrappers are tested in train/precision_test.cpp; the
// fused kernels themselves run in a CUDA graph, in tests/cuda/.)
#include "trainpack/detail/torch_compat.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/errors.h"
#include "support/library_sources.h"

namespace trainpack {
namespace torch_compat_test {

namespace fs = std::filesystem;
using testing::message_of;

TEST(TorchCompat, TheVersionIsMajorDotMinor) {
  EXPECT_EQ(compat::torch_version(),
            std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR));
  EXPECT_EQ(TRAINPACK_TORCH_VERSION, TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR);
}

TEST(TorchCompat, TheFusedAdamKernelsAreThoseOf2Point0On) {
  EXPECT_EQ(compat::kHasFusedAdam, TORCH_VERSION_MAJOR >= 2);
}

// Never reached (cuda_graph_refusal refuses Adam and AdamW there first); if one is, it says why.
TEST(TorchCompat, WithoutTheFusedKernelsTheirWrappersAreLogicErrors) {
  if (compat::kHasFusedAdam) GTEST_SKIP() << "this LibTorch has the fused Adam kernels";
  const std::vector<at::Tensor> none;
  EXPECT_EQ(message_of<std::logic_error>([&] {
              compat::fused_adam_(none, none, none, none, none, none, 0.1, 0.9, 0.999, 0, 1e-8,
                                  false, false);
            }),
            "trainpack::compat::fused_adam_: LibTorch " + compat::torch_version() +
                " has no fused Adam kernels (2.0 and later have them); check "
                "compat::kHasFusedAdam first");
  EXPECT_EQ(message_of<std::logic_error>([&] {
              compat::fused_adamw_(none, none, none, none, none, none, 0.1, 0.9, 0.999, 0, 1e-8,
                                   false, false);
            }),
            "trainpack::compat::fused_adamw_: LibTorch " + compat::torch_version() +
                " has no fused Adam kernels (2.0 and later have them); check "
                "compat::kHasFusedAdam first");
}

// Every use of LibTorch's version macros (and of torch/version.h) under include/ and src/: the one
// header.
TEST(TorchCompat, OnlyItTestsTheVersion) {
  const fs::path root = fs::path(TRAINPACK_INCLUDE_DIR).parent_path();
  const std::regex version_re(
      R"re(\b(TORCH_VERSION_(MAJOR|MINOR|PATCH)|TRAINPACK_TORCH_VERSION)\b|<torch/version\.h>)re");
  const testing::SourceScan scan = testing::scan_library_sources(root, version_re);
  EXPECT_GT(scan.files, 150);
  EXPECT_EQ(scan.matching, std::vector<std::string>{"include/trainpack/detail/torch_compat.h"});
}

}  // namespace torch_compat_test
}  // namespace trainpack
