// Summary callbacks: MovingAverageSummary, MergeAllSummaries (with the
// op and alone), SimpleMovingAverage, the default callbacks, RunUpdateOps with the tower's update
// ops, and the monitors at the end of the line (stats.json, event files).
#include "trainpack/callbacks/summary.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/optim/sgd.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "support/errors.h"
#include "support/event_reader.h"
#include "support/files.h"
#include "support/temp_dir.h"
#include "support/tower_function_trainer.h"
#include "trainpack/callbacks/graph.h"
#include "trainpack/callbacks/json_writer.h"
#include "trainpack/callbacks/param.h"
#include "trainpack/callbacks/tf_event_writer.h"
#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"
#include "trainpack/train/defaults.h"
#include "trainpack/train/tower.h"
#include "trainpack/utils/histogram.h"
#include "trainpack/utils/logger.h"

namespace trainpack {
namespace summary_test {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::LogCapture;
using testing::message_of;
using testing::read_text;
using testing::TowerFunctionTrainer;
using testing::Trace;

at::Tensor scalar(double v) { return at::full({}, v, at::kFloat); }

// The moving summary "cost" takes xs[gs] at the step that starts at global step gs.
std::function<void(TowerContext&, int64_t)> moving_cost(std::vector<double> xs) {
  return [xs](TowerContext& t, int64_t gs) {
    t.add_moving_summary("cost", scalar(xs.at(static_cast<size_t>(gs))));
  };
}

// The zero-debiased EMA (decay 0.95) of the first `t` values, from the formula.
double ema(const std::vector<double>& xs, size_t t) {
  double biased = 0;
  for (size_t i = 0; i < t; ++i) biased = 0.95 * biased + 0.05 * xs[i];
  return biased / (1.0 - std::pow(0.95, static_cast<double>(t)));
}

struct PutScalar {
  std::string name;
  double value;
  int64_t global_step;
};

// Records what reaches a monitor, with the global step at that moment; optionally appends
// "put <name> gs=G" to a shared trace.
class Recorder : public MonitorBase {
 public:
  explicit Recorder(std::shared_ptr<Trace> trace = nullptr) : trace_(std::move(trace)) {}
  std::vector<PutScalar> scalars;
  std::vector<std::pair<int64_t, Summary>> summaries;

  void process_scalar(const std::string& name, double value) override {
    scalars.push_back({name, value, global_step()});
    if (trace_) trace_->push_back(fmt::format("put {} gs={}", name, global_step()));
  }
  void process_summary(const Summary& summary) override {
    summaries.emplace_back(global_step(), summary);
  }

  std::vector<int64_t> steps_of(const std::string& name) const {
    std::vector<int64_t> out;
    for (const auto& s : scalars) {
      if (s.name == name) out.push_back(s.global_step);
    }
    return out;
  }
  std::vector<double> values_of(const std::string& name) const {
    std::vector<double> out;
    for (const auto& s : scalars) {
      if (s.name == name) out.push_back(s.value);
    }
    return out;
  }

 private:
  std::shared_ptr<Trace> trace_;
};

// Records after_run, trigger_step and trigger_epoch with the global step.
class StepRecorder : public Callback {
 public:
  explicit StepRecorder(std::shared_ptr<Trace> trace) : trace_(std::move(trace)) {}

 protected:
  void _after_run(const StepContext&, const RunValues&) override { record("after_run"); }
  void _trigger_step() override { record("trigger_step"); }
  void _trigger_epoch() override { record("trigger_epoch"); }

