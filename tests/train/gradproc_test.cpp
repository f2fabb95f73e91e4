// Gradient processors: GlobalNormClip against a hand computation and clip_grad_norm_, MapGradient's
// regex selection, SummaryGradient at exactly MergeAllSummaries' steps, CheckGradient naming the
// parameter and the step, the processors' order, and a step without processors unchanged.
#include "trainpack/train/gradproc.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trainpack/callbacks/summary.h"
#include "trainpack/core/monitor_base.h"
#include "trainpack/input/dataflow.h"
#include "trainpack/input/input_source.h"
#include "trainpack/testing.h"
#include "trainpack/train/config.h"
#include "trainpack/train/single_cost.h"

namespace trainpack {
namespace gradproc_test {

// Parameters "fc.weight" [1, 2], "fc.bias" [1] and "scale" [1].
struct TwoPartsImpl : torch::nn::Module {
  TwoPartsImpl() {
    fc = register_module("fc", torch::nn::Linear(2, 1));
    scale = register_parameter("scale", torch::ones({1}));
    torch::NoGradGuard no_grad;
    fc->weight.fill_(1);
    fc->bias.fill_(1);
  }
  torch::nn::Linear fc{nullptr};
  at::Tensor scale;
};
TORCH_MODULE(TwoParts);

// The gradients a step produces: the cost is sum(param * coefficient), so each gradient is its
// coefficient exactly. `coefficients(global_step)` gives (fc.weight, fc.bias, scale).
using Coefficients = std::function<std::vector<at::Tensor>(int64_t)>;

Coefficients fixed(std::vector<float> w, float b, float s) {
  return [w, b, s](int64_t) {
    return std::vector<at::Tensor>{torch::tensor(w).view({1, 2}), torch::tensor({b}),
                                   torch::tensor({s})};
  };
}

struct Rig {
  TwoParts net;
  SimpleTrainer trainer;
  Coefficients coefficients;

  explicit Rig(Coefficients c, std::vector<GradientProcessorPtr> processors = {}, double lr = 1.0)
      : coefficients(std::move(c)) {
    trainer.set_handle_signals(false);
    std::vector<Datapoint> points(4, Datapoint{torch::zeros({1})});
    auto input = std::make_shared<FeedInput>(
        std::make_shared<BatchData>(std::make_shared<DataFromList>(points), 1));
    auto net_copy = net;
    SimpleTrainer* t = &trainer;
    auto coeffs = coefficients;
    trainer.setup_graph(
        {InputDesc("x", {-1, 1})}, input, net.ptr(),
        [net_copy, t, coeffs](TowerContext&, const std::vector<at::Tensor>&) {
          auto c = coeffs(t->global_step());
          return (net_copy->fc->weight * c[0]).sum() + (net_copy->fc->bias * c[1]).sum() +
                 (net_copy->scale * c[2]).sum();
        },
        [this, lr] { return std::make_unique<torch::optim::SGD>(net->parameters(), lr); });
    trainer.set_gradient_processors(std::move(processors));
  }
  void train(int64_t steps_per_epoch, int64_t max_epoch, std::vector<CallbackPtr> callbacks = {},
             std::vector<MonitorPtr> monitors = {}) {
    trainer.train(callbacks, monitors, steps_per_epoch, 1, max_epoch);
  }
};

// Records, at each step, the gradients it sees (clones, by parameter name) and appends its tag to
// a shared trace.
class Recording : public GradientProcessor {
 public:
  explicit Recording(std::string tag = "", std::shared_ptr<std::vector<std::string>> trace = {})
      : tag_(std::move(tag)), trace_(std::move(trace)) {}
  std::vector<std::map<std::string, at::Tensor>> seen;  // per step
  std::vector<std::string> names;                       // the list's names, in order
  std::vector<int64_t> steps;

 protected:
  void _process(const NamedGradients& grads, StepContext& step) override {
    std::map<std::string, at::Tensor> row;
    names.clear();
    for (const auto& g : grads) {
      row[g.name] = g.grad().defined() ? g.grad().clone() : at::Tensor();
      names.push_back(g.name);
    }
    seen.push_back(std::move(row));
    steps.push_back(step.trainer().global_step());
    if (trace_) trace_->push_back(tag_);
  }

