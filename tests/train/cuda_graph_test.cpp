// The CUDA graph option on the CPU: what is refused (and the message), the fallback to eager with
// one warning, the same parameters as a run without the option, a step on a build without CUDA
// that runs eager; the pieces a capture relies on (StepContext's publish recorder,
// TowerRegistry's step record). tests/cuda/ runs the graph itself on a GPU; the fused Adam
// kernels' wrappers are tested in tests/detail/torch_compat_test.cpp.
#include "trainpack/train/cuda_graph.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "support/errors.h"
#include "support/linear_regression.h"
#include "trainpack/core/step_context.h"
#include "trainpack/core/tower_registry.h"
#include "trainpack/detail/cuda_streams.h"
#include "trainpack/detail/torch_compat.h"
#include "trainpack/testing.h"
#include "trainpack/train/config.h"
#include "trainpack/train/single_cost.h"

namespace trainpack {
namespace cuda_graph_test {

using testing::LinearRegressionModel;
using testing::LogCapture;
using testing::message_of;

// LinearRegressionModel with another optimizer.
class RmspropRegression : public LinearRegressionModel {
 public:
  std::unique_ptr<torch::optim::Optimizer> optimizer() override {
    return std::make_unique<torch::optim::RMSprop>(net->parameters(), 0.05);
  }
};
class AdamRegression : public LinearRegressionModel {
 public:
  std::unique_ptr<torch::optim::Optimizer> optimizer() override {
    return std::make_unique<torch::optim::Adam>(net->parameters(), 0.05);
  }
};

// Trains `model` for two epochs (6 steps) with `config`'s extras; returns the weights.
at::Tensor train(std::shared_ptr<LinearRegressionModel> model, TrainConfig config,
                 SimpleTrainer* trainer_out = nullptr) {
  SimpleTrainer local;
  SimpleTrainer& trainer = trainer_out ? *trainer_out : local;
  trainer.set_handle_signals(false);
  config.model(model)
      .dataflow(testing::linear_regression_batches())
      .callbacks({})
      .extra_callbacks({})
      .monitors({})
      .max_epoch(2);
  launch_train_with_config(config, trainer);
  return torch::cat({model->net->weight.detach().flatten(), model->net->bias.detach()});
}

TEST(CudaGraphOptionsTest, WarmupStepsBelowOneIsRefusedWhenSet) {
  SimpleTrainer trainer;
  const std::string message = message_of<std::invalid_argument>(
      [&] { trainer.set_cuda_graph(CudaGraphOptions().warmup_steps(0)); });
  EXPECT_NE(message.find("warmup_steps must be >= 1"), std::string::npos) << message;
  EXPECT_NE(message.find("got 0"), std::string::npos) << message;
  EXPECT_FALSE(trainer.cuda_graph().has_value());
}

TEST(CudaGraphRefusalTest, SgdAdamAndAdamWAreAcceptedAndOtherOptimizersAreNamed) {
  torch::nn::Linear net(2, 1);
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  EXPECT_EQ(cuda_graph_refusal(sgd, false, false, 1), "");
  EXPECT_EQ(cuda_graph_optimizer_kind(sgd), CudaGraphOptimizer::kSgd);
  torch::optim::Adam adam(net->parameters(), 0.1);
  torch::optim::AdamW adamw(net->parameters(), 0.1);
  EXPECT_EQ(cuda_graph_optimizer_kind(adam), CudaGraphOptimizer::kAdam);
  EXPECT_EQ(cuda_graph_optimizer_kind(adamw), CudaGraphOptimizer::kAdamW);
  if (compat::kHasFusedAdam) {
    EXPECT_EQ(cuda_graph_refusal(adam, false, false, 1), "");
    EXPECT_EQ(cuda_graph_refusal(adamw, false, false, 1), "");
  } else {  // LibTorch 1.13: no fused AdamW kernel
    EXPECT_EQ(cuda_graph_refusal(adam, false, false, 1),
              "the optimizer torch::optim::Adam is captured through ATen's fused Adam kernels, "
              "which this LibTorch " +
                  compat::torch_version() +
                  " lacks (2.0 and later have them); use torch::optim::SGD with a CUDA graph, or "
                  "a newer LibTorch");
    EXPECT_NE(cuda_graph_refusal(adamw, false, false, 1).find("torch::optim::AdamW"),
              std::string::npos);
  }
  torch::optim::RMSprop rmsprop(net->parameters(), 0.1);
  const std::string refusal = cuda_graph_refusal(rmsprop, false, false, 1);
  EXPECT_EQ(cuda_graph_optimizer_kind(rmsprop), CudaGraphOptimizer::kOther);
  EXPECT_NE(refusal.find("the optimizer torch::optim::RMSprop keeps host state"), std::string::npos)
      << refusal;
  EXPECT_NE(refusal.find("use torch::optim::SGD, Adam or AdamW"), std::string::npos) << refusal;
}

TEST(CudaGraphRefusalTest, LossScalingProcessorsAndAccumulationAreNamed) {
  torch::nn::Linear net(2, 1);
  torch::optim::SGD sgd(net->parameters(), 0.1);
  EXPECT_NE(cuda_graph_refusal(sgd, true, false, 1).find("dynamic loss scaling"),
            std::string::npos);
  EXPECT_NE(cuda_graph_refusal(sgd, false, true, 1).find("gradient processors"), std::string::npos);
  EXPECT_NE(cuda_graph_refusal(sgd, false, false, 4).find("gradient accumulation (4 batches"),
            std::string::npos);
}

// The refusal comes before the device's fallback, so that a CPU run already says what a GPU run
// would refuse.
TEST(CudaGraphTrainerTest, AnRmspropRunIsRefusedWhenTrainingStartsEvenOnTheCpu) {
  const std::string message = message_of<std::invalid_argument>([] {
    train(std::make_shared<RmspropRegression>(), TrainConfig().cuda_graph(CudaGraphOptions()));
  });
  EXPECT_NE(message.find("SimpleTrainer: the step cannot be captured as a CUDA graph: the "
                         "optimizer torch::optim::RMSprop keeps host state"),
            std::string::npos)
      << message;
}

TEST(CudaGraphTrainerTest, AnAdamRunIsAcceptedWhereTheFusedKernelsExist) {
  const std::string message = message_of<std::invalid_argument>([] {
    train(std::make_shared<AdamRegression>(), TrainConfig().cuda_graph(CudaGraphOptions()));
  });
  if (compat::kHasFusedAdam) {
    EXPECT_EQ(message, "<no exception>");  // on the CPU: trained eager, with the warning
  } else {
    EXPECT_NE(message.find("fused Adam kernels"), std::string::npos) << message;
  }
}

TEST(CudaGraphTrainerTest, AccumulationIsRefused) {
  const std::string message = message_of<std::invalid_argument>([] {
    train(std::make_shared<LinearRegressionModel>(),
          TrainConfig().cuda_graph(CudaGraphOptions()).accumulate_steps(3).steps_per_epoch(1));
  });
  EXPECT_NE(message.find("gradient accumulation (3 batches per step)"), std::string::npos)
      << message;
}

TEST(CudaGraphTrainerTest, OnTheCpuTrainingRunsEagerWithOneWarningAndTheSameParameters) {
  const at::Tensor eager = train(std::make_shared<LinearRegressionModel>(0.9), TrainConfig());
  LogCapture log;
  SimpleTrainer trainer;
  const at::Tensor with_option = train(std::make_shared<LinearRegressionModel>(0.9),
                                       TrainConfig().cuda_graph(CudaGraphOptions()), &trainer);
  EXPECT_TRUE(torch::equal(eager, with_option)) << eager << with_option;
  EXPECT_EQ(trainer.cuda_graph_step(), nullptr);
  int warnings = 0;
  for (const auto& line : log.lines()) {
    if (line.find("WRN [CudaGraph] the device is cpu, and CUDA graphs exist on CUDA devices "
                  "only: training runs eager") != std::string::npos) {
      ++warnings;
    }
  }
  EXPECT_EQ(warnings, 1);
}

TEST(CudaGraphStepTest, ACpuDeviceIsRefusedByTheStepItself) {
  torch::nn::Linear net(2, 1);
  torch::optim::SGD sgd(net->parameters(), 0.1);
  TowerRegistry registry;
  const std::string message = message_of<std::invalid_argument>(
      [&] { CudaGraphStep step(CudaGraphOptions(), c10::Device(c10::kCPU), sgd, registry); });
  EXPECT_NE(message.find("device cpu is not a CUDA device"), std::string::npos) << message;
}

// On a build without CUDA a step made for a CUDA device (which the trainer never makes: it falls
// back for a CPU device, and a CUDA device needs a GPU) runs eager, warm-up or not: zero_grad, the
// body, the optimizer's step; nothing captured, nothing replayed, no fall-back recorded.
TEST(CudaGraphStepTest, OnABuildWithoutCudaEveryStepRunsEager) {
  if (detail::built_with_cuda()) GTEST_SKIP() << "this build has CUDA: its steps are captured";
  torch::manual_seed(3);
  torch::nn::Linear net(2, 1);
  torch::nn::Linear reference(2, 1);
  {
    torch::NoGradGuard no_grad;
    reference->weight.copy_(net->weight);
    reference->bias.copy_(net->bias);
  }
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD reference_sgd(reference->parameters(),
                                  torch::optim::SGDOptions(0.1).momentum(0.9));
  TowerRegistry registry;
  CudaGraphStep step(CudaGraphOptions().warmup_steps(1), c10::Device(c10::kCUDA, 0), sgd, registry);
  NoOpTrainer trainer;
  StepContext ctx(trainer);
  const std::vector<at::Tensor> batch = {torch::tensor({{1.0f, 2.0f}, {3.0f, -1.0f}}),
                                         torch::tensor({{1.0f}, {0.5f}})};
  int bodies = 0;
  const CudaGraphStep::Body body = [&](StepContext&, const std::vector<at::Tensor>& in) {
    ++bodies;
    torch::mse_loss(net->forward(in[0]), in[1]).backward();
  };
  for (int64_t k = 1; k <= 4; ++k) {
    step.run(ctx, batch, body, k);
    reference_sgd.zero_grad();
    torch::mse_loss(reference->forward(batch[0]), batch[1]).backward();
    reference_sgd.step();
  }
  EXPECT_EQ(bodies, 4);
  EXPECT_EQ(step.captures(), 0);
  EXPECT_EQ(step.replays(), 0);
  EXPECT_FALSE(step.fell_back());
  EXPECT_TRUE(torch::equal(net->weight, reference->weight)) << net->weight << reference->weight;
  EXPECT_TRUE(torch::equal(net->bias, reference->bias));
}

TEST(StepContextRecorderTest, RecordsEveryPublishedNameRequestedOrNot) {
  NoOpTrainer trainer;
  StepContext ctx(trainer);
  std::vector<std::pair<std::string, at::Tensor>> recorded;
  const at::Tensor a = torch::tensor(1.0), b = torch::tensor(2.0);
  ctx.set_publish_recorder(&recorded);
  ctx.publish("cost", a);
  ctx.publish("wrong-top1", b);
  ctx.set_publish_recorder(nullptr);
  ctx.publish("after", a);
  ASSERT_EQ(recorded.size(), 2u);
  EXPECT_EQ(recorded[0].first, "cost");
  EXPECT_TRUE(recorded[0].second.is_same(a));
  EXPECT_EQ(recorded[1].first, "wrong-top1");
  EXPECT_TRUE(recorded[1].second.is_same(b));
}

TEST(TowerRegistryStepRecordTest, AReplayedRecordIsWhatTheStepRecorded) {
  TowerRegistry registry;
  const at::Tensor cost = torch::tensor(0.5), logits = torch::randn({4});
  int op_runs = 0;
  registry.record_summary("logits-histogram", TowerRegistry::SummaryKind::kHistogram, logits);
  registry.record_moving("cost", cost, 0.9);
  registry.record_update_op("ema", [&] { ++op_runs; });
  const TowerRegistry::StepRecord record = registry.step_record();
  ASSERT_EQ(record.summaries.size(), 1u);
  ASSERT_EQ(record.moving.size(), 1u);
  ASSERT_EQ(record.update_ops.size(), 1u);
  registry.update_moving_averages();
  registry.end_step();
  EXPECT_FALSE(registry.summaries()[0].value.defined());
  EXPECT_FALSE(registry.moving_averages()[0].latest.defined());

  registry.replay_step(record);
  EXPECT_TRUE(registry.summaries()[0].value.is_same(logits));
  EXPECT_EQ(registry.summaries()[0].kind, TowerRegistry::SummaryKind::kHistogram);
  EXPECT_TRUE(registry.moving_averages()[0].latest.is_same(cost));
  EXPECT_DOUBLE_EQ(registry.moving_averages()[0].decay, 0.9);
  registry.run_update_ops();
  EXPECT_EQ(op_runs, 1);
  EXPECT_EQ(registry.update_moving_averages(), 1u);
  EXPECT_EQ(registry.moving_averages()[0].updates, 2);
}

}  // namespace cuda_graph_test
}  // namespace trainpack
