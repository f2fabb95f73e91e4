// Training on a GPU: checkpoints that move between the GPU and the CPU, the GPU trackers,
// GraphProfiler's CUDA events, SessionRunTimeout on a step the GPU holds up.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "support/cuda.h"
#include "support/linear_regression.h"
#include "support/temp_dir.h"
#include "trainpack/testing.h"
#include "trainpack/trainpack.h"

#ifdef TRAINPACK_WITH_CUDA
#include <ATen/cuda/Sleep.h>
#endif

namespace trainpack {
namespace training_cuda_test {

using testing::LinearRegressionModel;

// LinearRegressionModel with momentum (optimizer state to move between devices), and its weights
// on the host.
class Regression : public LinearRegressionModel {
 public:
  Regression() : LinearRegressionModel(/*momentum=*/0.9) {}
  at::Tensor weights() const {
    return torch::cat({net->weight.detach().cpu().flatten(), net->bias.detach().cpu()});
  }
};

DataFlowPtr batches() { return testing::linear_regression_batches(); }

class TrainingCuda : public testing::TempDirFixture<> {
 protected:
  // Trains (or resumes, in dir()) to `max_epoch` on `device`, saving every epoch.
  at::Tensor run(c10::Device device, int64_t max_epoch, std::vector<CallbackPtr> extra = {}) {
    logger::set_logger_dir(dir().string(), 'k');
    auto model = std::make_shared<Regression>();
    SimpleTrainer trainer(device);
    trainer.set_handle_signals(false);
    extra.push_back(std::make_shared<ModelSaver>());
    launch_train_with_config(
        AutoResumeTrainConfig(
            TrainConfig().model(model).dataflow(batches()).callbacks(extra).monitors({}).max_epoch(
                max_epoch)),
        trainer);
    logger::unset_logger_dir();
    return model->weights();
  }
};

// Trains on the CPU only, in its own directory: the reference.
at::Tensor cpu_reference(int64_t max_epoch) {
  auto model = std::make_shared<Regression>();
  SimpleTrainer trainer;
  trainer.set_handle_signals(false);
  launch_train_with_config(
      TrainConfig().model(model).dataflow(batches()).callbacks({}).monitors({}).max_epoch(
          max_epoch),
      trainer);
  return model->weights();
}

TEST_F(TrainingCuda, AGpuRunResumesOnTheCpuAndBack) {
  TRAINPACK_REQUIRE_CUDA();
  run(c10::Device(c10::kCUDA, 0), 2);  // epochs 1-2 on the GPU
  run(c10::Device(c10::kCPU), 4);      // 3-4 on the CPU, from the GPU's checkpoint
  const at::Tensor end = run(c10::Device(c10::kCUDA, 0), 6);  // 5-6 on the GPU again
  EXPECT_TRUE(torch::allclose(end, cpu_reference(6), 1e-4, 1e-5)) << end << cpu_reference(6);
}

TEST_F(TrainingCuda, GpuMemoryTrackerPutsThePeakOfTheTrainingDevice) {
  TRAINPACK_REQUIRE_CUDA();
  logger::set_logger_dir(dir().string(), 'k');
  auto model = std::make_shared<Regression>();
  SimpleTrainer trainer(c10::Device(c10::kCUDA, 0));
  trainer.set_handle_signals(false);
  launch_train_with_config(TrainConfig()
                               .model(model)
                               .dataflow(batches())
                               .callbacks({std::make_shared<GPUMemoryTracker>()})
                               .monitors({})
                               .max_epoch(2),
                           trainer);
  const auto history = trainer.monitors().get_history("PeakMemory(MB)/gpu:0");
  ASSERT_EQ(history.size(), 2u);
  EXPECT_GT(history.back().second, 0.0);
}

TEST_F(TrainingCuda, GpuUtilizationTrackerReadsTheDriver) {
  TRAINPACK_REQUIRE_CUDA();
  logger::set_logger_dir(dir().string(), 'k');
  auto model = std::make_shared<Regression>();
  SimpleTrainer trainer(c10::Device(c10::kCUDA, 0));
  trainer.set_handle_signals(false);
  testing::LogCapture log;
  launch_train_with_config(TrainConfig()
                               .model(model)
                               .dataflow(batches())
                               .callbacks({std::make_shared<GPUUtilizationTracker>()})
                               .monitors({})
                               .max_epoch(2),
                           trainer);
  bool any = false;
  for (const auto& line : log.lines()) {
    if (line.find("Not tracking GPU utilization") != std::string::npos) {
      GTEST_SKIP() << "NVML is not usable here: " << line;
    }
  }
  for (int64_t d = 0; d < 16; ++d) {
    const auto history = trainer.monitors().get_history("GPUUtil/" + std::to_string(d));
    if (history.empty()) continue;
    any = true;
    EXPECT_EQ(history.size(), 2u);
    EXPECT_GE(history.back().second, 0.0);
    EXPECT_LE(history.back().second, 100.0);
  }
  EXPECT_TRUE(any) << "no GPUUtil/<device> scalar was put";
}

TEST_F(TrainingCuda, GraphProfilerWritesTheCudaEventsOfTheStep) {
  TRAINPACK_REQUIRE_CUDA();
  logger::set_logger_dir(dir().string(), 'k');
  auto model = std::make_shared<Regression>();
  SimpleTrainer trainer(c10::Device(c10::kCUDA, 0));
  trainer.set_handle_signals(false);
  launch_train_with_config(
      TrainConfig()
          .model(model)
          .dataflow(batches())
          .callbacks({std::make_shared<EnableCallbackIf>(
              std::make_shared<GraphProfiler>(),
              [](const EnableCallbackIf& self) { return self.global_step() == 1; })})
          .monitors({})
          .max_epoch(1),
      trainer);
  std::ifstream in(dir() / "chrome-trace-2.json");
  ASSERT_TRUE(in.good()) << "no chrome-trace-2.json";
  std::stringstream text;
  text << in.rdbuf();
  const std::string trace = text.str();
  EXPECT_TRUE(std::regex_search(trace, std::regex(R"re("cuda:0 \(CUDA events\)")re"))) << trace;
  EXPECT_TRUE(std::regex_search(trace, std::regex(R"re("cat"\s*:\s*"cuda_event")re")));
  EXPECT_TRUE(std::regex_search(trace, std::regex(R"re("cat"\s*:\s*"cpu_op")re")));
}

#ifdef TRAINPACK_WITH_CUDA
// A step that waits for a GPU kernel spinning far longer than the timeout, as a hung kernel or a
// collective stuck on the GPU does.
class GpuHangTrainer : public Trainer {
 public:
  void run_step() override {
    hooked_run([](StepContext&) {
      at::cuda::sleep(int64_t{8} * 1000 * 1000 * 1000);  // some seconds at GPU clocks
      torch::cuda::synchronize();
    });
  }
};
#endif

TEST_F(TrainingCuda, SessionRunTimeoutEndsAStepHeldUpByTheGpu) {
  TRAINPACK_REQUIRE_CUDA();
#ifdef TRAINPACK_WITH_CUDA
  std::atomic<int> ended_with{-1};
  GpuHangTrainer trainer;
  trainer.set_handle_signals(false);
  auto timeout = std::make_shared<SessionRunTimeout>(
      200, SessionRunTimeoutOptions()
               .grace_period(std::chrono::milliseconds(200))
               .end_process([&](int code) { ended_with = code; }));
  trainer.train({timeout}, {}, /*steps_per_epoch=*/1, /*starting_epoch=*/1, /*max_epoch=*/1);
  EXPECT_EQ(ended_with.load(), SessionRunTimeout::kExitCode);
#endif
}

}  // namespace training_cuda_test
}  // namespace trainpack
