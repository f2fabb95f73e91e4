// WeightEMA, SwapInEMAWeights and WithEMAWeights (callbacks/weight_ema.h): the averages against a
// hand computation, updates in place, the exact swap and swap back, a wrapped callback (an
// InferenceRunner too) seeing the averages, checkpoints that resume exactly (also when saved with
// the averages swapped in) and the argument checks.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <gmock/gmock.h>

#include "support/errors.h"
#include "support/linear_regression.h"
#include "support/temp_dir.h"
#include "trainpack/callbacks/inference.h"
#include "trainpack/callbacks/inference_runner.h"
#include "trainpack/callbacks/saver.h"
#include "trainpack/callbacks/weight_ema.h"
#include "trainpack/core/callback_state.h"
#include "trainpack/core/monitor_base.h"
#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"
#include "trainpack/train/config.h"
#include "trainpack/train/single_cost.h"
#include "trainpack/utils/checkpoint.h"
#include "trainpack/utils/logger.h"

namespace trainpack {
namespace weight_ema_test {

using testing::ActionCallback;
using ::testing::HasSubstr;
using testing::message_of;

std::vector<float> values_of(const at::Tensor& t) {
  const at::Tensor c = t.detach().to(at::kFloat).contiguous().reshape({-1});
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

// A NoOpTrainer whose one trainable variable `w` ({1, -2} at the start) is set, after step k, to
// `steps[k - 1]` by a callback that runs before the WeightEMA (as an optimizer step would).
struct ScriptedTrainer {
  at::Tensor w = torch::tensor({1.0f, -2.0f});
  NoOpTrainer trainer;
  std::vector<std::vector<float>> steps{{2, 0}, {4, 4}, {0, 8}};

  ScriptedTrainer() {
    trainer.set_handle_signals(false);
    trainer.graph().add_trainable_variable("w", w);
  }
  CallbackPtr setter() {
    auto cb = std::make_shared<ActionCallback>();
    cb->trigger_step_fn = [this](ActionCallback& self) {
      w.copy_(torch::tensor(steps[self.global_step() - 1]));
    };
    return cb;
  }
  void train(std::vector<CallbackPtr> callbacks) {
    callbacks.insert(callbacks.begin(), setter());
    trainer.train(callbacks, {}, 3, 1, 1);
  }
};

TEST(WeightEMA, ThreeUpdatesMatchAHandComputation) {
  ScriptedTrainer s;
  auto ema = std::make_shared<WeightEMA>(0.5);
  s.train({ema});
  // e0 = {1, -2}; e1 = .5 e0 + .5 {2, 0} = {1.5, -1}; e2 = .5 e1 + .5 {4, 4} = {2.75, 1.5};
  // e3 = .5 e2 + .5 {0, 8} = {1.375, 4.75} (exact in float).
  ASSERT_EQ(ema->shadows().size(), 1u);
  EXPECT_EQ(ema->shadows()[0].first, "w");
  EXPECT_EQ(values_of(ema->shadows()[0].second), (std::vector<float>{1.375f, 4.75f}));
  EXPECT_EQ(ema->num_updates(), 3);
  EXPECT_EQ(values_of(s.w), (std::vector<float>{0, 8}));  // the weights are untouched
}

TEST(WeightEMA, WarmupUsesTensorFlowsNumUpdatesDecay) {
  ScriptedTrainer s;
  auto ema = std::make_shared<WeightEMA>(0.9, WeightEMAOptions().warmup(true));
  s.train({ema});
  // d_n = min(0.9, (1 + n) / (10 + n)) for n = 0, 1, 2: 0.1, 2/11, 0.25.
  std::vector<double> e{1, -2};
  for (int n = 0; n < 3; ++n) {
    const double d = std::min(0.9, (1.0 + n) / (10.0 + n));
    for (int i = 0; i < 2; ++i) e[i] = d * e[i] + (1 - d) * s.steps[n][i];
  }
  const std::vector<float> got = values_of(ema->shadows()[0].second);
  EXPECT_NEAR(got[0], e[0], 1e-6);
  EXPECT_NEAR(got[1], e[1], 1e-6);
}

TEST(WeightEMA, ALinearModelsAveragesFollowItsWeightsStepByStep) {
  auto model = std::make_shared<testing::LinearRegressionModel>();
  auto ema = std::make_shared<WeightEMA>(0.75);
  // The weights after each step (recorded before the WeightEMA's update of that step) and at the
  // start.
  std::vector<std::vector<float>> weights;
  auto rec = std::make_shared<ActionCallback>();
  auto flat = [model] {
    std::vector<float> v = values_of(model->net->weight);
    v.push_back(values_of(model->net->bias)[0]);
    return v;
  };
  rec->before_train_fn = [&](ActionCallback&) { weights.push_back(flat()); };
  rec->trigger_step_fn = [&](ActionCallback&) { weights.push_back(flat()); };
  SimpleTrainer trainer;
  trainer.set_handle_signals(false);
  launch_train_with_config(TrainConfig()
                               .model(model)
                               .dataflow(testing::linear_regression_batches())
                               .callbacks({rec, ema})
                               .extra_callbacks(std::vector<CallbackPtr>{})
                               .monitors(std::vector<MonitorPtr>{})
                               .max_epoch(1),
                           trainer);
  ASSERT_EQ(weights.size(), 4u);  // the start and 3 steps
  std::vector<double> e(weights[0].begin(), weights[0].end());
  for (int k = 1; k <= 3; ++k) {
    for (size_t i = 0; i < e.size(); ++i) e[i] = 0.75 * e[i] + 0.25 * weights[k][i];
  }
  ASSERT_EQ(ema->shadows().size(), 2u);
  EXPECT_EQ(ema->shadows()[0].first, "weight");
  EXPECT_EQ(ema->shadows()[1].first, "bias");
  const std::vector<float> w = values_of(ema->shadows()[0].second);
  const std::vector<float> b = values_of(ema->shadows()[1].second);
  EXPECT_NEAR(w[0], e[0], 1e-6);
  EXPECT_NEAR(w[1], e[1], 1e-6);
  EXPECT_NEAR(b[0], e[2], 1e-6);
  EXPECT_NE(w[0], weights[3][0]);  // an average, not the last weights
}

TEST(WeightEMA, UpdatesInPlace) {
  ScriptedTrainer s;
  auto ema = std::make_shared<WeightEMA>(0.5);
  std::vector<const void*> before;
  auto rec = std::make_shared<ActionCallback>();
  rec->before_train_fn = [&](ActionCallback&) {
    for (const auto& kv : ema->shadows()) before.push_back(kv.second.data_ptr());
  };
  s.train({ema, rec});
  ASSERT_EQ(before.size(), 1u);
  EXPECT_EQ(ema->shadows()[0].second.data_ptr(), before[0]);
  const void* w_data = s.w.data_ptr();
  { SwapInEMAWeights swap(*ema); }
  EXPECT_EQ(s.w.data_ptr(), w_data);
  EXPECT_EQ(ema->shadows()[0].second.data_ptr(), before[0]);
}

TEST(WeightEMA, SwapInEMAWeightsExchangesExactlyNestsAndRestoresOnAnException) {
  ScriptedTrainer s;
  auto ema = std::make_shared<WeightEMA>(0.5);
  s.train({ema});
  {
    SwapInEMAWeights swap(*ema);
    EXPECT_TRUE(ema->swapped());
    EXPECT_EQ(values_of(s.w), (std::vector<float>{1.375f, 4.75f}));
    EXPECT_EQ(values_of(ema->shadows()[0].second), (std::vector<float>{0, 8}));
    {
      SwapInEMAWeights inner(*ema);  // nested: no second exchange
      EXPECT_EQ(values_of(s.w), (std::vector<float>{1.375f, 4.75f}));
    }
    EXPECT_EQ(values_of(s.w), (std::vector<float>{1.375f, 4.75f}));
  }
  EXPECT_FALSE(ema->swapped());
  EXPECT_EQ(values_of(s.w), (std::vector<float>{0, 8}));
  EXPECT_EQ(values_of(ema->shadows()[0].second), (std::vector<float>{1.375f, 4.75f}));
  EXPECT_THROW(
      {
        SwapInEMAWeights swap(*ema);
        throw std::runtime_error("inside");
      },
      std::runtime_error);
  EXPECT_EQ(values_of(s.w), (std::vector<float>{0, 8}));

  WeightEMA unset(0.5);
  EXPECT_EQ(message_of<std::logic_error>([&] { SwapInEMAWeights swap(unset); }),
            "SwapInEMAWeights: the WeightEMA is not set up (register it with the trainer; the "
            "averages exist from its setup_graph on)");
}

// The regression, with its cost published as the output "cost" (for ScalarStats).
class CostOutputModel : public testing::LinearRegressionModel {
 public:
  at::Tensor build_graph(TowerContext& ctx, const std::vector<at::Tensor>& in) override {
    at::Tensor cost = LinearRegressionModel::build_graph(ctx, in);
    ctx.output("cost", cost);
    return cost;
  }
};

TEST(WeightEMA, AWrappedCallbackSeesTheAveragesAndTheWeightsAreBackAfterwards) {
  auto model = std::make_shared<CostOutputModel>();
  auto ema = std::make_shared<WeightEMA>(0.5);
  std::vector<std::vector<float>> averages, training, seen, after;
  std::vector<bool> swapped_inside;
  auto before = std::make_shared<ActionCallback>();
  before->trigger_fn = [&](ActionCallback&) {
    averages.push_back(values_of(ema->shadows()[0].second));
    training.push_back(values_of(model->net->weight));
  };
  auto inner = std::make_shared<ActionCallback>();
  inner->trigger_fn = [&](ActionCallback&) {
    seen.push_back(values_of(model->net->weight));
    swapped_inside.push_back(ema->swapped());
  };
  auto later = std::make_shared<ActionCallback>();
  later->trigger_fn = [&](ActionCallback&) { after.push_back(values_of(model->net->weight)); };
  // An InferenceRunner over the training points, with the averages: its validation_cost must be
  // the mean squared error of the averaged weights.
  std::vector<double> expected_cost;
  auto cost_of_averages = std::make_shared<ActionCallback>();
  cost_of_averages->trigger_fn = [&](ActionCallback&) {
    const at::Tensor w = ema->shadows()[0].second.to(at::kDouble);
    const at::Tensor b = ema->shadows()[1].second.to(at::kDouble);
    double sum = 0;
    for (int i = 0; i < 24; ++i) {
      const double x0 = i % 5 - 2.0, x1 = i % 3 - 1.0;
      const double pred =
          w[0][0].item<double>() * x0 + w[0][1].item<double>() * x1 + b[0].item<double>();
      sum += (pred - (2 * x0 - x1)) * (pred - (2 * x0 - x1));
    }
    expected_cost.push_back(sum / 24);
  };
  auto runner = std::make_shared<InferenceRunner>(
      testing::linear_regression_batches(),
      std::make_shared<ScalarStats>(std::vector<std::string>{"cost"}),
      InferenceRunnerOptions().progress_bar(false));
  std::vector<double> validation_cost;
  auto read_cost = std::make_shared<ActionCallback>();
  read_cost->trigger_fn = [&](ActionCallback& self) {
    validation_cost.push_back(self.trainer().monitors().get_latest("validation_cost"));
  };
  SimpleTrainer trainer;
  trainer.set_handle_signals(false);
  launch_train_with_config(
      TrainConfig()
          .model(model)
          .dataflow(testing::linear_regression_batches())
          .callbacks({ema, before, std::make_shared<WithEMAWeights>(ema, inner), later,
                      cost_of_averages, std::make_shared<WithEMAWeights>(ema, runner), read_cost})
          .extra_callbacks(std::vector<CallbackPtr>{})
          .monitors(std::vector<MonitorPtr>{})
          .max_epoch(2),
      trainer);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen, averages);
  EXPECT_EQ(after, training);
  EXPECT_NE(averages, training);
  EXPECT_EQ(swapped_inside, (std::vector<bool>{true, true}));
  ASSERT_EQ(validation_cost.size(), 2u);
  EXPECT_NEAR(validation_cost[0], expected_cost[0], 1e-5);
  EXPECT_NEAR(validation_cost[1], expected_cost[1], 1e-5);
  EXPECT_FALSE(ema->swapped());
}

TEST(WeightEMA, BuffersAreAveragedWhenAsked) {
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  torch::nn::BatchNorm1d bn(2);
  for (const auto& p : bn->named_parameters()) {
    trainer.graph().add_trainable_variable(p.key(), p.value());
  }
  trainer.graph().add_module("bn", bn.ptr());
  auto ema = std::make_shared<WeightEMA>(0.5, WeightEMAOptions().buffers(true));
  trainer.train({ema}, {}, 1, 1, 1);
  std::vector<std::string> names;
  for (const auto& kv : ema->shadows()) names.push_back(kv.first);
  // num_batches_tracked (an integer) is not averaged.
  EXPECT_EQ(names,
            (std::vector<std::string>{"weight", "bias", "bn/running_mean", "bn/running_var"}));
}

class WeightEMAResumeTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    testing::TempDirTest::SetUp();
    logger::set_logger_dir(dir().string(), 'k');
  }
  // Trains the regression (momentum: an optimizer state) to `max_epoch`, auto-resuming from the
  // logger directory, with a WeightEMA and a ModelSaver every epoch (wrapped in WithEMAWeights
  // when `swap_for_saver`).
  std::shared_ptr<WeightEMA> run(int64_t max_epoch, bool swap_for_saver,
                                 std::shared_ptr<testing::LinearRegressionModel>* model_out) {
    auto model = std::make_shared<testing::LinearRegressionModel>(0.9);
    auto ema = std::make_shared<WeightEMA>(0.75, WeightEMAOptions().warmup(true));
    CallbackPtr saver = std::make_shared<ModelSaver>(ModelSaverOptions().fsync(false));
    if (swap_for_saver) saver = std::make_shared<WithEMAWeights>(ema, saver);
    AutoResumeTrainConfig config(TrainConfig()
                                     .model(model)
                                     .dataflow(testing::linear_regression_batches())
                                     .callbacks({ema, saver})
                                     .extra_callbacks(std::vector<CallbackPtr>{})
                                     .monitors(std::vector<MonitorPtr>{})
                                     .max_epoch(max_epoch));
    SimpleTrainer trainer;
    trainer.set_handle_signals(false);
    launch_train_with_config(config, trainer);
    *model_out = model;
    return ema;
  }
};

