// StagingInput on the CPU: the wrapped source's batches unchanged, staged nr_stage ahead, with
// the position of the batches the trainer took (never of those staged ahead), exact resume, the
// end of the data and errors after the staged batches. tests/cuda/staging_input_cuda_test.cpp
// covers the copies on a GPU.
#include "trainpack/input/staging_input.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support/batches.h"
#include "support/errors.h"
#include "support/linear_regression.h"
#include "support/source_trainer.h"
#include "trainpack/core/state.h"
#include "trainpack/core/trainer.h"
#include "trainpack/input/dataflow.h"
#include "trainpack/input/input_source.h"
#include "trainpack/testing.h"
#include "trainpack/train/config.h"
#include "trainpack/train/single_cost.h"

namespace trainpack {
namespace staging_input_test {

using testing::expect_same_batches;
using testing::kXYBatchSignature;
using testing::shuffled_xy_batches;
using testing::SourceTrainer;
using testing::wait_until;
using testing::xy_points;

using testing::message_of;

// The signature of single xy_points (unbatched).
const InputSignature kPointSignature = {InputDesc("x", {2}), InputDesc("y", {}, at::kLong)};

std::shared_ptr<StagingInput> staged_queue(DataFlowPtr flow, int64_t nr_stage,
                                           int64_t capacity = 50) {
  return std::make_shared<StagingInput>(
      std::make_shared<QueueInput>(std::move(flow), QueueInputOptions().capacity(capacity)),
      StagingInputOptions().nr_stage(nr_stage));
}

// The batches of `steps` steps (one epoch) of a trainer over `source`.
std::vector<std::vector<at::Tensor>> take(InputSourcePtr source, const InputSignature& sig,
                                          int64_t steps) {
  SourceTrainer trainer(std::move(source), sig);
  trainer.train({}, {}, steps, 1, 1);
  return trainer.batches;
}

std::pair<int64_t, int64_t> as_pair(InputPosition p) { return {p.pass, p.position}; }
std::pair<int64_t, int64_t> state_position(const Callback& cb) {
  const CallbackState s = cb.state();
  return {s.at("pass").item<int64_t>(), s.at("position").item<int64_t>()};
}
const Callback& callback_named(const std::vector<CallbackPtr>& callbacks, const std::string& n) {
  for (const auto& cb : callbacks) {
    if (cb->name() == n) return *cb;
  }
  throw std::logic_error("no callback named " + n);
}

// The scalars 0, 1, ..., n-1 in the first pass and nothing after (the data ends); the one at
// `fail_at` throws std::out_of_range instead, recording in `*taken_then` how many batches the
// trainer had taken by then.
DataFlowPtr counting_generator(int64_t n, int64_t fail_at = -1,
                               const SourceTrainer** trainer = nullptr,
                               int64_t* taken_then = nullptr) {
  auto next = std::make_shared<std::atomic<int64_t>>(0);
  return std::make_shared<DataFromGenerator>(
      [next, n, fail_at, trainer, taken_then]() -> std::optional<Datapoint> {
        const int64_t i = (*next)++;
        if (i == fail_at) {
          if (taken_then != nullptr) *taken_then = static_cast<int64_t>((*trainer)->batches.size());
          throw std::out_of_range("bad datapoint " + std::to_string(i));
        }
        if (i >= n) return std::nullopt;
        return Datapoint{at::scalar_tensor(i, at::kLong)};
      });
}
const InputSignature kScalarSignature = {InputDesc("x", {}, at::kLong)};

std::vector<int64_t> firsts(const std::vector<std::vector<at::Tensor>>& batches) {
  std::vector<int64_t> out;
  for (const auto& b : batches) out.push_back(b[0].item<int64_t>());
  return out;
}

// ---- for nr_stage 1 and 3 ----

class StagingDepth : public ::testing::TestWithParam<int64_t> {};

INSTANTIATE_TEST_SUITE_P(StagingInput, StagingDepth, ::testing::Values(1, 3),
                         [](const ::testing::TestParamInfo<int64_t>& info) {
                           return "nr_stage" + std::to_string(info.param);
                         });

TEST_P(StagingDepth, OnTheCpuTheBatchesAreTheWrappedSourcesOwnTensors) {
  // DataFromList hands out the tensors it holds (those of `stored`): the same objects come out
  // of StagingInput, not copies.
  const std::vector<Datapoint> stored = xy_points(4);
  auto input = std::make_shared<StagingInput>(
      std::make_shared<FeedInput>(std::make_shared<DataFromList>(stored)),
      StagingInputOptions().nr_stage(GetParam()));
  const auto batches = take(input, kPointSignature, 10);
  ASSERT_EQ(batches.size(), 10u);
  for (size_t k = 0; k < batches.size(); ++k) {
    EXPECT_TRUE(batches[k][0].is_same(stored[k % 4][0])) << "batch " << k;
    EXPECT_TRUE(batches[k][1].is_same(stored[k % 4][1])) << "batch " << k;
  }
}

TEST_P(StagingDepth, DeliversTheBatchesOfThePlainSource) {
  const auto plain =
      take(std::make_shared<QueueInput>(shuffled_xy_batches()), kXYBatchSignature, 13);
  const auto staged = take(staged_queue(shuffled_xy_batches(), GetParam()), kXYBatchSignature, 13);
  expect_same_batches(staged, plain);
}

TEST_P(StagingDepth, ConsumedIsThePositionOfTheTakenBatchesNotOfThoseAhead) {
  const int64_t nr = GetParam();
  auto queue = std::make_shared<QueueInput>(shuffled_xy_batches(), QueueInputOptions().capacity(4));
  auto input = std::make_shared<StagingInput>(queue, StagingInputOptions().nr_stage(nr));
  const auto callbacks = input->setup(kXYBatchSignature, c10::Device(c10::kCPU));
  EXPECT_EQ(as_pair(input->consumed()), std::make_pair(int64_t{0}, int64_t{0}));
  queue->start();
  for (int64_t k = 1; k <= 7; ++k) {
    SCOPED_TRACE(k);
    input->next_batch();
    // The queue refills to its capacity: the wrapped source has delivered nr more batches (the
    // staged ones) and prefetched 4 beyond them.
    ASSERT_TRUE(wait_until([&] { return queue->queued() == 4; }));
    const std::pair<int64_t, int64_t> taken{(k - 1) / 5, (k - 1) % 5 + 1};
    const std::pair<int64_t, int64_t> ahead{(k + nr - 1) / 5, (k + nr - 1) % 5 + 1};
    EXPECT_EQ(as_pair(input->consumed()), taken);
    EXPECT_EQ(as_pair(queue->consumed()), ahead);
    EXPECT_EQ(input->staged(), nr);
    // Both position entries of a checkpoint hold the trainer's position.
    EXPECT_EQ(state_position(callback_named(callbacks, "StagingInput")), taken);
    EXPECT_EQ(state_position(callback_named(callbacks, "QueueInput")), taken);
  }
  queue->stop();
}

TEST_P(StagingDepth, ResumesAtTheExactBatchThroughTheTrainingState) {
  const int64_t nr = GetParam();
  const auto full = take(staged_queue(shuffled_xy_batches(), nr), kXYBatchSignature, 14);
  ASSERT_EQ(full.size(), 14u);
  for (int64_t k : {1, 4, 5, 9}) {
    SCOPED_TRACE(k);
    TensorMap state;
    {
      SourceTrainer trainer(staged_queue(shuffled_xy_batches(), nr), kXYBatchSignature);
      trainer.train({}, {}, k, 1, 1);
      state = collect_training_state(trainer);
    }
    const int64_t pass = (k - 1) / 5, position = (k - 1) % 5 + 1;
    EXPECT_EQ(state.at("callback/StagingInput/pass").item<int64_t>(), pass);
    EXPECT_EQ(state.at("callback/StagingInput/position").item<int64_t>(), position);
    EXPECT_EQ(state.at("callback/QueueInput/pass").item<int64_t>(), pass);
    EXPECT_EQ(state.at("callback/QueueInput/position").item<int64_t>(), position);
    SourceTrainer trainer(staged_queue(shuffled_xy_batches(), nr), kXYBatchSignature);
    trainer.setup_callbacks({}, {});
    restore_training_state(trainer, state, RestoreOptions().restore_counters(false));
    trainer.initialize();
    trainer.main_loop(14 - k, 1, 1);
    expect_same_batches(trainer.batches,
                        std::vector<std::vector<at::Tensor>>(full.begin() + k, full.end()));
  }
}

TEST_P(StagingDepth, TheEndOfTheDataComesAfterTheStagedBatches) {
  auto input = std::make_shared<StagingInput>(std::make_shared<FeedInput>(counting_generator(5)),
                                              StagingInputOptions().nr_stage(GetParam()));
  SourceTrainer trainer(input, kScalarSignature);
  trainer.train({}, {}, 10, 1, 1);
  EXPECT_EQ(firsts(trainer.batches), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(trainer.global_step(), 5);
  EXPECT_EQ(as_pair(input->consumed()), std::make_pair(int64_t{0}, int64_t{5}));
}

TEST_P(StagingDepth, NextBatchAfterTheEndKeepsThrowingDataExhausted) {
  auto feed = std::make_shared<FeedInput>(counting_generator(2));
  auto input = std::make_shared<StagingInput>(feed, StagingInputOptions().nr_stage(GetParam()));
  const auto callbacks = input->setup(kScalarSignature, c10::Device(c10::kCPU));
  for (const auto& cb : callbacks) cb->before_train();
  EXPECT_EQ(input->next_batch()[0].item<int64_t>(), 0);
  EXPECT_EQ(input->next_batch()[0].item<int64_t>(), 1);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(message_of<DataExhausted>([&] { input->next_batch(); }),
              "StagingInput: FeedInput: the dataflow DataFromGenerator has no more data: pass 1 "
              "yielded no datapoint");
  }
  EXPECT_EQ(as_pair(input->consumed()), std::make_pair(int64_t{0}, int64_t{2}));
}

TEST_P(StagingDepth, AnExceptionComesAsItWasThrownAfterTheStagedBatches) {
  const int64_t nr = GetParam();
  const SourceTrainer* trainer_ptr = nullptr;
  int64_t taken_when_thrown = -1;
  auto input = std::make_shared<StagingInput>(
      std::make_shared<FeedInput>(counting_generator(10, 3, &trainer_ptr, &taken_when_thrown)),
      StagingInputOptions().nr_stage(nr));
  SourceTrainer trainer(input, kScalarSignature);
  trainer_ptr = &trainer;
  EXPECT_EQ(message_of<std::out_of_range>([&] { trainer.train({}, {}, 10, 1, 1); }),
            "bad datapoint 3");
  EXPECT_EQ(firsts(trainer.batches), (std::vector<int64_t>{0, 1, 2}));
  // The dataflow failed while batch 3 - nr was being taken (staging batch 3): the batches staged
  // before it were delivered first.
  EXPECT_EQ(taken_when_thrown, 3 - nr);
  EXPECT_EQ(as_pair(input->consumed()), std::make_pair(int64_t{0}, int64_t{3}));
}

TEST_P(StagingDepth, AnExceptionInAQueueInputsDataflowComesAfterTheStagedBatches) {
  auto input = staged_queue(counting_generator(10, 4), GetParam());
  SourceTrainer trainer(input, kScalarSignature);
  EXPECT_EQ(message_of<std::out_of_range>([&] { trainer.train({}, {}, 10, 1, 1); }),
            "bad datapoint 4");
  EXPECT_EQ(firsts(trainer.batches), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_FALSE(std::static_pointer_cast<QueueInput>(input->input())->running());  // joined
}

// ---- the rest ----

TEST(StagingInput, NrStageBelowOneAndANullSourceAreErrors) {
  for (int64_t nr : {0, -2}) {
    EXPECT_EQ(message_of<std::invalid_argument>([&] {
                StagingInput(std::make_shared<QueueInput>(shuffled_xy_batches()),
                             StagingInputOptions().nr_stage(nr));
              }),
              "StagingInput: nr_stage must be >= 1, got " + std::to_string(nr) +
                  "; set StagingInputOptions().nr_stage(n) with n >= 1 (default 1)");
  }
  EXPECT_EQ(message_of<std::invalid_argument>([] { StagingInput(nullptr); }),
            "StagingInput: the input source is null; pass one, e.g. "
            "std::make_shared<QueueInput>(batches)");
  EXPECT_EQ(StagingInput(std::make_shared<QueueInput>(shuffled_xy_batches())).options().nr_stage(),
            1);
}

TEST(StagingInput, ACudaDeviceWithoutAGpuFailsAtSetup) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is available on this machine";
  auto queue = std::make_shared<QueueInput>(shuffled_xy_batches());
  StagingInput input(queue);
  EXPECT_EQ(message_of<std::runtime_error>(
                [&] { input.setup(kXYBatchSignature, c10::Device(c10::kCUDA, 0)); }),
            "StagingInput: the device is cuda:0, but no GPU is available "
            "(torch::cuda::is_available() is false); use the CPU device (c10::Device(c10::kCPU))");
  EXPECT_FALSE(input.setup_done());
  EXPECT_FALSE(queue->setup_done());
}

TEST(StagingInput, AWrappedSourceThatWasSetUpIsAnError) {
  auto queue = std::make_shared<QueueInput>(shuffled_xy_batches());
  queue->setup(kXYBatchSignature, c10::Device(c10::kCPU));
  StagingInput input(queue);
  EXPECT_EQ(
      message_of<std::logic_error>([&] { input.setup(kXYBatchSignature, c10::Device(c10::kCPU)); }),
      "StagingInput: the input source QueueInput was set up already; StagingInput sets it "
      "up itself (on the CPU, so that it copies nothing): give it a source that was not "
      "set up");
}

TEST(StagingInput, ItsCallbacksAreTheWrappedSourcesThenItsOwn) {
  auto queue = std::make_shared<QueueInput>(shuffled_xy_batches(), QueueInputOptions().capacity(3));
  auto input = std::make_shared<StagingInput>(queue, StagingInputOptions().nr_stage(2));
  EXPECT_EQ(input->size(), 5);
  EXPECT_EQ(input->name(), "StagingInput");
  SourceTrainer trainer(input, kXYBatchSignature);
  std::vector<std::string> names;
  for (const auto& cb : trainer.source_callbacks) {
    names.push_back(cb->name());
    EXPECT_FALSE(cb->chief_only()) << cb->name();
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"QueueInput", "QueueInput/queue_size", "StagingInput"}));
  EXPECT_EQ(queue->device(), c10::Device(c10::kCPU));
  EXPECT_FALSE(queue->pin_host_batches());  // the CPU: nothing to pin
  bool ran_during_training = false;
  auto probe = std::make_shared<testing::ActionCallback>();
  probe->trigger_step_fn = [&](testing::ActionCallback&) {
    ran_during_training = queue->running();
  };
  trainer.train({probe}, {}, 4, 1, 1);
  EXPECT_TRUE(ran_during_training);
  EXPECT_FALSE(queue->running());  // stopped and joined in after_train
  EXPECT_EQ(input->staged(), 0);   // after_train released the stage
  EXPECT_EQ(message_of<StopTraining>([&] { input->next_batch(); }),
            "StagingInput: training has ended (after_train released the staged batches); the "
            "source gives no more batches");
  EXPECT_EQ(as_pair(input->consumed()), std::make_pair(int64_t{0}, int64_t{4}));
}

