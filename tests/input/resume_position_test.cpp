// Exact resume of the input sources: the state of FeedInput's and QueueInput's callback
// is (pass, position) of the batches the trainer consumed; a source given that state delivers
// exactly the batches an uninterrupted source delivers from there, without reading the skipped
// ones; flows that cannot seek are refused at restore time.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "support/batches.h"
#include "support/errors.h"
#include "support/source_trainer.h"
#include "trainpack/core/state.h"
#include "trainpack/core/trainer.h"
#include "trainpack/input/dataflow.h"
#include "trainpack/input/fashion_mnist.h"
#include "trainpack/input/input_source.h"
#include "trainpack/input/parallel_map.h"
#include "trainpack/testing.h"

namespace trainpack {
namespace resume_position_test {

using testing::expect_same_batches;
using testing::kXYBatchSignature;
using testing::SourceTrainer;
using testing::wait_until;
using testing::xy_points;

using testing::ActionCallback;
using ::testing::HasSubstr;
using testing::message_of;

using Kind = testing::SourceKind;
using testing::make_source;

CallbackState position_state(int64_t pass, int64_t position) {
  return {{"pass", at::scalar_tensor(pass, at::kLong)},
          {"position", at::scalar_tensor(position, at::kLong)}};
}

std::pair<int64_t, int64_t> as_pair(const CallbackState& s) {
  return {s.at("pass").item<int64_t>(), s.at("position").item<int64_t>()};
}

// Trains `steps` steps (one epoch) over a new source of `kind` on `flow`, restored from `from`
// when given; returns the batches, and the state of the position callback at the end in `state`.
std::vector<std::vector<at::Tensor>> take(Kind kind, DataFlowPtr flow, const InputSignature& sig,
                                          int64_t steps, const std::optional<CallbackState>& from,
                                          CallbackState* state = nullptr,
                                          std::vector<CallbackPtr> callbacks = {}) {
  SourceTrainer trainer(make_source(kind, std::move(flow)), sig);
  trainer.setup_callbacks(callbacks, {});
  if (from) trainer.position_callback().load_state(*from);
  trainer.initialize();
  trainer.main_loop(steps, 1, 1);
  if (state != nullptr) *state = trainer.position_callback().state();
  return trainer.batches;
}

// A flow that counts the datapoints its inner list produces (to show that seek reads none).
class CountingList : public DataFromList {
 public:
  using DataFromList::DataFromList;
  int64_t produced = 0;  // read by the test after the source's thread was joined