TEST_F(WeightEMAResumeTest, AResumedRunEndsWithTheSameWeightsAndAverages) {
  for (const bool swap_for_saver : {false, true}) {
    SCOPED_TRACE(swap_for_saver ? "ModelSaver inside WithEMAWeights" : "plain ModelSaver");
    for (const auto& e : std::filesystem::directory_iterator(dir())) {
      if (e.path().filename() != "log.log") std::filesystem::remove_all(e.path());
    }
    std::shared_ptr<testing::LinearRegressionModel> m_full, m1, m2;
    auto full = run(4, swap_for_saver, &m_full);
    for (const auto& e : std::filesystem::directory_iterator(dir())) {
      if (e.path().filename() != "log.log") std::filesystem::remove_all(e.path());
    }
    auto first = run(2, swap_for_saver, &m1);
    const TensorMap saved = read_checkpoint((dir() / "model-6").string());
    EXPECT_EQ(saved.at("callback/WeightEMA/num_updates").item<int64_t>(), 6);
    EXPECT_EQ(saved.at("callback/WeightEMA/swapped").item<int64_t>(), swap_for_saver ? 1 : 0);
    // Swapped: the model entry holds the averages, the shadow entry the training weights.
    const at::Tensor model_entry = saved.at("weight");
    const at::Tensor shadow_entry = saved.at("callback/WeightEMA/shadow/weight");
    EXPECT_TRUE(model_entry.equal(swap_for_saver ? first->shadows()[0].second : m1->net->weight));
    EXPECT_TRUE(shadow_entry.equal(swap_for_saver ? m1->net->weight : first->shadows()[0].second));

    auto resumed = run(4, swap_for_saver, &m2);
    EXPECT_EQ(resumed->num_updates(), 12);
    EXPECT_EQ(full->num_updates(), 12);
    EXPECT_TRUE(m2->net->weight.equal(m_full->net->weight));
    EXPECT_TRUE(m2->net->bias.equal(m_full->net->bias));
    ASSERT_EQ(resumed->shadows().size(), full->shadows().size());
    for (size_t i = 0; i < full->shadows().size(); ++i) {
      EXPECT_TRUE(resumed->shadows()[i].second.equal(full->shadows()[i].second))
          << full->shadows()[i].first;
    }
  }
}