TEST(StagingInput, ResumeAtDelegatesToTheWrappedSourceBeforeTheFirstBatch) {
  const auto full = take(staged_queue(shuffled_xy_batches(), 2), kXYBatchSignature, 12);
  auto input = staged_queue(shuffled_xy_batches(), 2);
  EXPECT_EQ(message_of<std::invalid_argument>([&] {
              input->resume_at({0, 6});
            }),
            "QueueInput: cannot resume at batch 6 of pass 0: a pass of the dataflow BatchData "
            "has 5 batches; the checkpoint was saved with another dataflow (batch size or data)");
  input->resume_at({1, 2});
  EXPECT_EQ(as_pair(input->consumed()), std::make_pair(int64_t{1}, int64_t{2}));
  SourceTrainer trainer(input, kXYBatchSignature);
  trainer.train({}, {}, 5, 1, 1);
  expect_same_batches(trainer.batches,
                      std::vector<std::vector<at::Tensor>>(full.begin() + 7, full.end()));
  // 7 + 5 batches: the second of pass 2.
  EXPECT_EQ(as_pair(input->consumed()), std::make_pair(int64_t{2}, int64_t{2}));
  EXPECT_EQ(message_of<std::logic_error>([&] {
              input->resume_at({0, 1});
            }),
            "StagingInput::resume_at called after the first batch; a restore happens before "
            "training");
}