 private:
  void record(const char* hook) { trace_->push_back(fmt::format("{} gs={}", hook, global_step())); }
  std::shared_ptr<Trace> trace_;
};

std::shared_ptr<Recorder> train(TowerFunctionTrainer& trainer, std::vector<CallbackPtr> callbacks,
                                int64_t steps_per_epoch, int64_t max_epoch) {
  auto recorder = std::make_shared<Recorder>();
  trainer.train(callbacks, {recorder}, steps_per_epoch, 1, max_epoch);
  return recorder;
}

CallbackPtr moving_average_summary() { return std::make_shared<MovingAverageSummary>(); }

std::vector<std::string> tags_of(const Summary& s) {
  std::vector<std::string> out;
  for (const auto& v : s.values) out.push_back(v.tag);
  return out;
}

size_t count_lines(const LogCapture& log, const std::string& text) {
  size_t n = 0;
  for (const auto& l : log.lines()) n += l.find(text) != std::string::npos ? 1 : 0;
  return n;
}

// ---- MovingAverageSummary + MergeAllSummaries: values and timing ----

TEST(MergeAllSummaries, ChiefOnlyButRunOnEveryRankOfADataParallelRun) {
  // Their results are the chief's; under data-parallel training every rank keeps its own
  // averages and takes part in the mean over the ranks (tests/distributed/inference_test.cpp).
  for (const CallbackPtr& cb :
       {CallbackPtr(std::make_shared<MovingAverageSummary>()), MergeAllSummaries(),
        MergeAllSummaries(MergeAllSummariesOptions().run_alone(true))}) {
    EXPECT_TRUE(cb->chief_only()) << cb->name();
    EXPECT_TRUE(cb->runs_on_every_rank()) << cb->name();
  }
}

TEST(MergeAllSummaries, PutsTheDebiasedMovingAverageAtTheLastStepOfEachEpoch) {
  const std::vector<double> xs = {4, 8, 2, 6, 10, 12};
  TowerFunctionTrainer trainer;
  trainer.tower = moving_cost(xs);
  auto rec = train(trainer, {moving_average_summary(), MergeAllSummaries()}, 3, 2);
  EXPECT_EQ(rec->steps_of("cost"), (std::vector<int64_t>{3, 6}));
  const auto values = rec->values_of("cost");
  ASSERT_EQ(values.size(), 2u);
  EXPECT_FLOAT_EQ(values[0], ema(xs, 3));
  EXPECT_FLOAT_EQ(values[1], ema(xs, 6));
  // The history has it too, under the normalised name.
  EXPECT_FLOAT_EQ(trainer.monitors().get_latest("cost"), ema(xs, 6));
}

TEST(MergeAllSummaries, TheFirstAverageIsTheFirstValueExactly) {
  const std::vector<double> xs = {4, 8, 3};
  TowerFunctionTrainer trainer;
  trainer.tower = moving_cost(xs);
  auto rec = train(trainer, {moving_average_summary(), MergeAllSummaries()}, 1, 3);
  EXPECT_EQ(rec->steps_of("cost"), (std::vector<int64_t>{1, 2, 3}));
  const auto values = rec->values_of("cost");
  ASSERT_EQ(values.size(), 3u);
  EXPECT_EQ(values[0], 4.0);
  // 0.95 * 0.05 * 4 + 0.05 * 8 over 1 - 0.95^2: the current step is included.
  EXPECT_FLOAT_EQ(values[1], (0.95 * 0.05 * 4 + 0.05 * 8) / (1 - 0.95 * 0.95));
  EXPECT_FLOAT_EQ(values[2], ema(xs, 3));
}

TEST(MergeAllSummaries, PeriodCountsLocalStepsAndRestartsEveryEpoch) {
  std::vector<double> xs(10);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<double>(i + 1);
  TowerFunctionTrainer trainer;
  trainer.tower = moving_cost(xs);
  auto rec = train(
      trainer, {moving_average_summary(), MergeAllSummaries(MergeAllSummariesOptions().period(2))},
      5, 2);
  // Local steps 1 and 3 ((ls + 1) % 2 == 0) and 4 (the last) of each epoch.
  EXPECT_EQ(rec->steps_of("cost"), (std::vector<int64_t>{2, 4, 5, 7, 9, 10}));
  const auto values = rec->values_of("cost");
  ASSERT_EQ(values.size(), 6u);
  const std::vector<size_t> t = {2, 4, 5, 7, 9, 10};
  for (size_t i = 0; i < t.size(); ++i) EXPECT_FLOAT_EQ(values[i], ema(xs, t[i])) << i;
}

TEST(MergeAllSummaries, RunWithOpPutsInAfterRunOfTheDueStep) {
  auto trace = std::make_shared<Trace>();
  TowerFunctionTrainer trainer;
  trainer.tower = moving_cost({1, 2, 3, 4, 5, 6});
  trainer.train({moving_average_summary(), std::make_shared<StepRecorder>(trace),
                 MergeAllSummaries(MergeAllSummariesOptions().period(2))},
                {std::make_shared<Recorder>(trace)}, 3, 1, 1);
  EXPECT_EQ(*trace, (Trace{"after_run gs=1", "trigger_step gs=1",  //
                           "after_run gs=2", "put cost gs=2", "trigger_step gs=2", "after_run gs=3",
                           "put cost gs=3", "trigger_step gs=3", "trigger_epoch gs=3"}));
}

TEST(MergeAllSummaries, RunAlonePutsTheDueStepsSummaryAtTriggerStepAndTrigger) {
  auto trace = std::make_shared<Trace>();
  const std::vector<double> xs = {1, 2, 3, 4, 5, 6, 7, 8};
  TowerFunctionTrainer trainer;
  trainer.tower = moving_cost(xs);
  auto cb = MergeAllSummaries(MergeAllSummariesOptions().period(2).run_alone(true));
  EXPECT_EQ(cb->name(), "MergeAllSummaries_RunAlone");
  auto rec = std::make_shared<Recorder>(trace);
  trainer.train({moving_average_summary(), std::make_shared<StepRecorder>(trace), cb}, {rec}, 4, 1,
                1);
  // Period steps in trigger_step; the epoch's last step (also a period step: put twice, as in
  // tensorpack) again at trigger.
  EXPECT_EQ(*trace, (Trace{"after_run gs=1", "trigger_step gs=1",                   //
                           "after_run gs=2", "trigger_step gs=2", "put cost gs=2",  //
                           "after_run gs=3", "trigger_step gs=3",                   //
                           "after_run gs=4", "trigger_step gs=4", "put cost gs=4",  //
                           "trigger_epoch gs=4", "put cost gs=4"}));
  const auto values = rec->values_of("cost");
  ASSERT_EQ(values.size(), 3u);
  EXPECT_FLOAT_EQ(values[0], ema(xs, 2));
  EXPECT_FLOAT_EQ(values[1], ema(xs, 4));
  EXPECT_FLOAT_EQ(values[2], ema(xs, 4));
}

TEST(MergeAllSummaries, RunAloneWithoutPeriodPutsOnlyAtEpochEnds) {
  auto trace = std::make_shared<Trace>();
  const std::vector<double> xs = {1, 2, 3, 4, 5, 6};
  TowerFunctionTrainer trainer;
  trainer.tower = moving_cost(xs);
  auto rec = std::make_shared<Recorder>(trace);
  trainer.train({moving_average_summary(), std::make_shared<StepRecorder>(trace),
                 MergeAllSummaries(MergeAllSummariesOptions().run_alone(true))},
                {rec}, 3, 1, 2);
  EXPECT_EQ(rec->steps_of("cost"), (std::vector<int64_t>{3, 6}));
  EXPECT_EQ(std::vector<std::string>(trace->begin() + 6, trace->begin() + 8),
            (Trace{"trigger_epoch gs=3", "put cost gs=3"}));
  const auto values = rec->values_of("cost");
  ASSERT_EQ(values.size(), 2u);
  EXPECT_FLOAT_EQ(values[0], ema(xs, 3));
  EXPECT_FLOAT_EQ(values[1], ema(xs, 6));
}

TEST(MergeAllSummaries, RunAloneTriggerWithoutANewDueStepPutsNothing) {
  TowerFunctionTrainer trainer;
  trainer.tower = moving_cost({1, 2});
  auto cb = MergeAllSummaries(MergeAllSummariesOptions().run_alone(true));
  auto rec = train(trainer, {moving_average_summary(), cb}, 2, 1);
  ASSERT_EQ(rec->steps_of("cost"), (std::vector<int64_t>{2}));
  cb->trigger();  // e.g. a PeriodicTrigger at another moment: the summary was put already
  EXPECT_EQ(rec->steps_of("cost"), (std::vector<int64_t>{2}));
}

TEST(MergeAllSummaries, EveryDueHookedRunIsMaterialised) {
  TowerFunctionTrainer trainer;
  trainer.hooked_runs_per_step = 2;
  trainer.tower = moving_cost({1, 2, 3, 4});
  auto rec = train(trainer, {moving_average_summary(), MergeAllSummaries()}, 2, 1);
  // Local step 1 (the last) has two hooked runs (global steps 2 -> 3 -> 4).
  EXPECT_EQ(rec->steps_of("cost"), (std::vector<int64_t>{3, 4}));
}

TEST(MergeAllSummaries, WithoutMovingAverageSummaryTheAverageIsNeverUpdatedNorPut) {
  TowerFunctionTrainer trainer;
  trainer.tower = [](TowerContext& t, int64_t gs) {
    t.add_moving_summary("cost", scalar(static_cast<double>(gs)));
    t.summary_scalar("lr", scalar(0.5));
  };
  auto rec = train(trainer, {MergeAllSummaries()}, 2, 2);
  EXPECT_TRUE(rec->steps_of("cost").empty());
  EXPECT_EQ(rec->steps_of("lr"), (std::vector<int64_t>{2, 4}));
  ASSERT_EQ(trainer.tower_registry().moving_averages().size(), 1u);
  EXPECT_EQ(trainer.tower_registry().moving_averages()[0].updates, 0);
}

TEST(MergeAllSummaries, NothingRecordedPutsNothing) {
  TowerFunctionTrainer trainer;
  auto rec = train(trainer, {moving_average_summary(), MergeAllSummaries()}, 2, 2);
  EXPECT_TRUE(rec->scalars.empty());
  EXPECT_TRUE(rec->summaries.empty());
}

// ---- what the summary holds ----

TEST(MergeAllSummaries, NormalisesScalarTagsAndSendsHistogramsAndPngImages) {
  const at::Tensor weights = at::tensor({1.0, 2.0, 3.0, 4.0}, at::kFloat);
  at::Tensor batch = at::zeros({4, 5, 7, 3}, at::kByte);
  batch.select(0, 1).fill_(200);
  TowerFunctionTrainer trainer;
  trainer.tower = [&](TowerContext& t, int64_t gs) {
    t.summary_scalar("lr", scalar(0.25));
    t.summary_histogram("w", weights);
    t.summary_image("img", batch, /*max_outputs=*/2);
    t.summary_image("one", at::full({5, 7}, 9.0), /*max_outputs=*/1);
    t.add_moving_summary("cost", scalar(gs == 0 ? 2.0 : 8.0));
  };
  auto rec = train(trainer, {moving_average_summary(), MergeAllSummaries()}, 1, 1);

  // Scalars reach process_scalar with the normalised tags.
  ASSERT_EQ(rec->scalars.size(), 2u);
  EXPECT_EQ(rec->scalars[0].name, "lr");
  EXPECT_EQ(rec->scalars[0].value, 0.25);
  EXPECT_EQ(rec->scalars[1].name, "cost");
  EXPECT_EQ(rec->scalars[1].value, 2.0);

  ASSERT_EQ(rec->summaries.size(), 1u);
  EXPECT_EQ(rec->summaries[0].first, 1);
  const Summary& s = rec->summaries[0].second;
  EXPECT_EQ(tags_of(s), (std::vector<std::string>{"lr", "w-histogram", "img/image/0", "img/image/1",
                                                  "one/image", "cost"}));

  const SummaryValue& h = s.values[1];
  EXPECT_EQ(h.kind, SummaryValue::Kind::kHistogram);
  EXPECT_EQ(h.histogram.num, 4);
  EXPECT_EQ(h.histogram.min, 1);
  EXPECT_EQ(h.histogram.max, 4);
  EXPECT_EQ(h.histogram.sum, 10);
  EXPECT_EQ(h.histogram.sum_squares, 30);
  EXPECT_EQ(h.histogram.bucket_limit, make_histogram(weights).bucket_limit);
  EXPECT_EQ(h.histogram.bucket, make_histogram(weights).bucket);

  for (size_t i = 2; i <= 4; ++i) {
    const SummaryValue& v = s.values[i];
    EXPECT_EQ(v.kind, SummaryValue::Kind::kImage);
    EXPECT_EQ(v.image.height, 5);
    EXPECT_EQ(v.image.width, 7);
    EXPECT_EQ(v.image.colorspace, i == 4 ? 1 : 3);
    const std::string& png = v.image.encoded_png;
    ASSERT_GT(png.size(), 24u);
    EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
    EXPECT_EQ(png.substr(12, 4), "IHDR");
    // IHDR: width then height, big-endian.
    EXPECT_EQ(png.substr(16, 8), std::string("\0\0\0\x07\0\0\0\x05", 8));
  }
  EXPECT_NE(s.values[2].image.encoded_png, s.values[3].image.encoded_png);  // 0s vs 200s
}

TEST(MergeAllSummaries, ASummaryNotRecordedInTheDueStepIsLeftOut) {
  TowerFunctionTrainer trainer;
  trainer.tower = [](TowerContext& t, int64_t gs) {
    if (gs == 0) t.summary_histogram("early", at::ones({3}));
    t.summary_scalar("lr", scalar(1.0));
  };
  auto rec = train(trainer, {MergeAllSummaries()}, 2, 1);
  ASSERT_EQ(rec->summaries.size(), 1u);
  EXPECT_EQ(tags_of(rec->summaries[0].second), (std::vector<std::string>{"lr"}));
}

TEST(MergeAllSummaries, AnImageThatIsNotAnImageNamesTheSummary) {
  TowerFunctionTrainer trainer;
  trainer.tower = [](TowerContext& t, int64_t) { t.summary_image("img", at::zeros({5})); };
  EXPECT_EQ(message_of<CallbackError>([&] { train(trainer, {MergeAllSummaries()}, 1, 1); }),
            "Callback MergeAllSummaries_RunWithOp failed in after_run: MergeAllSummaries: image "
            "summary 'img': array of shape [5] is not an image");
}

TEST(MergeAllSummaries, ANanInAHistogramNamesTheSummary) {
  TowerFunctionTrainer trainer;
  trainer.tower = [](TowerContext& t, int64_t) {
    t.summary_histogram("w", at::tensor({1.0, std::nan("")}));
  };
  EXPECT_EQ(message_of<CallbackError>([&] { train(trainer, {MergeAllSummaries()}, 1, 1); }),
            "Callback MergeAllSummaries_RunWithOp failed in after_run: MergeAllSummaries: "
            "histogram summary 'w-histogram': make_histogram: Nan in summary histogram");
}

TEST(MovingAverageSummary, ANonScalarMovingSummaryIsAnErrorNamingIt) {
  TowerFunctionTrainer trainer;
  trainer.tower = [](TowerContext& t, int64_t) { t.add_moving_summary("cost", at::ones({2})); };
  EXPECT_EQ(message_of<std::invalid_argument>([&] {
              train(trainer, {moving_average_summary(), MergeAllSummaries()}, 1, 1);
            }),
            "TowerContext::add_moving_summary('cost'): the tensor must be a scalar, but has shape "
            "[2]");
}

// ---- logs ----

TEST(MergeAllSummaries, LogsTheSizesOnceAfterTheFirstStep) {
  TowerFunctionTrainer trainer;
  trainer.tower = [](TowerContext& t, int64_t) {
    t.summary_scalar("lr", scalar(1.0));
    t.summary_histogram("w", at::ones({3}));
    t.add_moving_summary("cost", scalar(1.0));
  };
  LogCapture log;
  train(trainer, {moving_average_summary(), MergeAllSummaries()}, 2, 2);
  EXPECT_EQ(count_lines(log,
                        "[MovingAverageSummary] 1 operations in collection "
                        "'MOVING_SUMMARY_OPS' will be run with session hooks."),
            1u);
  EXPECT_EQ(count_lines(log, "Summarizing collection 'summaries' of size 3."), 1u);
}

// ---- MovingAverageSummary with another collection ----

TEST(MovingAverageSummary, AnotherCollectionRunsItsGraphClosuresAndLeavesTheTowerAlone) {
  int runs = 0;
  TowerFunctionTrainer trainer;
  trainer.tower = moving_cost({1, 2, 3, 4});
  trainer.graph().add_to_collection("MY_EMAS", [&] { ++runs; });
  LogCapture log;
  auto rec = train(trainer,
                   {std::make_shared<MovingAverageSummary>("MY_EMAS"), MergeAllSummaries()}, 2, 2);
  EXPECT_EQ(runs, 4);
  EXPECT_TRUE(rec->steps_of("cost").empty());
  EXPECT_EQ(trainer.tower_registry().moving_averages()[0].updates, 0);
  EXPECT_TRUE(log.contains(
      "[MovingAverageSummary] 1 operations in collection 'MY_EMAS' will be run with session "
      "hooks."));
}

TEST(MovingAverageSummary, IsChiefOnly) {
  EXPECT_TRUE(MovingAverageSummary().chief_only());
  EXPECT_TRUE(MergeAllSummaries()->chief_only());
  EXPECT_TRUE(SimpleMovingAverage({"cost"}, 2).chief_only());
  EXPECT_EQ(MovingAverageSummary().collection(), "MOVING_SUMMARY_OPS");
}

// ---- argument errors ----

TEST(SummaryCallbacks, BadArgumentsAreClearErrors) {
  EXPECT_EQ(message_of<std::invalid_argument>([] { MovingAverageSummary(""); }),
            "MovingAverageSummary: collection is empty; pass a Graph collection name (the "
            "default, 'MOVING_SUMMARY_OPS', holds the tower's moving averages)");
  EXPECT_EQ(message_of<std::invalid_argument>(
                [] { MergeAllSummaries(MergeAllSummariesOptions().period(-1)); }),
            "MergeAllSummaries: period must be >= 0 (0: only at the end of each epoch), got -1");
  EXPECT_EQ(message_of<std::invalid_argument>(
                [] { MergeAllSummaries(MergeAllSummariesOptions().key("train")); }),
            "MergeAllSummaries: key 'train' is not a summary collection; the training tower "
            "records every summary in 'summaries', so pass key 'summaries' (the default)");
  EXPECT_EQ(message_of<std::invalid_argument>(
                [] { MergeAllSummaries_RunAlone(MergeAllSummariesOptions().period(-2)); }),
            "MergeAllSummaries: period must be >= 0 (0: only at the end of each epoch), got -2");
  EXPECT_EQ(message_of<std::invalid_argument>([] { SimpleMovingAverage({}, 3); }),
            "SimpleMovingAverage: names is empty; pass the names of scalar tensors the step "
            "publishes, e.g. {\"cost\"}");
  EXPECT_EQ(message_of<std::invalid_argument>([] {
              SimpleMovingAverage({"cost", ""}, 3);
            }),
            "SimpleMovingAverage: name 1 is empty; pass the names of scalar tensors the step "
            "publishes");
  EXPECT_EQ(message_of<std::invalid_argument>([] {
              SimpleMovingAverage({"a", "b", "a"}, 3);
            }),
            "SimpleMovingAverage: name 'a' is given twice; list each tensor once");
  EXPECT_EQ(message_of<std::invalid_argument>([] { SimpleMovingAverage({"cost"}, 0); }),
            "SimpleMovingAverage: window_size must be >= 1 (the number of steps averaged), got 0");
}

// ---- SimpleMovingAverage ----

// Publishes "cost" = gs + 1 and "acc" = 10 * (gs + 1).
void publish_cost_and_acc(TowerContext& t, int64_t gs) {
  t.output("cost", scalar(static_cast<double>(gs + 1)));
  t.output("acc", scalar(10.0 * static_cast<double>(gs + 1)));
}

TEST(SimpleMovingAverage, PutsTheWindowMeanWhenTheGlobalStepIsAMultipleOfTheWindow) {
  TowerFunctionTrainer trainer;
  trainer.tower = publish_cost_and_acc;
  auto rec = train(
      trainer, {std::make_shared<SimpleMovingAverage>(std::vector<std::string>{"cost", "acc"}, 3)},
      4, 2);
  EXPECT_EQ(rec->steps_of("cost/SMA"), (std::vector<int64_t>{3, 6}));
  EXPECT_EQ(rec->values_of("cost/SMA"), (std::vector<double>{2, 5}));  // (1+2+3)/3, (4+5+6)/3
  EXPECT_EQ(rec->steps_of("acc/SMA"), (std::vector<int64_t>{3, 6}));
  EXPECT_EQ(rec->values_of("acc/SMA"), (std::vector<double>{20, 50}));
  // One name after the other at the same step.
  ASSERT_EQ(rec->scalars.size(), 4u);
  EXPECT_EQ(rec->scalars[0].name, "cost/SMA");
  EXPECT_EQ(rec->scalars[1].name, "acc/SMA");
}

TEST(SimpleMovingAverage, AveragesTheRowsHeldWhenTheWindowIsNotFullYet) {
  TowerFunctionTrainer trainer;
  trainer.start_at(2);  // e.g. resumed: global step 4 comes after two rows
  trainer.tower = publish_cost_and_acc;
  auto rec = train(
      trainer, {std::make_shared<SimpleMovingAverage>(std::vector<std::string>{"cost"}, 4)}, 7, 1);
  // The steps ending at global steps 3..9 publish 3..9: puts at gs 4 (rows 3, 4: fewer than the
  // window) and 8 (rows 5, 6, 7, 8).
  EXPECT_EQ(rec->steps_of("cost/SMA"), (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(rec->values_of("cost/SMA"), (std::vector<double>{3.5, 6.5}));
}

TEST(SimpleMovingAverage, EveryHookedRunAddsARow) {
  TowerFunctionTrainer trainer;
  trainer.hooked_runs_per_step = 2;
  trainer.tower = publish_cost_and_acc;
  auto rec = train(
      trainer, {std::make_shared<SimpleMovingAverage>(std::vector<std::string>{"cost"}, 2)}, 2, 1);
  // Each step moves the global step by 2: puts after steps 1 (rows 1, 2) and 2 (rows 3, 4).
  EXPECT_EQ(rec->steps_of("cost/SMA"), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(rec->values_of("cost/SMA"), (std::vector<double>{1.5, 3.5}));
}

TEST(SimpleMovingAverage, ANonScalarTensorIsAnErrorNamingIt) {
  TowerFunctionTrainer trainer;
  trainer.tower = [](TowerContext& t, int64_t) { t.output("v", at::zeros({2, 3})); };
  EXPECT_EQ(message_of<CallbackError>([&] {
              train(trainer,
                    {std::make_shared<SimpleMovingAverage>(std::vector<std::string>{"v"}, 2)}, 1,
                    1);
            }),
            "Callback SimpleMovingAverage failed in after_run: SimpleMovingAverage: tensor 'v' "
            "must be a scalar, but has shape [2, 3]; publish a one-element tensor (e.g. .mean())");
}

TEST(SimpleMovingAverage, AnUnpublishedNameListsThePublishedOnes) {
  TowerFunctionTrainer trainer;
  trainer.tower = publish_cost_and_acc;
  EXPECT_THAT(message_of<std::exception>([&] {
                train(trainer,
                      {std::make_shared<SimpleMovingAverage>(std::vector<std::string>{"loss"}, 2)},
                      1, 1);
              }),
              HasSubstr("Callback SimpleMovingAverage asked for the tensor 'loss', but the step "
                        "does not publish it. Names the step publishes: 'acc', 'cost'"));
}

// ---- RunUpdateOps and the tower's update ops ----

TEST(RunUpdateOps, RunsTheTowersUpdateOpsOncePerStepAfterTheGraphCollection) {
  std::vector<std::string> order;
  TowerFunctionTrainer trainer;
  trainer.graph().add_to_collection(Graph::kUpdateOps, [&] { order.push_back("graph"); });
  trainer.tower = [&](TowerContext& t, int64_t gs) {
    t.add_update_op("counter", [&order, gs] { order.push_back(fmt::format("tower{}", gs)); });
  };
  LogCapture log;
  train(trainer, {std::make_shared<RunUpdateOps>()}, 2, 2);
  EXPECT_EQ(order, (std::vector<std::string>{"graph", "tower0", "graph", "tower1", "graph",
                                             "tower2", "graph", "tower3"}));
  EXPECT_EQ(count_lines(log, "Applying collection UPDATE_OPS of 1 ops."), 1u);
  EXPECT_EQ(count_lines(log, "Applying the training tower's update ops: counter."), 1u);
}

TEST(RunUpdateOps, AnUpdateOpRunsOnlyInTheStepsThatRecordIt) {
  int runs = 0;
  TowerFunctionTrainer trainer;
  trainer.tower = [&](TowerContext& t, int64_t gs) {
    if (gs % 2 == 1) t.add_update_op("odd", [&] { ++runs; });
    t.add_update_op("every", [&] { runs += 100; });
  };
  LogCapture log;
  train(trainer, {std::make_shared<RunUpdateOps>()}, 5, 1);
  EXPECT_EQ(runs, 502);
  // Logged once, at the first step that recorded any: "odd" came later.
  EXPECT_EQ(count_lines(log, "Applying the training tower's update ops:"), 1u);
  EXPECT_TRUE(log.contains("Applying the training tower's update ops: every."));
}

TEST(RunUpdateOps, AnotherCollectionLeavesTheTowersUpdateOpsAlone) {
  int runs = 0;
  TowerFunctionTrainer trainer;
  trainer.tower = [&](TowerContext& t, int64_t) { t.add_update_op("u", [&] { ++runs; }); };
  train(trainer, {std::make_shared<RunUpdateOps>("OTHER")}, 2, 1);
  EXPECT_EQ(runs, 0);
}

// ---- defaults ----

TEST(SummaryDefaults, DefaultCallbacksAreTensorpacksInItsOrder) {
  auto callbacks = DEFAULT_CALLBACKS();
  std::vector<std::string> names;
  for (const auto& cb : callbacks) names.push_back(cb->name());
  EXPECT_EQ(names, (std::vector<std::string>{"MovingAverageSummary", "ProgressBar",
                                             "MergeAllSummaries_RunWithOp", "RunUpdateOps"}));
}

TEST(SummaryDefaults, TrainWithDefaultsPutsTheCostAtEveryEpochEnd) {
  const std::vector<double> xs = {2, 4, 6, 8};
  TowerFunctionTrainer trainer;
  trainer.tower = moving_cost(xs);
  auto rec = std::make_shared<Recorder>();
  trainer.train_with_defaults(
      TrainOptions().monitors(std::vector<MonitorPtr>{rec}).steps_per_epoch(2).max_epoch(2));
  EXPECT_EQ(rec->steps_of("cost"), (std::vector<int64_t>{2, 4}));
  const auto values = rec->values_of("cost");
  ASSERT_EQ(values.size(), 2u);
  EXPECT_FLOAT_EQ(values[0], ema(xs, 2));
  EXPECT_FLOAT_EQ(values[1], ema(xs, 4));
}

// ---- end to end: stats.json and the event file ----

class SummaryFilesTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    testing::TempDirTest::SetUp();
    logger::set_logger_dir(dir().string());
  }
};

TEST_F(SummaryFilesTest, TheMovingCostLandsInStatsJsonAndTheEventFileAsCost) {
  const std::vector<double> xs = {4, 8};
  auto rec = std::make_shared<Recorder>();
  {
    TowerFunctionTrainer trainer;
    trainer.tower = [&](TowerContext& t, int64_t gs) {
      t.add_moving_summary("cost", scalar(xs.at(static_cast<size_t>(gs))));
      t.summary_image("img", at::zeros({2, 3, 3}, at::kByte), /*max_outputs=*/1);
    };
    trainer.train({moving_average_summary(), MergeAllSummaries()},
                  {std::make_shared<TFEventWriter>(), std::make_shared<JSONWriter>(), rec}, 1, 1,
                  2);
  }
  const auto values = rec->values_of("cost");
  ASSERT_EQ(values.size(), 2u);
  EXPECT_FLOAT_EQ(values[1], ema(xs, 2));
  EXPECT_EQ(read_text(dir() / "stats.json"),
            fmt::format(R"([{{"cost": 4.0, "epoch_num": 1, "global_step": 1}}, )"
                        R"({{"cost": {}, "epoch_num": 2, "global_step": 2}}])",
                        JSONWriter::format_value(values[1])));

  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir())) {
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) {
      files.push_back(e.path().string());
    }
  }
  ASSERT_EQ(files.size(), 1u);
  std::vector<std::string> seen;  // "step:tag"
  for (const auto& ev : testing::read_event_file(files[0])) {
    if (!ev.has_summary()) continue;
    for (const auto& v : ev.summary().value()) {
      seen.push_back(fmt::format("{}:{}", ev.step(), v.tag()));
      if (v.tag() == "cost" && ev.step() == 1) {
        EXPECT_EQ(v.simple_value(), 4.0f);
      }
      if (v.tag() == "img/image") {
        EXPECT_EQ(v.image().height(), 2);
        EXPECT_EQ(v.image().width(), 3);
      }
    }
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"1:img/image", "1:cost", "2:img/image", "2:cost"}));
}

