// The training state map (core/state.h) and the restoring SessionInits (core/session_init.h):
// what is collected, what is put back, what is reported, and where the loop continues.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include "support/errors.h"
#include "support/model_trainer.h"
#include "support/temp_dir.h"
#include "trainpack/core/optimizer_state.h"
#include "trainpack/core/session_init.h"
#include "trainpack/core/state.h"
#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"
#include "trainpack/utils/checkpoint.h"

namespace trainpack {
namespace state_test {

using testing::LogCapture;
using testing::ModelTrainer;
using testing::Trace;
using testing::TraceCallback;

// A testing::ModelTrainer seeded with `seed` whose Linear is followed by a BatchNorm (its running
// statistics are state too), with an SGD-momentum optimizer and the learning rate variable.
testing::ModelTrainerOptions with_batch_norm(uint64_t seed) {
  return testing::ModelTrainerOptions().seed(seed).batch_norm(true).learning_rate_variable(true);
}

// A callback with a state: a counter of the epochs it saw.
class CountingCallback : public Callback {
 public:
  int64_t epochs = 0;
  CallbackState state() const override {
    return {{"epochs", at::scalar_tensor(epochs, at::kLong)}};
  }
  void load_state(const CallbackState& s) override { epochs = s.at("epochs").item<int64_t>(); }

 protected:
  void _trigger_epoch() override { ++epochs; }
};

TEST(TrainingState, CollectsModulesOptimizerVariablesCountersRngAndCallbackStates) {
  ModelTrainer m(with_batch_norm(1));
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
      "optimizer/0/0/momentum_buffer",
      "optimizer/0/1/momentum_buffer",
      "optimizer/0/2/momentum_buffer",
      "optimizer/0/3/momentum_buffer",
      "optimizer/0/dampening",
      "optimizer/0/lr",
      "optimizer/0/momentum",
      "optimizer/0/nesterov",
      "optimizer/0/weight_decay",
      "optimizer/group_sizes",
      "optimizer/type",
      "rng/cpu",
      "trainer/epoch",
      "trainer/global_step",
      "trainer/step_in_epoch",
      "trainer/steps_per_epoch",
      "variable/learning_rate",
  };
  EXPECT_EQ(keys, expected);
  EXPECT_EQ(state.at("trainer/global_step").item<int64_t>(), 6);
  EXPECT_EQ(state.at("trainer/epoch").item<int64_t>(), 3);  // after epoch 2: epoch 3, step 0
  EXPECT_EQ(state.at("trainer/step_in_epoch").item<int64_t>(), 0);
  EXPECT_EQ(state.at("trainer/steps_per_epoch").item<int64_t>(), 3);
  EXPECT_EQ(state.at("callback/CountingCallback/epochs").item<int64_t>(), 2);
  EXPECT_DOUBLE_EQ(state.at("variable/learning_rate").item<double>(), 0.1);
  EXPECT_TRUE(torch::equal(state.at("0.weight"), m.net->weight));
  // The optimizer's state as tensors of their own.
  const at::Tensor& type = state.at("optimizer/type");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(type.data_ptr<uint8_t>()), type.numel()),
            "SGD");
  EXPECT_TRUE(torch::equal(state.at("optimizer/group_sizes"), torch::tensor({int64_t{4}})));
  EXPECT_DOUBLE_EQ(state.at("optimizer/0/momentum").item<double>(), 0.9);
  EXPECT_EQ(state.at("optimizer/0/nesterov").scalar_type(), at::kBool);
  EXPECT_EQ(state.at("optimizer/0/0/momentum_buffer").sizes(), m.net->weight.sizes());
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
      "before_train 1/0/0", "step 1/1/1", "step 2/0/2",      "epoch_end 2/0/2",
      "step 2/1/3",         "step 3/0/4", "epoch_end 3/0/4",
  };
  EXPECT_EQ(points, expected);
}

