// Inferencers (ScalarStats, ClassificationError, BinaryClassificationStats) and the inference
// runners: exact statistics, exact batch counts per round, modes, and the errors.
#include "trainpack/callbacks/inference_runner.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "support/errors.h"
#include "trainpack/core/monitor_base.h"
#include "trainpack/input/dataflow.h"
#include "trainpack/input/input_source.h"
#include "trainpack/testing.h"
#include "trainpack/train/single_cost.h"

namespace trainpack {
namespace inference_test {

using testing::message_of;

// ---- the inferencers alone ----

Inferencer::Stats run_inferencer(Inferencer& inf, const std::vector<std::vector<at::Tensor>>& b) {
  inf.before_inference();
  for (const auto& r : b) inf.on_fetches(r);
  return inf.after_inference();
}

TEST(ClassificationErrorTest, IsTheErrorOverAllSamplesNotTheMeanOfBatchErrors) {
  ClassificationError err("wrong-top1", "val-error-top1");
  EXPECT_EQ(err.get_fetches(), std::vector<std::string>{"wrong-top1"});
  // Batches of 4 and 2 samples with 1 and 2 errors: 3 / 6 = 0.5 (the mean of batch errors
  // would be (0.25 + 1) / 2 = 0.625).
  auto stats =
      run_inferencer(err, {{torch::tensor({0.f, 1.f, 0.f, 0.f})}, {torch::tensor({1.f, 1.f})}});
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].first, "val-error-top1");
  EXPECT_DOUBLE_EQ(stats[0].second, 0.5);
  // A new round starts from zero; no samples is an error, not an error rate of 0.
  EXPECT_EQ(message_of([&] { run_inferencer(err, {}); }),
            "ClassificationError('wrong-top1'): no sample was seen, so 'val-error-top1' cannot be "
            "computed; the validation data is empty (check the dataflow given to the "
            "InferenceRunner)");
  EXPECT_NE(message_of([&] { run_inferencer(err, {{torch::zeros({0})}}); }).find("no sample"),
            std::string::npos);
  stats = run_inferencer(err, {{torch::tensor({1.f})}});
  EXPECT_DOUBLE_EQ(stats[0].second, 1.0);
  EXPECT_EQ(message_of([&] {
              run_inferencer(err, {{torch::zeros({2, 2})}});
            }),
            "ClassificationError: output 'wrong-top1' is not a vector (one entry per sample, 1 = "
            "wrong): its shape is [2, 2]");
}

TEST(BinaryClassificationStatsTest, KnownConfusionMatrix) {
  BinaryClassificationStats stats_inf("pred", "label");
  EXPECT_EQ(stats_inf.get_fetches(), (std::vector<std::string>{"pred", "label"}));
  // Over two batches: TP = 3, FP = 1, FN = 2, TN = 2.
  auto stats =
      run_inferencer(stats_inf, {{torch::tensor({1, 1, 0, 0}), torch::tensor({1, 0, 1, 0})},
                                 {torch::tensor({1, 1, 0, 0}), torch::tensor({1, 1, 1, 0})}});
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_EQ(stats[0].first, "val_precision");
  EXPECT_DOUBLE_EQ(stats[0].second, 3.0 / 4.0);
  EXPECT_EQ(stats[1].first, "val_recall");
  EXPECT_DOUBLE_EQ(stats[1].second, 3.0 / 5.0);
}

TEST(BinaryClassificationStatsTest, NoPositivePredictionsAndNoPositiveLabels) {
  BinaryClassificationStats stats_inf("pred", "label", "test");
  auto stats = run_inferencer(stats_inf, {{torch::tensor({0, 0, 0}), torch::tensor({1, 0, 1})}});
  EXPECT_EQ(stats[0].first, "test_precision");
  EXPECT_DOUBLE_EQ(stats[0].second, 0.0);
  EXPECT_DOUBLE_EQ(stats[1].second, 0.0);  // 0 of 2 positives found
  stats = run_inferencer(stats_inf, {{torch::tensor({1, 0}), torch::tensor({0, 0})}});
  EXPECT_DOUBLE_EQ(stats[0].second, 0.0);
  EXPECT_DOUBLE_EQ(stats[1].second, 0.0);  // no positive labels
  EXPECT_EQ(message_of([&] {
              run_inferencer(stats_inf, {{torch::tensor({1, 0}), torch::tensor({0, 0, 1})}});
            }),
            "BinaryClassificationStats: prediction 'pred' [2] and label 'label' [3] have different "
            "shapes");
  EXPECT_EQ(message_of([&] { run_inferencer(stats_inf, {}); }),
            "BinaryClassificationStats('pred', 'label'): no sample was seen, so 'test_precision' "
            "and 'test_recall' cannot be computed; the validation data is empty (check the "
            "dataflow given to the InferenceRunner)");
}