// ---- LearningRateSummary ----

// A NoOpTrainer with SGD optimizers registered as SingleCostTrainer registers its own: "" with one
// group per rate in `rates`, and "learning_rate" bound to it (group 0 read, every group set).
struct RateTrainer {
  std::vector<at::Tensor> params;
  std::vector<std::unique_ptr<torch::optim::SGD>> optimizers;
  NoOpTrainer trainer;

  explicit RateTrainer(const std::vector<double>& rates) {
    trainer.set_handle_signals(false);
    torch::optim::SGD* opt = add_optimizer("", rates);
    trainer.graph().add_variable(
        "learning_rate", [opt] { return opt->param_groups().front().options().get_lr(); },
        [opt](double lr) {
          for (auto& group : opt->param_groups()) group.options().set_lr(lr);
        });
  }
  torch::optim::SGD* add_optimizer(const std::string& name, const std::vector<double>& rates) {
    std::vector<torch::optim::OptimizerParamGroup> groups;
    for (double rate : rates) {
      params.push_back(torch::zeros({1}, torch::requires_grad()));
      groups.emplace_back(std::vector<at::Tensor>{params.back()},
                          std::make_unique<torch::optim::SGDOptions>(rate));
    }
    optimizers.push_back(
        std::make_unique<torch::optim::SGD>(groups, torch::optim::SGDOptions(rates.front())));
    trainer.graph().add_optimizer(name, optimizers.back().get());
    return optimizers.back().get();
  }
  const Monitors::History& history(const std::string& name) const {
    return trainer.monitors().get_history(name);
  }
};

