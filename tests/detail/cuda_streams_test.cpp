// detail/cuda_streams.h on a build without CUDA: built_with_cuda() says so, and each wrapper that
// can be called without a stream throws the message that names it (the others take a CudaStream,
// which such a build cannot make). An event is made, moved and dropped without CUDA. And the rule
// that the header states: no other file of the library tests TRAINPACK_WITH_CUDA.
// tests/cuda/ runs the wrappers on a GPU (through StagingInput, CudaGraphStep, GPUMemoryTracker).
#include "trainpack/detail/cuda_streams.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <iterator>
#include <regex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "support/errors.h"
#include "support/library_sources.h"

namespace trainpack {
namespace cuda_streams_test {

namespace fs = std::filesystem;
using testing::message_of;

std::string without_cuda(const std::string& what) {
  return what + ": trainpack was built without CUDA (TRAINPACK_WITH_CUDA is not defined)";
}

TEST(CudaStreams, WithoutCudaEveryWrapperThatTakesNoStreamSaysSo) {
  if (detail::built_with_cuda()) GTEST_SKIP() << "this build has CUDA";
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"trainpack::detail::CudaStream::from_pool", [] { detail::CudaStream::from_pool(0); }},
      {"trainpack::detail::CudaStream::current", [] { detail::CudaStream::current(-1); }},
      {"trainpack::detail::current_cuda_device", [] { detail::current_cuda_device(); }},
      {"trainpack::detail::cuda_device_synchronize", [] { detail::cuda_device_synchronize(); }},
      {"trainpack::detail::CudaGraph", [] { detail::CudaGraph graph; }},
      {"trainpack::detail::cuda_allocator_peak_bytes",
       [] { detail::cuda_allocator_peak_bytes(0); }},
      {"trainpack::detail::cuda_allocator_reset_peak",
       [] { detail::cuda_allocator_reset_peak(0); }},
  };
  for (const auto& [what, call] : calls) {
    EXPECT_EQ(message_of<std::runtime_error>(call), without_cuda(what));
  }
}

TEST(CudaStreams, AnEventIsMadeMovedAndDroppedWithoutCuda) {
  std::vector<detail::CudaEvent> spare;
  spare.reserve(2);
  spare.emplace_back();
  detail::CudaEvent event(std::move(spare.back()));
  spare.pop_back();
  spare.push_back(std::move(event));
  detail::CudaEvent other;
  other = std::move(spare.back());
  EXPECT_EQ(spare.size(), 1u);
}

// Every preprocessor test of TRAINPACK_WITH_CUDA under include/ and src/: the one file.
TEST(CudaStreams, OnlyItsSourceTestsTrainpackWithCuda) {
  const fs::path root = fs::path(TRAINPACK_INCLUDE_DIR).parent_path();
  const std::regex test_re(R"re(^\s*#\s*(if|ifdef|ifndef|elif)\b.*\bTRAINPACK_WITH_CUDA\b)re");
  const testing::SourceScan scan = testing::scan_library_sources(root, test_re);
  EXPECT_GT(scan.files, 150);
  EXPECT_EQ(scan.matching, std::vector<std::string>{"src/detail/cuda_streams.cpp"});
}

}  // namespace cuda_streams_test
}  // namespace trainpack