TEST(ScalarStatsTest, UnweightedMeanOverBatchesWithPrefix) {
  ScalarStats s({"cost", "acc"});
  auto stats = run_inferencer(
      s, {{torch::tensor(1.0), torch::tensor(0.5)}, {torch::tensor(3.0), torch::tensor(1.0)}});
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_EQ(stats[0].first, "validation_cost");
  EXPECT_DOUBLE_EQ(stats[0].second, 2.0);
  EXPECT_EQ(stats[1].first, "validation_acc");
  EXPECT_DOUBLE_EQ(stats[1].second, 0.75);
  ScalarStats bare({"cost"}, "");
  EXPECT_EQ(run_inferencer(bare, {{torch::tensor(2.0)}})[0].first, "cost");
  EXPECT_EQ(message_of([&] { run_inferencer(bare, {}); }),
            "ScalarStats('cost'): no sample was seen, so 'cost' cannot be computed; the validation "
            "data is empty (check the dataflow given to the InferenceRunner)");
  EXPECT_NE(message_of([&] {
              run_inferencer(s, {});
            }).find("ScalarStats('validation_cost', 'validation_acc'): no sample was seen"),
            std::string::npos);
  EXPECT_EQ(message_of([&] { run_inferencer(bare, {{torch::zeros({2})}}); }),
            "ScalarStats: output 'cost' must be a scalar, but has shape [2]");
  EXPECT_NE(message_of([] { ScalarStats({}); }).find("names is empty"), std::string::npos);
}

// ---- partial sums (data-parallel validation) ----

// Splits `batches` as the ranks of a sharded runner do (batch k to rank k % world), adds the
// ranks' partial sums element-wise, gives the totals to a fresh inferencer and returns its stats.
template <class Make>
Inferencer::Stats sharded_stats(Make make, const std::vector<std::vector<at::Tensor>>& batches,
                                size_t world) {
  std::vector<double> totals;
  for (size_t r = 0; r < world; ++r) {
    auto inf = make();
    inf->before_inference();
    for (size_t k = r; k < batches.size(); k += world) inf->on_fetches(batches[k]);
    const std::vector<double> sums = inf->partial_sums();
    if (totals.empty()) totals.assign(sums.size(), 0.0);
    EXPECT_EQ(sums.size(), totals.size());
    for (size_t i = 0; i < sums.size(); ++i) totals[i] += sums[i];
  }
  auto combined = make();
  combined->before_inference();
  combined->set_partial_sums(totals);
  return combined->after_inference();
}

TEST(PartialSumsTest, ShardedStatisticsEqualOneProcessExactly) {
  torch::manual_seed(3);
  std::vector<std::vector<at::Tensor>> scalar_batches, wrong_batches, binary_batches;
  for (int k = 0; k < 13; ++k) {
    const int64_t n = k == 12 ? 5 : 8;  // 101 samples in batches of 8
    scalar_batches.push_back({torch::rand({}) * 3 + 0.1, torch::rand({}) + 0.5});
    wrong_batches.push_back({torch::rand({n}).gt(0.7).to(at::kFloat)});
    binary_batches.push_back(
        {torch::rand({n}).gt(0.5).to(at::kLong), torch::rand({n}).gt(0.4).to(at::kLong)});
  }
  auto scalar = [] { return std::make_shared<ScalarStats>(std::vector<std::string>{"a", "b"}); };
  auto error = [] { return std::make_shared<ClassificationError>("wrong", "err"); };
  auto binary = [] { return std::make_shared<BinaryClassificationStats>("p", "l"); };
  for (size_t world : {1u, 2u, 3u, 20u}) {  // 20 ranks: some have no batch at all
    SCOPED_TRACE(world);
    ScalarStats s({"a", "b"});
    EXPECT_EQ(sharded_stats(scalar, scalar_batches, world), run_inferencer(s, scalar_batches));
    ClassificationError e("wrong", "err");
    EXPECT_EQ(sharded_stats(error, wrong_batches, world), run_inferencer(e, wrong_batches));
    BinaryClassificationStats b("p", "l");
    EXPECT_EQ(sharded_stats(binary, binary_batches, world), run_inferencer(b, binary_batches));
  }
}

