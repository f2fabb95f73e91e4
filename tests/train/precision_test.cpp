// Mixed precision (train/precision.h): the spellings and the refusals, the autocast guard's
// effect and its restoring, a bfloat16 trainer whose tower and predictors run under autocast
// while the parameters, gradients and optimizer stay float32, and a bfloat16 run that learns as
// well as a float32 one, and a bfloat16 run stopped and resumed that ends where one never stopped
// ends.
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/temp_dir.h"
#include "trainpack/callbacks/saver.h"
#include "trainpack/callbacks/trigger.h"
#include "trainpack/core/state.h"
#include "trainpack/detail/torch_compat.h"
#include "trainpack/input/dataflow.h"
#include "trainpack/train/config.h"
#include "trainpack/train/gradproc.h"
#include "trainpack/train/precision.h"
#include "trainpack/train/single_cost.h"
#include "trainpack/utils/logger.h"

namespace trainpack {
namespace precision_test {

TEST(Precision, ParsesTheUsualSpellingsAndRefusesOthers) {
  EXPECT_EQ(parse_precision("fp32"), Precision::kFloat32);
  EXPECT_EQ(parse_precision("float32"), Precision::kFloat32);
  EXPECT_EQ(parse_precision("32"), Precision::kFloat32);
  EXPECT_EQ(parse_precision("bf16"), Precision::kBFloat16);
  EXPECT_EQ(parse_precision("BFloat16"), Precision::kBFloat16);
  EXPECT_EQ(parse_precision("fp16"), Precision::kFloat16);
  EXPECT_EQ(parse_precision("float16"), Precision::kFloat16);
  EXPECT_EQ(parse_precision("16"), Precision::kFloat16);
  EXPECT_STREQ(precision_name(Precision::kBFloat16), "bfloat16");
  try {
    parse_precision("half");
    FAIL() << "'half' was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "unknown precision 'half'; use float32 (fp32), bfloat16 (bf16) or float16 (fp16)");
  }
}

TEST(Precision, TheStartLineSaysWhatRunsWhereAndTheCpusSupport) {
  EXPECT_EQ(describe_precision(Precision::kFloat32, c10::Device(c10::kCPU)),
            "float32 (no autocast)");
  const std::string bf16 = describe_precision(Precision::kBFloat16, c10::Device(c10::kCPU));
  EXPECT_EQ(bf16.rfind("bfloat16 (autocast on cpu; ", 0), 0u) << bf16;
  EXPECT_NE(bf16.find(cpu_has_native_bf16() ? "the CPU has native bfloat16: AVX512_BF16"
                                            : "native bfloat16 not detected"),
            std::string::npos)
      << bf16;
  EXPECT_EQ(describe_precision(Precision::kFloat16, c10::Device(c10::kCUDA, 0)),
            "float16 (autocast on cuda; dynamic loss scaling)");
}

TEST(AutocastGuard, ALinearLayerRunsInBfloat16InsideAndTheStateIsRestoredAfter) {
  torch::nn::Linear linear(4, 3);
  const at::Tensor x = torch::randn({2, 4});
  ASSERT_FALSE(compat::autocast_enabled(c10::DeviceType::CPU));
  const c10::ScalarType dtype_before = compat::autocast_dtype(c10::DeviceType::CPU);
  {
    AutocastGuard guard(c10::DeviceType::CPU, at::kBFloat16);
    EXPECT_TRUE(compat::autocast_enabled(c10::DeviceType::CPU));
    EXPECT_EQ(linear->forward(x).scalar_type(), at::kBFloat16);
    {
      AutocastGuard float32(c10::DeviceType::CPU, std::nullopt);  // disengaged: changes nothing
      EXPECT_EQ(linear->forward(x).scalar_type(), at::kBFloat16);
    }
    EXPECT_TRUE(compat::autocast_enabled(c10::DeviceType::CPU));
    // The parameters themselves are not converted.
    EXPECT_EQ(linear->weight.scalar_type(), at::kFloat);
  }
  EXPECT_FALSE(compat::autocast_enabled(c10::DeviceType::CPU));
  EXPECT_EQ(compat::autocast_dtype(c10::DeviceType::CPU), dtype_before);
  EXPECT_EQ(linear->forward(x).scalar_type(), at::kFloat);
}

// 64 fixed points of a two-class problem in 2-D (class 1 inside a ring), batches of 16.
DataFlowPtr ring_batches() {
  std::vector<Datapoint> points;
  for (int i = 0; i < 64; ++i) {
    const float a = std::sin(0.37f * static_cast<float>(i)) * 2.0f;
    const float b = std::cos(0.91f * static_cast<float>(i)) * 2.0f;
    const int64_t label = a * a + b * b < 2.0f ? 1 : 0;
    points.push_back({torch::tensor({a, b}), torch::tensor(label)});
  }
  return std::make_shared<BatchData>(std::make_shared<DataFromList>(points), 16);
}

// An MLP classifier; records the dtype of the hidden layer's output inside the tower.
class RingModel : public ModelDesc {
 public:
  RingModel() {
    torch::manual_seed(7);
    net = torch::nn::Sequential(torch::nn::Linear(2, 32), torch::nn::ReLU(),
                                torch::nn::Linear(32, 2));
  }
  InputSignature inputs() const override {
    return {InputDesc("x", {-1, 2}), InputDesc("label", {-1}, at::kLong)};
  }
  std::shared_ptr<torch::nn::Module> module() override { return net.ptr(); }
  at::Tensor build_graph(TowerContext& ctx, const std::vector<at::Tensor>& in) override {
    at::Tensor logits = net->forward(in[0]);
    ctx.output("logits", logits);
    logits_dtype = logits.scalar_type();
    if (!in[1].defined()) return logits.sum();  // a predictor without labels
    at::Tensor cost = torch::nn::functional::cross_entropy(logits, in[1]);
    cost_dtype = cost.scalar_type();
    return cost;
  }
  std::unique_ptr<torch::optim::Optimizer> optimizer() override {
    return std::make_unique<torch::optim::SGD>(net->parameters(),
                                               torch::optim::SGDOptions(0.2).momentum(0.9));
  }
  // The mean cross-entropy over all points, in float32 without autocast.
  double full_loss() {
    torch::NoGradGuard no_grad;
    double total = 0;
    int64_t n = 0;
    auto flow = ring_batches();
    flow->reset_state();
    flow->begin_pass();
    while (auto dp = flow->next()) {
      const Datapoint& batch = *dp;
      total +=
          torch::nn::functional::cross_entropy(net->forward(batch[0]), batch[1]).item<double>() *
          static_cast<double>(batch[1].size(0));
      n += batch[1].size(0);
    }
    return total / static_cast<double>(n);
  }
  torch::nn::Sequential net{nullptr};
  c10::ScalarType logits_dtype = c10::ScalarType::Undefined;
  c10::ScalarType cost_dtype = c10::ScalarType::Undefined;
};

// Records the dtype of every gradient it sees.
class GradientDtypes : public GradientProcessor {
 public:
  std::vector<c10::ScalarType> dtypes;

