// Gradient accumulation (SingleCostTrainer::set_accumulate_steps, TrainConfig().accumulate_steps):
// N micro-batches per optimizer step equal one batch N times as large, global_step and triggers
// count optimizer steps, the gradient processors see the accumulated gradient once per step, the
// published cost and the moving summaries are the micro-batches' mean, bad values are refused, and
// a run that crashes in the middle of a step resumes exactly (with gradient processors on, and
// with the processors alone).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/temp_dir.h"
#include "trainpack/callbacks/saver.h"
#include "trainpack/callbacks/summary.h"
#include "trainpack/callbacks/trigger.h"
#include "trainpack/core/state.h"
#include "trainpack/input/dataflow.h"
#include "trainpack/input/input_source.h"
#include "trainpack/train/config.h"
#include "trainpack/train/gradproc.h"
#include "trainpack/train/single_cost.h"
#include "trainpack/utils/logger.h"

namespace trainpack {
namespace accumulate_test {

namespace fs = std::filesystem;

// 24 fixed points of y = 2 a - b + 0.3 a b (not linear, so that the loss stays non-zero).
std::vector<Datapoint> points(int n = 24) {
  std::vector<Datapoint> out;
  for (int i = 0; i < n; ++i) {
    const float a = std::sin(0.7f * static_cast<float>(i));
    const float b = static_cast<float>(i % 5) / 2.0f - 1.0f;
    out.push_back({torch::tensor({a, b}), torch::tensor({2 * a - b + 0.3f * a * b})});
  }
  return out;
}

DataFlowPtr batches(int64_t batch_size, int n = 24) {
  return std::make_shared<BatchData>(std::make_shared<DataFromList>(points(n)), batch_size);
}

// Linear(2, 1), seeded; mean squared error; SGD with momentum. Counts the tower's runs.
class Regression : public ModelDesc {
 public:
  Regression() {
    torch::manual_seed(5);
    net = torch::nn::Linear(2, 1);
  }
  InputSignature inputs() const override {
    return {InputDesc("x", {-1, 2}), InputDesc("y", {-1, 1})};
  }
  std::shared_ptr<torch::nn::Module> module() override { return net.ptr(); }
  at::Tensor build_graph(TowerContext& ctx, const std::vector<at::Tensor>& in) override {
    ++tower_runs;
    at::Tensor cost = torch::mse_loss(net->forward(in[0]), in[1]);
    ctx.add_moving_summary("cost", cost);
    micro_costs.push_back(cost.item<float>());
    return cost;
  }
  std::unique_ptr<torch::optim::Optimizer> optimizer() override {
    return std::make_unique<torch::optim::SGD>(net->parameters(),
                                               torch::optim::SGDOptions(0.05).momentum(0.9));
  }
  torch::nn::Linear net{nullptr};
  int64_t tower_runs = 0;
  std::vector<float> micro_costs;
};

// Records each step's global_step and its fetched "cost".
class CostRecorder : public Callback {
 public:
  std::vector<int64_t> steps;
  std::vector<float> costs;
  int64_t triggers = 0;

 protected:
  RunArgs _before_run(const StepContext&) override {
    steps.push_back(global_step());
    return RunArgs{"cost"};
  }
  void _after_run(const StepContext&, const RunValues& values) override {
    costs.push_back(values["cost"].item<float>());
  }
  void _trigger_step() override { ++triggers; }
};

// Counts its calls and keeps the global step at each.
class CountingProcessor : public GradientProcessor {
 public:
  std::vector<int64_t> steps;