TEST(PartialSumsTest, LayoutAndErrors) {
  ScalarStats s({"a", "b"});
  EXPECT_TRUE(s.supports_partial_sums());
  s.before_inference();
  EXPECT_EQ(s.partial_sums(), (std::vector<double>{0, 0, 0}));  // a round without batches
  s.on_fetches({torch::tensor(1.5), torch::tensor(2.0)});
  EXPECT_EQ(s.partial_sums(), (std::vector<double>{1.5, 2.0, 1}));
  EXPECT_EQ(message_of([&] {
              s.set_partial_sums({1, 2});
            }),
            "ScalarStats: set_partial_sums got 2 values, but partial_sums() has 3; give it the "
            "element-wise sums over the ranks of partial_sums()");
  ClassificationError e("wrong", "err");
  e.before_inference();
  e.on_fetches({torch::tensor({1.0f, 0.0f, 1.0f})});
  EXPECT_EQ(e.partial_sums(), (std::vector<double>{2, 3}));

  struct NoSums : Inferencer {
    std::vector<std::string> _get_fetches() override { return {"x"}; }
    void _on_fetches(const std::vector<at::Tensor>&) override {}
  } none;
  EXPECT_FALSE(none.supports_partial_sums());
  EXPECT_NE(message_of([&] { none.partial_sums(); }).find("partial_sums() is not supported"),
            std::string::npos);
  EXPECT_NE(message_of([&] { none.set_partial_sums({}); }).find("override _supports_partial_sums"),
            std::string::npos);
}

// ---- the runners ----

struct TinyNetImpl : torch::nn::Cloneable<TinyNetImpl> {
  TinyNetImpl() { reset(); }
  void reset() override { fc = register_module("fc", torch::nn::Linear(2, 3)); }
  at::Tensor forward(const at::Tensor& x) { return fc(x); }
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(TinyNet);

std::vector<Datapoint> points(int64_t n, uint64_t seed) {
  torch::manual_seed(seed);
  auto x = torch::randn({n, 2});
  auto y = torch::randint(0, 3, {n}, torch::kLong);
  std::vector<Datapoint> out;
  for (int64_t i = 0; i < n; ++i) out.push_back({x[i].clone(), y[i].clone()});
  return out;
}

// Records every scalar put to the monitors with the global step.
class ScalarLog : public MonitorBase {
 public:
  std::vector<std::tuple<int64_t, std::string, double>> puts;
  void process_scalar(const std::string& name, double value) override {
    puts.emplace_back(trainer().global_step(), name, value);
  }
};

struct RunnerSetup {
  TinyNet net;
  SimpleTrainer trainer;
  std::vector<bool> training_mode_seen;  // is_training() of the module in every tower call
  std::vector<bool> ctx_training_seen;
  bool capture_module = false;         // the tower uses the captured module instead of ctx.module()
  std::function<void()> on_inference;  // called in every inference-mode tower call