 private:
  std::string tag_;
  std::shared_ptr<std::vector<std::string>> trace_;
};

// What reaches the monitors, with the global step.
class SummaryRecorder : public MonitorBase {
 public:
  std::vector<std::pair<int64_t, Summary>> summaries;
  std::vector<std::pair<std::string, int64_t>> scalars;  // (name, global_step)
  void process_scalar(const std::string& name, double) override {
    scalars.emplace_back(name, global_step());
  }
  void process_summary(const Summary& s) override { summaries.emplace_back(global_step(), s); }
  std::vector<int64_t> steps_of(const std::string& tag) const {
    std::vector<int64_t> out;
    for (const auto& [step, s] : summaries) {
      for (const auto& v : s.values) {
        if (v.tag == tag) out.push_back(step);
      }
    }
    return out;
  }
  const SummaryValue* last(const std::string& tag) const {
    const SummaryValue* found = nullptr;
    for (const auto& [step, s] : summaries) {
      for (const auto& v : s.values) {
        if (v.tag == tag) found = &v;
      }
    }
    return found;
  }
};

int count(const testing::LogCapture& log, const std::string& text) {
  int n = 0;
  for (const auto& line : log.lines()) n += line.find(text) != std::string::npos ? 1 : 0;
  return n;
}

std::vector<float> values(const at::Tensor& t) {
  auto c = t.to(at::kFloat).contiguous().view({-1});
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

// ---- the list the processors get ----

TEST(GradientProcessors, SeeTheTrainableParametersUnderTheirNamesInOrder) {
  auto rec = std::make_shared<Recording>();
  Rig s(fixed({3, 4}, 12, 0), {rec});
  s.train(2, 1);
  // named_parameters() order: the module's own parameters, then its submodules'.
  EXPECT_EQ(rec->names, (std::vector<std::string>{"scale", "fc.weight", "fc.bias"}));
  EXPECT_EQ(rec->steps, (std::vector<int64_t>{0, 1}));  // once per step, before the increment
  EXPECT_EQ(values(rec->seen[0]["fc.weight"]), (std::vector<float>{3, 4}));
  EXPECT_EQ(values(rec->seen[0]["fc.bias"]), (std::vector<float>{12}));
}

TEST(GradientProcessors, RunInTheGivenOrderBeforeTheOptimizerStep) {
  auto trace = std::make_shared<std::vector<std::string>>();
  auto first = std::make_shared<Recording>("first", trace);
  auto doubler = std::make_shared<MapGradient>([](const at::Tensor& g) { return g * 2; });
  auto second = std::make_shared<Recording>("second", trace);
  Rig s(fixed({3, 4}, 12, 1), {first, doubler, second});
  s.train(2, 1);
  EXPECT_EQ(*trace, (std::vector<std::string>{"first", "second", "first", "second"}));
  EXPECT_EQ(values(first->seen[0]["scale"]), (std::vector<float>{1}));
  EXPECT_EQ(values(second->seen[0]["scale"]), (std::vector<float>{2}));
  // The optimizer used the doubled gradients: scale = 1 - 2 steps * lr 1 * 2.
  EXPECT_EQ(values(s.net->scale), (std::vector<float>{-3}));
}

TEST(GradientProcessors, TrainConfigGivesThemToTheTrainer) {
  struct Model : ModelDesc {
    TwoParts net;
    InputSignature inputs() const override { return {InputDesc("x", {-1, 1})}; }
    std::shared_ptr<torch::nn::Module> module() override { return net.ptr(); }
    at::Tensor build_graph(TowerContext&, const std::vector<at::Tensor>&) override {
      return net->scale.sum() * 5;
    }
    std::unique_ptr<torch::optim::Optimizer> optimizer() override {
      return std::make_unique<torch::optim::SGD>(net->parameters(), 1.0);
    }
  };
  auto model = std::make_shared<Model>();
  auto rec = std::make_shared<Recording>();
  std::vector<Datapoint> points(3, Datapoint{torch::zeros({1})});
  SimpleTrainer trainer;
  trainer.set_handle_signals(false);
  launch_train_with_config(
      TrainConfig()
          .model(model)
          .dataflow(std::make_shared<BatchData>(std::make_shared<DataFromList>(points), 1))
          .extra_callbacks({})
          .monitors({})
          .max_epoch(1)
          .gradient_processors({rec}),
      trainer);
  ASSERT_EQ(trainer.gradient_processors().size(), 1u);
  EXPECT_EQ(rec->steps, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(values(rec->seen[2]["scale"]), (std::vector<float>{5}));
}

TEST(GradientProcessors, ANullProcessorIsRefused) {
  SimpleTrainer trainer;
  try {
    trainer.set_gradient_processors({std::make_shared<CheckGradient>(), nullptr});
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "SingleCostTrainer::set_gradient_processors: processor #1 is null");
  }
}

// Without processors, a step is the plain zero_grad / backward / step: the same parameters, bit
// for bit, as a hand-written LibTorch loop.
TEST(GradientProcessors, WithoutProcessorsTrainingIsUnchangedBitForBit) {
  auto coeffs = [](int64_t step) {
    const float k = static_cast<float>(step) + 0.3f;
    return std::vector<at::Tensor>{torch::tensor({k, -k / 7}).view({1, 2}),
                                   torch::tensor({k * k / 3}), torch::tensor({1 / k})};
  };
  Rig with_none(coeffs, {}, 0.1);
  with_none.train(3, 2);

  TwoParts bare;
  torch::optim::SGD opt(bare->parameters(), 0.1);
  for (int64_t step = 0; step < 6; ++step) {
    auto c = coeffs(step);
    auto cost = (bare->fc->weight * c[0]).sum() + (bare->fc->bias * c[1]).sum() +
                (bare->scale * c[2]).sum();
    opt.zero_grad();
    cost.backward();
    opt.step();
  }
  EXPECT_TRUE(torch::equal(with_none.net->fc->weight, bare->fc->weight));
  EXPECT_TRUE(torch::equal(with_none.net->fc->bias, bare->fc->bias));
  EXPECT_TRUE(torch::equal(with_none.net->scale, bare->scale));
  EXPECT_TRUE(with_none.trainer.gradient_processors().empty());
}

// ---- GlobalNormClip ----

// Gradients (3, 4), 12 and 0: global norm sqrt(9 + 16 + 144 + 0) = 13. With max_norm 6.5 the
// coefficient is 6.5 / (13 + 1e-6), so the gradients become about (1.5, 2), 6 and 0.
TEST(GlobalNormClip, ScalesAllGradientsByMaxNormOverTheGlobalNorm) {
  auto clip = std::make_shared<GlobalNormClip>(6.5);
  auto after = std::make_shared<Recording>();
  Rig s(fixed({3, 4}, 12, 0), {clip, after});
  s.train(1, 1);
  EXPECT_EQ(clip->global_norm().item<float>(), 13.0f);
  // The coefficient in float32, as the gradients' dtype computes it.
  const float coef = 6.5f / (13.0f + 1e-6f);
  EXPECT_EQ(clip->clip_coefficient().item<float>(), coef);
  EXPECT_LT(coef, 0.5f);
  EXPECT_GT(coef, 0.4999999f);
  EXPECT_EQ(values(after->seen[0]["fc.weight"]), (std::vector<float>{3 * coef, 4 * coef}));
  EXPECT_EQ(values(after->seen[0]["fc.bias"]), (std::vector<float>{12 * coef}));
  EXPECT_EQ(values(after->seen[0]["scale"]), (std::vector<float>{0}));
  EXPECT_NEAR(values(after->seen[0]["fc.weight"])[0], 1.5f, 1e-6);
  // The global norm after clipping: 6.5 (up to the 1e-6).
  const double after_norm =
      std::sqrt(std::pow(3 * coef, 2) + std::pow(4 * coef, 2) + std::pow(12 * coef, 2));
  EXPECT_NEAR(after_norm, 6.5, 1e-5);
  // SGD with lr 1 applied the clipped gradients.
  EXPECT_EQ(values(s.net->fc->weight), (std::vector<float>{1 - 3 * coef, 1 - 4 * coef}));
}

TEST(GlobalNormClip, LeavesGradientsBelowMaxNormUnchanged) {
  auto clip = std::make_shared<GlobalNormClip>(20.0);
  auto after = std::make_shared<Recording>();
  Rig s(fixed({3, 4}, 12, 0), {clip, after});
  s.train(1, 1);
  EXPECT_EQ(clip->global_norm().item<float>(), 13.0f);
  EXPECT_EQ(clip->clip_coefficient().item<float>(), 1.0f);
  EXPECT_EQ(values(after->seen[0]["fc.weight"]), (std::vector<float>{3, 4}));
  EXPECT_EQ(values(after->seen[0]["fc.bias"]), (std::vector<float>{12}));
}

TEST(GlobalNormClip, GivesWhatClipGradNormGives) {
  auto coeffs = [](int64_t step) {
    const float k = static_cast<float>(step) + 1.7f;
    return std::vector<at::Tensor>{torch::tensor({k * 3, -k}).view({1, 2}), torch::tensor({k * k}),
                                   torch::tensor({0.25f})};
  };
  auto clip = std::make_shared<GlobalNormClip>(2.0);
  auto after = std::make_shared<Recording>();
  Rig s(coeffs, {clip, after}, 0.01);
  s.train(2, 2);
  ASSERT_EQ(after->seen.size(), 4u);
  for (int64_t step = 0; step < 4; ++step) {
    auto c = coeffs(step);
    std::vector<at::Tensor> params;
    for (auto& t : c) {
      auto p = torch::zeros_like(t).requires_grad_();
      p.mutable_grad() = t.clone();
      params.push_back(p);
    }
    torch::nn::utils::clip_grad_norm_(params, 2.0);
    const char* names[] = {"fc.weight", "fc.bias", "scale"};  // the order of the coefficients
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_TRUE(torch::allclose(after->seen[step][names[i]], params[i].grad(), 1e-6, 0))
          << "step " << step << " parameter " << names[i];
    }
  }
}

TEST(GlobalNormClip, RefusesANonPositiveOrNonFiniteMaxNorm) {
  for (double bad : {0.0, -1.0, std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::quiet_NaN()}) {
    try {
      GlobalNormClip clip(bad);
      FAIL() << bad;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("GlobalNormClip: max_norm must be finite and > 0"),
                std::string::npos)
          << e.what();
    }
  }
}

// ---- MapGradient ----

TEST(MapGradient, AppliesTheFunctionToTheWholeNamesTheRegexMatches) {
  auto map = std::make_shared<MapGradient>([](const at::Tensor& g) { return g * 10; }, "fc\\..*");
  auto after = std::make_shared<Recording>();
  Rig s(fixed({3, 4}, 12, 1), {map, after});
  s.train(1, 1);
  EXPECT_EQ(values(after->seen[0]["fc.weight"]), (std::vector<float>{30, 40}));
  EXPECT_EQ(values(after->seen[0]["fc.bias"]), (std::vector<float>{120}));
  EXPECT_EQ(values(after->seen[0]["scale"]), (std::vector<float>{1}));  // "scale": not matched
}

TEST(MapGradient, MatchesTheWholeNameOnly) {
  // "fc" is a prefix of "fc.weight" and "bias" a suffix of "fc.bias": neither matches.
  auto prefix = std::make_shared<MapGradient>([](const at::Tensor& g) { return g * 10; }, "fc");
  auto suffix = std::make_shared<MapGradient>([](const at::Tensor& g) { return g * 10; }, "bias");
  auto bias = std::make_shared<MapGradient>([](const at::Tensor& g) { return g * 3; }, ".*bias");
  auto after = std::make_shared<Recording>();
  testing::LogCapture log;
  Rig s(fixed({3, 4}, 12, 1), {prefix, suffix, bias, after});
  s.train(2, 1);
  EXPECT_EQ(values(after->seen[1]["fc.weight"]), (std::vector<float>{3, 4}));
  EXPECT_EQ(values(after->seen[1]["fc.bias"]), (std::vector<float>{36}));
  EXPECT_EQ(values(after->seen[1]["scale"]), (std::vector<float>{1}));
  // The warning, once per processor that matches nothing.
  EXPECT_EQ(count(log, "[MapGradient] No match was found for regex fc."), 1);
  EXPECT_EQ(count(log, "[MapGradient] No match was found for regex bias."), 1);
  EXPECT_EQ(count(log, "No match was found for regex .*bias"), 0);
}

TEST(MapGradient, TheTwoArgumentFunctionGetsTheParameterAndAnUndefinedResultSkipsTheUpdate) {
  auto map = std::make_shared<MapGradient>(
      [](const at::Tensor& g, const at::Tensor& param) {
        return param.numel() == 1 ? at::Tensor() : g + param;  // drop fc.bias and scale
      },
      ".*");
  auto after = std::make_shared<Recording>();
  Rig s(fixed({3, 4}, 12, 1), {map, after});
  s.train(1, 1);
  EXPECT_EQ(values(after->seen[0]["fc.weight"]), (std::vector<float>{4, 5}));  // 3 + 1, 4 + 1
  EXPECT_FALSE(after->seen[0]["fc.bias"].defined());
  EXPECT_FALSE(after->seen[0]["scale"].defined());
  EXPECT_EQ(values(s.net->fc->weight), (std::vector<float>{-3, -4}));
  EXPECT_EQ(values(s.net->fc->bias), (std::vector<float>{1}));  // not updated
  EXPECT_EQ(values(s.net->scale), (std::vector<float>{1}));
}

TEST(MapGradient, RefusesABadRegexAnEmptyFunctionAndAWrongShape) {
  EXPECT_THROW(MapGradient([](const at::Tensor& g) { return g; }, "fc("), std::invalid_argument);
  EXPECT_THROW(MapGradient(MapGradient::GradFn()), std::invalid_argument);
  auto map =
      std::make_shared<MapGradient>([](const at::Tensor& g) { return g.sum(); }, "fc.weight");
  Rig s(fixed({3, 4}, 12, 1), {map});
  try {
    s.train(1, 1);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("for parameter 'fc.weight' of shape [1, 2]"),
              std::string::npos)
        << e.what();
  }
}

