// Dynamic loss scaling (train/loss_scaler.h): the skip / grow / back-off sequence against a hand
// computation, the refusals, and the trainer's use of it: exact (a power-of-two scale changes no
// gradient), a step with an inf gradient skipped before the gradient processors, and the scale
// saved in checkpoints so that a resumed run continues with it. float16 itself needs a CUDA GPU;
// the trainer turns the scaler on in float32 when its options are set, which is what runs here.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "support/linear_regression.h"
#include "support/temp_dir.h"
#include "trainpack/callbacks/saver.h"
#include "trainpack/callbacks/trigger.h"
#include "trainpack/core/session_init.h"
#include "trainpack/core/state.h"
#include "trainpack/train/config.h"
#include "trainpack/train/gradproc.h"
#include "trainpack/train/loss_scaler.h"
#include "trainpack/train/single_cost.h"
#include "trainpack/utils/logger.h"

namespace trainpack {
namespace loss_scaler_test {

// One parameter whose gradient is `grad` (a scaled gradient, as backward leaves it).
NamedGradients one_gradient(const at::Tensor& grad) {
  at::Tensor parameter = torch::zeros_like(grad).requires_grad_(true);
  parameter.mutable_grad() = grad.clone();
  return {{"w", parameter}};
}

TEST(LossScaler, SkipGrowAndBackOffFollowGradScalersRules) {
  LossScaler scaler(LossScalerOptions().init_scale(8).growth_interval(3));
  EXPECT_EQ(scaler.scale(torch::tensor(1.5f)).item<float>(), 12.0f);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // (gradient values of the step, finite?) -> the scale after update().
  struct Step {
    std::vector<float> grad;
    bool finite;
    double scale_after;
    int64_t tracker_after;
  };
  const std::vector<Step> steps = {
      {{8, 16}, true, 8, 1},   {{8, 16}, true, 8, 2},    {{8, 16}, true, 16, 0},  // grows after 3
      {{inf, 1}, false, 8, 0},                                                    // backs off
      {{1, nan}, false, 4, 0},                                                    // NaN too
      {{4, 4}, true, 4, 1},    {{-inf, 4}, false, 2, 0},                          // count restarts
      {{2, 2}, true, 2, 1},    {{2, 2}, true, 2, 2},     {{2, 2}, true, 4, 0},
  };
  int64_t skipped = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const double scale = scaler.scale_value();
    auto grads = one_gradient(torch::tensor(steps[i].grad));
    EXPECT_EQ(scaler.unscale(grads), steps[i].finite) << "step " << i;
    if (steps[i].finite) {
      // Divided by the scale, exactly (powers of two).
      EXPECT_EQ(grads[0].grad()[0].item<float>(), static_cast<float>(steps[i].grad[0] / scale));
    }
    EXPECT_EQ(scaler.update(), !steps[i].finite) << "step " << i;
    if (!steps[i].finite) ++skipped;
    EXPECT_EQ(scaler.scale_value(), steps[i].scale_after) << "step " << i;
    EXPECT_EQ(scaler.growth_tracker(), steps[i].tracker_after) << "step " << i;
  }
  EXPECT_EQ(scaler.skipped_steps(), skipped);
}

TEST(LossScaler, AnUndefinedGradientIsSkippedAndTheScaleNeverGrowsToInfinity) {
  LossScaler scaler(LossScalerOptions().init_scale(1e308).growth_interval(1));
  NamedGradients grads = one_gradient(torch::tensor({1.0f}));
  grads.push_back({"unused", torch::zeros({2}).requires_grad_(true)});  // no grad this step
  EXPECT_TRUE(scaler.unscale(grads));
  EXPECT_FALSE(scaler.update());
  EXPECT_EQ(scaler.scale_value(), 1e308);  // 2e308 would be infinite: kept
}

TEST(LossScaler, BadOptionsAndStatesAreRefusedNamingThem) {
  auto message = [](auto make) -> std::string {
    try {
      make();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_EQ(message([] { LossScaler(LossScalerOptions().init_scale(0)); }),
            "LossScaler: init_scale must be finite and > 0, got 0");
  EXPECT_EQ(message([] { LossScaler(LossScalerOptions().init_scale(INFINITY)); }),
            "LossScaler: init_scale must be finite and > 0, got inf");
  EXPECT_EQ(message([] { LossScaler(LossScalerOptions().growth_factor(1)); }),
            "LossScaler: growth_factor must be finite and > 1, got 1");
  EXPECT_EQ(message([] { LossScaler(LossScalerOptions().backoff_factor(1)); }),
            "LossScaler: backoff_factor must be in (0, 1), got 1");
  EXPECT_EQ(message([] { LossScaler(LossScalerOptions().growth_interval(0)); }),
            "LossScaler: growth_interval must be >= 1, got 0");
  LossScaler scaler;
  EXPECT_EQ(message([&] { scaler.set_scale(-2); }),
            "LossScaler: the loss scale must be finite and > 0, got -2");
  EXPECT_EQ(message([&] { scaler.set_growth_tracker(-1); }),
            "LossScaler: the growth tracker must be >= 0, got -1");
  SimpleTrainer trainer;
  EXPECT_EQ(
      message([&] { trainer.set_loss_scaler_options(LossScalerOptions().growth_factor(0.5)); }),
      "LossScaler: growth_factor must be finite and > 1, got 0.5");
}

// ---- in the trainer ----

// LinearRegressionModel whose cost is made infinite at the given global steps of `trainer`.
class InfAt : public testing::LinearRegressionModel {
 public:
  InfAt(std::vector<int64_t> steps, const Trainer& trainer)
      : LinearRegressionModel(0.9), inf_steps_(std::move(steps)), trainer_(trainer) {}
  at::Tensor build_graph(TowerContext& ctx, const std::vector<at::Tensor>& in) override {
    at::Tensor cost = LinearRegressionModel::build_graph(ctx, in);
    for (int64_t step : inf_steps_) {
      if (step == trainer_.global_step()) cost = cost * std::numeric_limits<float>::infinity();
    }
    return cost;
  }

 private:
  std::vector<int64_t> inf_steps_;
  const Trainer& trainer_;
};

// Keeps each step's parameters (after the step), the scale and the steps the processors saw.
class Watch : public Callback {
 public:
  std::vector<at::Tensor> weights;
  std::vector<double> scales;
  const SingleCostTrainer* trainer = nullptr;

 protected:
  void _trigger_step() override {
    weights.push_back(trainer->module()->parameters()[0].detach().clone());
    scales.push_back(trainer->loss_scaler()->scale_value());
  }
};

class StepsSeen : public GradientProcessor {
 public:
  std::vector<int64_t> steps;

 protected:
  void _process(const NamedGradients&, StepContext& step) override {
    steps.push_back(step.trainer().global_step());
  }
};

TEST(LossScalingInTheTrainer, APowerOfTwoScaleTrainsExactlyAsWithoutIt) {
  auto train = [](bool scaled) {
    auto model = std::make_shared<testing::LinearRegressionModel>(0.9);
    SimpleTrainer trainer;
    trainer.set_handle_signals(false);
    if (scaled) trainer.set_loss_scaler_options(LossScalerOptions().init_scale(1024));
    launch_train_with_config(TrainConfig()
                                 .model(model)
                                 .dataflow(testing::linear_regression_batches())
                                 .max_epoch(4)
                                 .extra_callbacks({})
                                 .monitors({}),
                             trainer);
    EXPECT_EQ(trainer.loss_scaler() != nullptr, scaled);
    return model->net->weight.detach().clone();
  };
  const at::Tensor plain = train(false), scaled = train(true);
  EXPECT_TRUE(torch::equal(plain, scaled)) << plain << scaled;
  EXPECT_FALSE(torch::equal(plain, testing::LinearRegressionModel(0.9).net->weight));
}

// Global steps 4 and 5 give inf gradients: both are skipped (the weights
// after them are those after step 3; the processors never see them), the scale halves twice,
// and global_step counts them as steps.
TEST(LossScalingInTheTrainer, AStepWithAnInfGradientIsSkippedBeforeTheProcessors) {
  SimpleTrainer trainer;
  auto model = std::make_shared<InfAt>(std::vector<int64_t>{4, 5}, trainer);
  auto watch = std::make_shared<Watch>();
  auto seen = std::make_shared<StepsSeen>();
  trainer.set_handle_signals(false);
  trainer.set_loss_scaler_options(LossScalerOptions().init_scale(256).growth_interval(3));
  watch->trainer = &trainer;
  launch_train_with_config(TrainConfig()
                               .model(model)
                               .dataflow(testing::linear_regression_batches())
                               .max_epoch(3)
                               .gradient_processors({seen, std::make_shared<CheckGradient>()})
                               .callbacks(std::vector<CallbackPtr>{watch})
                               .extra_callbacks({})
                               .monitors({}),
                           trainer);
  EXPECT_EQ(trainer.global_step(), 9);
  EXPECT_EQ(seen->steps, (std::vector<int64_t>{0, 1, 2, 3, 6, 7, 8}));
  ASSERT_EQ(watch->weights.size(), 9u);
  EXPECT_TRUE(torch::equal(watch->weights[4], watch->weights[3]));
  EXPECT_TRUE(torch::equal(watch->weights[5], watch->weights[3]));
  EXPECT_FALSE(torch::equal(watch->weights[6], watch->weights[3]));
  // 256: steps 0, 1, 2 good -> 512 after step 2; step 3 good (1 of 3); 4 and 5 skipped -> 256,
  // 128; 6, 7 good; 8 good -> 256.
  EXPECT_EQ(watch->scales, (std::vector<double>{256, 256, 512, 512, 256, 128, 128, 128, 256}));
  EXPECT_EQ(trainer.loss_scaler()->skipped_steps(), 2);
}

class LossScalingResume : public testing::TempDirFixture<> {
 protected:
  // 3 epochs of 3 steps with a checkpoint every step; global step 1 gives an inf gradient, so the
  // scale moves: 64 -> 32 at step 1, then grows every 2 good steps.
  TensorMap run(const std::string& logdir, int64_t max_epoch) {
    logger::set_logger_dir(logdir, 'k');
    SimpleTrainer trainer;
    auto model = std::make_shared<InfAt>(std::vector<int64_t>{1}, trainer);
    trainer.set_handle_signals(false);
    trainer.set_loss_scaler_options(LossScalerOptions().init_scale(64).growth_interval(2));
    TrainConfig config = TrainConfig()
                             .model(model)
                             .dataflow(testing::linear_regression_batches())
                             .max_epoch(max_epoch)
                             .callbacks(std::vector<CallbackPtr>{std::make_shared<PeriodicTrigger>(
                                 std::make_shared<ModelSaver>(ModelSaverOptions().fsync(false)),
                                 PeriodicTriggerOptions().every_k_steps(1))})
                             .extra_callbacks({})
                             .monitors({});
    launch_train_with_config(AutoResumeTrainConfig(config), trainer);
    logger::unset_logger_dir();
    scale = trainer.loss_scaler()->scale_value();
    tracker = trainer.loss_scaler()->growth_tracker();
    return collect_training_state(trainer);
  }
  double scale = 0;
  int64_t tracker = 0;
};

// Stopped after epoch 1 (step 3) and resumed to epoch 3, the run ends with the scale, the growth
// count and every other entry of the state equal to those of the run never stopped.
TEST_F(LossScalingResume, TheScaleIsInTheCheckpointAndAResumedRunContinuesIt) {
  const TensorMap straight = run((dir() / "straight").string(), 3);
  const double straight_scale = scale;
  const int64_t straight_tracker = tracker;
  // 64, skip -> 32, then 7 good steps: grows after the 2nd, 4th and 6th -> 256, tracker 1.
  EXPECT_EQ(straight_scale, 256);
  EXPECT_EQ(straight_tracker, 1);
  ASSERT_EQ(straight.count("variable/loss_scale"), 1u) << "the scale is not in the training state";

  const std::string stopped = (dir() / "stopped").string();
  run(stopped, 1);
  EXPECT_EQ(scale, 32);  // steps 0..2: good, skipped (64 -> 32), good
  EXPECT_EQ(tracker, 1);
  const TensorMap resumed = run(stopped, 3);
  EXPECT_EQ(scale, straight_scale);
  EXPECT_EQ(tracker, straight_tracker);
  for (const auto& [key, value] : straight) {
    auto found = resumed.find(key);
    ASSERT_NE(found, resumed.end()) << key;
    EXPECT_TRUE(torch::equal(found->second, value)) << key;
  }
}

}  // namespace loss_scaler_test
}  // namespace trainpack