TEST(WeightEMA, LoadStateChecksTheEntries) {
  ScriptedTrainer s;
  auto ema = std::make_shared<WeightEMA>(0.5);
  s.train({ema});
  CallbackState good{{"num_updates", state_scalar(int64_t{2})},
                     {"swapped", state_scalar(int64_t{0})},
                     {"shadow/w", torch::tensor({3.0f, 5.0f})}};
  ema->load_state(good);
  EXPECT_EQ(values_of(ema->shadows()[0].second), (std::vector<float>{3, 5}));
  EXPECT_EQ(ema->num_updates(), 2);
  CallbackState wrong_shape = good;
  wrong_shape["shadow/w"] = torch::zeros({3});
  EXPECT_EQ(message_of<std::invalid_argument>([&] { ema->load_state(wrong_shape); }),
            "WeightEMA: the saved state entry 'shadow/w' is a Float tensor of shape 3, but the "
            "model's tensor is a Float tensor of shape 2");
  CallbackState unknown = good;
  unknown["shadow/v"] = torch::zeros({2});
  EXPECT_THAT(message_of<std::invalid_argument>([&] { ema->load_state(unknown); }),
              HasSubstr("WeightEMA: the saved state has an entry 'shadow/v' that this callback "
                        "does not save"));
  CallbackState missing = good;
  missing.erase("shadow/w");
  EXPECT_THAT(message_of<std::invalid_argument>([&] { ema->load_state(missing); }),
              HasSubstr("WeightEMA: the saved state has no entry 'shadow/w'"));
  EXPECT_EQ(values_of(ema->shadows()[0].second), (std::vector<float>{3, 5}));  // unchanged
}

