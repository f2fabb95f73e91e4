// The training step as a CUDA graph, on a GPU: the same parameters as eager steps, the fetched
// costs of every step, a schedule that captures again, a batch of other shapes that falls back,
// no host sync while replaying, and a stopped-and-resumed run equal to one never stopped.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "support/cuda.h"
#include "support/temp_dir.h"
#include "trainpack/testing.h"
#include "trainpack/trainpack.h"

#ifdef TRAINPACK_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace trainpack {
namespace cuda_graph_cuda_test {

// A small MLP on 64 random points of 16 features, 8 classes; batches of 16 (4 steps per epoch),
// or of 24 with the remainder (24, 24, 16: shapes that change).
class Mlp : public ModelDesc {
 public:
  explicit Mlp(std::string optimizer = "sgd") : optimizer_(std::move(optimizer)) {
    torch::manual_seed(7);
    net_ = torch::nn::Sequential(torch::nn::Linear(16, 32), torch::nn::ReLU(),
                                 torch::nn::Linear(32, 8));
  }
  InputSignature inputs() const override {
    return {InputDesc("x", {-1, 16}), InputDesc("label", {-1}, at::kLong)};
  }
  std::shared_ptr<torch::nn::Module> module() override { return net_.ptr(); }
  at::Tensor build_graph(TowerContext& ctx, const std::vector<at::Tensor>& in) override {
    const at::Tensor logits = net_->forward(in[0]);
    const at::Tensor cost = torch::cross_entropy_loss(logits, in[1]);
    ctx.output("logits", logits);
    ctx.add_moving_summary("cost", cost);
    return cost;
  }
  std::unique_ptr<torch::optim::Optimizer> optimizer() override {
    if (optimizer_ == "adam") {
      return std::make_unique<torch::optim::Adam>(
          net_->parameters(), torch::optim::AdamOptions(0.01).weight_decay(1e-4));
    }
    if (optimizer_ == "adamw") {
      return std::make_unique<torch::optim::AdamW>(net_->parameters(),
                                                   torch::optim::AdamWOptions(0.01));
    }
    return std::make_unique<torch::optim::SGD>(
        net_->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9).nesterov(true));
  }
  at::Tensor weights() const {
    std::vector<at::Tensor> all;
    for (const auto& p : net_->parameters()) all.push_back(p.detach().cpu().flatten());
    return torch::cat(all);
  }

 private:
  torch::nn::Sequential net_{nullptr};
  std::string optimizer_;
};

DataFlowPtr batches(int64_t batch_size = 16, bool remainder = false) {
  torch::manual_seed(11);
  const at::Tensor x = torch::randn({64, 16});
  const at::Tensor y = torch::randint(0, 8, {64}, at::kLong);
  std::vector<Datapoint> points;
  for (int64_t i = 0; i < 64; ++i) points.push_back({x[i].clone(), y[i].clone()});
  return std::make_shared<BatchData>(std::make_shared<DataFromList>(points), batch_size, remainder);
}

struct Outcome {
  at::Tensor weights;
  std::vector<double> costs;  // the cost fetched at every step
  int64_t captures = 0;
  int64_t replays = 0;
  bool fell_back = false;
};

// Trains an Mlp on cuda:0 for `epochs` epochs; `graph`: with the CUDA graph.
Outcome train(bool graph, int64_t epochs, std::vector<CallbackPtr> callbacks = {},
              DataFlowPtr data = batches(), const std::string& optimizer = "sgd") {
  auto model = std::make_shared<Mlp>(optimizer);
  Outcome run;
  auto fetch = std::make_shared<testing::ActionCallback>();
  fetch->run_args = RunArgs({"cost"});
  fetch->after_run_fn = [&run](testing::ActionCallback& self) {
    run.costs.push_back((*self.values)["cost"].item<double>());
  };
  callbacks.push_back(fetch);
  SimpleTrainer trainer(c10::Device(c10::kCUDA, 0));
  trainer.set_handle_signals(false);
  TrainConfig config =
      TrainConfig().model(model).dataflow(data).callbacks(callbacks).monitors({}).max_epoch(epochs);
  if (graph) config.cuda_graph(CudaGraphOptions().warmup_steps(3));
  launch_train_with_config(config, trainer);
  run.weights = model->weights();
  if (const CudaGraphStep* step = trainer.cuda_graph_step()) {
    run.captures = step->captures();
    run.replays = step->replays();
    run.fell_back = step->fell_back();
  }
  return run;
}

void expect_close(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_TRUE(torch::allclose(a, b, /*rtol=*/1e-5, /*atol=*/1e-6))
      << "largest difference " << (a - b).abs().max().item<double>();
}

TEST(CudaGraphCuda, ReplayedStepsTrainAsEagerStepsDo) {
  TRAINPACK_REQUIRE_CUDA();
  const Outcome eager = train(false, 5);
  const Outcome graph = train(true, 5);
  expect_close(eager.weights, graph.weights);
  EXPECT_EQ(graph.captures, 1);
  EXPECT_EQ(graph.replays, 20 - 3);
  ASSERT_EQ(graph.costs.size(), 20u);
  for (size_t i = 0; i < 20; ++i) EXPECT_NEAR(eager.costs[i], graph.costs[i], 1e-5) << i;
}

