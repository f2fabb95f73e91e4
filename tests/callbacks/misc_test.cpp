// EstimatedTimeLeft and SendStat.
#include "trainpack/callbacks/misc.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "support/files.h"
#include "support/temp_dir.h"
#include "trainpack/callbacks/trigger.h"
#include "trainpack/core/monitor_base.h"
#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"

namespace trainpack {
namespace misc_test {

using testing::ActionCallback;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::LogCapture;

std::vector<std::string> lines_with(const LogCapture& log, const std::string& text) {
  std::vector<std::string> out;
  for (const auto& l : log.lines()) {
    if (l.find(text) != std::string::npos) out.push_back(l);
  }
  return out;
}

void train(std::vector<CallbackPtr> callbacks, int64_t spe, int64_t max_epoch) {
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train(callbacks, {}, spe, 1, max_epoch);
}

// ---- EstimatedTimeLeft ----

// Advances `clock` by durations[epoch - 1] at the start of each epoch.
CallbackPtr epoch_clock(double* clock, std::vector<double> durations) {
  auto cb = std::make_shared<ActionCallback>();
  cb->before_epoch_fn = [clock, durations](ActionCallback& self) {
    *clock += durations.at(static_cast<size_t>(self.epoch_num() - 1));
  };
  return cb;
}

TEST(EstimatedTimeLeft, LogsAfterEveryEpochButTheLast) {
  LogCapture log;
  train({std::make_shared<EstimatedTimeLeft>()}, 2, 3);
  EXPECT_EQ(lines_with(log, "Estimated Time Left: ").size(), 2u);
}

TEST(EstimatedTimeLeft, MedianOfTheLastEpochsTimesEpochsLeft) {
  double clock = 1000;
  LogCapture log;
  train({epoch_clock(&clock, {10, 20, 30, 40}),
         std::make_shared<EstimatedTimeLeft>(5, true, [&clock] { return clock; })},
        1, 4);
  // [10] -> 3 * 10; [10, 20] -> 2 * 15; [10, 20, 30] -> 1 * 20; nothing after the last epoch.
  EXPECT_THAT(lines_with(log, "Estimated Time Left"),
              ElementsAre("Estimated Time Left: 30 seconds", "Estimated Time Left: 30 seconds",
                          "Estimated Time Left: 20 seconds"));
}

TEST(EstimatedTimeLeft, MeanOfTheLastKEpochs) {
  double clock = 0;
  LogCapture log;
  train({epoch_clock(&clock, {10, 20, 30, 40, 50}),
         std::make_shared<EstimatedTimeLeft>(2, false, [&clock] { return clock; })},
        1, 5);
  // mean of [10] * 4, [10, 20] * 3, [20, 30] * 2, [30, 40] * 1.
  EXPECT_THAT(lines_with(log, "Estimated Time Left"),
              ElementsAre("Estimated Time Left: 40 seconds", "Estimated Time Left: 45 seconds",
                          "Estimated Time Left: 50 seconds", "Estimated Time Left: 35 seconds"));
}

TEST(EstimatedTimeLeft, PeriodicTriggerCannotScheduleIt) {
  auto etl = std::make_shared<EstimatedTimeLeft>();
  EXPECT_TRUE(etl->chief_only());
  EXPECT_TRUE(etl->overrides(Hook::kTriggerEpoch));
  EXPECT_FALSE(etl->overrides(Hook::kTrigger));
  LogCapture log;
  train({std::make_shared<PeriodicTrigger>(etl, PeriodicTriggerOptions().every_k_epochs(1))}, 1, 3);
  EXPECT_TRUE(lines_with(log, "Estimated Time Left").empty());
}

TEST(EstimatedTimeLeft, BadLastKIsAnError) {
  EXPECT_THROW(EstimatedTimeLeft(0), std::invalid_argument);
}

// ---- SendStat ----

class SendStatTest : public testing::TempDirTest {
 protected:
  std::string out_path() const { return path("out.txt").string(); }
  std::string read_out() const { return testing::read_text(out_path()); }

  // A callback that puts `name` = values[epoch - 1] at every epoch end (before SendStat's).
  static CallbackPtr putter(std::string name, std::vector<double> values) {
    auto cb = std::make_shared<ActionCallback>();
    cb->trigger_fn = [name, values](ActionCallback& self) {
      self.trainer().monitors().put_scalar(name,
                                           values.at(static_cast<size_t>(self.epoch_num() - 1)));
    };
    return cb;
  }
};

TEST_F(SendStatTest, RunsTheFilledCommandAtEveryEpochEnd) {
  auto send =
      std::make_shared<SendStat>("echo '{cost}' '{Throughput (steps/sec)}' >> " + out_path(),
                                 std::vector<std::string>{"cost", "Throughput (steps/sec)"});
  EXPECT_TRUE(send->chief_only());
  train({putter("cost", {0.1, 1.0 / 3}), putter("Throughput (steps/sec)", {1e-05, 12345.0}), send},
        2, 2);
  EXPECT_EQ(read_out(), "0.1 1e-05\n0.3333333333333333 12345.0\n");
}

TEST_F(SendStatTest, MissingStatIsAWarningAndTheCommandIsSkipped) {
  auto send = std::make_shared<SendStat>("echo {cost} {acc} >> " + out_path(),
                                         std::vector<std::string>{"cost", "acc"});
  LogCapture log;
  train({putter("cost", {0.5, 0.25}), send}, 1, 2);
  EXPECT_EQ(read_out(), "");
  const auto warnings = lines_with(log, "[SendStat]");
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_EQ(warnings[0],
            "WRN [SendStat] No value of the stat 'acc' in the monitors yet; the command is not "
            "run.");
}

TEST_F(SendStatTest, NonZeroExitIsAnErrorLine) {
  auto send = std::make_shared<SendStat>("exit 3 # {cost}", std::vector<std::string>{"cost"});
  LogCapture log;
  train({putter("cost", {0.5, 0.25}), send}, 1, 2);
  EXPECT_THAT(lines_with(log, "failed with"),
              ElementsAre("ERR Command exit 3 # 0.5 failed with ret=3!",
                          "ERR Command exit 3 # 0.25 failed with ret=3!"));
}

TEST_F(SendStatTest, BadTemplateIsAnErrorAtConstruction) {
  try {
    SendStat("echo {cost} {acc}", {"cost"});
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("SendStat"));
    EXPECT_THAT(e.what(), HasSubstr("'{acc}'"));
    EXPECT_THAT(e.what(), HasSubstr("'echo {cost} {acc}'"));
  }
  EXPECT_THROW(SendStat("echo {cost", {"cost"}), std::invalid_argument);
  EXPECT_THROW(SendStat("echo cost}", {"cost"}), std::invalid_argument);
}

}  // namespace misc_test
}  // namespace trainpack