// The rate each epoch trained with, at its end, whether the summary runs before or after the
// setter that changes it there.
TEST(LearningRateSummary, PutsTheRateEachEpochTrainedWithWhateverTheOrder) {
  for (const bool summary_first : {true, false}) {
    SCOPED_TRACE(summary_first ? "summary first" : "setter first");
    RateTrainer t({0.5});
    auto summary = std::make_shared<LearningRateSummary>();
    auto setter = std::make_shared<ScheduledHyperParamSetter>(
        "learning_rate", ScheduledHyperParamSetter::Schedule{{1, 0.125}, {3, 0.0625}});
    t.trainer.train(summary_first ? std::vector<CallbackPtr>{summary, setter}
                                  : std::vector<CallbackPtr>{setter, summary},
                    {}, 2, 1, 4);
    EXPECT_EQ(summary->names(), std::vector<std::string>{"learning_rate"});
    EXPECT_EQ(t.history("learning_rate"),
              (Monitors::History{{2, 0.5}, {4, 0.125}, {6, 0.125}, {8, 0.0625}}));
  }
}

// every_step: after every step, the rate that step ran with (a step-based linear schedule changes
// it in trigger_step); nothing at the epoch ends.
TEST(LearningRateSummary, EveryStepPutsTheRateOfEachStep) {
  RateTrainer t({0.125});
  auto summary =
      std::make_shared<LearningRateSummary>(LearningRateSummaryOptions().every_step(true));
  auto setter = std::make_shared<ScheduledHyperParamSetter>(
      "learning_rate", ScheduledHyperParamSetter::Schedule{{2, 0.25}, {6, 0.75}},
      ScheduledHyperParamSetterOptions().interp("linear").step_based(true));
  t.trainer.train({setter, summary}, {}, 4, 1, 2);
  EXPECT_EQ(t.history("learning_rate"), (Monitors::History{{1, 0.125},
                                                           {2, 0.125},
                                                           {3, 0.25},
                                                           {4, 0.375},
                                                           {5, 0.5},
                                                           {6, 0.625},
                                                           {7, 0.75},
                                                           {8, 0.75}}));
}

