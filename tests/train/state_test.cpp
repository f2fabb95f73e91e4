// The training state map (train/state.h) and the restoring SessionInits (session_init.h):
// what is collected, what is put back, what is reported, and where the loop continues.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "support/trace.h"
#include "trainpack/session_init.h"
#include "trainpack/train/state.h"
#include "trainpack/train/trainer.h"

namespace trainpack {
namespace {

using testing::LogCapture;
using testing::Trace;
using testing::TraceCallback;

// A NoOpTrainer with a small module, an SGD-momentum optimizer and the learning rate variable,
// registered as SingleCostTrainer registers them.
struct ModelTrainer {
  torch::nn::Linear net{torch::nn::LinearOptions(3, 2)};
  torch::nn::BatchNorm1d bn{2};
  std::shared_ptr<torch::nn::Sequential> seq;
  std::unique_ptr<torch::optim::SGD> opt;
  NoOpTrainer trainer;

  explicit ModelTrainer(uint64_t seed) {
    torch::manual_seed(seed);
    seq = std::make_shared<torch::nn::Sequential>(net, bn);
    opt = std::make_unique<torch::optim::SGD>(
        (*seq)->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    trainer.graph().add_module("", seq->ptr());
    trainer.graph().add_optimizer("", opt.get());
    torch::optim::SGD* o = opt.get();
    trainer.graph().add_variable(
        "learning_rate", [o] { return o->param_groups().front().options().get_lr(); },
        [o](double lr) {
          for (auto& g : o->param_groups()) g.options().set_lr(lr);
        });
  }
  // One optimizer step on a fixed batch (so that momentum buffers exist).
  void sgd_step() {
    auto x = torch::ones({4, 3});
    opt->zero_grad();
    (*seq)->forward(x).pow(2).sum().backward();
    opt->step();
  }
};

// A callback with a state: a counter of the epochs it saw.
class CountingCallback : public Callback {
 public:
  int64_t epochs = 0;
  CallbackState state() const override { return {{"epochs", at::scalar_tensor(epochs, at::kLong)}}; }
  void load_state(const CallbackState& s) override { epochs = s.at("epochs").item<int64_t>(); }

