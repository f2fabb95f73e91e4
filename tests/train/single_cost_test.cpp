// SimpleTrainer / SingleCostTrainer / TowerTrainer / TrainConfig: training lowers the loss,
// fetches come from the same step, the learning rate follows a schedule, predictors, bad inputs.
#include "trainpack/train/single_cost.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <memory>
#include <vector>

#include "support/errors.h"
#include "trainpack/callbacks/param.h"
#include "trainpack/input/dataflow.h"
#include "trainpack/input/input_source.h"
#include "trainpack/testing.h"
#include "trainpack/train/config.h"

namespace trainpack {
namespace single_cost_test {

using testing::ActionCallback;
using testing::message_of;

// y = 3 x0 - 2 x1 + 0.5, 64 points; each datapoint also carries its index.
std::vector<Datapoint> regression_points(int64_t n = 64) {
  torch::manual_seed(0);
  auto x = torch::randn({n, 2});
  auto y = (x.select(1, 0) * 3 - x.select(1, 1) * 2 + 0.5).unsqueeze(1);
  std::vector<Datapoint> points;
  for (int64_t i = 0; i < n; ++i) {
    points.push_back({x[i].clone(), y[i].clone(), torch::tensor(i)});
  }
  return points;
}

InputSignature regression_signature() {
  return {InputDesc("x", {-1, 2}), InputDesc("y", {-1, 1}), InputDesc("index", {-1}, at::kLong)};
}

DataFlowPtr regression_batches(int64_t batch = 8) {
  return std::make_shared<BatchData>(std::make_shared<DataFromList>(regression_points()), batch);
}

// A callback that fetches `names` in every step and records the values.
class Fetcher : public Callback {
 public:
  explicit Fetcher(std::vector<std::string> names) : args_(std::move(names)) {}
  std::vector<std::vector<at::Tensor>> values;

 protected:
  RunArgs _before_run(const StepContext&) override { return RunArgs::ref(args_); }
  void _after_run(const StepContext&, const RunValues& v) override {
    std::vector<at::Tensor> row;
    for (size_t i = 0; i < v.size(); ++i) row.push_back(v[i].detach().clone());
    values.push_back(std::move(row));
  }
  RunArgs args_;
};

struct RegressionSetup {
  torch::nn::Linear net{2, 1};
  SimpleTrainer trainer;
  RegressionSetup() { trainer.set_handle_signals(false); }

