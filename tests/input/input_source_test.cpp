#include "trainpack/input/input_source.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <ATen/Functions.h>
#include <torch/cuda.h>

#include "support/errors.h"
#include "support/source_trainer.h"
#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"

namespace trainpack {
namespace input_source_test {

using testing::SourceTrainer;
using testing::wait_until;

using testing::ActionCallback;
using testing::LogCapture;
using testing::message_of;

using Kind = testing::SourceKind;
using testing::make_source;

// True if the source's prefetch thread is running (always false for a FeedInput).
bool running(const InputSourcePtr& source) {
  auto* queue = dynamic_cast<QueueInput*>(source.get());
  return queue != nullptr && queue->running();
}

// Datapoints {x: scalar long i} for i in [0, n).
std::vector<Datapoint> scalars(int64_t n) {
  std::vector<Datapoint> points;
  for (int64_t i = 0; i < n; ++i) points.push_back({at::scalar_tensor(i, at::kLong)});
  return points;
}

const InputSignature kScalarSignature = {InputDesc("x", {}, at::kLong)};

// The first component of each batch, for scalar batches.
std::vector<int64_t> firsts(const std::vector<std::vector<at::Tensor>>& batches) {
  std::vector<int64_t> out;
  for (const auto& b : batches) out.push_back(b[0].item<int64_t>());
  return out;
}

// A generator of scalars 0, 1, ..., n-1 in its first pass and nothing after (the data ends).
DataFlowPtr finite_generator(int64_t n) {
  auto next = std::make_shared<std::atomic<int64_t>>(0);
  return std::make_shared<DataFromGenerator>([next, n]() -> std::optional<Datapoint> {
    const int64_t i = (*next)++;
    if (i >= n) return std::nullopt;
    return Datapoint{at::scalar_tensor(i, at::kLong)};
  });
}

// A callback that sets a flag in after_train.
std::shared_ptr<ActionCallback> after_train_flag(std::shared_ptr<bool> flag) {
  auto cb = std::make_shared<ActionCallback>();
  cb->after_train_fn = [flag](ActionCallback&) { *flag = true; };
  return cb;
}

// ---- behaviour shared by FeedInput and QueueInput ----

class BothSources : public ::testing::TestWithParam<Kind> {};

INSTANTIATE_TEST_SUITE_P(InputSource, BothSources, ::testing::Values(Kind::kFeed, Kind::kQueue),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           return info.param == Kind::kFeed ? "FeedInput" : "QueueInput";
                         });

TEST_P(BothSources, DeliversEveryDatapointInOrderPassAfterPass) {
  auto list =
      std::make_shared<DataFromList>(scalars(4), DataFromListOptions().shuffle(true).seed(7));
  auto source = make_source(GetParam(), list);
  EXPECT_EQ(source->size(), 4);
  SourceTrainer trainer(source, kScalarSignature);
  trainer.train({}, {}, /*steps_per_epoch=*/5, 1, /*max_epoch=*/2);

  std::vector<int64_t> expected;
  for (int64_t pass = 0; pass < 3; ++pass) {
    for (int64_t i : list->order_of_pass(pass)) expected.push_back(i);
  }
  expected.resize(10);  // 10 steps: passes 0 and 1, then half of pass 2
  EXPECT_NE(list->order_of_pass(0), list->order_of_pass(1));  // the passes do differ
  EXPECT_EQ(firsts(trainer.batches), expected);
  EXPECT_EQ(trainer.global_step(), 10);
  EXPECT_FALSE(running(source));
}

TEST_P(BothSources, BatchesWrapIntoTheNextPassWithExactValues) {
  std::vector<Datapoint> points;
  for (int64_t i = 0; i < 6; ++i) {
    points.push_back(
        {at::full({2}, static_cast<double>(i) + 0.5, at::kFloat), at::scalar_tensor(i, at::kLong)});
  }
  auto batches = std::make_shared<BatchData>(std::make_shared<DataFromList>(points), 2);
  auto source = make_source(GetParam(), batches);
  EXPECT_EQ(source->size(), 3);
  SourceTrainer trainer(source, {InputDesc("x", {-1, 2}), InputDesc("y", {-1}, at::kLong)});
  trainer.train({}, {}, /*steps_per_epoch=*/7, 1, /*max_epoch=*/1);

  ASSERT_EQ(trainer.batches.size(), 7u);
  for (size_t k = 0; k < 7; ++k) {
    const int64_t first = 2 * static_cast<int64_t>(k % 3);  // 3 batches per pass
    const auto& b = trainer.batches[k];
    ASSERT_EQ(b.size(), 2u);
    EXPECT_TRUE(
        b[0].equal(at::tensor({first + 0.5, first + 0.5, first + 1.5, first + 1.5}, at::kFloat)
                       .reshape({2, 2})))
        << "batch " << k << ": " << b[0];
    EXPECT_TRUE(b[1].equal(at::tensor({first, first + 1}, at::kLong))) << "batch " << k;
    EXPECT_TRUE(b[0].device().is_cpu());
  }
}

TEST_P(BothSources, TheDataflowIsResetOnceInBeforeTrain) {
  // A list flow that counts reset_state() calls.
  class CountingFlow : public DataFromList {
   public:
    using DataFromList::DataFromList;
    void reset_state() override { ++resets; }
    std::atomic<int> resets{0};
  };
  auto flow = std::make_shared<CountingFlow>(scalars(3));
  auto source = make_source(GetParam(), flow);
  auto seen_in_before_train = std::make_shared<int>(-1);
  auto probe = std::make_shared<ActionCallback>();
  probe->before_train_fn = [&](ActionCallback&) { *seen_in_before_train = flow->resets; };
  SourceTrainer trainer(source, kScalarSignature);
  trainer.train({probe}, {}, 4, 1, 1);
  EXPECT_EQ(*seen_in_before_train, 1);  // the source's callbacks run before the user's
  EXPECT_EQ(flow->resets, 1);
  EXPECT_EQ(firsts(trainer.batches), (std::vector<int64_t>{0, 1, 2, 0}));
}

TEST_P(BothSources, EndOfDataStopsTrainingCleanlyAtTheExactStep) {
  auto source = make_source(GetParam(), finite_generator(5));
  auto after_train = std::make_shared<bool>(false);
  SourceTrainer trainer(source, kScalarSignature);
  LogCapture log;
  trainer.train({after_train_flag(after_train)}, {}, /*steps_per_epoch=*/3, 1, /*max_epoch=*/10);

  EXPECT_EQ(firsts(trainer.batches), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(trainer.global_step(), 5);
  EXPECT_EQ(trainer.epoch_num(), 2);
  EXPECT_TRUE(*after_train);
  EXPECT_FALSE(running(source));
  const std::string name = GetParam() == Kind::kFeed ? "FeedInput" : "QueueInput";
  EXPECT_TRUE(log.contains("Training was stopped by exception " + name +
                           ": the dataflow DataFromGenerator has no more data: pass 1 yielded no "
                           "datapoint."));
  EXPECT_FALSE(log.contains("Training has finished!"));
}

TEST_P(BothSources, AnEmptyFirstPassStopsBeforeTheFirstStep) {
  auto source = make_source(GetParam(), finite_generator(0));
  SourceTrainer trainer(source, kScalarSignature);
  LogCapture log;
  trainer.train({}, {}, 3, 1, 2);
  EXPECT_EQ(trainer.global_step(), 0);
  EXPECT_TRUE(trainer.batches.empty());
  EXPECT_TRUE(log.contains("has no more data: pass 0 yielded no datapoint."));
}

TEST_P(BothSources, NextBatchAfterTheEndKeepsThrowingDataExhausted) {
  // Driven by hand: the first callback prepares the source (reset / start) and stops it.
  auto fresh = make_source(GetParam(), finite_generator(1));
  auto callbacks = fresh->setup(kScalarSignature, c10::Device(c10::kCPU));
  callbacks[0]->before_train();
  EXPECT_EQ(fresh->next_batch()[0].item<int64_t>(), 0);
  EXPECT_THROW(fresh->next_batch(), DataExhausted);
  EXPECT_THROW(fresh->next_batch(), DataExhausted);
  callbacks[0]->after_train();
  EXPECT_FALSE(running(fresh));
}

// A user exception type, to check that the type survives the trip from the prefetch thread.
class BadRecord : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

TEST_P(BothSources, AnExceptionInADataFromGeneratorReachesTheTrainingThread) {
  auto calls = std::make_shared<std::atomic<int64_t>>(0);
  auto gen = std::make_shared<DataFromGenerator>([calls]() -> std::optional<Datapoint> {
    const int64_t i = (*calls)++;
    if (i == 3) throw BadRecord("bad record 3 in shard-00001");
    return Datapoint{at::scalar_tensor(i, at::kLong)};
  });
  auto source = make_source(GetParam(), gen);
  auto after_train = std::make_shared<bool>(false);
  SourceTrainer trainer(source, kScalarSignature);
  LogCapture log;
  // A step's exception is not a callback's: the trainer rethrows it as it is (no CallbackError).
  EXPECT_EQ(
      message_of<BadRecord>([&] { trainer.train({after_train_flag(after_train)}, {}, 10, 1, 1); }),
      "bad record 3 in shard-00001");
  EXPECT_EQ(firsts(trainer.batches), (std::vector<int64_t>{0, 1, 2}));  // the batches before it
  EXPECT_EQ(trainer.global_step(), 3);
  EXPECT_TRUE(*after_train);
  EXPECT_FALSE(running(source));  // stopped and joined in after_train
  EXPECT_TRUE(log.contains("ERR Training failed at global_step=3"));
}

TEST_P(BothSources, AnExceptionInAMapDataReachesTheTrainingThread) {
  auto mapped = std::make_shared<MapData>(std::make_shared<DataFromList>(scalars(5)),
                                          [](Datapoint dp) -> std::optional<Datapoint> {
                                            if (dp[0].item<int64_t>() == 2)
                                              throw std::runtime_error("cannot decode record 2");
                                            return dp;
                                          });
  auto source = make_source(GetParam(), mapped);
  auto after_train = std::make_shared<bool>(false);
  SourceTrainer trainer(source, kScalarSignature);
  EXPECT_EQ(message_of<std::runtime_error>(
                [&] { trainer.train({after_train_flag(after_train)}, {}, 10, 1, 1); }),
            "cannot decode record 2");
  EXPECT_EQ(trainer.global_step(), 2);
  EXPECT_TRUE(*after_train);
  EXPECT_FALSE(running(source));
}

// Trains one step on batches of `points` with `signature`; returns the std::invalid_argument
// message (the step's exception reaches the caller of train as it is).
std::string mismatch_message(Kind kind, std::vector<Datapoint> points,
                             const InputSignature& signature) {
  auto batches = std::make_shared<BatchData>(std::make_shared<DataFromList>(points), 2);
  auto source = make_source(kind, batches);
  SourceTrainer trainer(source, signature);
  std::string msg = message_of<std::invalid_argument>([&] { trainer.train({}, {}, 1, 1, 1); });
  EXPECT_EQ(trainer.global_step(), 0);
  EXPECT_FALSE(running(source));
  return msg;
}

TEST_P(BothSources, SignatureMismatchNamesTheSourceTheInputExpectedAndActual) {
  const std::string name = GetParam() == Kind::kFeed ? "FeedInput" : "QueueInput";
  const InputSignature signature = {InputDesc("image", {-1, 2}),
                                    InputDesc("label", {-1}, at::kLong)};
  const auto good_label = at::scalar_tensor(1, at::kLong);

  // Wrong shape.
  EXPECT_EQ(
      mismatch_message(GetParam(), {{at::zeros({3}), good_label}, {at::zeros({3}), good_label}},
                       signature),
      name +
          ": input 'image' (component 0) should be [-1, 2] float, but the batch has "
          "[2, 3] float");
  // Wrong dtype.
  EXPECT_EQ(mismatch_message(GetParam(),
                             {{at::zeros({2}), at::scalar_tensor(1.0)},
                              {at::zeros({2}), at::scalar_tensor(1.0)}},
                             signature),
            name +
                ": input 'label' (component 1) should be [-1] long, but the batch has [2] "
                "float");
  // Wrong number of components.
  EXPECT_EQ(mismatch_message(GetParam(), {{at::zeros({2})}, {at::zeros({2})}}, signature),
            name +
                ": the batch has 1 components, but the input signature has 2 (image, label); "
                "the dataflow must produce one component per input, in the signature's "
                "order");
}

TEST_P(BothSources, SetupReturnsCallbacksThatAreNotChiefOnly) {
  auto source = make_source(GetParam(), finite_generator(3));
  NoOpTrainer worker;
  worker.set_is_chief(false);
  std::vector<std::string> names;
  for (const auto& cb : source->setup(kScalarSignature, c10::Device(c10::kCPU))) {
    EXPECT_FALSE(cb->chief_only()) << cb->name();
    EXPECT_TRUE(worker.register_callback(cb)) << cb->name();  // kept on a non-chief worker
    names.push_back(cb->name());
  }
  const std::vector<std::string> expected =
      GetParam() == Kind::kFeed ? std::vector<std::string>{"FeedInput"}
                                : std::vector<std::string>{"QueueInput", "QueueInput/queue_size"};
  EXPECT_EQ(names, expected);
}

TEST_P(BothSources, SetupTwiceIsAnError) {
  auto source = make_source(GetParam(), finite_generator(3));
  source->setup(kScalarSignature, c10::Device(c10::kCPU));
  EXPECT_TRUE(source->setup_done());
  const std::string name = GetParam() == Kind::kFeed ? "FeedInput" : "QueueInput";
  EXPECT_EQ(message_of<std::logic_error>(
                [&] { source->setup(kScalarSignature, c10::Device(c10::kCPU)); }),
            "Method " + name + ".setup can only be called once per object!");
}

TEST_P(BothSources, NextBatchBeforeSetupIsAnError) {
  auto source = make_source(GetParam(), finite_generator(3));
  const std::string name = GetParam() == Kind::kFeed ? "FeedInput" : "QueueInput";
  EXPECT_EQ(message_of<std::logic_error>([&] { source->next_batch(); }),
            name +
                "::next_batch() called before setup(); the trainer calls setup(signature, "
                "device) when it is set up (or call it yourself and register the callbacks it "
                "returns)");
}

TEST_P(BothSources, NextBatchWithoutTheCallbacksIsAnError) {
  auto source = make_source(GetParam(), finite_generator(3));
  source->setup(kScalarSignature, c10::Device(c10::kCPU));  // callbacks dropped
  const bool feed = GetParam() == Kind::kFeed;
  EXPECT_EQ(message_of<std::logic_error>([&] { source->next_batch(); }),
            std::string(feed ? "FeedInput::next_batch(): the dataflow was not reset"
                             : "QueueInput::next_batch(): the prefetch thread was not started") +
                "; register the callbacks that setup() returned with the trainer "
                "(Trainer::register_callback, before train()): they prepare the source in "
                "before_train");
}

TEST_P(BothSources, ACudaDeviceWithoutAGpuIsAClearError) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is available on this machine";
  auto source = make_source(GetParam(), finite_generator(3));
  const std::string name = GetParam() == Kind::kFeed ? "FeedInput" : "QueueInput";
  EXPECT_EQ(message_of<std::runtime_error>(
                [&] { source->setup(kScalarSignature, c10::Device(c10::kCUDA, 0)); }),
            name +
                ": the device is cuda:0, but no GPU is available (torch::cuda::is_available() is "
                "false); use the CPU device (c10::Device(c10::kCPU))");
  EXPECT_FALSE(source->setup_done());
}

TEST_P(BothSources, ANullDataflowIsAnError) {
  const std::string name = GetParam() == Kind::kFeed ? "FeedInput" : "QueueInput";
  EXPECT_EQ(message_of<std::invalid_argument>([&] { make_source(GetParam(), nullptr); }),
            name + ": the dataflow is null; pass one, e.g. std::make_shared<BatchData>(ds, 32)");
}

TEST_P(BothSources, SizeIsTheDataflowsSize) {
  EXPECT_EQ(make_source(GetParam(), std::make_shared<DataFromList>(scalars(7)))->size(), 7);
  EXPECT_EQ(make_source(GetParam(), finite_generator(7))->size(), std::nullopt);
}

// ---- QueueInput only ----

TEST(QueueInput, CapacityBelowOneIsAnError) {
  auto ds = std::make_shared<DataFromList>(scalars(3));
  EXPECT_EQ(
      message_of<std::invalid_argument>([&] { QueueInput(ds, QueueInputOptions().capacity(0)); }),
      "QueueInput: capacity must be >= 1, got 0; set QueueInputOptions().capacity(n) with "
      "n >= 1 (default 50)");
  EXPECT_THROW(QueueInput(ds, QueueInputOptions().capacity(-3)), std::invalid_argument);
  EXPECT_EQ(QueueInput(ds).options().capacity(), 50);
}

// An endless generator of scalars 0, 1, 2, ... that counts its calls.
DataFlowPtr counting_generator(std::shared_ptr<std::atomic<int64_t>> calls) {
  return std::make_shared<DataFromGenerator>([calls]() -> std::optional<Datapoint> {
    return Datapoint{at::scalar_tensor((*calls)++, at::kLong)};
  });
}

TEST(QueueInput, StopsCleanlyWhenTrainingEndsWithTheProducerBlockedOnAFullQueue) {
  auto calls = std::make_shared<std::atomic<int64_t>>(0);
  auto source =
      std::make_shared<QueueInput>(counting_generator(calls), QueueInputOptions().capacity(2));
  // After the last step: 3 batches taken, 2 queued, and the producer holds the 6th, waiting for
  // room in the full queue.
  auto wait_full = std::make_shared<ActionCallback>();
  auto blocked = std::make_shared<bool>(false);
  wait_full->trigger_step_fn = [&](ActionCallback& self) {
    if (self.global_step() != 3) return;
    *blocked = wait_until([&] { return *calls == 6 && source->queued() == 2; });
  };
  SourceTrainer trainer(source, kScalarSignature);
  LogCapture log;
  trainer.train({wait_full}, {}, 3, 1, 1);
  EXPECT_TRUE(*blocked);
  EXPECT_EQ(firsts(trainer.batches), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_FALSE(source->running());
  EXPECT_EQ(source->queued(), 0);  // the queued batches were dropped
  EXPECT_EQ(*calls, 6);            // the stopped producer asked the dataflow for nothing more
  EXPECT_TRUE(log.contains("Starting EnqueueThread QueueInput/input_queue ..."));
  EXPECT_TRUE(log.contains("EnqueueThread QueueInput/input_queue Exited."));
}

TEST(QueueInput, TheDestructorJoinsAProducerBlockedOnAFullQueue) {
  auto calls = std::make_shared<std::atomic<int64_t>>(0);
  {
    QueueInput source(counting_generator(calls), QueueInputOptions().capacity(2));
    source.setup(kScalarSignature, c10::Device(c10::kCPU));
    source.start();
    EXPECT_TRUE(source.running());
    ASSERT_TRUE(wait_until([&] { return *calls == 3 && source.queued() == 2; }));
  }  // ~QueueInput: stop and join
  EXPECT_EQ(*calls, 3);
}

TEST(QueueInput, StopWakesANextBatchWaitingOnAnEmptyQueue) {
  std::atomic<bool> entered_third{false};
  std::atomic<bool> gate_open{false};
  auto calls = std::make_shared<std::atomic<int64_t>>(0);
  auto gen = std::make_shared<DataFromGenerator>([&, calls]() -> std::optional<Datapoint> {
    const int64_t i = (*calls)++;
    if (i == 2) {  // the third datapoint takes until the test opens the gate
      entered_third = true;
      while (!gate_open) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return Datapoint{at::scalar_tensor(i, at::kLong)};
  });
  QueueInput source(gen);
  source.setup(kScalarSignature, c10::Device(c10::kCPU));
  source.start();
  EXPECT_EQ(source.next_batch()[0].item<int64_t>(), 0);
  EXPECT_EQ(source.next_batch()[0].item<int64_t>(), 1);
  // Another thread stops the source while this one waits for the third batch. stop() returns
  // only once the producer has left the dataflow, i.e. after the gate opens below.
  std::thread stopper([&] {
    wait_until([&] { return entered_third.load(); });
    source.stop();
  });
  EXPECT_EQ(message_of<StopTraining>([&] { source.next_batch(); }),
            "QueueInput: stop() was called; the queue gives no more batches");
  gate_open = true;
  stopper.join();
  EXPECT_FALSE(source.running());
  EXPECT_EQ(*calls, 3);
  source.stop();  // idempotent
}

TEST(QueueInput, AnExceptionComesAfterTheBatchesQueuedBeforeIt) {
  auto calls = std::make_shared<std::atomic<int64_t>>(0);
  auto gen = std::make_shared<DataFromGenerator>([calls]() -> std::optional<Datapoint> {
    const int64_t i = (*calls)++;
    if (i == 3) throw BadRecord("record 3 is truncated");
    return Datapoint{at::scalar_tensor(i, at::kLong)};
  });
  QueueInput source(gen);
  source.setup(kScalarSignature, c10::Device(c10::kCPU));
  source.start();
  ASSERT_TRUE(wait_until([&] { return *calls == 4; }));  // the producer has failed
  EXPECT_EQ(source.queued(), 3);
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(source.next_batch()[0].item<int64_t>(), i);
  EXPECT_EQ(message_of<BadRecord>([&] { source.next_batch(); }), "record 3 is truncated");
  EXPECT_EQ(message_of<BadRecord>([&] { source.next_batch(); }), "record 3 is truncated");
  source.stop();
  EXPECT_FALSE(source.running());
}

TEST(QueueInput, StartErrors) {
  QueueInput source(finite_generator(3));
  EXPECT_EQ(message_of<std::logic_error>([&] { source.start(); }),
            "QueueInput::start() called before setup(); the trainer calls setup(signature, "
            "device) first");
  source.setup(kScalarSignature, c10::Device(c10::kCPU));
  source.start();
  EXPECT_EQ(message_of<std::logic_error>([&] { source.start(); }),
            "QueueInput::start(): the prefetch thread was started before; a QueueInput feeds one "
            "training run");
  source.stop();
}

TEST(QueueInput, AResetStateErrorFailsBeforeTrainNamingTheCallback) {
  class BrokenFlow : public DataFromList {
   public:
    using DataFromList::DataFromList;
    void reset_state() override { throw std::runtime_error("cannot open the shard list"); }
  };
  auto source = std::make_shared<QueueInput>(std::make_shared<BrokenFlow>(scalars(3)));
  auto after_train = std::make_shared<bool>(false);
  SourceTrainer trainer(source, kScalarSignature);
  EXPECT_EQ(message_of<CallbackError>(
                [&] { trainer.train({after_train_flag(after_train)}, {}, 3, 1, 1); }),
            "Callback QueueInput failed in before_train: cannot open the shard list");
  EXPECT_TRUE(*after_train);
  EXPECT_FALSE(source->running());
}

TEST(QueueInput, QueueSizeSummaryIsTheEmaOfTheQueueLengthEveryStep) {
  // 4 datapoints, then the data ends: once the producer has queued all 4, the queue holds 4, 3,
  // 2, 1 batches before steps 1 to 4.
  auto source = std::make_shared<QueueInput>(finite_generator(4));
  auto wait_all_queued = std::make_shared<ActionCallback>();
  wait_all_queued->before_run_fn = [&](ActionCallback& self) {
    if (self.global_step() == 0) {
      EXPECT_TRUE(wait_until([&] { return source->queued() == 4; }));
    }
  };
  std::vector<float> values;
  std::vector<const void*> storages;
  auto reader = std::make_shared<ActionCallback>();
  reader->after_run_fn = [&](ActionCallback& self) {
    for (const auto& e : self.trainer().tower_registry().summaries()) {
      if (e.tag != "QueueInput/queue_size" || !e.value.defined()) continue;
      EXPECT_EQ(e.kind, TowerRegistry::SummaryKind::kScalar);
      EXPECT_EQ(e.value.dim(), 0);
      EXPECT_EQ(e.value.scalar_type(), at::kFloat);
      values.push_back(e.value.item<float>());
      storages.push_back(e.value.data_ptr());
    }
  };
  SourceTrainer trainer(source, kScalarSignature, {wait_all_queued});
  trainer.train({reader}, {}, 10, 1, 1);
  EXPECT_EQ(trainer.global_step(), 4);  // the 5th step found no data
  // Zero-debiased EMA with decay 0.5 of 4, 3, 2, 1: biased_t = 0.5 biased_{t-1} + 0.5 x_t,
  // value_t = biased_t / (1 - 0.5^t).
  ASSERT_EQ(values.size(), 4u);
  EXPECT_FLOAT_EQ(values[0], 4.0f);
  EXPECT_FLOAT_EQ(values[1], 10.0f / 3.0f);
  EXPECT_FLOAT_EQ(values[2], 18.0f / 7.0f);
  EXPECT_FLOAT_EQ(values[3], 26.0f / 15.0f);
  for (const void* p : storages) EXPECT_EQ(p, storages[0]);  // one tensor, updated in place
}

TEST(QueueInput, QueueSizeIsTheCapacityWhenTheProducerKeepsUp) {
  auto calls = std::make_shared<std::atomic<int64_t>>(0);
  auto source = std::make_shared<QueueInput>(counting_generator(calls));  // capacity 50
  auto wait_full = std::make_shared<ActionCallback>();
  wait_full->before_run_fn = [&](ActionCallback&) {
    EXPECT_TRUE(wait_until([&] { return source->queued() == 50; }));
  };
  std::vector<float> values;
  auto reader = std::make_shared<ActionCallback>();
  reader->after_run_fn = [&](ActionCallback& self) {
    for (const auto& e : self.trainer().tower_registry().summaries()) {
      if (e.tag == "QueueInput/queue_size" && e.value.defined()) {
        values.push_back(e.value.item<float>());
      }
    }
  };
  SourceTrainer trainer(source, kScalarSignature, {wait_full});
  trainer.train({reader}, {}, 3, 1, 1);
  EXPECT_EQ(values, (std::vector<float>{50.0f, 50.0f, 50.0f}));
}

}  // namespace input_source_test
}  // namespace trainpack