// A checkpoint is the same with or without StagingInput: one saved by either restores the
// other, and StagingInput's own entries restore the position when the wrapped source's are
// missing.
TEST(StagingInput, CheckpointsMoveBetweenStagedAndPlainSources) {
  const auto full =
      take(std::make_shared<QueueInput>(shuffled_xy_batches()), kXYBatchSignature, 12);
  auto state_after = [](InputSourcePtr source, int64_t steps) {
    SourceTrainer trainer(std::move(source), kXYBatchSignature);
    trainer.train({}, {}, steps, 1, 1);
    return collect_training_state(trainer);
  };
  auto rest_from = [](InputSourcePtr source, const TensorMap& state, int64_t steps) {
    SourceTrainer trainer(std::move(source), kXYBatchSignature);
    trainer.setup_callbacks({}, {});
    restore_training_state(trainer, state, RestoreOptions().restore_counters(false));
    trainer.initialize();
    trainer.main_loop(steps, 1, 1);
    return trainer.batches;
  };
  const auto rest = [&](int64_t k) {
    return std::vector<std::vector<at::Tensor>>(full.begin() + k, full.end());
  };
  {
    SCOPED_TRACE("staged -> plain");
    const TensorMap state = state_after(staged_queue(shuffled_xy_batches(), 3), 6);
    expect_same_batches(rest_from(std::make_shared<QueueInput>(shuffled_xy_batches()), state, 6),
                        rest(6));
  }
  {
    SCOPED_TRACE("plain -> staged");
    const TensorMap state = state_after(std::make_shared<QueueInput>(shuffled_xy_batches()), 3);
    expect_same_batches(rest_from(staged_queue(shuffled_xy_batches(), 3), state, 9), rest(3));
  }
  {
    SCOPED_TRACE("staged, only StagingInput's entries");
    TensorMap state = state_after(staged_queue(shuffled_xy_batches(), 1), 8);
    state.erase("callback/QueueInput/pass");
    state.erase("callback/QueueInput/position");
    state.erase("callback/QueueInput/queue_size_biased");
    state.erase("callback/QueueInput/queue_size_updates");
    state.erase("callback/QueueInput/dataflow");
    expect_same_batches(rest_from(staged_queue(shuffled_xy_batches(), 2), state, 4), rest(8));
  }
}