TEST(WeightEMA, BadArgumentsAreRefused) {
  for (const double decay : {1.5, -0.1, std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_THAT(message_of<std::invalid_argument>([&] { WeightEMA ema(decay); }),
                HasSubstr("WeightEMA: decay must be in [0, 1] (the weight of the old average; "
                          "0.999 is usual), got "));
  }
  auto ema = std::make_shared<WeightEMA>(0.9);
  EXPECT_EQ(message_of<std::invalid_argument>(
                [&] { WithEMAWeights(ema, std::make_shared<MinSaver>("val-error")); }),
            "WithEMAWeights: MinSaver copies ModelSaver's checkpoint and reads no weights; wrap "
            "the ModelSaver instead (WithEMAWeights(ema, ModelSaver)), so that the checkpoint it "
            "copies holds the averages");
  EXPECT_EQ(message_of<std::invalid_argument>(
                [&] { WithEMAWeights(nullptr, std::make_shared<ActionCallback>()); }),
            "WithEMAWeights: ema is null");
  EXPECT_EQ(message_of<std::invalid_argument>([&] { WithEMAWeights(ema, nullptr); }),
            "WithEMAWeights: callback is null");

  // A WeightEMA that is not registered.
  ScriptedTrainer s;
  auto inner = std::make_shared<ActionCallback>();
  inner->trigger_fn = [](ActionCallback&) {};
  EXPECT_THAT(
      message_of<std::exception>([&] { s.train({std::make_shared<WithEMAWeights>(ema, inner)}); }),
      HasSubstr("WithEMAWeights: its WeightEMA is not among the trainer's callbacks"));

  NoOpTrainer empty;
  empty.set_handle_signals(false);
  EXPECT_THAT(message_of<std::exception>(
                  [&] { empty.train({std::make_shared<WeightEMA>(0.9)}, {}, 1, 1, 1); }),
              HasSubstr("WeightEMA: the trainer has no trainable variables to average"));
}

}  // namespace weight_ema_test
}  // namespace trainpack