  RunnerSetup() {
    torch::manual_seed(1);
    net = TinyNet();
    trainer.set_handle_signals(false);
    auto params = net->parameters();
    auto captured = net;
    trainer.setup_graph(
        {InputDesc("x", {-1, 2}), InputDesc("label", {-1}, at::kLong)},
        std::make_shared<FeedInput>(
            std::make_shared<BatchData>(std::make_shared<DataFromList>(points(32, 3)), 8)),
        net.ptr(),
        [this, captured](TowerContext& ctx, const std::vector<at::Tensor>& in) mutable {
          TinyNetImpl& m = capture_module ? *captured : ctx.module_as<TinyNetImpl>();
          if (!ctx.is_training()) {
            if (on_inference) on_inference();
            std::lock_guard<std::mutex> lock(mu);
            training_mode_seen.push_back(m.is_training());
            ctx_training_seen.push_back(ctx.is_training());
          }
          auto logits = m.forward(in[0]);
          ctx.output("logits", logits);
          ctx.output("wrong", logits.argmax(1).ne(in[1]).to(at::kFloat));
          auto cost = torch::nn::functional::cross_entropy(logits, in[1]);
          ctx.output("val-cost", cost);
          return cost;
        },
        [params] { return std::make_unique<torch::optim::SGD>(params, 0.1); });
  }
  std::mutex mu;
};

// A dataflow of validation batches that counts the datapoints read.
DataFlowPtr counted_batches(std::shared_ptr<int64_t> reads, int64_t n = 20, int64_t batch = 6,
                            bool remainder = true) {
  auto mapped = std::make_shared<MapData>(std::make_shared<DataFromList>(points(n, 9)),
                                          [reads](Datapoint dp) -> std::optional<Datapoint> {
                                            ++*reads;
                                            return dp;
                                          });
  return std::make_shared<BatchData>(mapped, batch, remainder);
}

// The error of `net` on the validation points, computed directly.
double expected_error(TinyNet& net, int64_t n = 20) {
  torch::NoGradGuard no_grad;
  auto pts = points(n, 9);
  int64_t wrong = 0;
  for (auto& p : pts) {
    wrong += net->forward(p[0].unsqueeze(0)).argmax(1).item<int64_t>() != p[1].item<int64_t>();
  }
  return static_cast<double>(wrong) / static_cast<double>(n);
}

TEST(InferenceRunnerTest, RunsSizeBatchesPerEpochInEvalModeAndPutsTheStats) {
  RunnerSetup s;
  auto reads = std::make_shared<int64_t>(0);
  auto runner = std::make_shared<InferenceRunner>(
      counted_batches(reads),
      std::vector<InferencerPtr>{
          std::make_shared<ClassificationError>("wrong", "val-error"),
          std::make_shared<ScalarStats>(std::vector<std::string>{"val-cost"})},
      InferenceRunnerOptions().progress_bar(false));
  auto log = std::make_shared<ScalarLog>();
  std::vector<double> errors_expected;
  auto check = std::make_shared<testing::ActionCallback>();
  check->trigger_epoch_fn = [&](testing::ActionCallback&) {};
  // Registered before the runner: sees the weights the runner will see at this epoch's end.
  check->after_epoch_fn = [&](testing::ActionCallback&) {
    errors_expected.push_back(expected_error(s.net));
  };
  testing::LogCapture capture;
  s.trainer.train({check, runner}, {log}, /*steps_per_epoch=*/4, 1, /*max_epoch=*/3);

  EXPECT_TRUE(capture.contains("[InferenceRunner] Will eval 4 iterations"));
  EXPECT_TRUE(capture.contains("[InferenceRunner] Building tower 'InferenceTower' on device cpu"));
  EXPECT_EQ(runner->batches_last_round(), 4);  // 20 points in batches of 6, the last of 2
  // One batch of 6 at before_train (the check of the tower's outputs), then one whole pass per
  // epoch, nothing more.
  EXPECT_EQ(*reads, 6 + 3 * 20);
  EXPECT_TRUE(s.net->is_training());
  ASSERT_EQ(s.training_mode_seen.size(), 1u + 12u);
  for (size_t i = 0; i < s.training_mode_seen.size(); ++i) {
    EXPECT_FALSE(s.training_mode_seen[i]) << i;
    EXPECT_FALSE(s.ctx_training_seen[i]) << i;
  }
  ASSERT_EQ(log->puts.size(), 6u);
  for (int e = 0; e < 3; ++e) {
    const auto& err = log->puts[static_cast<size_t>(2 * e)];
    EXPECT_EQ(std::get<0>(err), 4 * (e + 1));  // at the end of epoch e+1: the step counter
    EXPECT_EQ(std::get<1>(err), "val-error");
    EXPECT_DOUBLE_EQ(std::get<2>(err), errors_expected[static_cast<size_t>(e)])
        << "epoch " << e + 1;
    EXPECT_EQ(std::get<1>(log->puts[static_cast<size_t>(2 * e + 1)]), "validation_val-cost");
  }
  EXPECT_EQ(s.trainer.global_step(), 12);
}

// The cost a tower returns is "cost" in inference as in training: ScalarStats("cost") averages
// it (here the tower also outputs the same tensor as "val-cost", to compare with).
TEST(InferenceRunnerTest, TheReturnedCostIsTheOutputCost) {
  RunnerSetup s;
  auto reads = std::make_shared<int64_t>(0);
  auto runner = std::make_shared<InferenceRunner>(
      counted_batches(reads),
      std::vector<InferencerPtr>{std::make_shared<ScalarStats>("cost"),
                                 std::make_shared<ScalarStats>("val-cost", "")},
      InferenceRunnerOptions().progress_bar(false));
  auto log = std::make_shared<ScalarLog>();
  s.trainer.train({runner}, {log}, /*steps_per_epoch=*/2, 1, /*max_epoch=*/2);
  ASSERT_EQ(log->puts.size(), 4u);
  for (size_t i = 0; i < 4; i += 2) {
    EXPECT_EQ(std::get<1>(log->puts[i]), "validation_cost");
    EXPECT_EQ(std::get<1>(log->puts[i + 1]), "val-cost");
    EXPECT_EQ(std::get<2>(log->puts[i]), std::get<2>(log->puts[i + 1]));
  }
}

// A tower's own output "cost" wins over the returned tensor.
TEST(InferenceRunnerTest, ATowersOwnCostOutputIsKept) {
  TowerContext ctx("InferenceTower", /*is_training=*/false);
  const std::vector<std::string> names{"cost"};
  std::vector<at::Tensor> out;
  ctx.collect_outputs(&names, &out);
  ctx.output("cost", torch::tensor(1.0));
  ctx.output_returned_cost(torch::tensor(2.0));
  EXPECT_EQ(out[0].item<double>(), 1.0);

  TowerContext returned_only("InferenceTower", false);
  returned_only.collect_outputs(&names, &out);
  returned_only.output_returned_cost(at::Tensor());  // an undefined return outputs nothing
  EXPECT_FALSE(out[0].defined());
  returned_only.output_returned_cost(torch::tensor(2.0));
  EXPECT_EQ(out[0].item<double>(), 2.0);
}

TEST(ScalarStatsTest, OneNameAsTensorpacksScalarStatsCost) {
  ScalarStats one("cost");
  EXPECT_EQ(one.get_fetches(), std::vector<std::string>{"cost"});
  const std::string name = "val-cost";
  ScalarStats from_string(name, "");
  EXPECT_EQ(from_string.get_fetches(), std::vector<std::string>{"val-cost"});
  ScalarStats two({"cost", "accuracy"});  // a braced list is the names, never one string
  EXPECT_EQ(two.get_fetches(), (std::vector<std::string>{"cost", "accuracy"}));
  const auto stats = run_inferencer(one, {{torch::tensor(1.0)}, {torch::tensor(3.0)}});
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].first, "validation_cost");
  EXPECT_EQ(stats[0].second, 2.0);
}