// launch_train_with_config with StagingInput as the data: the same steps, the same parameters.
TEST(StagingInput, TrainingThroughItGivesTheSameParameters) {
  auto train = [](bool staged) {
    auto model = std::make_shared<testing::LinearRegressionModel>(0.9);
    TrainConfig config = TrainConfig()
                             .model(model)
                             .extra_callbacks(std::vector<CallbackPtr>{})
                             .monitors(std::vector<MonitorPtr>{})
                             .max_epoch(4);
    if (staged) {
      config.data(std::make_shared<StagingInput>(
          std::make_shared<QueueInput>(testing::linear_regression_batches()),
          StagingInputOptions().nr_stage(2)));
    } else {
      config.dataflow(testing::linear_regression_batches());  // FeedInput
    }
    SimpleTrainer trainer;
    trainer.set_handle_signals(false);
    launch_train_with_config(config, trainer);
    EXPECT_EQ(trainer.global_step(), 12);
    return std::make_pair(model->net->weight.detach().clone(), model->net->bias.detach().clone());
  };
  const auto plain = train(false);
  const auto staged = train(true);
  EXPECT_TRUE(staged.first.equal(plain.first)) << staged.first << "\nvs\n" << plain.first;
  EXPECT_TRUE(staged.second.equal(plain.second)) << staged.second << "\nvs\n" << plain.second;
  EXPECT_FALSE(plain.first.equal(testing::LinearRegressionModel(0.9).net->weight.detach()));
}

}  // namespace staging_input_test
}  // namespace trainpack