 protected:
  void _process(const NamedGradients& grads, StepContext&) override {
    for (const auto& g : grads) dtypes.push_back(g.grad().scalar_type());
  }
};

std::shared_ptr<RingModel> train_ring(Precision precision, int64_t epochs,
                                      std::shared_ptr<GradientProcessor> processor = nullptr,
                                      SimpleTrainer* trainer_out = nullptr) {
  auto model = std::make_shared<RingModel>();
  SimpleTrainer local;
  SimpleTrainer& trainer = trainer_out != nullptr ? *trainer_out : local;
  trainer.set_handle_signals(false);
  TrainConfig config = TrainConfig()
                           .model(model)
                           .dataflow(ring_batches())
                           .max_epoch(epochs)
                           .precision(precision)
                           .extra_callbacks({})
                           .monitors({});
  if (processor) config.gradient_processors({processor});
  launch_train_with_config(config, trainer);
  return model;
}

TEST(Precision, ABfloat16TowerRunsUnderAutocastWhileParametersAndGradientsStayFloat32) {
  auto dtypes = std::make_shared<GradientDtypes>();
  SimpleTrainer trainer;
  auto model = train_ring(Precision::kBFloat16, 1, dtypes, &trainer);
  EXPECT_EQ(trainer.precision(), Precision::kBFloat16);
  EXPECT_EQ(model->logits_dtype, at::kBFloat16);
  EXPECT_EQ(model->cost_dtype, at::kFloat);   // cross-entropy is one of autocast's float32 ops
  ASSERT_EQ(dtypes->dtypes.size(), 4u * 4u);  // 4 steps, 4 parameters
  for (auto dtype : dtypes->dtypes) EXPECT_EQ(dtype, at::kFloat);
  for (const auto& p : model->net->parameters()) EXPECT_EQ(p.scalar_type(), at::kFloat);
  EXPECT_EQ(trainer.loss_scaler(), nullptr);  // bfloat16 needs no loss scaling
  // Outside the step, autocast is off again.
  EXPECT_FALSE(compat::autocast_enabled(c10::DeviceType::CPU));

  // The predictors run under the trainer's precision too (as InferenceRunner's do).
  auto predict = trainer.get_predictor({"x"}, {"logits"});
  EXPECT_EQ(predict->precision(), Precision::kBFloat16);
  EXPECT_EQ((*predict)({torch::randn({3, 2})})[0].scalar_type(), at::kBFloat16);
  EXPECT_FALSE(compat::autocast_enabled(c10::DeviceType::CPU));

  // float32 changes nothing.
  auto plain = train_ring(Precision::kFloat32, 1);
  EXPECT_EQ(plain->logits_dtype, at::kFloat);
}

// bfloat16 keeps about 3 significant digits; trained from the same seed on the same batches, the
// model reaches the float32 run's loss within a small tolerance, though not bitwise.
TEST(Precision, Bfloat16TrainingReachesTheFloat32LossWithinATolerance) {
  auto untrained = std::make_shared<RingModel>();
  const double initial = untrained->full_loss();
  auto fp32 = train_ring(Precision::kFloat32, 40);
  auto bf16 = train_ring(Precision::kBFloat16, 40);
  const double loss32 = fp32->full_loss(), loss16 = bf16->full_loss();
  EXPECT_LT(loss32, 0.5 * initial)
      << "the float32 run did not learn: " << initial << " -> " << loss32;
  EXPECT_NEAR(loss16, loss32, 0.05 + 0.15 * loss32) << "initial loss " << initial;
  // Not vacuous: bfloat16 really ran, so the weights differ from the float32 run's.
  EXPECT_FALSE(torch::equal(fp32->net->parameters()[0], bf16->net->parameters()[0]));
}

// Counts the steps that run; given a step > 0, also ends training with StopTraining at the
// trigger_step of that global step.
class StepCounter : public Callback {
 public:
  explicit StepCounter(int64_t step) : step_(step) {}
  int64_t steps_run = 0;