TEST(InferenceRunnerTest, ChiefOnlyButShardedOverEveryRankUnlessTold) {
  auto flow = std::make_shared<DataFromList>(points(4, 1));
  auto inf = [] { return std::make_shared<ClassificationError>("wrong", "err"); };
  InferenceRunner sharded(flow, inf());
  EXPECT_TRUE(sharded.chief_only());
  EXPECT_TRUE(sharded.runs_on_every_rank());
  InferenceRunner alone(flow, inf(), InferenceRunnerOptions().shard_over_ranks(false));
  EXPECT_TRUE(alone.chief_only());
  EXPECT_FALSE(alone.runs_on_every_rank());
}

TEST(InferenceRunnerTest, UnknownSizeRunsOneWholePassWithAWarning) {
  RunnerSetup s;
  int64_t produced = 0;
  auto gen = std::make_shared<DataFromGenerator>([&]() -> std::optional<Datapoint> {
    if (produced % 3 == 2) {
      ++produced;
      return std::nullopt;  // every pass has 2 batches
    }
    ++produced;
    return Datapoint{torch::zeros({5, 2}), torch::zeros({5}, torch::kLong)};
  });
  auto runner =
      std::make_shared<InferenceRunner>(gen, std::make_shared<ClassificationError>("wrong", "err"),
                                        InferenceRunnerOptions().progress_bar(false));
  testing::LogCapture capture;
  s.trainer.train({runner}, {}, 1, 1, 2);
  EXPECT_TRUE(
      capture.contains("WRN [InferenceRunner] Got an input with unknown size! Will iterate "
                       "until the end of each pass of DataFromGenerator."));
  EXPECT_EQ(runner->batches_last_round(), 2);
}