// ---- SummaryGradient ----

TEST(SummaryGradient, PutsRmsAndHistogramAtExactlyTheSummarySteps) {
  auto summary = std::make_shared<SummaryGradient>("fc\\..*");
  auto clip = std::make_shared<GlobalNormClip>(1.0);  // after it: the summaries are unclipped
  Rig s(fixed({3, 4}, 12, 1), {summary, clip});
  auto monitor = std::make_shared<SummaryRecorder>();
  // 5 steps per epoch, 2 epochs; period 2: local steps 1, 3 and the last, 4.
  s.train(5, 2, {MergeAllSummaries(MergeAllSummariesOptions().period(2))}, {monitor});
  const std::vector<int64_t> due{2, 4, 5, 7, 9, 10};  // global_step after each due step
  EXPECT_EQ(monitor->steps_of("SummaryGradient/fc.weight/rms"), due);
  EXPECT_EQ(monitor->steps_of("SummaryGradient/fc.bias/rms"), due);
  EXPECT_EQ(monitor->steps_of("SummaryGradient/fc.weight-grad"), due);
  EXPECT_EQ(monitor->steps_of("SummaryGradient/fc.bias-grad"), due);
  EXPECT_TRUE(monitor->steps_of("SummaryGradient/scale/rms").empty());  // regex: not matched
  // The scalars also reach process_scalar at those steps.
  int rms_scalars = 0;
  for (const auto& [name, step] : monitor->scalars) {
    if (name == "SummaryGradient/fc.weight/rms") ++rms_scalars;
  }
  EXPECT_EQ(rms_scalars, 6);
  // rms of (3, 4) = sqrt(12.5); the histogram of the unclipped gradient.
  const SummaryValue* rms = monitor->last("SummaryGradient/fc.weight/rms");
  ASSERT_NE(rms, nullptr);
  EXPECT_EQ(rms->kind, SummaryValue::Kind::kScalar);
  EXPECT_FLOAT_EQ(static_cast<float>(rms->scalar), std::sqrt(12.5f));
  const SummaryValue* hist = monitor->last("SummaryGradient/fc.weight-grad");
  ASSERT_NE(hist, nullptr);
  EXPECT_EQ(hist->kind, SummaryValue::Kind::kHistogram);
  EXPECT_EQ(hist->histogram.num, 2);
  EXPECT_EQ(hist->histogram.min, 3);
  EXPECT_EQ(hist->histogram.max, 4);
  EXPECT_EQ(hist->histogram.sum, 7);
  EXPECT_EQ(hist->histogram.sum_squares, 25);
}