TEST(TrainingState, RestoreRoundTripsWeightsOptimizerVariablesRngAndCallbacks) {
  ModelTrainer source(with_batch_norm(1));
  source.sgd_step();
  auto counter = std::make_shared<CountingCallback>();
  source.trainer.train({counter}, {}, 2, 1, 3);
  source.opt->param_groups().front().options().set_lr(0.025);
  const TensorMap state = collect_training_state(source.trainer);
  const at::Tensor next_random = torch::rand({5});  // what the CPU generator gives next
  // Restored into a trainer with other weights: everything comes back, and the loop continues
  // at epoch 4.
  ModelTrainer target(with_batch_norm(2));
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
      "setup_graph ep=0 ls=-1 gs=4", "before_train ep=1 ls=-1 gs=4", "before_epoch ep=2 ls=-1 gs=4",
      "before_run ep=2 ls=1 gs=4",   "after_run ep=2 ls=1 gs=5",     "trigger_step ep=2 ls=1 gs=5",
      "before_run ep=2 ls=2 gs=5",   "after_run ep=2 ls=2 gs=6",     "trigger_step ep=2 ls=2 gs=6",
      "after_epoch ep=2 ls=2 gs=6",  "trigger_epoch ep=2 ls=2 gs=6", "trigger ep=2 ls=2 gs=6",
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

// require_all (what auto-resume asks for): a map that lacks any parameter is refused, naming it,
// and nothing is restored.
TEST(TrainingState, RequireAllRefusesAMapThatLacksAParameter) {
  ModelTrainer source(with_batch_norm(1));
  TensorMap state = collect_training_state(source.trainer);
  state.erase("0.bias");
  ModelTrainer target(with_batch_norm(2));
  const TensorMap before = collect_training_state(target.trainer);
  try {
    restore_training_state(target.trainer, state,
                           RestoreOptions().require_all(true).source("the test map"));
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("restoring from the test map: it lacks 1 of the model's"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(": 0.bias."), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("allow_missing_parameters(true)"), std::string::npos);
  }
  EXPECT_TRUE(torch::equal(target.net->weight, before.at("0.weight")));  // nothing restored
  EXPECT_FALSE(torch::equal(target.net->weight, source.net->weight));
}

TEST(TrainingState, PartialRestoreReportsMissingUnusedAndIgnoredNames) {
  ModelTrainer source(with_batch_norm(1));
  source.sgd_step();  // BatchNorm in training mode moves its running mean
  ASSERT_FALSE(torch::equal(source.bn->running_mean, torch::zeros({2})));
  TensorMap state = collect_training_state(source.trainer);
  state.erase("0.bias");
  for (auto it = state.lower_bound("optimizer/"); it != state.end() && it->first < "optimizer0";) {
    it = state.erase(it);
  }
  state["extra.weight"] = torch::zeros({2});
  // Entries the trainer has no place for but that match an ignore pattern: ignored, not unused.
  state["old/head.weight"] = torch::zeros({2});
  state["callback/GoneCallback/x"] = torch::zeros({});
  ModelTrainer target(with_batch_norm(2));
  LogCapture log;
  const RestoreReport r = restore_training_state(
      target.trainer, state,
      RestoreOptions()
          .ignore({"1.running_mean", "rng/", "old/", "callback/GoneCallback/x"})
          .source("the test map"));
  EXPECT_EQ(r.missing, std::vector<std::string>{"0.bias"});
  EXPECT_EQ(r.unused, std::vector<std::string>{"extra.weight"});
  EXPECT_EQ(r.ignored, (std::vector<std::string>{"1.running_mean", "rng/cpu",
                                                 "callback/GoneCallback/x", "old/head.weight"}));
  EXPECT_EQ(r.missing_training_only, std::vector<std::string>{"optimizer/*"});
  EXPECT_TRUE(log.contains(
      "WRN The following variables are in the graph, but not found in the test map: 0.bias"));
  EXPECT_TRUE(
      log.contains("WRN The following variables are in the test map, but not found in the graph: "
                   "extra.weight"));
  EXPECT_TRUE(
      log.contains("Variable 1.running_mean in the graph will not be loaded from the test map!"));
  EXPECT_TRUE(torch::equal(target.net->weight, source.net->weight));
  EXPECT_TRUE(torch::equal(target.bn->running_mean, torch::zeros({2})));  // ignored: untouched
}

TEST(TrainingState, EntryNamesFromTheFileAreLoggedWithTheirControlBytesEscaped) {
  // A checkpoint is a file someone may have written: its names reach the log, not the terminal.
  ModelTrainer source(with_batch_norm(2));
  TensorMap state = collect_training_state(source.trainer);
  state["evil\x1b]52;c;aGk=\x07name"] = torch::zeros({2});
  ModelTrainer target(with_batch_norm(2));
  LogCapture log;
  const RestoreReport r =
      restore_training_state(target.trainer, state, RestoreOptions().source("the test map"));
  EXPECT_EQ(r.unused, std::vector<std::string>{"evil\x1b]52;c;aGk=\x07name"});  // as it is
  EXPECT_TRUE(log.contains("but not found in the graph: evil\\x1b]52;c;aGk=\\x07name"));
  EXPECT_FALSE(log.contains("\x1b"));
}

TEST(TrainingState, ShapeMismatchNamesTheEntryAndChangesNothing) {
  ModelTrainer source(with_batch_norm(1));
  TensorMap state = collect_training_state(source.trainer);
  state["0.weight"] = torch::zeros({5, 5});
  ModelTrainer target(with_batch_norm(2));
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

// Another model's checkpoint: a restore that matches fewer than half of the parameter tensors
// is refused, naming the source and the names, and applies nothing (its counters included).
TEST(TrainingState, AMapOfAnotherModelIsRefusedAndAppliesNothing) {
  ModelTrainer source(with_batch_norm(1));
  source.trainer.train({}, {}, 2, 1, 2);
  TensorMap foreign;
  for (const auto& [name, tensor] : collect_training_state(source.trainer)) {
    const bool model = is_model_entry(name);
    foreign[model ? "encoder/" + name : name] = tensor;
  }
  ModelTrainer target(with_batch_norm(2));
  const at::Tensor weight_before = target.net->weight.clone();
  try {
    restore_training_state(target.trainer, foreign, RestoreOptions().source("checkpoint x/y"));
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("restoring from checkpoint x/y: it matches 0 of the "
                                         "model's 4 parameter tensors"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("0.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("SaverRestoreOptions().partial(true)"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(target.trainer.restored_resume_point().has_value());
  EXPECT_TRUE(torch::equal(target.net->weight, weight_before));

  // Shapes that differ do not match: one of four is too few, and the message says which.
  TensorMap reshaped = collect_training_state(source.trainer);
  reshaped["0.weight"] = torch::zeros({5, 5});
  reshaped["0.bias"] = torch::zeros({5});
  reshaped["1.weight"] = torch::zeros({5});
  try {
    restore_training_state(target.trainer, reshaped);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("it matches 1 of the model's 4 parameter tensors"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("of another shape or dtype: '0.weight' has shape [5, 5]"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(target.trainer.restored_resume_point().has_value());

  // Asked for: a partial restore loads what matches, with tensorpack's warnings.
  LogCapture log;
  const RestoreReport r =
      restore_training_state(target.trainer, reshaped, RestoreOptions().partial(true));
  EXPECT_EQ(r.mismatched, (std::vector<std::string>{"0.weight", "0.bias", "1.weight"}));
  EXPECT_TRUE(torch::equal(target.bn->bias, source.bn->bias));
  EXPECT_TRUE(torch::equal(target.net->weight, weight_before));
  EXPECT_TRUE(
      log.contains("'0.weight' has shape [5, 5] there, but [2, 3] in the model; it will "
                   "not be loaded (partial restore)."));
  EXPECT_TRUE(
      log.contains("Partial restore from the checkpoint: 1 of the model's 4 parameter "
                   "tensors matched."));
}

TEST(TrainingState, CountersOutOfRangeAreRefusedNamingTheSourceAndTheValue) {
  ModelTrainer source(with_batch_norm(1));
  const TensorMap good = collect_training_state(source.trainer);
  const std::vector<std::pair<std::string, int64_t>> bad{
      {"trainer/global_step", std::numeric_limits<int64_t>::max()},
      {"trainer/global_step", -1},
      {"trainer/epoch", 0},
      {"trainer/step_in_epoch", -5}};
  for (const auto& [entry, value] : bad) {
    SCOPED_TRACE(entry);
    TensorMap state = good;
    state[entry] = at::scalar_tensor(value, at::kLong);
    ModelTrainer target(with_batch_norm(2));
    try {
      restore_training_state(target.trainer, state, RestoreOptions().source("checkpoint a/b"));
      FAIL() << "expected std::invalid_argument";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(
                    fmt::format("checkpoint a/b: '{}' is {}, outside the range", entry, value)),
                std::string::npos)
          << e.what();
    }
    EXPECT_FALSE(target.trainer.restored_resume_point().has_value());
    // Weights only: the counters are not read.
    restore_training_state(target.trainer, state, RestoreOptions().restore_counters(false));
  }
}

TEST(TrainingState, NonFiniteWeightsAreNamedAndSaverRestoreWarns) {
  testing::ScopedTempDir tmp("nan_restore");
  ModelTrainer source(with_batch_norm(1));
  TensorMap state = collect_training_state(source.trainer);
  state["0.bias"] = state["0.bias"].clone();
  state["0.bias"][0] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(non_finite_model_entries(state), std::vector<std::string>{"0.bias"});
  const std::string prefix = (tmp.path() / "model-0").string();
  write_checkpoint(prefix, state, CheckpointWriteOptions().fsync(false));
  ModelTrainer target(with_batch_norm(2));
  LogCapture log;
  SaverRestore(prefix).run_init(target.trainer);
  EXPECT_TRUE(log.contains("checkpoint " + prefix +
                           " holds weights that are not finite (NaN or inf), in: 0.bias."));
}

TEST(TrainingState, WeightsOnlyRestoreLeavesTheCountersAlone) {
  ModelTrainer source(with_batch_norm(1));
  source.trainer.train({}, {}, 2, 1, 2);
  const TensorMap state = collect_training_state(source.trainer);
  ModelTrainer target(with_batch_norm(2));
  restore_training_state(target.trainer, state, RestoreOptions().restore_counters(false));
  EXPECT_FALSE(target.trainer.restored_resume_point().has_value());
  EXPECT_TRUE(torch::equal(target.net->weight, source.net->weight));
}

TEST(ChainInitTest, RunsInOrderAndRejectsNull) {
  ModelTrainer source(with_batch_norm(1));
  TensorMap first = collect_training_state(source.trainer);
  TensorMap second = {{"0.bias", torch::full({2}, 3.0)}};
  ModelTrainer target(with_batch_norm(2));
  // One tensor of four: a partial restore, which has to be asked for.
  ChainInit chain({std::make_shared<DictRestore>(first),
                   std::make_shared<DictRestore>(second, SaverRestoreOptions().partial(true))});
  EXPECT_EQ(chain.name(), "ChainInit(DictRestore, DictRestore)");
  chain.run_init(target.trainer);
  EXPECT_TRUE(torch::equal(target.net->weight, source.net->weight));
  EXPECT_TRUE(torch::equal(target.net->bias, torch::full({2}, 3.0)));
  EXPECT_THROW(ChainInit({nullptr}), std::invalid_argument);
  EXPECT_TRUE(ChainInit({std::make_shared<JustCurrentSession>()}).is_noop());
}

// ---- Optimizer state (core/optimizer_state.h) ----

namespace fs = std::filesystem;
using torch::optim::OptimizerParamGroup;
using MakeOptimizer =
    std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<OptimizerParamGroup>)>;

// A model (Linear, BatchNorm, Linear) and an optimizer from `make` with two parameter groups (the
// first Linear, then the rest; the second group's lr halved), registered on a NoOpTrainer as
// SingleCostTrainer registers them. The first group also holds a tensor that never gets a
// gradient, so that it never has a state.
struct OptimizerRun {
  torch::nn::Sequential seq;
  at::Tensor never_used = torch::zeros({2}).requires_grad_();
  std::unique_ptr<torch::optim::Optimizer> opt;
  NoOpTrainer trainer;

  OptimizerRun(uint64_t seed, const MakeOptimizer& make) {
    torch::manual_seed(seed);
    seq = torch::nn::Sequential(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4),
                                torch::nn::Linear(4, 2));
    std::vector<at::Tensor> first = seq[0]->parameters();
    first.push_back(never_used);
    std::vector<at::Tensor> rest = seq[1]->parameters();
    for (const auto& p : seq[2]->parameters()) rest.push_back(p);
    opt = make({OptimizerParamGroup(first), OptimizerParamGroup(rest)});
    auto& last = opt->param_groups().back().options();
    last.set_lr(last.get_lr() * 0.5);
    trainer.graph().add_module("", seq.ptr());
    trainer.graph().add_optimizer("", opt.get());
  }
  // One step on the k-th of a fixed series of batches (through a closure, as LBFGS needs one).
  void step(int k) {
    const at::Tensor x = torch::sin(torch::arange(24, torch::kFloat).reshape({8, 3}) * (k + 1));
    const at::Tensor y = torch::cos(torch::arange(16, torch::kFloat).reshape({8, 2}) * (k + 2));
    opt->step([&] {
      opt->zero_grad();
      at::Tensor loss = (seq->forward(x) - y).pow(2).mean();
      loss.backward();
      return loss;
    });
  }
  std::vector<at::Tensor> params() const {
    std::vector<at::Tensor> out;
    for (const auto& p : seq->parameters()) out.push_back(p.detach().clone());
    for (const auto& b : seq->buffers()) out.push_back(b.clone());
    return out;
  }
};

bool all_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i])) return false;
  }
  return true;
}