// Adam and AdamW: captured through ATen's fused kernels, with the step counts on the device; the
// bias corrections must follow the steps as LibTorch's own (eager) step does.
TEST(CudaGraphCuda, AdamAndAdamWTrainAsTheirEagerStepsDo) {
  TRAINPACK_REQUIRE_CUDA();
  for (const std::string optimizer : {"adam", "adamw"}) {
    SCOPED_TRACE(optimizer);
    const Outcome eager = train(false, 5, {}, batches(), optimizer);
    const Outcome graph = train(true, 5, {}, batches(), optimizer);
    EXPECT_TRUE(torch::allclose(eager.weights, graph.weights, 1e-4, 1e-5))
        << "largest difference " << (eager.weights - graph.weights).abs().max().item<double>();
    EXPECT_EQ(graph.captures, 1);
  }
}

TEST(CudaGraphCuda, ALearningRateScheduleCapturesAgainAtEachChange) {
  TRAINPACK_REQUIRE_CUDA();
  auto schedule = [] {
    return std::vector<CallbackPtr>{std::make_shared<ScheduledHyperParamSetter>(
        "learning_rate", std::vector<std::pair<int64_t, double>>{{3, 0.01}, {4, 0.001}})};
  };
  const Outcome eager = train(false, 5, schedule());
  const Outcome graph = train(true, 5, schedule());
  expect_close(eager.weights, graph.weights);
  EXPECT_EQ(graph.captures, 3);  // after the warm-up, at epoch 3 and at epoch 4
}

TEST(CudaGraphCuda, ABatchOfOtherShapesFallsBackToEagerOnce) {
  TRAINPACK_REQUIRE_CUDA();
  testing::LogCapture log;
  // 3 batches per pass: 24, 24, 16. Warm-up 3 steps, capture at 24, then 16 differs.
  const Outcome graph = train(true, 2, {}, batches(24, /*remainder=*/true));
  const Outcome eager = train(false, 2, {}, batches(24, /*remainder=*/true));
  expect_close(eager.weights, graph.weights);
  EXPECT_TRUE(graph.fell_back);
  int warnings = 0;
  for (const auto& line : log.lines()) {
    if (line.find("training goes on eager from here") != std::string::npos) ++warnings;
  }
  EXPECT_EQ(warnings, 1);
}

TEST(CudaGraphCuda, ReplayingNeverWaitsForTheGpu) {
  TRAINPACK_REQUIRE_CUDA();
#ifdef TRAINPACK_WITH_CUDA
  auto model = std::make_shared<Mlp>();
  // Sync-debug mode "error" around every step after the capture: a host sync throws.
  auto guard = std::make_shared<testing::ActionCallback>();
  guard->before_run_fn = [](testing::ActionCallback& self) {
    if (self.global_step() >= 4) {
      c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
    }
  };
  guard->after_run_fn = [](testing::ActionCallback&) {
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
  };
  SimpleTrainer trainer(c10::Device(c10::kCUDA, 0));
  trainer.set_handle_signals(false);
  try {
    launch_train_with_config(TrainConfig()
                                 .model(model)
                                 .dataflow(batches())
                                 .callbacks({guard})
                                 .extra_callbacks({})
                                 .monitors({})
                                 .cuda_graph(CudaGraphOptions())
                                 .max_epoch(4),
                             trainer);
  } catch (...) {
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
    throw;
  }
  EXPECT_EQ(trainer.cuda_graph_step()->replays(), 16 - 3);
#endif
}

class CudaGraphResume : public testing::TempDirFixture<> {};

TEST_F(CudaGraphResume, AStoppedAndResumedRunEndsWithTheParametersOfOneNeverStopped) {
  TRAINPACK_REQUIRE_CUDA();
  const Outcome straight = train(true, 4);
  auto run_in_dir = [&](int64_t max_epoch) {
    logger::set_logger_dir(dir().string(), 'k');
    auto model = std::make_shared<Mlp>();
    SimpleTrainer trainer(c10::Device(c10::kCUDA, 0));
    trainer.set_handle_signals(false);
    launch_train_with_config(AutoResumeTrainConfig(TrainConfig()
                                                       .model(model)
                                                       .dataflow(batches())
                                                       .callbacks({std::make_shared<ModelSaver>()})
                                                       .monitors({})
                                                       .cuda_graph(CudaGraphOptions())
                                                       .max_epoch(max_epoch)),
                             trainer);
    logger::unset_logger_dir();
    return model->weights();
  };
  run_in_dir(2);
  const at::Tensor resumed = run_in_dir(4);
  expect_close(straight.weights, resumed);
}

}  // namespace cuda_graph_cuda_test
}  // namespace trainpack