TEST(InferenceRunnerTest, ErrorsNameTheFix) {
  {
    RunnerSetup s;
    auto reads = std::make_shared<int64_t>(0);
    auto runner = std::make_shared<InferenceRunner>(
        counted_batches(reads), std::make_shared<ClassificationError>("wrong-top5", "e"),
        InferenceRunnerOptions().progress_bar(false));
    const std::string msg = message_of([&] { s.trainer.train({runner}, {}, 1, 1, 1); });
    // Before training, not after the first epoch; the returned cost is the output "cost".
    EXPECT_NE(msg.find("Callback InferenceRunner failed in before_train: InferenceTower: the tower "
                       "did not output 'wrong-top5', which an inferencer needs; it outputs: cost, "
                       "logits, val-cost, wrong"),
              std::string::npos)
        << msg;
    EXPECT_EQ(s.trainer.global_step(), 0);
    EXPECT_EQ(*reads, 6);  // one batch
    EXPECT_TRUE(s.net->is_training());
  }
  {
    // The same from DataParallelInferenceRunner.
    RunnerSetup s;
    auto reads = std::make_shared<int64_t>(0);
    auto runner = std::make_shared<DataParallelInferenceRunner>(
        counted_batches(reads),
        std::vector<InferencerPtr>{std::make_shared<ScalarStats>("val-mea")},
        std::vector<c10::Device>{c10::kCPU, c10::kCPU},
        InferenceRunnerOptions().progress_bar(false));
    const std::string msg = message_of([&] { s.trainer.train({runner}, {}, 1, 1, 1); });
    EXPECT_NE(msg.find("Callback DataParallelInferenceRunner failed in before_train: "
                       "InferenceTower0: the tower did not output 'val-mea'"),
              std::string::npos)
        << msg;
    EXPECT_EQ(s.trainer.global_step(), 0);
  }
  {
    // A dataflow whose pass ends before its size() batches.
    class Liar : public DataFlow {
     public:
      std::string name() const override { return "Liar"; }
      std::optional<int64_t> size() const override { return 5; }

     protected:
      void _begin_pass(int64_t) override { n_ = 0; }
      std::optional<Datapoint> _next() override {
        if (n_++ == 3) return std::nullopt;
        return Datapoint{torch::zeros({2, 2}), torch::zeros({2}, torch::kLong)};
      }
      int n_ = 0;
    };
    RunnerSetup s;
    auto runner = std::make_shared<InferenceRunner>(
        std::make_shared<Liar>(), std::make_shared<ClassificationError>("wrong", "e"),
        InferenceRunnerOptions().progress_bar(false));
    testing::LogCapture capture;
    const std::string msg = message_of([&] { s.trainer.train({runner}, {}, 1, 1, 1); });
    EXPECT_NE(msg.find("InferenceRunner: the dataflow Liar ended after 3 batches, but its size() "
                       "is 5"),
              std::string::npos)
        << msg;
    EXPECT_TRUE(
        capture.contains("ERR [InferenceRunner] input stopped before reaching its size()!"));
    EXPECT_TRUE(s.net->is_training());  // the mode is restored after the error
  }
  {
    // An empty validation set: an error at before_train, before any training step.
    RunnerSetup s;
    auto runner = std::make_shared<InferenceRunner>(
        std::make_shared<BatchData>(std::make_shared<DataFromList>(std::vector<Datapoint>{}), 4,
                                    /*remainder=*/true),
        std::make_shared<ClassificationError>("wrong", "val-error"),
        InferenceRunnerOptions().progress_bar(false));
    const std::string msg = message_of([&] { s.trainer.train({runner}, {}, 1, 1, 1); });
    EXPECT_NE(msg.find("Callback InferenceRunner failed in before_train: InferenceRunner: the "
                       "input BatchData(batch_size=4, remainder=true) over DataFromList (0 "
                       "datapoints) is empty (its size() is 0): there is nothing to validate "
                       "on."),
              std::string::npos)
        << msg;
    EXPECT_EQ(s.trainer.global_step(), 0);
  }
  {
    // The usual cause: a batch larger than the set, without remainder. The message names the
    // flows (their sizes show it) and the fix.
    RunnerSetup s;
    std::vector<Datapoint> three(3, Datapoint{torch::zeros({2}), torch::zeros({}, torch::kLong)});
    auto runner = std::make_shared<InferenceRunner>(
        std::make_shared<BatchData>(std::make_shared<DataFromList>(three), 4),
        std::make_shared<ClassificationError>("wrong", "val-error"),
        InferenceRunnerOptions().progress_bar(false));
    EXPECT_EQ(message_of([&] { s.trainer.train({runner}, {}, 1, 1, 1); }),
              "Callback InferenceRunner failed in before_train: InferenceRunner: the input "
              "BatchData(batch_size=4) over DataFromList (3 datapoints) is empty (its size() is "
              "0): there is nothing to validate on. A batch larger than the validation set yields "
              "no batch unless BatchData keeps the short last one: use a smaller batch, or "
              "BatchData(ds, batch_size, /*remainder=*/true); otherwise, is the validation set "
              "empty, or limited to 0 samples? Give it a dataflow that yields at least one batch");
    EXPECT_EQ(s.trainer.global_step(), 0);
  }
  {
    // A dataflow of unknown size whose pass yields nothing: an error at the round.
    RunnerSetup s;
    auto gen = std::make_shared<DataFromGenerator>(
        []() -> std::optional<Datapoint> { return std::nullopt; });
    auto runner =
        std::make_shared<InferenceRunner>(gen, std::make_shared<ClassificationError>("wrong", "e"),
                                          InferenceRunnerOptions().progress_bar(false));
    const std::string msg = message_of([&] { s.trainer.train({runner}, {}, 1, 1, 1); });
    EXPECT_NE(msg.find("InferenceRunner: the input DataFromGenerator is empty (this round's pass "
                       "yielded no batch): there is nothing to validate on. A batch larger than "
                       "the validation set yields no batch"),
              std::string::npos)
        << msg;
  }
  {
    RunnerSetup s;
    std::vector<Datapoint> bad = {{torch::zeros({2, 3}), torch::zeros({2}, torch::kLong)}};
    auto runner = std::make_shared<InferenceRunner>(
        std::make_shared<DataFromList>(bad), std::make_shared<ClassificationError>("wrong", "e"),
        InferenceRunnerOptions().progress_bar(false));
    const std::string msg = message_of([&] { s.trainer.train({runner}, {}, 1, 1, 1); });
    EXPECT_NE(msg.find("InferenceRunner: input 'x' (component 0) should be [-1, 2] float, but the "
                       "batch has [2, 3] float"),
              std::string::npos)
        << msg;
  }
  {
    auto runner =
        std::make_shared<InferenceRunner>(std::make_shared<DataFromList>(std::vector<Datapoint>{}),
                                          std::make_shared<ClassificationError>());
    const std::string msg = message_of([&] { testing::run_noop({runner}, 1, 1, 1); });
    EXPECT_NE(msg.find("InferenceRunner needs a trainer with a tower function (a TowerTrainer such "
                       "as SimpleTrainer)"),
              std::string::npos)
        << msg;
  }
  EXPECT_EQ(message_of([] { InferenceRunner(nullptr, std::make_shared<ClassificationError>()); }),
            "InferenceRunner: the input dataflow is null");
  EXPECT_NE(message_of([] {
              InferenceRunner(std::make_shared<DataFromList>(std::vector<Datapoint>{}),
                              std::vector<InferencerPtr>{});
            }).find("no inferencers"),
            std::string::npos);
}