 protected:
  std::optional<Datapoint> _next() override {
    auto dp = DataFromList::_next();
    if (dp) ++produced;
    return dp;
  }
};

class ResumableSources : public ::testing::TestWithParam<Kind> {
 protected:
  std::string source_name() const { return GetParam() == Kind::kFeed ? "FeedInput" : "QueueInput"; }
};

INSTANTIATE_TEST_SUITE_P(ResumePosition, ResumableSources,
                         ::testing::Values(Kind::kFeed, Kind::kQueue),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           return info.param == Kind::kFeed ? "FeedInput" : "QueueInput";
                         });

TEST_P(ResumableSources, ResumedAtAnyStepDeliversTheBatchesOfAnUninterruptedSource) {
  // 10 shuffled datapoints in batches of 3: 3 batches a pass (the 10th datapoint is dropped),
  // each pass in its own order.
  auto flow = [] {
    return std::make_shared<BatchData>(
        std::make_shared<DataFromList>(xy_points(10), DataFromListOptions().shuffle(true).seed(3)),
        3);
  };
  const int64_t total = 14;
  const auto full = take(GetParam(), flow(), kXYBatchSignature, total, std::nullopt);
  ASSERT_EQ(full.size(), 14u);
  for (int64_t k : {0, 1, 2, 3, 4, 6, 7, 9, 13}) {
    SCOPED_TRACE(k);
    CallbackState state;
    const auto first = take(GetParam(), flow(), kXYBatchSignature, k, std::nullopt, &state);
    // The pass of the last batch consumed and the batches consumed in it; after the last batch of
    // a pass (k = 3, 6, 9), the position is the pass's size.
    const std::pair<int64_t, int64_t> expected = k == 0
                                                     ? std::make_pair(int64_t{0}, int64_t{0})
                                                     : std::make_pair((k - 1) / 3, (k - 1) % 3 + 1);
    EXPECT_EQ(as_pair(state), expected);
    EXPECT_EQ(state.at("pass").scalar_type(), at::kLong);
    EXPECT_EQ(state.at("pass").dim(), 0);

    CallbackState end;
    const auto rest = take(GetParam(), flow(), kXYBatchSignature, total - k, state, &end);
    std::vector<std::vector<at::Tensor>> expected_rest(full.begin() + k, full.end());
    expect_same_batches(rest, expected_rest);
    EXPECT_EQ(as_pair(end), std::make_pair(int64_t{4}, int64_t{2}));  // as after 14 batches
  }
}

TEST_P(ResumableSources, ResumedOverMultiThreadMapDataDeliversTheBatchesOfAnUninterruptedSource) {
  // An augmentation that depends on the pass and the input's position, on 3 worker threads.
  auto flow = [] {
    auto list =
        std::make_shared<DataFromList>(xy_points(10), DataFromListOptions().shuffle(true).seed(3));
    auto augmented = std::make_shared<MultiThreadMapData>(
        list, 3,
        [](Datapoint dp, const MapContext& c) -> std::optional<Datapoint> {
          dp[0] = at::add(dp[0], static_cast<double>(c.pass * 100 + c.position));
          return dp;
        },
        MultiThreadMapDataOptions().buffer_size(4));
    return std::make_shared<BatchData>(augmented, 3);
  };
  const int64_t total = 14;
  const auto full = take(GetParam(), flow(), kXYBatchSignature, total, std::nullopt);
  ASSERT_EQ(full.size(), 14u);
  for (int64_t k : {1, 3, 5, 13}) {
    SCOPED_TRACE(k);
    CallbackState state;
    take(GetParam(), flow(), kXYBatchSignature, k, std::nullopt, &state);
    const auto rest = take(GetParam(), flow(), kXYBatchSignature, total - k, state);
    expect_same_batches(rest, std::vector<std::vector<at::Tensor>>(full.begin() + k, full.end()));
  }
}

TEST_P(ResumableSources, ResumingReadsNoneOfTheSkippedDatapoints) {
  auto list = std::make_shared<CountingList>(xy_points(12));
  const auto batches = take(GetParam(), std::make_shared<BatchData>(list, 2), kXYBatchSignature, 2,
                            position_state(3, 5));
  // Pass 3 was seeked to batch 5 (datapoint 10): its last batch, then pass 4's first.
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_TRUE(batches[0][1].equal(at::tensor({10, 11}, at::kLong)));
  EXPECT_TRUE(batches[1][1].equal(at::tensor({0, 1}, at::kLong)));
  if (GetParam() == Kind::kFeed) {  // QueueInput prefetches more
    EXPECT_EQ(list->produced, 4);   // only what was delivered
    EXPECT_EQ(list->pass(), 4);
  }
}

TEST_P(ResumableSources, APositionEqualToThePassSizeContinuesWithTheNextPass) {
  // With remainder: batches of 3, 3 and 1 datapoints; position 3 is the end of the pass.
  auto flow = [] {
    return std::make_shared<BatchData>(
        std::make_shared<DataFromList>(xy_points(7), DataFromListOptions().shuffle(true).seed(11)),
        3,
        /*remainder=*/true);
  };
  const auto full = take(GetParam(), flow(), kXYBatchSignature, 8, std::nullopt);
  ASSERT_EQ(full[2][1].numel(), 1);  // the short batch
  for (int64_t k : {2, 3, 5, 6}) {
    SCOPED_TRACE(k);
    CallbackState state;
    take(GetParam(), flow(), kXYBatchSignature, k, std::nullopt, &state);
    EXPECT_EQ(as_pair(state), std::make_pair((k - 1) / 3, (k - 1) % 3 + 1));
    const auto rest = take(GetParam(), flow(), kXYBatchSignature, 8 - k, state);
    expect_same_batches(rest, std::vector<std::vector<at::Tensor>>(full.begin() + k, full.end()));
  }
}

TEST_P(ResumableSources, MapDataOverAListResumesToo) {
  auto flow = [] {
    return std::make_shared<MapData>(
        std::make_shared<BatchData>(std::make_shared<DataFromList>(
                                        xy_points(9), DataFromListOptions().shuffle(true).seed(5)),
                                    2),
        [](Datapoint dp) -> std::optional<Datapoint> {
          dp[0] = dp[0] * 2;
          return dp;
        });
  };
  const auto full = take(GetParam(), flow(), kXYBatchSignature, 11, std::nullopt);
  CallbackState state;
  take(GetParam(), flow(), kXYBatchSignature, 6, std::nullopt, &state);
  EXPECT_EQ(as_pair(state), std::make_pair(int64_t{1}, int64_t{2}));
  expect_same_batches(take(GetParam(), flow(), kXYBatchSignature, 5, state),
                      std::vector<std::vector<at::Tensor>>(full.begin() + 6, full.end()));
}

// A flow that cannot seek does not block a resume: the checkpoint's position is not restored,
// a warning names the flow, and the data starts from its beginning (tensorpack's behaviour).
// resume_at, called directly, refuses it.
TEST_P(ResumableSources, AFlowThatCannotSeekStartsFromItsBeginningWithAWarning) {
  // Datapoint k has the label k: the batches show where the data started. `batched`: each
  // datapoint is a batch of one.
  auto generator = [](bool batched = true) {
    auto next = std::make_shared<int64_t>(0);
    return std::make_shared<DataFromGenerator>(
        [next, batched]() -> std::optional<Datapoint> {
          const at::Tensor label = at::scalar_tensor((*next)++, at::kLong);
          if (batched) return Datapoint{at::zeros({1, 2}), label.reshape({1})};
          return Datapoint{at::zeros({2}), label};
        },
        10);
  };
  const std::string who = source_name();
  {
    testing::LogCapture log;
    const auto batches = take(GetParam(), generator(), kXYBatchSignature, 2, position_state(1, 2));
    ASSERT_EQ(batches.size(), 2u);
    EXPECT_TRUE(batches[0][1].equal(at::tensor({0}, at::kLong)));
    EXPECT_TRUE(batches[1][1].equal(at::tensor({1}, at::kLong)));
    EXPECT_TRUE(log.contains(
        "WRN " + who +
        ": the checkpoint's data position (batch 2 of pass 1) is not restored: the dataflow "
        "DataFromGenerator cannot seek; the data starts from its beginning (as in tensorpack). "
        "For an exact resume use a seekable flow"));
  }
  {
    testing::LogCapture log;
    const auto batches = take(GetParam(), std::make_shared<BatchData>(generator(false), 2),
                              kXYBatchSignature, 1, position_state(0, 1));
    ASSERT_EQ(batches.size(), 1u);
    EXPECT_TRUE(batches[0][1].equal(at::tensor({0, 1}, at::kLong)));
    EXPECT_TRUE(
        log.contains("the dataflow BatchData cannot seek (DataFromGenerator inside it "
                     "cannot); the data starts from its beginning"));
  }
  {
    // The start of the data needs no seek: no warning.
    testing::LogCapture log;
    take(GetParam(), generator(), kXYBatchSignature, 1, position_state(0, 0));
    EXPECT_FALSE(log.contains("cannot seek"));
  }
  // Called directly, resume_at refuses the flow, naming it.
  auto direct = [&](auto source) {
    return message_of<std::invalid_argument>([&] { source->resume_at(InputPosition{1, 2}); });
  };
  const std::string refusal =
      ": cannot resume at batch 2 of pass 1: the dataflow DataFromGenerator cannot seek. Exact "
      "resume needs a seekable flow: DataFromList (or FashionMnist), and BatchData, MapData or "
      "MultiThreadMapData (strict) over one.";
  if (GetParam() == Kind::kFeed) {
    EXPECT_THAT(direct(std::make_shared<FeedInput>(generator())), HasSubstr("FeedInput" + refusal));
  } else {
    EXPECT_THAT(direct(std::make_shared<QueueInput>(generator())),
                HasSubstr("QueueInput" + refusal));
  }
}

TEST_P(ResumableSources, AStateThatDoesNotFitIsRefusedNamingTheEntry) {
  SourceTrainer trainer(
      make_source(GetParam(),
                  std::make_shared<BatchData>(std::make_shared<DataFromList>(xy_points(10)), 3)),
      kXYBatchSignature);
  trainer.setup_callbacks({}, {});
  Callback& cb = trainer.position_callback();
  const std::string who = source_name();
  EXPECT_EQ(message_of<std::invalid_argument>([&] { cb.load_state(position_state(0, 4)); }),
            who +
                ": cannot resume at batch 4 of pass 0: a pass of the dataflow BatchData has 3 "
                "batches; the checkpoint was saved with another dataflow (batch size or data)");
  EXPECT_EQ(message_of<std::invalid_argument>([&] { cb.load_state(position_state(-1, 0)); }),
            who + ": cannot resume at pass -1, batch 0: both must be >= 0");
  EXPECT_THAT(message_of<std::invalid_argument>([&] {
                cb.load_state({{"pass", at::scalar_tensor(int64_t{1}, at::kLong)}});
              }),
              HasSubstr(who + ": the saved state has no entry 'position'"));
  EXPECT_EQ(message_of<std::invalid_argument>([&] {
              cb.load_state({{"pass", at::scalar_tensor(1.0, at::kDouble)},
                             {"position", at::scalar_tensor(int64_t{1}, at::kLong)}});
            }),
            who +
                ": the saved state entry 'pass' should be a 0-d int64 tensor, but it is a 0-d "
                "Double tensor");
  CallbackState extra = position_state(0, 1);
  extra["index"] = at::scalar_tensor(int64_t{1}, at::kLong);
  EXPECT_THAT(message_of<std::invalid_argument>([&] { cb.load_state(extra); }),
              HasSubstr(who + ": the saved state has an entry 'index' that this callback does not "
                              "save (its entries: pass, position"));
  // Refused states changed nothing: training starts at the beginning.
  EXPECT_EQ(as_pair(cb.state()), std::make_pair(int64_t{0}, int64_t{0}));
  trainer.initialize();
  trainer.main_loop(1, 1, 1);
  EXPECT_TRUE(trainer.batches.at(0)[1].equal(at::tensor({0, 1, 2}, at::kLong)));
}

TEST(ResumePosition, QueueInputCountsTheBatchesConsumedNotThosePrefetched) {
  // A slow consumer: before each step's batch, the producer has filled the queue (capacity 50).
  const int64_t steps = 5;
  auto source = std::make_shared<QueueInput>(std::make_shared<DataFromList>(xy_points(200)));
  SourceTrainer trainer(source, {InputDesc("x", {2}), InputDesc("y", {}, at::kLong)});
  auto slow = std::make_shared<ActionCallback>();
  std::optional<CallbackState> at_last_step;
  slow->before_run_fn = [&](ActionCallback&) {
    EXPECT_TRUE(wait_until([&] { return source->queued() == 50; }));
  };
  slow->trigger_step_fn = [&](ActionCallback& self) {
    if (self.global_step() != steps) return;
    EXPECT_TRUE(wait_until([&] { return source->queued() == 50; }));  // 55 produced by now
    at_last_step = trainer.position_callback().state();
  };
  trainer.setup_callbacks({slow}, {});
  trainer.initialize();
  trainer.main_loop(steps, 1, 1);
  ASSERT_TRUE(at_last_step.has_value());
  EXPECT_EQ(as_pair(*at_last_step), std::make_pair(int64_t{0}, int64_t{5}));
  EXPECT_EQ(source->consumed().position, 5);

  // Resumed from it, the next batch is datapoint 5 (not 55).
  const auto rest = take(Kind::kQueue, std::make_shared<DataFromList>(xy_points(200)),
                         {InputDesc("x", {2}), InputDesc("y", {}, at::kLong)}, 3, *at_last_step);
  ASSERT_EQ(rest.size(), 3u);
  EXPECT_EQ(rest[0][1].item<int64_t>(), 5);
  EXPECT_EQ(rest[2][1].item<int64_t>(), 7);
}

TEST(ResumePosition, ResumeAtIsRefusedOnceTheSourceHasStarted) {
  auto queue = std::make_shared<QueueInput>(std::make_shared<DataFromList>(xy_points(4)));
  {
    SourceTrainer trainer(queue, {InputDesc("x", {2}), InputDesc("y", {}, at::kLong)});
    trainer.train({}, {}, 2, 1, 1);
  }
  EXPECT_EQ(message_of<std::logic_error>([&] {
              queue->resume_at({0, 1});
            }),
            "QueueInput::resume_at called after start(); a restore happens before training");

  auto feed = std::make_shared<FeedInput>(std::make_shared<DataFromList>(xy_points(4)));
  SourceTrainer trainer(feed, {InputDesc("x", {2}), InputDesc("y", {}, at::kLong)});
  trainer.train({}, {}, 2, 1, 1);
  EXPECT_EQ(feed->consumed().position, 2);
  EXPECT_EQ(message_of<std::logic_error>([&] {
              feed->resume_at({0, 1});
            }),
            "FeedInput::resume_at called after the first batch; a restore happens before training");
}

TEST(ResumePosition, QueueInputStateHoldsTheQueueSizeAverage) {
  const InputSignature sig = {InputDesc("x", {2}), InputDesc("y", {}, at::kLong)};
  CallbackState saved;
  {
    SourceTrainer trainer(
        std::make_shared<QueueInput>(std::make_shared<DataFromList>(xy_points(20))), sig);
    trainer.train({}, {}, 6, 1, 1);
    ASSERT_EQ(trainer.source_callbacks.at(1)->name(), "QueueInput/queue_size");
    EXPECT_TRUE(trainer.source_callbacks.at(1)->state().empty());  // kept by "QueueInput"
    saved = trainer.position_callback().state();
  }
  EXPECT_EQ(saved.at("queue_size_updates").item<int64_t>(), 6);
  EXPECT_EQ(saved.at("queue_size_biased").scalar_type(), at::kDouble);
  SourceTrainer trainer(std::make_shared<QueueInput>(std::make_shared<DataFromList>(xy_points(20))),
                        sig);
  trainer.setup_callbacks({}, {});
  trainer.position_callback().load_state(saved);
  const CallbackState back = trainer.position_callback().state();
  EXPECT_TRUE(back.at("queue_size_biased").equal(saved.at("queue_size_biased")));
  EXPECT_TRUE(back.at("queue_size_updates").equal(saved.at("queue_size_updates")));
  CallbackState bad = saved;
  bad["queue_size_updates"] = at::scalar_tensor(int64_t{-1}, at::kLong);
  EXPECT_EQ(message_of<std::invalid_argument>([&] { trainer.position_callback().load_state(bad); }),
            "QueueInput: the saved state entry 'queue_size_updates' is -1; expected >= 0");
  bad.erase("queue_size_biased");
  EXPECT_THAT(
      message_of<std::invalid_argument>([&] { trainer.position_callback().load_state(bad); }),
      HasSubstr("QueueInput: the saved state has no entry 'queue_size_biased'"));
  // Without the average (a state written by hand): the position alone.
  trainer.position_callback().load_state(position_state(0, 3));
  EXPECT_EQ(trainer.position_callback().state().at("queue_size_updates").item<int64_t>(), 6);
}

// Through the trainer's whole state, as ModelSaver and SaverRestore carry it (callback entries
// under callback/<name>/, restored by restore_training_state).
TEST_P(ResumableSources, ThroughTheTrainingState) {
  auto flow = [] {
    return std::make_shared<BatchData>(
        std::make_shared<DataFromList>(xy_points(10), DataFromListOptions().shuffle(true).seed(9)),
        2);
  };
  const auto full = take(GetParam(), flow(), kXYBatchSignature, 12, std::nullopt);
  TensorMap state;
  {
    SourceTrainer trainer(make_source(GetParam(), flow()), kXYBatchSignature);
    trainer.train({}, {}, 7, 1, 1);
    state = collect_training_state(trainer);
  }
  EXPECT_EQ(state.at("callback/" + source_name() + "/pass").item<int64_t>(), 1);
  EXPECT_EQ(state.at("callback/" + source_name() + "/position").item<int64_t>(), 2);
  SourceTrainer trainer(make_source(GetParam(), flow()), kXYBatchSignature);
  trainer.setup_callbacks({}, {});
  restore_training_state(trainer, state, RestoreOptions().restore_counters(false));
  trainer.initialize();
  trainer.main_loop(5, 1, 1);
  expect_same_batches(trainer.batches,
                      std::vector<std::vector<at::Tensor>>(full.begin() + 7, full.end()));
}

// The main job's flow over the real data: BatchData over shuffled Fashion-MNIST.
TEST(ResumePosition, FashionMnistBatchesResumeExactly) {
  if (!std::filesystem::exists(std::string(kFashionMnistDir) + "/t10k-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST is not installed in " << kFashionMnistDir
                 << " (Debian package dataset-fashion-mnist)";
  }
  const auto options = FashionMnistOptions().shuffle(true).seed(42);
  auto mnist = std::make_shared<FashionMnist>("test", kFashionMnistDir, options);
  const int64_t batch = 64;
  auto flow = std::make_shared<BatchData>(mnist, batch);
  ASSERT_TRUE(flow->seekable());
  const int64_t per_pass = *flow->size();  // 156
  const std::pair<at::Tensor, at::Tensor> data = FashionMnist::read("test");
  const at::Tensor& images = data.first;
  const at::Tensor& labels = data.second;
  // The k-th batch of pass p, from the pass's order.
  auto expected = [&](int64_t pass, int64_t k) {
    const auto order = mnist->order_of_pass(pass);
    const at::Tensor index =
        at::tensor(std::vector<int64_t>(order.begin() + k * batch, order.begin() + (k + 1) * batch),
                   at::kLong);
    return std::vector<at::Tensor>{images.index_select(0, index), labels.index_select(0, index)};
  };
  const InputSignature sig = {InputDesc("input", {-1, 28, 28}),
                              InputDesc("label", {-1}, at::kLong)};
  for (Kind kind : {Kind::kFeed, Kind::kQueue}) {
    SCOPED_TRACE(kind == Kind::kFeed ? "FeedInput" : "QueueInput");
    // Mid-pass, and at the end of a pass (the next batch is the next pass's first).
    const auto mid =
        take(kind, std::make_shared<BatchData>(mnist, batch), sig, 2, position_state(1, 150));
    expect_same_batches(mid, {expected(1, 150), expected(1, 151)});
    const auto end =
        take(kind, std::make_shared<BatchData>(mnist, batch), sig, 1, position_state(1, per_pass));
    expect_same_batches(end, {expected(2, 0)});
  }
}

}  // namespace resume_position_test
}  // namespace trainpack