class OptimizerStateTest : public testing::TempDirTest {
 protected:
  std::string prefix() const { return (dir() / "model-3").string(); }

  // The exact-resume property: train k steps, save a checkpoint, train n more -> P1; a new model
  // and optimizer (other initial weights) restored from the checkpoint (SaverRestore), n steps ->
  // P2; bitwise P1 == P2. Restoring all but the optimizer gives other parameters, so that the
  // optimizer's state is what makes them equal. Returns the checkpoint's entries.
  TensorMap expect_exact_resume(const MakeOptimizer& make, int k = 3, int n = 3) {
    OptimizerRun a(1, make);
    for (int i = 0; i < k; ++i) a.step(i);
    write_checkpoint(prefix(), collect_training_state(a.trainer),
                     CheckpointWriteOptions().fsync(false));
    for (int i = k; i < k + n; ++i) a.step(i);

    OptimizerRun b(2, make);
    EXPECT_FALSE(all_equal(b.params(), a.params()));
    SaverRestore restore(prefix());
    restore.run_init(b.trainer);
    EXPECT_TRUE(restore.report().unused.empty())
        << ::testing::PrintToString(restore.report().unused);
    for (int i = k; i < k + n; ++i) b.step(i);
    EXPECT_TRUE(all_equal(b.params(), a.params()));
    EXPECT_DOUBLE_EQ(b.opt->param_groups().back().options().get_lr(),
                     a.opt->param_groups().back().options().get_lr());

    OptimizerRun c(2, make);
    SaverRestore(prefix(), SaverRestoreOptions().ignore({"optimizer", "optimizer/"}))
        .run_init(c.trainer);
    for (int i = k; i < k + n; ++i) c.step(i);
    EXPECT_FALSE(all_equal(c.params(), a.params()));
    return read_checkpoint(prefix());
  }
};