TEST(LearningRateSummary, NamesEveryGroupOfEveryOptimizer) {
  RateTrainer t({0.5, 0.25});
  t.add_optimizer("gen", {0.125});
  t.add_optimizer("discrim", {0.0625, 0.03125});
  auto summary = std::make_shared<LearningRateSummary>();
  t.trainer.train({summary}, {}, 1, 1, 1);
  EXPECT_EQ(summary->names(),
            (std::vector<std::string>{"learning_rate", "learning_rate/group1", "learning_rate/gen",
                                      "learning_rate/discrim", "learning_rate/discrim/group1"}));
  EXPECT_EQ(t.history("learning_rate"), (Monitors::History{{1, 0.5}}));
  EXPECT_EQ(t.history("learning_rate/group1"), (Monitors::History{{1, 0.25}}));
  EXPECT_EQ(t.history("learning_rate/gen"), (Monitors::History{{1, 0.125}}));
  EXPECT_EQ(t.history("learning_rate/discrim"), (Monitors::History{{1, 0.0625}}));
  EXPECT_EQ(t.history("learning_rate/discrim/group1"), (Monitors::History{{1, 0.03125}}));
}

// A group added during training is named and put from the next put on.
TEST(LearningRateSummary, AGroupAddedDuringTrainingIsPutToo) {
  RateTrainer t({0.5});
  auto adder = std::make_shared<testing::ActionCallback>();
  adder->before_epoch_fn = [&t](testing::ActionCallback& self) {
    if (self.epoch_num() != 2) return;
    t.params.push_back(torch::zeros({1}, torch::requires_grad()));
    t.optimizers.front()->add_param_group(torch::optim::OptimizerParamGroup(
        {t.params.back()}, std::make_unique<torch::optim::SGDOptions>(0.25)));
  };
  auto summary = std::make_shared<LearningRateSummary>();
  t.trainer.train({adder, summary}, {}, 1, 1, 2);
  EXPECT_EQ(summary->names(), (std::vector<std::string>{"learning_rate", "learning_rate/group1"}));
  EXPECT_EQ(t.history("learning_rate"), (Monitors::History{{1, 0.5}, {2, 0.5}}));
  EXPECT_EQ(t.history("learning_rate/group1"), (Monitors::History{{2, 0.25}}));
}