// The gradient summaries are computed only in the due hooked runs: at any other step the tower's
// summaries hold no value under their tags.
class RecordedAt : public Callback {
 public:
  explicit RecordedAt(std::string tag) : tag_(std::move(tag)) {}
  std::vector<int64_t> steps;  // global_step in after_run (incremented)

 protected:
  void _after_run(const StepContext&, const RunValues&) override {
    for (const auto& e : trainer().tower_registry().summaries()) {
      if (e.tag == tag_ && e.value.defined()) steps.push_back(trainer().global_step());
    }
  }

 private:
  std::string tag_;
};

TEST(SummaryGradient, ComputesNothingAtTheOtherSteps) {
  auto summary = std::make_shared<SummaryGradient>();
  Rig s(fixed({3, 4}, 12, 1), {summary});
  auto rms = std::make_shared<RecordedAt>("SummaryGradient/scale/rms-summary");
  auto hist = std::make_shared<RecordedAt>("SummaryGradient/scale-grad");
  s.train(3, 2, {MergeAllSummaries(), rms, hist});
  EXPECT_EQ(rms->steps, (std::vector<int64_t>{3, 6}));
  EXPECT_EQ(hist->steps, (std::vector<int64_t>{3, 6}));
}

TEST(SummaryGradient, WithTheDefaultMergeAllSummariesPutsAtEpochEndsOnly) {
  auto summary = std::make_shared<SummaryGradient>();
  Rig s(fixed({3, 4}, 12, 1), {summary});
  auto monitor = std::make_shared<SummaryRecorder>();
  s.train(4, 3, {MergeAllSummaries()}, {monitor});
  EXPECT_EQ(monitor->steps_of("SummaryGradient/scale/rms"), (std::vector<int64_t>{4, 8, 12}));
  EXPECT_EQ(monitor->steps_of("SummaryGradient/scale-grad"), (std::vector<int64_t>{4, 8, 12}));
}