TEST_F(OptimizerStateTest, SgdWithMomentumResumesExactly) {
  const TensorMap state = expect_exact_resume([](std::vector<OptimizerParamGroup> groups) {
    return std::make_unique<torch::optim::SGD>(
        std::move(groups),
        torch::optim::SGDOptions(0.1).momentum(0.9).dampening(0.1).weight_decay(1e-3));
  });
  // Group 0: the first Linear's weight and bias, and the tensor without a gradient (no state).
  EXPECT_EQ(state.count("optimizer/0/1/momentum_buffer"), 1u);
  EXPECT_EQ(state.count("optimizer/0/2/momentum_buffer"), 0u);
  EXPECT_TRUE(
      torch::equal(state.at("optimizer/group_sizes"), torch::tensor({int64_t{3}, int64_t{4}})));
  EXPECT_DOUBLE_EQ(state.at("optimizer/1/lr").item<double>(), 0.05);
}

TEST_F(OptimizerStateTest, SgdWithNesterovResumesExactly) {
  expect_exact_resume([](std::vector<OptimizerParamGroup> groups) {
    return std::make_unique<torch::optim::SGD>(
        std::move(groups),
        torch::optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(5e-4));
  });
}

TEST_F(OptimizerStateTest, AdamWithAmsgradResumesExactly) {
  const TensorMap state = expect_exact_resume([](std::vector<OptimizerParamGroup> groups) {
    return std::make_unique<torch::optim::Adam>(
        std::move(groups), torch::optim::AdamOptions(0.01).amsgrad(true).weight_decay(1e-3));
  });
  EXPECT_EQ(state.at("optimizer/0/0/step").item<int64_t>(), 3);
  EXPECT_EQ(state.count("optimizer/0/0/max_exp_avg_sq"), 1u);
  EXPECT_EQ(state.at("optimizer/0/betas").sizes(), at::IntArrayRef({2}));
}