 protected:
  void _trigger_epoch() override { ++epochs; }
};

TEST(TrainingState, CollectsModulesOptimizerVariablesCountersRngAndCallbackStates) {
  ModelTrainer m(1);
  m.sgd_step();
  auto a = std::make_shared<CountingCallback>();
  auto b = std::make_shared<CountingCallback>();
  m.trainer.train({a, b}, {}, /*steps_per_epoch=*/3, 1, /*max_epoch=*/2);
  const TensorMap state = collect_training_state(m.trainer);
  std::vector<std::string> keys;
  for (const auto& kv : state) keys.push_back(kv.first);
  const std::vector<std::string> expected = {
      "0.bias",
      "0.weight",
      "1.bias",
      "1.num_batches_tracked",
      "1.running_mean",
      "1.running_var",
      "1.weight",
      "callback/CountingCallback#2/epochs",
      "callback/CountingCallback/epochs",
      "optimizer",
      "rng/cpu",
      "trainer/epoch",
      "trainer/global_step",
      "trainer/step_in_epoch",
      "variable/learning_rate",
  };
  EXPECT_EQ(keys, expected);
  EXPECT_EQ(state.at("trainer/global_step").item<int64_t>(), 6);
  EXPECT_EQ(state.at("trainer/epoch").item<int64_t>(), 3);  // after epoch 2: epoch 3, step 0
  EXPECT_EQ(state.at("trainer/step_in_epoch").item<int64_t>(), 0);
  EXPECT_EQ(state.at("callback/CountingCallback/epochs").item<int64_t>(), 2);
  EXPECT_DOUBLE_EQ(state.at("variable/learning_rate").item<double>(), 0.1);
  EXPECT_TRUE(torch::equal(state.at("0.weight"), m.net->weight));
}

TEST(TrainingState, ResumePointFollowsTheSteps) {
  NoOpTrainer trainer;
  std::vector<std::string> points;
  auto cb = std::make_shared<testing::ActionCallback>();
  auto record = [&](const char* where) {
    const ResumePoint p = trainer.resume_point();
    points.push_back(fmt::format("{} {}/{}/{}", where, p.epoch, p.step_in_epoch, p.global_step));
  };
  cb->before_train_fn = [&](auto&) { record("before_train"); };
  cb->trigger_step_fn = [&](auto&) { record("step"); };
  cb->trigger_epoch_fn = [&](auto&) { record("epoch_end"); };
  trainer.train({cb}, {}, 2, 1, 2);
  const std::vector<std::string> expected = {
      "before_train 1/0/0", "step 1/1/1", "step 2/0/2", "epoch_end 2/0/2",
      "step 2/1/3",         "step 3/0/4", "epoch_end 3/0/4",
  };
  EXPECT_EQ(points, expected);
}

TEST(TrainingState, RestoreRoundTripsWeightsOptimizerVariablesRngAndCallbacks) {
  ModelTrainer source(1);
  source.sgd_step();
  auto counter = std::make_shared<CountingCallback>();
  source.trainer.train({counter}, {}, 2, 1, 3);
  source.opt->param_groups().front().options().set_lr(0.025);
  const TensorMap state = collect_training_state(source.trainer);
  const at::Tensor next_random = torch::rand({5});  // what the CPU generator gives next
  // Restored into a trainer with other weights: everything comes back, and the loop continues
  // at epoch 4.
  ModelTrainer target(2);
  ASSERT_FALSE(torch::equal(target.net->weight, source.net->weight));
  auto restored_counter = std::make_shared<CountingCallback>();
  auto trace = std::make_shared<Trace>();
  auto dict = std::make_shared<DictRestore>(state);
  torch::rand({7});  // move the generator: the restore must put it back
  target.trainer.setup_callbacks({restored_counter, std::make_shared<TraceCallback>(trace)}, {});
  target.trainer.initialize(dict);
  EXPECT_TRUE(torch::equal(target.net->weight, source.net->weight));
  EXPECT_TRUE(torch::equal(target.bn->running_mean, source.bn->running_mean));
  EXPECT_DOUBLE_EQ(target.opt->param_groups().front().options().get_lr(), 0.025);
  EXPECT_EQ(restored_counter->epochs, 3);
  EXPECT_TRUE(torch::equal(torch::rand({5}), next_random));
  EXPECT_TRUE(dict->report().missing.empty());
  EXPECT_TRUE(dict->report().unused.empty());
  // The momentum buffers came back too: one more identical step on both gives identical weights.
  source.sgd_step();
  target.sgd_step();
  EXPECT_TRUE(torch::equal(target.net->weight, source.net->weight));
  target.trainer.main_loop(2, 1, 4);
  ASSERT_FALSE(trace->empty());
  EXPECT_EQ(trace->at(1), "before_train ep=3 ls=-1 gs=6");
  EXPECT_EQ(trace->at(2), "before_epoch ep=4 ls=-1 gs=6");
  EXPECT_EQ(trace->back(), "after_train ep=4 ls=1 gs=8");
}

TEST(TrainingState, MidEpochResumeRunsTheRemainingStepsOfTheEpoch) {
  NoOpTrainer trainer;
  trainer.set_resume_point(ResumePoint{2, 1, 4});
  auto trace = std::make_shared<Trace>();
  trainer.train({std::make_shared<TraceCallback>(trace)}, {}, 3, 1, 2);
  const Trace expected = {
      "setup_graph ep=0 ls=-1 gs=4",  "before_train ep=1 ls=-1 gs=4",
      "before_epoch ep=2 ls=-1 gs=4", "before_run ep=2 ls=1 gs=4",
      "after_run ep=2 ls=1 gs=5",     "trigger_step ep=2 ls=1 gs=5",
      "before_run ep=2 ls=2 gs=5",    "after_run ep=2 ls=2 gs=6",
      "trigger_step ep=2 ls=2 gs=6",  "after_epoch ep=2 ls=2 gs=6",
      "trigger_epoch ep=2 ls=2 gs=6", "trigger ep=2 ls=2 gs=6",
      "after_train ep=2 ls=2 gs=6",
  };
  EXPECT_EQ(*trace, expected);
}

TEST(TrainingState, ResumePointErrors) {
  NoOpTrainer trainer;
  EXPECT_THROW(trainer.set_resume_point(ResumePoint{0, 0, 0}), std::invalid_argument);
  EXPECT_THROW(trainer.set_resume_point(ResumePoint{1, -1, 0}), std::invalid_argument);
  trainer.set_resume_point(ResumePoint{1, 5, 5});
  // A step past the epoch's end: the checkpoint was made with more steps per epoch.
  try {
    trainer.train({}, {}, 3, 1, 2);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("steps_per_epoch is 3"), std::string::npos) << e.what();
  }
}

TEST(TrainingState, PartialRestoreReportsMissingUnusedAndIgnoredNames) {
  ModelTrainer source(1);
  source.sgd_step();  // BatchNorm in training mode moves its running mean
  ASSERT_FALSE(torch::equal(source.bn->running_mean, torch::zeros({2})));
  TensorMap state = collect_training_state(source.trainer);
  state.erase("0.bias");
  state.erase("optimizer");
  state["extra.weight"] = torch::zeros({2});
  ModelTrainer target(2);
  LogCapture log;
  const RestoreReport r = restore_training_state(
      target.trainer, state, RestoreOptions().ignore({"1.running_mean", "rng/"}).source("the test map"));
  EXPECT_EQ(r.missing, std::vector<std::string>{"0.bias"});
  EXPECT_EQ(r.unused, std::vector<std::string>{"extra.weight"});
  EXPECT_EQ(r.ignored, (std::vector<std::string>{"1.running_mean", "rng/cpu"}));
  EXPECT_EQ(r.missing_training_only, std::vector<std::string>{"optimizer"});
  EXPECT_TRUE(log.contains(
      "WRN The following variables are in the graph, but not found in the test map: 0.bias"));
  EXPECT_TRUE(log.contains(
      "WRN The following variables are in the test map, but not found in the graph: "
      "extra.weight"));
  EXPECT_TRUE(
      log.contains("Variable 1.running_mean in the graph will not be loaded from the test map!"));
  EXPECT_TRUE(torch::equal(target.net->weight, source.net->weight));
  EXPECT_TRUE(torch::equal(target.bn->running_mean, torch::zeros({2})));  // ignored: untouched
}

TEST(TrainingState, ShapeMismatchNamesTheEntryAndChangesNothing) {
  ModelTrainer source(1);
  TensorMap state = collect_training_state(source.trainer);
  state["0.weight"] = torch::zeros({5, 5});
  ModelTrainer target(2);
  const at::Tensor bias_before = target.net->bias.clone();
  try {
    restore_training_state(target.trainer, state);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'0.weight' has shape [5, 5] there, but [2, 3]"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(torch::equal(target.net->bias, bias_before));
}

TEST(TrainingState, WeightsOnlyRestoreLeavesTheCountersAlone) {
  ModelTrainer source(1);
  source.trainer.train({}, {}, 2, 1, 2);
  const TensorMap state = collect_training_state(source.trainer);
  ModelTrainer target(2);
  restore_training_state(target.trainer, state, RestoreOptions().restore_counters(false));
  EXPECT_FALSE(target.trainer.restored_resume_point().has_value());
  EXPECT_TRUE(torch::equal(target.net->weight, source.net->weight));
}

TEST(ChainInitTest, RunsInOrderAndRejectsNull) {
  ModelTrainer source(1);
  TensorMap first = collect_training_state(source.trainer);
  TensorMap second = {{"0.bias", torch::full({2}, 3.0)}};
  ModelTrainer target(2);
  ChainInit chain({std::make_shared<DictRestore>(first), std::make_shared<DictRestore>(second)});
  EXPECT_EQ(chain.name(), "ChainInit(DictRestore, DictRestore)");
  chain.run_init(target.trainer);
  EXPECT_TRUE(torch::equal(target.net->weight, source.net->weight));
  EXPECT_TRUE(torch::equal(target.net->bias, torch::full({2}, 3.0)));
  EXPECT_THROW(ChainInit({nullptr}), std::invalid_argument);
  EXPECT_TRUE(ChainInit({std::make_shared<JustCurrentSession>()}).is_noop());
}

}  // namespace
}  // namespace trainpack