 protected:
  void _trigger_step() override {
    ++steps_run;
    if (step_ > 0 && trainer().global_step() == step_) throw StopTraining("test stop");
  }

 private:
  int64_t step_;
};

class Bfloat16Resume : public testing::TempDirFixture<> {
 protected:
  // Epochs of 4 steps in bfloat16, a checkpoint after every step, resumed from the log directory.
  TensorMap run(const std::string& logdir, int64_t max_epoch, int64_t stop_after_steps = 0) {
    logger::set_logger_dir(logdir, 'k');
    SimpleTrainer trainer;
    trainer.set_handle_signals(false);
    std::vector<CallbackPtr> callbacks{std::make_shared<PeriodicTrigger>(
        std::make_shared<ModelSaver>(ModelSaverOptions().fsync(false)),
        PeriodicTriggerOptions().every_k_steps(1))};
    auto counter = std::make_shared<StepCounter>(stop_after_steps);
    callbacks.push_back(counter);
    launch_train_with_config(AutoResumeTrainConfig(TrainConfig()
                                                       .model(std::make_shared<RingModel>())
                                                       .dataflow(ring_batches())
                                                       .max_epoch(max_epoch)
                                                       .precision(Precision::kBFloat16)
                                                       .callbacks(callbacks)
                                                       .extra_callbacks({})
                                                       .monitors({})),
                             trainer);
    logger::unset_logger_dir();
    global_step = trainer.global_step();
    steps_run = counter->steps_run;
    return collect_training_state(trainer);
  }
  int64_t global_step = 0;
  int64_t steps_run = 0;
};

// Stopped in the middle of epoch 2 (after step 6) and resumed, the bfloat16 run ends with every
// entry of the training state (parameters, momentum, counters) equal to the run never stopped:
// autocast changes how a step computes, not what a checkpoint holds.
TEST_F(Bfloat16Resume, AResumedRunEndsWithTheStateOfOneNeverStopped) {
  const TensorMap straight = run((dir() / "straight").string(), 3);
  EXPECT_EQ(global_step, 12);
  const std::string stopped = (dir() / "stopped").string();
  run(stopped, 3, /*stop_after_steps=*/6);
  EXPECT_EQ(global_step, 6);
  const TensorMap resumed = run(stopped, 3);
  EXPECT_EQ(global_step, 12);
  EXPECT_EQ(steps_run, 6) << "the second run did not resume at step 6";
  ASSERT_FALSE(straight.empty());
  for (const auto& [key, value] : straight) {
    auto found = resumed.find(key);
    ASSERT_NE(found, resumed.end()) << key;
    EXPECT_TRUE(torch::equal(found->second, value)) << key;
  }
}

TEST(Precision, Float16OnTheCpuIsRefusedNamingBfloat16) {
  SimpleTrainer trainer;
  trainer.set_handle_signals(false);
  auto model = std::make_shared<RingModel>();
  try {
    launch_train_with_config(TrainConfig()
                                 .model(model)
                                 .dataflow(ring_batches())
                                 .max_epoch(1)
                                 .precision(Precision::kFloat16)
                                 .extra_callbacks({})
                                 .monitors({}),
                             trainer);
    FAIL() << "float16 on the CPU was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "TowerTrainer: float16 mixed precision needs a CUDA device (LibTorch's CPU "
                 "autocast has no float16 kernels); on the CPU use bfloat16 "
                 "(Precision::kBFloat16, --precision bf16)");
  }
  EXPECT_EQ(model->logits_dtype, c10::ScalarType::Undefined);  // nothing ran
}

TEST(Precision, SettingItAfterSetupGraphIsRefusedNamingTheFix) {
  SimpleTrainer trainer;
  auto model = std::make_shared<RingModel>();
  trainer.setup_graph(
      model->inputs(), std::make_shared<FeedInput>(ring_batches()), model->module(),
      [model](TowerContext& ctx, const std::vector<at::Tensor>& in) {
        return model->build_graph(ctx, in);
      },
      [model] { return model->optimizer(); });
  try {
    trainer.set_precision(Precision::kBFloat16);
    FAIL() << "set_precision after setup_graph was accepted";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(),
                 "TowerTrainer::set_precision: the tower function is set already; call "
                 "set_precision before setup_graph (or give TrainConfig::precision to "
                 "launch_train_with_config)");
  }
  try {
    trainer.set_loss_scaler_options(LossScalerOptions());
    FAIL() << "set_loss_scaler_options after setup_graph was accepted";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(),
                 "SingleCostTrainer::set_loss_scaler_options: call it before setup_graph");
  }
}

}  // namespace precision_test
}  // namespace trainpack