TEST_F(OptimizerStateTest, AdamResumesExactly) {
  const TensorMap state = expect_exact_resume([](std::vector<OptimizerParamGroup> groups) {
    return std::make_unique<torch::optim::Adam>(std::move(groups), torch::optim::AdamOptions(0.01));
  });
  EXPECT_EQ(state.count("optimizer/0/0/max_exp_avg_sq"), 0u);
}

TEST_F(OptimizerStateTest, AdamWResumesExactly) {
  expect_exact_resume([](std::vector<OptimizerParamGroup> groups) {
    return std::make_unique<torch::optim::AdamW>(std::move(groups),
                                                 torch::optim::AdamWOptions(0.01).amsgrad(true));
  });
}

TEST_F(OptimizerStateTest, RmspropCenteredWithMomentumResumesExactly) {
  const TensorMap state = expect_exact_resume([](std::vector<OptimizerParamGroup> groups) {
    return std::make_unique<torch::optim::RMSprop>(
        std::move(groups),
        torch::optim::RMSpropOptions(0.01).momentum(0.5).centered(true).weight_decay(1e-3));
  });
  EXPECT_EQ(state.count("optimizer/1/0/grad_avg"), 1u);
  EXPECT_EQ(state.count("optimizer/1/0/momentum_buffer"), 1u);
}

TEST_F(OptimizerStateTest, AdagradResumesExactly) {
  const TensorMap state = expect_exact_resume([](std::vector<OptimizerParamGroup> groups) {
    return std::make_unique<torch::optim::Adagrad>(
        std::move(groups), torch::optim::AdagradOptions(0.1).lr_decay(0.01).weight_decay(1e-3));
  });
  // Adagrad makes a state for every parameter when it is constructed.
  EXPECT_EQ(state.at("optimizer/0/2/step").item<int64_t>(), 0);
  EXPECT_EQ(state.at("optimizer/0/0/step").item<int64_t>(), 3);
}