TEST(DataParallelInferenceRunnerTest, EqualsInferenceRunnerOnTheSameData) {
  for (int64_t n : {20, 24, 2}) {  // remainders of 1 and 0 batches, and a single batch
    SCOPED_TRACE(n);
    RunnerSetup s;
    auto reads1 = std::make_shared<int64_t>(0);
    auto reads2 = std::make_shared<int64_t>(0);
    auto single = std::make_shared<InferenceRunner>(
        counted_batches(reads1, n, 4),
        std::vector<InferencerPtr>{
            std::make_shared<ClassificationError>("wrong", "single-err"),
            std::make_shared<ScalarStats>(std::vector<std::string>{"val-cost"}, "single")},
        InferenceRunnerOptions().progress_bar(false));
    auto parallel = std::make_shared<DataParallelInferenceRunner>(
        counted_batches(reads2, n, 4),
        std::vector<InferencerPtr>{
            std::make_shared<ClassificationError>("wrong", "dp-err"),
            std::make_shared<ScalarStats>(std::vector<std::string>{"val-cost"}, "dp")},
        std::vector<c10::Device>{c10::kCPU, c10::kCPU},
        InferenceRunnerOptions().progress_bar(false));
    auto log = std::make_shared<ScalarLog>();
    s.trainer.train({single, parallel}, {log}, 4, 1, 2);
    EXPECT_EQ(*reads1, *reads2);
    EXPECT_EQ(single->batches_last_round(), parallel->batches_last_round());
    ASSERT_EQ(log->puts.size(), 8u);
    for (size_t k = 0; k < 8; k += 4) {
      EXPECT_EQ(std::get<1>(log->puts[k]), "single-err");
      EXPECT_EQ(std::get<1>(log->puts[k + 2]), "dp-err");
      EXPECT_EQ(std::get<2>(log->puts[k]), std::get<2>(log->puts[k + 2]));
      EXPECT_EQ(std::get<1>(log->puts[k + 3]), "dp_val-cost");
      EXPECT_DOUBLE_EQ(std::get<2>(log->puts[k + 1]), std::get<2>(log->puts[k + 3]));
    }
    EXPECT_TRUE(s.net->is_training());
  }
}