TEST(SummaryGradient, WithoutMergeAllSummariesPutsNothingAndWarnsOnce) {
  auto summary = std::make_shared<SummaryGradient>();
  Rig s(fixed({3, 4}, 12, 1), {summary});
  auto monitor = std::make_shared<SummaryRecorder>();
  testing::LogCapture log;
  s.train(3, 2, {}, {monitor});
  EXPECT_TRUE(monitor->summaries.empty());
  EXPECT_EQ(count(log, "SummaryGradient: no MergeAllSummaries among the callbacks"), 1);
}

// ---- CheckGradient ----

Coefficients poisoned_at(int64_t bad_step, size_t which, float poison) {
  return [bad_step, which, poison](int64_t step) {
    auto c = fixed({3, 4}, 12, 1)(step);
    if (step == bad_step) c[which].view({-1})[0] = poison;
    return c;
  };
}

TEST(CheckGradient, ANaNGradientStopsTrainingNamingTheParameterAndTheStep) {
  auto check = std::make_shared<CheckGradient>();
  Rig s(poisoned_at(5, 2, std::numeric_limits<float>::quiet_NaN()), {check}, 0.5);
  try {
    s.train(4, 3);
    FAIL() << "training went on";
  } catch (const NonFiniteGradientError& e) {
    EXPECT_EQ(e.parameter(), "scale");
    EXPECT_EQ(e.global_step(), 5);
    EXPECT_STREQ(e.what(),
                 "CheckGradient/scale : Tensor had NaN values (the gradient of parameter 'scale' "
                 "at global_step 5; training stops)");
  }
  EXPECT_EQ(s.trainer.global_step(), 5);
  // Five optimizer steps ran (1 - 5 * 0.5 * 1), not the sixth.
  EXPECT_EQ(values(s.net->scale), (std::vector<float>{-1.5f}));
}

TEST(CheckGradient, AnInfiniteGradientNamesTheFirstBadParameter) {
  auto check = std::make_shared<CheckGradient>();
  Rig s(poisoned_at(2, 0, -std::numeric_limits<float>::infinity()), {check});
  try {
    s.train(4, 1);
    FAIL() << "training went on";
  } catch (const NonFiniteGradientError& e) {
    EXPECT_EQ(e.parameter(), "fc.weight");
    EXPECT_EQ(e.global_step(), 2);
    EXPECT_NE(std::string(e.what()).find("CheckGradient/fc.weight : Tensor had Inf values"),
              std::string::npos)
        << e.what();
  }
}

TEST(CheckGradient, FiniteGradientsPassUnchanged) {
  auto check = std::make_shared<CheckGradient>();
  auto after = std::make_shared<Recording>();
  // Large finite values: their sum would overflow float32, the check must not.
  Rig s(fixed({3e38f, 3e38f}, -3e38f, 1), {check, after}, 1e-40);
  s.train(2, 1);
  ASSERT_EQ(after->seen.size(), 2u);
  EXPECT_EQ(values(after->seen[1]["fc.weight"]), (std::vector<float>{3e38f, 3e38f}));
}

}  // namespace gradproc_test
}  // namespace trainpack