TEST(LearningRateSummary, WithoutAnOptimizerSetupFails) {
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  EXPECT_EQ(
      message_of([&] { trainer.train({std::make_shared<LearningRateSummary>()}, {}, 1, 1, 1); }),
      "Callback LearningRateSummary failed in setup_graph: LearningRateSummary: the trainer "
      "has no optimizer (graph().optimizers() is empty); register yours with "
      "graph().add_optimizer(name, optimizer), as SingleCostTrainer does");
}

// Options without get_lr (a custom optimizer's): refused at setup, naming the group.
TEST(LearningRateSummary, AGroupWithoutALearningRateFailsSetup) {
  struct NoRateOptions : torch::optim::OptimizerCloneableOptions<NoRateOptions> {};
  class NoRateOptimizer : public torch::optim::Optimizer {
   public:
    explicit NoRateOptimizer(std::vector<at::Tensor> params)
        : Optimizer(std::move(params), std::make_unique<NoRateOptions>()) {}
    at::Tensor step(LossClosure /*closure*/) override { return {}; }
  };
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  NoRateOptimizer opt({torch::zeros({1}, torch::requires_grad())});
  trainer.graph().add_optimizer("custom", &opt);
  EXPECT_EQ(
      message_of([&] { trainer.train({std::make_shared<LearningRateSummary>()}, {}, 1, 1, 1); }),
      "Callback LearningRateSummary failed in setup_graph: LearningRateSummary: parameter "
      "group 0 of the optimizer 'custom' has no learning rate (its options do not "
      "implement OptimizerOptions::get_lr); register an optimizer whose options do, or "
      "leave LearningRateSummary out");
}

}  // namespace summary_test
}  // namespace trainpack
