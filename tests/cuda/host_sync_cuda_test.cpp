// The rule of trainpack/utils/host_read.h on a GPU: with the default callbacks and monitors and
// the main job's callbacks, the steps that neither display nor summarise synchronise nothing.
// CUDA's sync debug mode (c10::cuda::SyncDebugMode::L_ERROR, what torch.cuda.set_sync_debug_mode
// sets) is on from the first before_run of each such step to the first before_run of the next:
// any .item(), copy to the host or other synchronising call there throws, and the run fails with
// LibTorch's "called a synchronizing CUDA operation" and the stack.
//
// The steps that display or summarise are the last one of every epoch: the ProgressBar's interval
// is too long for any other draw, and MergeAllSummaries materialises at epoch ends only (the one
// under PeriodicTrigger puts, every 5 steps, the summary of the last epoch end: guarded too).
// The data are made on the GPU, so that feeding them copies nothing.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "support/cuda.h"
#include "support/host_reads.h"
#include "support/temp_dir.h"
#include "trainpack/trainpack.h"

#ifdef TRAINPACK_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace trainpack {
namespace host_sync_cuda_test {

#ifdef TRAINPACK_WITH_CUDA
void set_sync_debug(bool error) {
  c10::cuda::warning_state().set_sync_debug_mode(error ? c10::cuda::SyncDebugMode::L_ERROR
                                                       : c10::cuda::SyncDebugMode::L_DISABLED);
}

// Turns the sync debug mode off when the test ends, whatever happened.
struct SyncDebugOff {
  ~SyncDebugOff() { set_sync_debug(false); }
};

// Register first: its before_run is the first hook of a step. Counts the steps it guarded.
class GuardQuietSteps : public Callback {
 public:
  explicit GuardQuietSteps(int64_t steps_per_epoch) : steps_per_epoch_(steps_per_epoch) {}
  int64_t guarded = 0;

 protected:
  RunArgs _before_run(const StepContext& /*ctx*/) override {
    const bool quiet = (global_step() + 1) % steps_per_epoch_ != 0;
    set_sync_debug(quiet);
    if (quiet) ++guarded;
    return RunArgs();
  }
  void _after_train() override { set_sync_debug(false); }

 private:
  int64_t steps_per_epoch_;
};
#endif

class HostSyncCuda : public testing::TempDirFixture<> {};

TEST_F(HostSyncCuda, QuietStepsOfTheMainJobsCallbacksDoNotSynchronise) {
  TRAINPACK_REQUIRE_CUDA();
#ifndef TRAINPACK_WITH_CUDA
  GTEST_SKIP() << "this build has no TRAINPACK_WITH_CUDA (no CUDA LibTorch)";
#else
  SyncDebugOff off;
  logger::set_logger_dir(dir().string(), 'k');
  constexpr int64_t kStepsPerEpoch = 8, kEpochs = 3, kBatch = 4;
  const c10::Device gpu(c10::kCUDA, 0);
  SimpleTrainer trainer(gpu);
  trainer.set_handle_signals(false);
  testing::add_scale_variable(trainer, gpu);
  int64_t draws = 0;
  ProgressBarOptions bar;
  bar.names({"cost"}).sink([&](std::string_view) { ++draws; }).refresh_interval(1e9).clock([&] {
    return static_cast<double>(trainer.global_step());
  });
  testing::MainJobLists lists = testing::main_job_lists(
      dir(), testing::regression_points(gpu, 8, kBatch), std::move(bar), kBatch);
  auto guard = std::make_shared<GuardQuietSteps>(kStepsPerEpoch);
  std::vector<CallbackPtr> callbacks{guard};
  callbacks.insert(callbacks.end(), lists.callbacks.begin(), lists.callbacks.end());
  auto model = std::make_shared<testing::SummarisingRegression>();
  launch_train_with_config(
      TrainConfig()
          .model(model)
          .dataflow(testing::regression_points(gpu, kStepsPerEpoch * kBatch, kBatch))
          .callbacks(callbacks)
          .extra_callbacks(lists.defaults)
          .monitors(lists.monitors)
          .max_epoch(kEpochs),
      trainer);
  set_sync_debug(false);
  logger::unset_logger_dir();

  EXPECT_EQ(guard->guarded, (kStepsPerEpoch - 1) * kEpochs);
  EXPECT_EQ(draws, kEpochs);  // the epochs' last lines only
  EXPECT_EQ(model->steps.item<int64_t>(), kStepsPerEpoch * kEpochs);
  EXPECT_EQ(trainer.graph().variable("scale").get(), 0.25);  // points 5 and 17 of 24 steps
  EXPECT_EQ(trainer.monitors().get_history("cost").size(), static_cast<size_t>(kEpochs));
#endif
}

}  // namespace host_sync_cuda_test
}  // namespace trainpack