// CPU replicas share the intra-op threads during a parallel round (each gets T / replicas, at
// least 1) and the trainer's count is restored afterwards, for the remainder and for training.
TEST(DataParallelInferenceRunnerTest, CpuReplicasShareTheIntraOpThreadsAndRestoreThem) {
  const int saved = at::get_num_threads();
  at::set_num_threads(4);
  RunnerSetup s;
  std::mutex mu;
  std::vector<int> threads_seen;  // at::get_num_threads() in every inference call
  auto runner = std::make_shared<DataParallelInferenceRunner>(
      counted_batches(std::make_shared<int64_t>(0), 20, 4),
      std::vector<InferencerPtr>{std::make_shared<ClassificationError>("wrong", "dp-err")},
      std::vector<c10::Device>{c10::kCPU, c10::kCPU}, InferenceRunnerOptions().progress_bar(false));
  s.on_inference = [&] {
    std::lock_guard<std::mutex> lock(mu);
    threads_seen.push_back(at::get_num_threads());
  };
  s.trainer.train({runner}, {}, 4, 1, 1);
  const int after = at::get_num_threads();
  at::set_num_threads(saved);
  // The check of the outputs at before_train (one batch, the trainer's count), then 20 / 4 = 5
  // batches: two parallel rounds of 2, then 1 sequentially.
  ASSERT_EQ(threads_seen.size(), 1u + 5u);
  EXPECT_EQ(threads_seen.front(), 4);
  EXPECT_EQ(std::count(threads_seen.begin(), threads_seen.end(), 2), 4);
  EXPECT_EQ(threads_seen.back(), 4) << "the remainder runs with the trainer's count";
  EXPECT_EQ(after, 4);
}

TEST(DataParallelInferenceRunnerTest, Errors) {
  EXPECT_NE(message_of([] {
              DataParallelInferenceRunner(std::make_shared<DataFromList>(std::vector<Datapoint>{}),
                                          {std::make_shared<ClassificationError>()}, {});
            }).find("devices is empty"),
            std::string::npos);
  {
    RunnerSetup s;
    s.capture_module = true;
    auto reads = std::make_shared<int64_t>(0);
    auto runner = std::make_shared<DataParallelInferenceRunner>(
        counted_batches(reads, 16, 4),
        std::vector<InferencerPtr>{std::make_shared<ClassificationError>("wrong", "e")},
        std::vector<c10::Device>{c10::kCPU, c10::kCPU},
        InferenceRunnerOptions().progress_bar(false));
    const std::string msg = message_of([&] { s.trainer.train({runner}, {}, 1, 1, 1); });
    EXPECT_NE(msg.find("InferenceTower1: the tower function does not take its module from the "
                       "TowerContext"),
              std::string::npos)
        << msg;
  }
  {
    RunnerSetup s;
    auto gen = std::make_shared<DataFromGenerator>(
        []() -> std::optional<Datapoint> { return std::nullopt; });
    auto runner = std::make_shared<DataParallelInferenceRunner>(
        gen, std::vector<InferencerPtr>{std::make_shared<ClassificationError>("wrong", "e")},
        std::vector<c10::Device>{c10::kCPU, c10::kCPU});
    const std::string msg = message_of([&] { s.trainer.train({runner}, {}, 1, 1, 1); });
    EXPECT_NE(msg.find("DataParallelInferenceRunner: the input DataFromGenerator must have a known "
                       "size > 0 (its size is unknown)"),
              std::string::npos)
        << msg;
  }
}

}  // namespace inference_test
}  // namespace trainpack