// Other optimizers keep the archive: LBFGS (one parameter group only), and a subclass of a known
// class (it may hold more state than its base, so the base's entries are not used for it).
TEST_F(OptimizerStateTest, LbfgsFallsBackToTheArchiveAndResumesExactly) {
  const TensorMap state = expect_exact_resume([](std::vector<OptimizerParamGroup> groups) {
    std::vector<at::Tensor> params;
    for (const auto& g : groups) {
      for (const auto& p : g.params()) params.push_back(p);
    }
    return std::make_unique<torch::optim::LBFGS>(
        params, torch::optim::LBFGSOptions(0.5).max_iter(4).history_size(3));
  });
  EXPECT_EQ(state.at("optimizer").scalar_type(), at::kByte);
  EXPECT_EQ(state.count("optimizer/type"), 0u);
}

class MySgd : public torch::optim::SGD {
 public:
  using torch::optim::SGD::SGD;
};

TEST_F(OptimizerStateTest, ASubclassOfAKnownOptimizerFallsBackToTheArchive) {
  const TensorMap state = expect_exact_resume([](std::vector<OptimizerParamGroup> groups) {
    return std::make_unique<MySgd>(std::move(groups),
                                   torch::optim::SGDOptions(0.1).momentum(0.9).nesterov(true));
  });
  EXPECT_EQ(state.at("optimizer").scalar_type(), at::kByte);
  EXPECT_FALSE(has_typed_optimizer_state(MySgd({torch::zeros({1})}, torch::optim::SGDOptions(1))));
}

// A checkpoint written before the optimizer state had entries of its own (the archive, for an
// SGD) is still restored.
TEST_F(OptimizerStateTest, AnArchiveOfAKnownOptimizerIsStillRestored) {
  const MakeOptimizer make = [](std::vector<OptimizerParamGroup> groups) {
    return std::make_unique<torch::optim::SGD>(std::move(groups),
                                               torch::optim::SGDOptions(0.1).momentum(0.9));
  };
  OptimizerRun a(1, make);
  for (int i = 0; i < 3; ++i) a.step(i);
  TensorMap state = collect_training_state(a.trainer);
  for (auto& kv : state) kv.second = kv.second.clone();  // the map holds the live tensors
  for (auto it = state.lower_bound("optimizer/"); it != state.end() && it->first < "optimizer0";) {
    it = state.erase(it);
  }
  torch::serialize::OutputArchive archive;
  a.opt->save(archive);
  std::ostringstream bytes;
  archive.save_to(bytes);
  const std::string b = bytes.str();
  state["optimizer"] =
      torch::from_blob(const_cast<char*>(b.data()), {static_cast<int64_t>(b.size())}, at::kByte)
          .clone();
  for (int i = 3; i < 6; ++i) a.step(i);
  OptimizerRun r(2, make);
  const RestoreReport report = restore_training_state(r.trainer, state);
  EXPECT_TRUE(report.unused.empty());
  for (int i = 3; i < 6; ++i) r.step(i);
  EXPECT_TRUE(all_equal(r.params(), a.params()));
}

// ---- Errors: every entry is checked before anything changes ----

// An SGD run after 3 steps, its state, and a second run to restore into.
struct SgdPair {
  static std::unique_ptr<torch::optim::Optimizer> make(std::vector<OptimizerParamGroup> groups) {
    return std::make_unique<torch::optim::SGD>(std::move(groups),
                                               torch::optim::SGDOptions(0.1).momentum(0.9));
  }
  OptimizerRun source{1, make};
  OptimizerRun target{2, make};
  TensorMap state;
  SgdPair() {
    for (int i = 0; i < 3; ++i) source.step(i);
    state = collect_training_state(source.trainer);
    target.step(0);  // the target has momentum buffers of its own
  }
  // The message of the std::invalid_argument that restoring `state` throws; checks that the
  // target's weights and optimizer state were left as they were.
  std::string restore_error(const TensorMap& s) {
    const auto params_before = target.params();
    std::vector<at::Tensor> buffers_before;
    for (const auto& kv : target.opt->state()) {
      buffers_before.push_back(
          static_cast<torch::optim::SGDParamState&>(*kv.second).momentum_buffer().clone());
    }
    const double lr_before = target.opt->param_groups().back().options().get_lr();
    std::string msg = testing::message_of<std::invalid_argument>([&] {
      restore_training_state(target.trainer, s, RestoreOptions().source("the test map"));
    });
    EXPECT_TRUE(all_equal(target.params(), params_before)) << msg;
    std::vector<at::Tensor> buffers_after;
    for (const auto& kv : target.opt->state()) {
      buffers_after.push_back(
          static_cast<torch::optim::SGDParamState&>(*kv.second).momentum_buffer());
    }
    EXPECT_TRUE(all_equal(buffers_after, buffers_before)) << msg;
    EXPECT_EQ(target.opt->param_groups().back().options().get_lr(), lr_before);
    return msg;
  }
};

