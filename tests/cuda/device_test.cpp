// The CUDA device itself: what every other test in tests/cuda/ relies on.
#include <torch/torch.h>

#include "support/cuda.h"

namespace device_test {

TEST(CudaDevice, ATensorRoundTripsThroughTheGpu) {
  TRAINPACK_REQUIRE_CUDA();
  const at::Tensor host = torch::arange(16, torch::kFloat32);
  const at::Tensor device = host.to(torch::kCUDA);
  EXPECT_TRUE(device.is_cuda());
  EXPECT_TRUE(torch::equal(device.cpu(), host));
}

}  // namespace device_test
