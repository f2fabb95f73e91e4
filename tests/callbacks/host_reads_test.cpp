// The rule of trainpack/utils/host_read.h, counted on the CPU: with the default callbacks and
// monitors and the main job's callbacks, a step reads no value to the host unless it displays or
// summarises something; the steps that do, read. (tests/cuda/host_sync_cuda_test.cpp checks the
// same on a GPU, where a read would synchronise.)
//
// Which steps display or summarise is known in advance: the last step of every epoch
// (MergeAllSummaries materialises it, the ProgressBar fetches its values for the epoch's last line,
// the epoch-end callbacks validate, save and put), and the steps after which the ProgressBar draws.
// The bar's refresh is time-based; here its clock is the trainer's global_step (one "second" per
// step) and its interval 4, so it draws at known steps, which its sink records.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "support/host_reads.h"
#include "support/temp_dir.h"
#include "trainpack/trainpack.h"

namespace trainpack {
namespace host_reads_test {

// The reads of every step, from its first before_run to the next step's (so a step's window
// holds its after_run, trigger_step and, for the last step of an epoch, the epoch end). Register
// it first. close() ends the last window.
class ReadsPerStep : public Callback {
 public:
  std::map<int64_t, uint64_t> reads;  // global step (before the step's increment) -> reads

  void close() {
    if (open_) reads[step_] = counter_.count();
    open_ = false;
  }

 protected:
  RunArgs _before_run(const StepContext& /*ctx*/) override {
    if (open_ && step_ == global_step()) return RunArgs();  // a later hooked run of the step
    close();
    open_ = true;
    step_ = global_step();
    counter_.reset();
    return RunArgs();
  }

 private:
  HostReadCounter counter_;
  bool open_ = false;
  int64_t step_ = -1;
};

class HostReads : public testing::TempDirFixture<> {};

TEST_F(HostReads, OnlyTheStepsThatShowOrSummariseReadValues) {
  logger::set_logger_dir(dir().string(), 'k');
  constexpr int64_t kStepsPerEpoch = 12, kEpochs = 3, kBatch = 4;
  const c10::Device cpu(c10::kCPU);
  SimpleTrainer trainer(cpu);
  trainer.set_handle_signals(false);
  testing::add_scale_variable(trainer, cpu);

  std::set<int64_t> bar_draws;  // steps after which the bar drew a line (epoch ends included)
  ProgressBarOptions bar;
  bar.names({"cost"})
      .sink([&](std::string_view) { bar_draws.insert(trainer.global_step() - 1); })
      .refresh_interval(4)
      .clock([&] { return static_cast<double>(trainer.global_step()); });
  testing::MainJobLists lists = testing::main_job_lists(
      dir(), testing::regression_points(cpu, 8, kBatch), std::move(bar), kBatch);
  auto rec = std::make_shared<ReadsPerStep>();
  std::vector<CallbackPtr> callbacks{rec};
  callbacks.insert(callbacks.end(), lists.callbacks.begin(), lists.callbacks.end());
  auto model = std::make_shared<testing::SummarisingRegression>();
  launch_train_with_config(
      TrainConfig()
          .model(model)
          .dataflow(testing::regression_points(cpu, kStepsPerEpoch * kBatch, kBatch))
          .callbacks(callbacks)
          .extra_callbacks(lists.defaults)
          .monitors(lists.monitors)
          .max_epoch(kEpochs),
      trainer);
  rec->close();
  logger::unset_logger_dir();

  // The run did what the callbacks are there for: the update op ran at every step, the step-based
  // schedule set "scale" at its last point, the moving averages and summaries were put.
  EXPECT_EQ(model->steps.item<int64_t>(), kStepsPerEpoch * kEpochs);
  EXPECT_EQ(trainer.graph().variable("scale").get(), testing::scale_schedule().back().second);
  // The moving cost: put at every epoch end, and again by the MergeAllSummaries under
  // PeriodicTrigger at the next multiple of 5 (the summary it kept from that epoch end).
  std::vector<int64_t> cost_steps;
  for (const auto& entry : trainer.monitors().get_history("cost"))
    cost_steps.push_back(entry.first);
  EXPECT_EQ(cost_steps, (std::vector<int64_t>{12, 15, 24, 25, 36}));
  EXPECT_EQ(trainer.monitors().get_history("validation_cost").size(), static_cast<size_t>(kEpochs));

  // The bar's mid-epoch draws: the clock is the global step and the interval 4 steps, so with 12
  // steps per epoch it draws after the 5th and the 10th step of every epoch (local steps 4 and 9:
  // due when 4 "seconds" have passed since the last draw), and at every epoch end.
  std::set<int64_t> expected_draws;
  for (int64_t e = 0; e < kEpochs; ++e) {
    for (int64_t local : {int64_t{4}, int64_t{9}, kStepsPerEpoch - 1}) {
      expected_draws.insert(e * kStepsPerEpoch + local);
    }
  }
  ASSERT_EQ(bar_draws, expected_draws);

  ASSERT_EQ(rec->reads.size(), static_cast<size_t>(kStepsPerEpoch * kEpochs));
  for (const auto& [step, reads] : rec->reads) {
    const bool epoch_end = (step + 1) % kStepsPerEpoch == 0;
    if (epoch_end) {
      // The EMAs, the scalar summary and the histogram, the bar's cost, the validation, the
      // checkpoint's moving averages and "scale": many.
      EXPECT_GE(reads, 6u) << "the last step of an epoch, global step " << step;
    } else if (bar_draws.count(step) != 0) {
      EXPECT_EQ(reads, 1u) << "a step after which the bar draws reads its cost, global step "
                           << step;
    } else {
      EXPECT_EQ(reads, 0u) << "a step that neither displays nor summarises, global step " << step;
    }
  }
}

}  // namespace host_reads_test
}  // namespace trainpack