TEST(OptimizerStateErrors, AStateTensorOfTheWrongShapeOrDtype) {
  SgdPair p;
  TensorMap s = p.state;
  s["optimizer/1/2/momentum_buffer"] = torch::zeros({5});
  EXPECT_EQ(p.restore_error(s),
            "restoring from the test map: 'optimizer/1/2/momentum_buffer' has shape [5] there, but "
            "its parameter has [2, 4]");
  s = p.state;
  s["optimizer/0/0/momentum_buffer"] = s["optimizer/0/0/momentum_buffer"].to(at::kDouble);
  EXPECT_EQ(p.restore_error(s),
            "restoring from the test map: 'optimizer/0/0/momentum_buffer' is Double there, but its "
            "parameter is Float");
}

TEST(OptimizerStateErrors, OtherNumbersOfGroupsOrParameters) {
  SgdPair p;
  TensorMap s = p.state;
  s["optimizer/group_sizes"] = torch::tensor({int64_t{7}});
  EXPECT_EQ(p.restore_error(s),
            "restoring from the test map: 'optimizer/group_sizes' lists 1 parameter groups, but "
            "the optimizer has 2");
  s["optimizer/group_sizes"] = torch::tensor({int64_t{3}, int64_t{5}});
  EXPECT_EQ(p.restore_error(s),
            "restoring from the test map: 'optimizer/group_sizes' says parameter group 1 has 5 "
            "parameters, but it has 4 in the optimizer");
}

TEST(OptimizerStateErrors, MissingEntriesAndOptionsOfTheWrongType) {
  SgdPair p;
  TensorMap s = p.state;
  s.erase("optimizer/1/lr");
  EXPECT_EQ(p.restore_error(s), "restoring from the test map: 'optimizer/1/lr' is missing");
  s = p.state;
  s["optimizer/1/lr"] = torch::tensor({0.5f});
  EXPECT_EQ(p.restore_error(s),
            "restoring from the test map: 'optimizer/1/lr' should be Double of shape [], but is "
            "Float of shape [1]");
  s = p.state;
  s.erase("optimizer/group_sizes");
  EXPECT_EQ(p.restore_error(s), "restoring from the test map: 'optimizer/group_sizes' is missing");
}

TEST(OptimizerStateErrors, AnotherOptimizerClass) {
  SgdPair p;
  OptimizerRun adam(3, [](std::vector<OptimizerParamGroup> groups) {
    return std::make_unique<torch::optim::Adam>(std::move(groups));
  });
  adam.step(0);
  const TensorMap adam_state = collect_training_state(adam.trainer);
  EXPECT_EQ(p.restore_error(adam_state),
            "restoring from the test map: 'optimizer/type' says the state is of a "
            "torch::optim::Adam, but the optimizer is a torch::optim::SGD");
  // Adam's entries without one of the fields its parameters need.
  TensorMap s = adam_state;
  s.erase("optimizer/0/1/exp_avg_sq");
  const std::string msg = testing::message_of<std::invalid_argument>(
      [&] { restore_training_state(adam.trainer, s, RestoreOptions().source("the test map")); });
  EXPECT_EQ(msg,
            "restoring from the test map: 'optimizer/0/1/exp_avg_sq' is missing (the other state "
            "entries of its parameter are there)");
  // Typed entries into an optimizer that keeps an archive.
  OptimizerRun lbfgs(4, [](std::vector<OptimizerParamGroup> groups) {
    std::vector<at::Tensor> params;
    for (const auto& g : groups) {
      for (const auto& q : g.params()) params.push_back(q);
    }
    return std::make_unique<torch::optim::LBFGS>(params);
  });
  EXPECT_EQ(testing::message_of<std::invalid_argument>([&] {
              restore_training_state(lbfgs.trainer, p.state, RestoreOptions().source("x"));
            }),
            "restoring from x: 'optimizer/type' holds the state of a torch::optim::SGD, but the "
            "optimizer is a torch::optim::LBFGS (its state is saved as the archive 'optimizer')");
}

TEST(OptimizerStateErrors, AnArchiveThatDoesNotDecode) {
  SgdPair p;
  TensorMap s = p.state;
  s["optimizer"] = torch::arange(50, at::kInt).to(at::kByte);
  const std::string msg = p.restore_error(s);
  EXPECT_EQ(msg.rfind("restoring from the test map: 'optimizer' is not an optimizer archive: ", 0),
            0u)
      << msg;
  s["optimizer"] = torch::zeros({3});
  EXPECT_EQ(p.restore_error(s),
            "restoring from the test map: 'optimizer' should be an optimizer archive (Byte of "
            "shape [n]), but is Float of shape [3]");
}

