// StagingInput on a GPU: batches staged on a side stream come out on the device equal to the
// host batches, without a host sync (sync debug mode set to error around the takes), with the
// exact position; a slow step does not see its batch overwritten by the copies staged ahead.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "support/batches.h"
#include "support/cuda.h"
#include "support/linear_regression.h"
#include "trainpack/input/dataflow.h"
#include "trainpack/input/input_source.h"
#include "trainpack/input/staging_input.h"
#include "trainpack/train/config.h"
#include "trainpack/train/single_cost.h"

#ifdef TRAINPACK_WITH_CUDA
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace trainpack {
namespace staging_input_cuda_test {

using testing::expect_same_batches;
using testing::kXYBatchSignature;
using testing::shuffled_xy_batches;

// The first `n` batches of shuffled_xy_batches(), on the host (FeedInput on the CPU, no staging).
std::vector<std::vector<at::Tensor>> host_batches(int64_t n) {
  FeedInput feed(shuffled_xy_batches());
  for (const auto& cb : feed.setup(kXYBatchSignature, c10::Device(c10::kCPU))) cb->before_train();
  std::vector<std::vector<at::Tensor>> out;
  for (int64_t k = 0; k < n; ++k) out.push_back(feed.next_batch());
  return out;
}

#ifdef TRAINPACK_WITH_CUDA
// Sets the sync debug mode for its lifetime: L_ERROR turns any host sync into an exception.
class SyncDebugMode {
 public:
  explicit SyncDebugMode(c10::cuda::SyncDebugMode mode) {
    c10::cuda::warning_state().set_sync_debug_mode(mode);
  }
  ~SyncDebugMode() {
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
  }
  SyncDebugMode(const SyncDebugMode&) = delete;
  SyncDebugMode& operator=(const SyncDebugMode&) = delete;
};
#endif

// Takes `n` batches from `input` (set up on cuda:0, its callbacks' before_train run), each in a
// "step" that first keeps the compute stream busy (so that a copy staged ahead would overwrite a
// batch the step has not read yet, were the batch given back too early) and then clones the batch
// on the compute stream. Checks the position after every take. Returns the clones, on the host.
std::vector<std::vector<at::Tensor>> take_on_gpu(StagingInput& input, int64_t n, bool sync_error) {
  std::vector<std::vector<at::Tensor>> clones;
#ifdef TRAINPACK_WITH_CUDA
  {
    std::optional<SyncDebugMode> no_sync;
    if (sync_error) no_sync.emplace(c10::cuda::SyncDebugMode::L_ERROR);
    for (int64_t k = 1; k <= n; ++k) {
      std::vector<at::Tensor> batch = input.next_batch();
      EXPECT_EQ(input.consumed().pass, (k - 1) / 5) << "batch " << k;
      EXPECT_EQ(input.consumed().position, (k - 1) % 5 + 1) << "batch " << k;
      at::cuda::sleep(2000000);  // about a millisecond on the compute stream
      std::vector<at::Tensor> clone;
      for (const auto& t : batch) {
        EXPECT_EQ(t.device(), c10::Device(c10::kCUDA, 0));
        clone.push_back(t.clone());
      }
      clones.push_back(std::move(clone));
    }
  }
  for (auto& b : clones) {
    for (auto& t : b) t = t.cpu();
  }
#else
  (void)input;
  (void)n;
  (void)sync_error;
#endif
  return clones;
}

class StagingInputCuda : public ::testing::TestWithParam<int64_t> {};

INSTANTIATE_TEST_SUITE_P(StagingInputCuda, StagingInputCuda, ::testing::Values(1, 3),
                         [](const ::testing::TestParamInfo<int64_t>& info) {
                           return "nr_stage" + std::to_string(info.param);
                         });

TEST_P(StagingInputCuda, QueueInputsBatchesComeOutOnTheDeviceWithoutAHostSync) {
  TRAINPACK_REQUIRE_CUDA();
  const int64_t nr = GetParam();
  auto queue = std::make_shared<QueueInput>(shuffled_xy_batches(), QueueInputOptions().capacity(4));
  StagingInput input(queue, StagingInputOptions().nr_stage(nr));
  const auto callbacks = input.setup(kXYBatchSignature, c10::Device(c10::kCUDA, 0));
  EXPECT_EQ(queue->device(), c10::Device(c10::kCPU));  // the wrapped source copies nothing
  EXPECT_TRUE(queue->pin_host_batches());
  for (const auto& cb : callbacks) cb->before_train();  // starts QueueInput's thread
  const auto got = take_on_gpu(input, 12, /*sync_error=*/true);
  EXPECT_EQ(input.staged(), nr);
  EXPECT_EQ(queue->consumed().pass, (12 + nr - 1) / 5);  // the wrapped source is ahead
  EXPECT_EQ(queue->consumed().position, (12 + nr - 1) % 5 + 1);
  for (const auto& cb : callbacks) cb->after_train();
  EXPECT_EQ(input.staged(), 0);
  EXPECT_FALSE(queue->running());
  expect_same_batches(got, host_batches(12));
}

TEST_P(StagingInputCuda, FeedInputsBatchesArePinnedAndCopiedToo) {
  TRAINPACK_REQUIRE_CUDA();
  StagingInput input(std::make_shared<FeedInput>(shuffled_xy_batches()),
                     StagingInputOptions().nr_stage(GetParam()));
  const auto callbacks = input.setup(kXYBatchSignature, c10::Device(c10::kCUDA, 0));
  for (const auto& cb : callbacks) cb->before_train();
  const auto got = take_on_gpu(input, 7, /*sync_error=*/false);
  for (const auto& cb : callbacks) cb->after_train();
  expect_same_batches(got, host_batches(7));
}

TEST(StagingInputCudaPinning, QueueInputPinsOnItsThreadWhenAsked) {
  TRAINPACK_REQUIRE_CUDA();
  QueueInput queue(shuffled_xy_batches());
  queue.set_pin_host_batches(true);
  queue.setup(kXYBatchSignature, c10::Device(c10::kCPU));
  queue.start();
  const std::vector<at::Tensor> batch = queue.next_batch();
  queue.stop();
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_TRUE(batch[0].is_cpu());
  EXPECT_TRUE(batch[0].is_pinned());
  EXPECT_TRUE(batch[1].is_pinned());
}

// On the GPU: the same parameters through StagingInput as through FeedInput's own copies.
TEST(StagingInputCudaTraining, TrainingThroughItGivesTheSameParameters) {
  TRAINPACK_REQUIRE_CUDA();
  auto train = [](bool staged) {
    DataFlowPtr flow = testing::linear_regression_batches();
    auto model = std::make_shared<testing::LinearRegressionModel>(/*momentum=*/0.9);
    TrainConfig config = TrainConfig()
                             .model(model)
                             .extra_callbacks(std::vector<CallbackPtr>{})
                             .monitors(std::vector<MonitorPtr>{})
                             .max_epoch(4);
    if (staged) {
      config.data(std::make_shared<StagingInput>(std::make_shared<QueueInput>(flow),
                                                 StagingInputOptions().nr_stage(2)));
    } else {
      config.dataflow(flow);
    }
    SimpleTrainer trainer(torch::kCUDA);
    trainer.set_handle_signals(false);
    launch_train_with_config(config, trainer);
    EXPECT_EQ(trainer.global_step(), 12);
    return torch::cat(
        {model->net->weight.detach().cpu().flatten(), model->net->bias.detach().cpu()});
  };
  const at::Tensor plain = train(false);
  const at::Tensor staged = train(true);
  EXPECT_TRUE(staged.equal(plain)) << staged << "\nvs\n" << plain;
}

}  // namespace staging_input_cuda_test
}  // namespace trainpack