  TowerFunc tower() {
    auto net_copy = net;
    return [net_copy](TowerContext& ctx, const std::vector<at::Tensor>& in) mutable {
      auto pred = net_copy->forward(in[0]);
      ctx.output("pred", pred);
      ctx.output("index", in[2]);
      ctx.output("training", torch::tensor(ctx.is_training() ? 1 : 0));
      if (!in[1].defined()) return at::Tensor();
      return torch::mse_loss(pred, in[1]);
    };
  }
  void setup(InputSourcePtr input, double lr = 0.1) {
    auto params = net->parameters();
    trainer.setup_graph(regression_signature(), std::move(input), net.ptr(), tower(),
                        [params, lr] { return std::make_unique<torch::optim::SGD>(params, lr); });
  }
};

TEST(SimpleTrainerTest, TrainingLowersTheLoss) {
  RegressionSetup s;
  s.setup(std::make_shared<FeedInput>(regression_batches()));
  auto fetch = std::make_shared<Fetcher>(std::vector<std::string>{"cost"});
  s.trainer.train({fetch}, {}, /*steps_per_epoch=*/8, 1, /*max_epoch=*/10);
  ASSERT_EQ(fetch->values.size(), 80u);
  double first = 0, last = 0;
  for (int i = 0; i < 8; ++i) first += fetch->values[i][0].item<double>();
  for (int i = 72; i < 80; ++i) last += fetch->values[i][0].item<double>();
  EXPECT_LT(last, first * 0.01) << "first epoch " << first / 8 << ", last epoch " << last / 8;
  EXPECT_EQ(s.trainer.global_step(), 80);
}

TEST(SimpleTrainerTest, FetchedTensorsComeFromTheSameStep) {
  RegressionSetup s;
  s.setup(std::make_shared<FeedInput>(regression_batches(8)));
  auto fetch = std::make_shared<Fetcher>(std::vector<std::string>{"index", "cost", "pred"});
  // Recompute the cost of the batch in after_run with the weights *before* the update: the
  // fetched cost must be the one of this step's batch and weights.
  auto net = s.net;
  std::vector<at::Tensor> weights_before;
  auto watcher = std::make_shared<ActionCallback>();
  watcher->before_run_fn = [&](ActionCallback&) {
    weights_before.clear();
    for (auto& p : net->parameters()) weights_before.push_back(p.detach().clone());
  };
  std::vector<double> recomputed;
  auto points = regression_points();
  watcher->after_run_fn = [&](ActionCallback&) {
    const int64_t step = static_cast<int64_t>(recomputed.size());
    const int64_t first = (step % 8) * 8;
    auto x = torch::stack({points[first][0], points[first + 1][0], points[first + 2][0],
                           points[first + 3][0], points[first + 4][0], points[first + 5][0],
                           points[first + 6][0], points[first + 7][0]});
    auto y = torch::stack({points[first][1], points[first + 1][1], points[first + 2][1],
                           points[first + 3][1], points[first + 4][1], points[first + 5][1],
                           points[first + 6][1], points[first + 7][1]});
    auto pred = torch::addmm(weights_before[1], x, weights_before[0].t());
    recomputed.push_back(torch::mse_loss(pred, y).item<double>());
  };
  s.trainer.train({watcher, fetch}, {}, 8, 1, 2);
  ASSERT_EQ(fetch->values.size(), 16u);
  for (size_t step = 0; step < 16; ++step) {
    const int64_t first = static_cast<int64_t>(step % 8) * 8;
    EXPECT_TRUE(torch::equal(fetch->values[step][0], torch::arange(first, first + 8)))
        << "step " << step;
    EXPECT_NEAR(fetch->values[step][1].item<double>(), recomputed[step], 1e-6) << "step " << step;
    EXPECT_EQ(fetch->values[step][2].size(0), 8);
  }
}

TEST(SimpleTrainerTest, LearningRateFollowsTheScheduleInEveryParamGroup) {
  torch::nn::Linear a(2, 1), b(2, 1);
  auto module = std::make_shared<torch::nn::Module>();
  module->register_module("a", a);
  module->register_module("b", b);
  SimpleTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.setup_graph(
      regression_signature(), std::make_shared<FeedInput>(regression_batches()), module,
      [a, b](TowerContext&, const std::vector<at::Tensor>& in) mutable {
        return torch::mse_loss(a->forward(in[0]) + b->forward(in[0]), in[1]);
      },
      [a, b] {
        std::vector<torch::optim::OptimizerParamGroup> groups;
        groups.emplace_back(a->parameters());
        groups.emplace_back(b->parameters(), std::make_unique<torch::optim::SGDOptions>(0.5));
        return std::make_unique<torch::optim::SGD>(std::move(groups),
                                                   torch::optim::SGDOptions(0.5));
      });
  std::vector<std::vector<double>> seen;  // per step: lr of each group, as the optimizer sees it
  auto watcher = std::make_shared<ActionCallback>();
  watcher->after_run_fn = [&](ActionCallback&) {
    std::vector<double> lrs;
    for (auto& g : trainer.optimizer().param_groups()) lrs.push_back(g.options().get_lr());
    seen.push_back(lrs);
  };
  auto setter = std::make_shared<ScheduledHyperParamSetter>(
      "learning_rate", ScheduledHyperParamSetter::Schedule{{0, 0.1}, {2, 0.05}, {3, 0.01}});
  trainer.train({setter, watcher}, {}, 2, 1, 4);
  ASSERT_EQ(seen.size(), 8u);
  // Point 0 applies in before_train; point N at the end of epoch N (so from epoch N + 1 on).
  const std::vector<double> expected = {0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.01, 0.01};
  for (size_t i = 0; i < 8; ++i) {
    ASSERT_EQ(seen[i].size(), 2u);
    EXPECT_DOUBLE_EQ(seen[i][0], expected[i]) << "step " << i;
    EXPECT_DOUBLE_EQ(seen[i][1], expected[i]) << "step " << i;
  }
  EXPECT_DOUBLE_EQ(trainer.graph().variable("learning_rate").get(), 0.01);
}

TEST(SimpleTrainerTest, TheLearningRateIsFiniteAndPositive) {
  RegressionSetup s;
  s.setup(std::make_shared<FeedInput>(regression_batches()));
  const ValueRange& range = s.trainer.graph().variable("learning_rate").range;
  EXPECT_EQ(range.str(), "finite and > 0");
  EXPECT_TRUE(range.contains(1e-4));
  for (const double bad : {0.0, -1.0, std::nan(""), HUGE_VAL}) EXPECT_FALSE(range.contains(bad));
}

TEST(SimpleTrainerTest, RegistersTrainableVariablesAndPublishesCost) {
  RegressionSetup s;
  s.setup(std::make_shared<FeedInput>(regression_batches()));
  const auto& vars = s.trainer.graph().trainable_variables();
  ASSERT_EQ(vars.size(), 2u);
  EXPECT_EQ(vars[0].first, "weight");
  EXPECT_EQ(vars[1].first, "bias");
  EXPECT_TRUE(vars[0].second.is_same(s.net->weight));
}

TEST(SimpleTrainerTest, UnknownFetchNameListsThePublishedNames) {
  RegressionSetup s;
  s.setup(std::make_shared<FeedInput>(regression_batches()));
  auto fetch = std::make_shared<Fetcher>(std::vector<std::string>{"acuracy"});
  const std::string msg = message_of([&] { s.trainer.train({fetch}, {}, 8, 1, 1); });
  EXPECT_NE(msg.find("acuracy"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Fetcher"), std::string::npos) << msg;
  for (const char* name : {"cost", "index", "pred", "training"}) {
    EXPECT_NE(msg.find(name), std::string::npos) << name << " missing in: " << msg;
  }
  EXPECT_EQ(s.trainer.global_step(), 0);
}

TEST(SimpleTrainerTest, WrongBatchShapeNamesTheInput) {
  RegressionSetup s;
  std::vector<Datapoint> bad;
  for (int i = 0; i < 4; ++i) {
    bad.push_back({torch::zeros({3}), torch::zeros({1}), torch::tensor(int64_t{i})});
  }
  s.setup(std::make_shared<FeedInput>(
      std::make_shared<BatchData>(std::make_shared<DataFromList>(bad), 2)));
  const std::string msg = message_of([&] { s.trainer.train({}, {}, 2, 1, 1); });
  EXPECT_NE(msg.find("FeedInput: input 'x' (component 0) should be [-1, 2] float, but the batch "
                     "has [2, 3] float"),
            std::string::npos)
      << msg;
}

TEST(SimpleTrainerTest, NonScalarCostIsAnError) {
  torch::nn::Linear net(2, 1);
  SimpleTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.setup_graph(
      regression_signature(), std::make_shared<FeedInput>(regression_batches()), net.ptr(),
      [net](TowerContext&, const std::vector<at::Tensor>& in) mutable {
        return (net->forward(in[0]) - in[1]).pow(2);
      },
      [net] { return std::make_unique<torch::optim::SGD>(net->parameters(), 0.1); });
  const std::string msg = message_of([&] { trainer.train({}, {}, 2, 1, 1); });
  EXPECT_NE(msg.find("the cost must be a scalar, but the tower function returned a tensor of "
                     "shape [8, 1]"),
            std::string::npos)
      << msg;
}

TEST(SimpleTrainerTest, SetupErrors) {
  RegressionSetup s;
  EXPECT_NE(message_of([&] {
              s.trainer.setup_graph(regression_signature(), nullptr, s.net.ptr(), s.tower(),
                                    [] { return nullptr; });
            }).find("the input source is null"),
            std::string::npos);
  s.setup(std::make_shared<FeedInput>(regression_batches()));
  EXPECT_NE(message_of([&] {
              s.setup(std::make_shared<FeedInput>(regression_batches()));
            }).find("can only be called once"),
            std::string::npos);
  SimpleTrainer cuda_trainer(c10::Device(c10::kCUDA, 0));
  if (!torch::cuda::is_available()) {
    torch::nn::Linear net(2, 1);
    const std::string msg = message_of([&] {
      cuda_trainer.setup_graph(
          regression_signature(), std::make_shared<FeedInput>(regression_batches()), net.ptr(),
          s.tower(), [net] { return std::make_unique<torch::optim::SGD>(net->parameters(), 0.1); });
    });
    EXPECT_NE(msg.find("no CUDA GPU is available"), std::string::npos) << msg;
    EXPECT_NE(msg.find("use the CPU device"), std::string::npos) << msg;
  }
}

TEST(PredictorTest, RunsInEvalModeWithoutGradAndIsMemoised) {
  RegressionSetup s;
  s.setup(std::make_shared<FeedInput>(regression_batches()));
  auto predict = s.trainer.get_predictor({"x"}, {"pred", "training"});
  EXPECT_EQ(predict, s.trainer.get_predictor({"x"}, {"pred", "training"}));
  EXPECT_NE(predict, s.trainer.get_predictor({"x"}, {"pred"}));
  EXPECT_EQ(predict->tower_name(), "tower-pred-cpu");
  auto x = torch::randn({5, 2});
  auto out = (*predict)({x});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(torch::allclose(out[0], s.net->forward(x).detach()));
  EXPECT_FALSE(out[0].requires_grad());
  EXPECT_EQ(out[1].item<int64_t>(), 0);  // is_training() was false
  EXPECT_TRUE(s.net->is_training());     // and the module is back in training mode

  // The predictor sees the current weights after training.
  s.trainer.train({}, {}, 8, 1, 1);
  EXPECT_TRUE(torch::allclose((*predict)({x})[0], s.net->forward(x).detach()));
}

// As in training, the tower's returned cost is the output "cost" (the tower outputs no "cost").
TEST(PredictorTest, TheReturnedCostIsTheOutputCost) {
  RegressionSetup s;
  s.setup(std::make_shared<FeedInput>(regression_batches()));
  auto predict = s.trainer.get_predictor({"x", "y"}, {"cost", "pred"});
  auto x = torch::randn({5, 2});
  auto y = torch::randn({5, 1});
  auto out = (*predict)({x, y});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(torch::allclose(out[0], torch::mse_loss(s.net->forward(x), y).detach()));
}

TEST(PredictorTest, TracksModuleModeDuringTheCall) {
  RegressionSetup s;
  bool mode_in_call = true;
  auto net = s.net;
  auto params = net->parameters();
  s.trainer.setup_graph(
      regression_signature(), std::make_shared<FeedInput>(regression_batches()), net.ptr(),
      [net, &mode_in_call](TowerContext& ctx, const std::vector<at::Tensor>& in) mutable {
        mode_in_call = net->is_training();
        ctx.output("pred", net->forward(in[0]));
        return at::Tensor();
      },
      [params] { return std::make_unique<torch::optim::SGD>(params, 0.1); });
  (*s.trainer.get_predictor({"x"}, {"pred"}))({torch::zeros({1, 2})});
  EXPECT_FALSE(mode_in_call);
  EXPECT_TRUE(net->is_training());
}

TEST(PredictorTest, BadNames) {
  RegressionSetup s;
  s.setup(std::make_shared<FeedInput>(regression_batches()));
  EXPECT_EQ(message_of([&] { s.trainer.get_predictor({"image"}, {"pred"}); }),
            "get_predictor: 'image' is not an input of the model; its inputs are: x, y, index");
  auto predict = s.trainer.get_predictor({"x"}, {"prob"});
  EXPECT_EQ(message_of([&] {
              (*predict)({torch::zeros({1, 2})});
            }),
            "Predictor 'tower-pred-cpu': the tower did not output 'prob'; it outputs: index, pred, "
            "training");
  EXPECT_EQ(message_of([&] { (*predict)({}); }),
            "Predictor 'tower-pred-cpu': expected 1 inputs (x), got 0");
  SimpleTrainer fresh;
  EXPECT_NE(message_of<std::logic_error>([&] {
              fresh.get_predictor({"x"}, {"pred"});
            }).find("call setup_graph"),
            std::string::npos);
}

// ---- TrainConfig / launch_train_with_config ----

class RegressionModel : public ModelDesc {
 public:
  InputSignature inputs() const override { return regression_signature(); }
  std::shared_ptr<torch::nn::Module> module() override { return net.ptr(); }
  at::Tensor build_graph(TowerContext& ctx, const std::vector<at::Tensor>& in) override {
    auto cost = torch::mse_loss(net->forward(in[0]), in[1]);
    ctx.output("total_cost", cost);
    return cost;
  }
  std::unique_ptr<torch::optim::Optimizer> optimizer() override {
    ++optimizer_calls;
    return std::make_unique<torch::optim::SGD>(net->parameters(), 0.1);
  }
  torch::nn::Linear net{2, 1};
  int optimizer_calls = 0;
};

TEST(LaunchTrainWithConfigTest, TrainsOnePassPerEpochWithFeedInput) {
  auto model = std::make_shared<RegressionModel>();
  SimpleTrainer trainer;
  trainer.set_handle_signals(false);
  auto fetch = std::make_shared<Fetcher>(std::vector<std::string>{"total_cost"});
  launch_train_with_config(TrainConfig()
                               .model(model)
                               .dataflow(regression_batches(16))
                               .callbacks({fetch})
                               .extra_callbacks(std::vector<CallbackPtr>{})
                               .monitors(std::vector<MonitorPtr>{})
                               .max_epoch(3),
                           trainer);
  EXPECT_EQ(trainer.steps_per_epoch(), 4);  // 64 points / 16
  EXPECT_EQ(trainer.global_step(), 12);
  EXPECT_EQ(fetch->values.size(), 12u);
  EXPECT_EQ(model->optimizer_calls, 1);
  EXPECT_NE(dynamic_cast<FeedInput*>(trainer.input().get()), nullptr);
}

TEST(LaunchTrainWithConfigTest, OtherTrainersGetQueueInput) {
  class MyTrainer : public SimpleTrainer {};
  auto model = std::make_shared<RegressionModel>();
  MyTrainer trainer;
  trainer.set_handle_signals(false);
  testing::LogCapture log;
  launch_train_with_config(TrainConfig()
                               .model(model)
                               .dataflow(regression_batches(16))
                               .extra_callbacks(std::vector<CallbackPtr>{})
                               .monitors(std::vector<MonitorPtr>{})
                               .steps_per_epoch(2)
                               .max_epoch(1),
                           trainer);
  EXPECT_TRUE(log.contains("Automatically applying QueueInput on the DataFlow."));
  EXPECT_NE(dynamic_cast<QueueInput*>(trainer.input().get()), nullptr);
  EXPECT_EQ(trainer.global_step(), 2);
}

TEST(LaunchTrainWithConfigTest, BadConfigs) {
  auto model = std::make_shared<RegressionModel>();
  SimpleTrainer trainer;
  EXPECT_EQ(message_of([&] { launch_train_with_config(TrainConfig(), trainer); }),
            "TrainConfig: no model; set TrainConfig().model(std::make_shared<YourModelDesc>())");
  EXPECT_NE(message_of([&] {
              launch_train_with_config(TrainConfig()
                                           .model(model)
                                           .dataflow(regression_batches())
                                           .data(std::make_shared<FeedInput>(regression_batches())),
                                       trainer);
            }).find("dataflow and data are both set"),
            std::string::npos);
  EXPECT_NE(message_of([&] {
              launch_train_with_config(TrainConfig().model(model), trainer);
            }).find("neither dataflow nor data is set"),
            std::string::npos);
  auto unsized = std::make_shared<DataFromGenerator>(
      []() -> std::optional<Datapoint> { return std::nullopt; });
  testing::LogCapture log;
  EXPECT_EQ(
      message_of(
          [&] { launch_train_with_config(TrainConfig().model(model).dataflow(unsized), trainer); }),
      "TrainConfig: steps_per_epoch is not set and the size of the input (FeedInput) is unknown; "
      "set TrainConfig().steps_per_epoch(n)");
  EXPECT_TRUE(
      log.contains("ERR You must set `TrainConfig(steps_per_epoch)` if the size of your "
                   "input is not available."));
  EXPECT_NE(message_of([&] {
              launch_train_with_config(
                  TrainConfig().model(model).dataflow(regression_batches()).starting_epoch(0),
                  trainer);
            }).find("starting_epoch must be >= 1"),
            std::string::npos);
}

}  // namespace single_cost_test
}  // namespace trainpack