TEST_F(OptimizerStateTest, ABadEntryInACheckpointIsRefusedNamingTheFile) {
  SgdPair p;
  TensorMap s = p.state;
  s["optimizer/0/1/momentum_buffer"] = torch::zeros({3});
  write_checkpoint(prefix(), s, CheckpointWriteOptions().fsync(false));
  SaverRestore restore(prefix());
  EXPECT_EQ(testing::message_of<std::invalid_argument>([&] { restore.run_init(p.target.trainer); }),
            "restoring from checkpoint " + prefix() +
                ": 'optimizer/0/1/momentum_buffer' has shape [3] there, but its parameter has [4]");
}

// Ignoring any entry of an optimizer leaves the whole optimizer as it is.
TEST(OptimizerStateRestore, IgnoringOneEntryIgnoresTheWholeOptimizer) {
  SgdPair p;
  std::vector<at::Tensor> buffers_before;
  for (const auto& kv : p.target.opt->state()) {
    buffers_before.push_back(
        static_cast<torch::optim::SGDParamState&>(*kv.second).momentum_buffer().clone());
  }
  const RestoreReport r = restore_training_state(
      p.target.trainer, p.state, RestoreOptions().ignore({"optimizer/0/0/momentum_buffer"}));
  std::vector<std::string> optimizer_entries;
  for (const auto& kv : p.state) {
    if (kv.first.compare(0, 10, "optimizer/") == 0) optimizer_entries.push_back(kv.first);
  }
  EXPECT_EQ(r.ignored, optimizer_entries);
  EXPECT_TRUE(r.unused.empty());
  std::vector<at::Tensor> buffers_after;
  for (const auto& kv : p.target.opt->state()) {
    buffers_after.push_back(
        static_cast<torch::optim::SGDParamState&>(*kv.second).momentum_buffer());
  }
  EXPECT_TRUE(all_equal(buffers_after, buffers_before));
  EXPECT_TRUE(all_equal(p.target.params(), p.source.params()));  // the rest was restored
}

// The restored tensors are copies: training after DictRestore does not change the caller's map.
TEST(OptimizerStateRestore, TheRestoredStateIsACopyOfTheMap) {
  SgdPair p;
  const at::Tensor before = p.state.at("optimizer/0/0/momentum_buffer").clone();
  restore_training_state(p.target.trainer, p.state);
  p.target.step(5);
  EXPECT_TRUE(torch::equal(p.state.at("optimizer/0/0/momentum_buffer"), before));
}

// The checkpoint of a trainer with an Adam optimizer, as Python's torch.load reads it.
TEST_F(OptimizerStateTest, PythonsTorchLoadReadsTheOptimizerEntries) {
  const std::string python = TRAINPACK_TORCH_PYTHON;
  if (std::system((python + " -c 'import torch' >/dev/null 2>&1").c_str()) != 0) {
    GTEST_SKIP() << python << " with torch is not installed (Debian: python3-torch)";
  }
  OptimizerRun a(1, [](std::vector<OptimizerParamGroup> groups) {
    return std::make_unique<torch::optim::Adam>(std::move(groups),
                                                torch::optim::AdamOptions(0.01).amsgrad(true));
  });
  a.step(0);
  a.step(1);
  write_checkpoint(prefix(), collect_training_state(a.trainer));
  const fs::path out = dir() / "py.txt";
  const std::string cmd =
      python +
      " -c \"import torch, sys\n"
      "d = torch.load(sys.argv[1], weights_only=True)\n"
      "lines = [bytes(d['optimizer/type'].tolist()).decode()]\n"
      "lines.append(str(d['optimizer/group_sizes'].tolist()))\n"
      "lines.append(str(d['optimizer/1/betas'].tolist()))\n"
      "lines.append(str(d['optimizer/1/amsgrad'].item()))\n"
      "lines.append(str(d['optimizer/0/0/step'].item()))\n"
      "lines.append(str(list(d['optimizer/0/0/exp_avg'].shape)))\n"
      "lines.append(str(sorted(k for k in d if k.startswith('optimizer/1/3/'))))\n"
      "open(sys.argv[2], 'w').write(chr(10).join(lines))\n\" " +
      prefix() + ".data " + out.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(),
            "Adam\n"
            "[3, 4]\n"
            "[0.9, 0.999]\n"
            "True\n"
            "2\n"
            "[4, 3]\n"
            "['optimizer/1/3/exp_avg', 'optimizer/1/3/exp_avg_sq', 'optimizer/1/3/max_exp_avg_sq', "
            "'optimizer/1/3/step']");
}

}  // namespace state_test
}  // namespace trainpack