 protected:
  void _process(const NamedGradients&, StepContext& step) override {
    steps.push_back(step.trainer().global_step());
  }
};

struct Training {
  std::shared_ptr<Regression> model = std::make_shared<Regression>();
  std::shared_ptr<CostRecorder> recorder = std::make_shared<CostRecorder>();
  SimpleTrainer trainer;
  Training() { trainer.set_handle_signals(false); }
  void train(TrainConfig config) {
    config.model(model).extra_callbacks({}).monitors({});
    std::vector<CallbackPtr> callbacks = config.callbacks();
    callbacks.push_back(recorder);
    config.callbacks(callbacks);
    launch_train_with_config(config, trainer);
  }
};

void expect_close(const at::Tensor& a, const at::Tensor& b, double tolerance) {
  ASSERT_EQ(a.sizes(), b.sizes());
  const double worst = (a - b).abs().max().item<double>();
  EXPECT_LT(worst, tolerance) << "a = " << a << "\nb = " << b;
}

// Three micro-batches of 4 per step train as batches of 12 (the same 12 points per step), with
// momentum and a gradient clip: within float rounding, the same parameters after 3 epochs.
TEST(Accumulation, ThreeMicroBatchesEqualOneBatchThreeTimesAsLarge) {
  Training accumulated, big;
  accumulated.train(TrainConfig()
                        .dataflow(batches(4))
                        .max_epoch(3)
                        .accumulate_steps(3)
                        .gradient_processors({std::make_shared<GlobalNormClip>(0.5)}));
  big.train(TrainConfig()
                .dataflow(batches(12))
                .max_epoch(3)
                .gradient_processors({std::make_shared<GlobalNormClip>(0.5)}));
  EXPECT_EQ(accumulated.trainer.global_step(), 6);
  EXPECT_EQ(big.trainer.global_step(), 6);
  expect_close(accumulated.model->net->weight, big.model->net->weight, 1e-6);
  expect_close(accumulated.model->net->bias, big.model->net->bias, 1e-6);
  // Not vacuous: training moved the weights.
  Regression untrained;
  EXPECT_GT((untrained.net->weight - big.model->net->weight).abs().max().item<double>(), 0.05);
}

// A step is an optimizer step: 8 batches per pass and accumulate_steps 3 give 2 steps per epoch
// (the 2 batches left over start the next epoch); 3 epochs are global steps 0..5, 18 batches
// read, 6 trigger_step calls, and the gradient processors run once per step.
TEST(Accumulation, GlobalStepTriggersAndProcessorsCountOptimizerSteps) {
  Training run;
  auto counting = std::make_shared<CountingProcessor>();
  run.train(TrainConfig()
                .dataflow(batches(3))  // 24 points: 8 batches
                .max_epoch(3)
                .accumulate_steps(3)
                .gradient_processors({counting}));
  EXPECT_EQ(run.trainer.global_step(), 6);
  EXPECT_EQ(run.trainer.steps_per_epoch(), 2);
  EXPECT_EQ(run.model->tower_runs, 18);
  EXPECT_EQ(run.recorder->steps, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(run.recorder->triggers, 6);
  EXPECT_EQ(counting->steps, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
}

// The cost a callback fetches, and the moving summary "cost", are the mean of the step's
// micro-batch costs (the tower's own values, recorded as it ran).
TEST(Accumulation, TheFetchedCostAndTheMovingSummaryAreTheMicroBatchMean) {
  Training run;
  run.train(TrainConfig()
                .dataflow(batches(4))
                .steps_per_epoch(1)
                .max_epoch(2)
                .accumulate_steps(3)
                .callbacks(std::vector<CallbackPtr>{std::make_shared<MovingAverageSummary>()}));
  const auto& micro = run.model->micro_costs;
  ASSERT_EQ(micro.size(), 6u);
  ASSERT_EQ(run.recorder->costs.size(), 2u);
  for (size_t step = 0; step < 2; ++step) {
    const float mean = (micro[3 * step] + micro[3 * step + 1] + micro[3 * step + 2]) / 3;
    EXPECT_FLOAT_EQ(run.recorder->costs[step], mean) << "step " << step;
  }
  // The micro-batches differ, so the mean is not any one of them.
  EXPECT_NE(micro[0], micro[2]);
  // The moving average after 2 updates with decay 0.95, debiased: the mean of each step's value,
  // weighted 0.95 : 1 for the first and second.
  const auto& averages = run.trainer.tower_registry().moving_averages();
  ASSERT_EQ(averages.size(), 1u);
  const double s0 = run.recorder->costs[0], s1 = run.recorder->costs[1];
  const double expected = (0.05 * 0.95 * s0 + 0.05 * s1) / (1 - 0.95 * 0.95);
  EXPECT_NEAR(averages[0].average().item<double>(), expected, 1e-6);
}

TEST(Accumulation, BadValuesAreRefusedNamingTheFix) {
  SimpleTrainer trainer;
  try {
    trainer.set_accumulate_steps(0);
    FAIL() << "accumulate_steps 0 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "SingleCostTrainer::set_accumulate_steps: n must be >= 1 (1: no accumulation), "
                 "got 0");
  }
  Training negative;
  try {
    negative.train(TrainConfig().dataflow(batches(4)).max_epoch(1).accumulate_steps(-2));
    FAIL() << "accumulate_steps -2 was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "TrainConfig: accumulate_steps must be >= 1 (1: no accumulation), got -2");
  }
  Training too_few;
  try {
    too_few.train(TrainConfig().dataflow(batches(8)).max_epoch(1).accumulate_steps(4));
    FAIL() << "an input of 3 batches per pass was accepted with accumulate_steps 4";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "TrainConfig: the input has 3 batches per pass, fewer than accumulate_steps (4), "
                 "so an epoch would have no step; lower accumulate_steps or set steps_per_epoch");
  }
  EXPECT_EQ(too_few.model->tower_runs, 0);
}

// ---- exact resume ----

// Batch norm (buffers), dropout (the RNG), Adam (optimizer state), a shuffled flow (its
// position) and a moving summary: everything a checkpoint must carry. The tower throws at its
// `crash_at`-th run (0-based), in the middle of a step.
class ResumableModel : public ModelDesc {
 public:
  explicit ResumableModel(int64_t crash_at) : crash_at_(crash_at) {
    torch::manual_seed(11);
    fc1 = torch::nn::Linear(2, 8);
    bn = torch::nn::BatchNorm1d(8);
    fc2 = torch::nn::Linear(8, 1);
    net = std::make_shared<torch::nn::Module>();
    net->register_module("fc1", fc1);
    net->register_module("bn", bn);
    net->register_module("fc2", fc2);
  }
  InputSignature inputs() const override {
    return {InputDesc("x", {-1, 2}), InputDesc("y", {-1, 1})};
  }
  std::shared_ptr<torch::nn::Module> module() override { return net; }
  at::Tensor build_graph(TowerContext& ctx, const std::vector<at::Tensor>& in) override {
    if (runs_++ == crash_at_) throw std::runtime_error("crash in a micro-batch");
    at::Tensor h = torch::dropout(torch::relu(bn->forward(fc1->forward(in[0]))), 0.3, true);
    at::Tensor cost = torch::mse_loss(fc2->forward(h), in[1]);
    ctx.add_moving_summary("cost", cost);
    return cost;
  }
  std::unique_ptr<torch::optim::Optimizer> optimizer() override {
    return std::make_unique<torch::optim::Adam>(net->parameters(), torch::optim::AdamOptions(0.01));
  }
  std::shared_ptr<torch::nn::Module> net;
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};

 private:
  int64_t crash_at_;
  int64_t runs_ = 0;
};

class AccumulationResume : public testing::TempDirFixture<> {
 protected:
  // Every entry of the training state bitwise equal (parameters, buffers, optimizer state, RNG,
  // counters, input position, the callbacks' states).
  static void expect_same_state(const TensorMap& got, const TensorMap& want) {
    std::vector<std::string> differ;
    for (const auto& [key, value] : want) {
      auto found = got.find(key);
      if (found == got.end() || found->second.scalar_type() != value.scalar_type() ||
          !torch::equal(found->second, value)) {
        differ.push_back(key);
      }
    }
    EXPECT_EQ(differ, std::vector<std::string>{});
    EXPECT_EQ(got.size(), want.size());
  }

  struct Outcome {
    std::vector<int64_t> steps;
    std::vector<float> costs;
    TensorMap state;
    bool crashed = false;
  };

  // 36 shuffled points in batches of 4 (9 per pass), `accumulate` micro-batches per step (3: 3
  // steps per epoch), 4 epochs, the gradients clipped and checked. A checkpoint after every step;
  // auto-resume from `logdir`.
  Outcome run(const fs::path& logdir, int64_t crash_at, int64_t accumulate = 3) {
    at::set_num_threads(1);
    logger::set_logger_dir(logdir.string(), 'k');
    auto model = std::make_shared<ResumableModel>(crash_at);
    auto recorder = std::make_shared<CostRecorder>();
    auto flow = std::make_shared<BatchData>(
        std::make_shared<DataFromList>(points(36), DataFromListOptions().shuffle(true).seed(4)), 4);
    TrainConfig config =
        TrainConfig()
            .model(model)
            .dataflow(flow)
            .max_epoch(4)
            .accumulate_steps(accumulate)
            .gradient_processors(
                {std::make_shared<GlobalNormClip>(0.2), std::make_shared<CheckGradient>()})
            .callbacks(std::vector<CallbackPtr>{
                std::make_shared<PeriodicTrigger>(
                    std::make_shared<ModelSaver>(ModelSaverOptions().fsync(false)),
                    PeriodicTriggerOptions().every_k_steps(1)),
                recorder})
            .extra_callbacks(std::vector<CallbackPtr>{std::make_shared<MovingAverageSummary>()})
            .monitors({});
    config = AutoResumeTrainConfig(config);
    SimpleTrainer trainer;
    trainer.set_handle_signals(false);
    Outcome out;
    try {
      launch_train_with_config(config, trainer);
    } catch (const std::runtime_error& e) {
      if (std::string(e.what()) != "crash in a micro-batch") throw;
      out.crashed = true;
    }
    logger::unset_logger_dir();
    out.steps = recorder->steps;
    out.costs = recorder->costs;
    out.state = collect_training_state(trainer);
    return out;
  }
};

// A crash in the second micro-batch of step 7 (tower run 3 * 7 + 1) loses that step only: the
// resumed run starts at global_step 7 from the checkpoint of step 7 and ends with bitwise the
// state (parameters, buffers, Adam's moments, RNG, input position, moving average) and the costs
// of the run never stopped. The gradient processors are on too.
TEST_F(AccumulationResume, ACrashInTheMiddleOfAStepResumesExactly) {
  const Outcome straight = run(dir() / "straight", -1);
  ASSERT_FALSE(straight.crashed);
  ASSERT_EQ(straight.steps.size(), 12u);

  const fs::path logdir = dir() / "stopped";
  const Outcome crashed = run(logdir, 3 * 7 + 1);
  ASSERT_TRUE(crashed.crashed);
  EXPECT_EQ(crashed.steps, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(crashed.costs.size(), 7u);  // step 7 never finished
  EXPECT_TRUE(fs::exists(logdir / "model-7.data"));
  EXPECT_FALSE(fs::exists(logdir / "model-8.data"));

  const Outcome resumed = run(logdir, -1);
  ASSERT_FALSE(resumed.crashed);
  EXPECT_EQ(resumed.steps, (std::vector<int64_t>{7, 8, 9, 10, 11}));
  std::vector<float> costs(crashed.costs.begin(), crashed.costs.end());
  costs.insert(costs.end(), resumed.costs.begin(), resumed.costs.end());
  EXPECT_EQ(costs, straight.costs);

  expect_same_state(resumed.state, straight.state);
}

// The same with the gradient processors alone (no accumulation): a crash at step 20 resumes from
// the checkpoint of step 20 and ends as the run never stopped.
TEST_F(AccumulationResume, WithGradientProcessorsAloneACrashResumesExactly) {
  const Outcome straight = run(dir() / "straight", -1, 1);
  ASSERT_EQ(straight.steps.size(), 36u);
  const fs::path logdir = dir() / "stopped";
  const Outcome crashed = run(logdir, 20, 1);
  ASSERT_TRUE(crashed.crashed);
  EXPECT_EQ(crashed.costs.size(), 20u);
  const Outcome resumed = run(logdir, -1, 1);
  ASSERT_FALSE(resumed.crashed);
  ASSERT_FALSE(resumed.steps.empty());
  EXPECT_EQ(resumed.steps.front(), 20);
  std::vector<float> costs(crashed.costs.begin(), crashed.costs.end());
  costs.insert(costs.end(), resumed.costs.begin(), resumed.costs.end());
  EXPECT_EQ(costs, straight.costs);
  expect_same_state(resumed.state, straight.state);
}

}  // namespace accumulate_test
}  // namespace trainpack
