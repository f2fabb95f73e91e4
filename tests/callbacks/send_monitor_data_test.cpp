// SendMonitorData: runs its command once every named stat has a fresh value.
#include "trainpack/callbacks/send_monitor_data.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "support/files.h"
#include "support/temp_dir.h"
#include "trainpack/callbacks/monitor.h"
#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"

namespace trainpack {
namespace send_monitor_data_test {

using testing::ActionCallback;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::LogCapture;

class SendMonitorDataTest : public testing::TempDirTest {
 protected:
  std::string out_path() const { return path("out.txt").string(); }
  std::string read_out() const { return testing::read_text(out_path()); }

  // Puts "a/loss" = global_step / 10 at every step and "b (x)" = global_step at every other one.
  static CallbackPtr putter() {
    auto cb = std::make_shared<ActionCallback>();
    cb->trigger_step_fn = [](ActionCallback& self) {
      const auto gs = static_cast<double>(self.global_step());
      self.trainer().monitors().put_scalar("a/loss", gs / 10);
      if (self.global_step() % 2 == 0) self.trainer().monitors().put_scalar("b (x)", gs);
    };
    return cb;
  }

  static void train(std::vector<CallbackPtr> callbacks, std::vector<MonitorPtr> monitors,
                    int64_t spe, int64_t max_epoch) {
    NoOpTrainer trainer;
    trainer.set_handle_signals(false);
    trainer.train(callbacks, monitors, spe, 1, max_epoch);
  }
};

TEST_F(SendMonitorDataTest, RunsWhenAllStatsArePresentThenWaitsAgain) {
  auto send = std::make_shared<SendMonitorData>("echo {a/loss} {b (x)} >> " + out_path(),
                                                std::vector<std::string>{"a/loss", "b (x)"});
  EXPECT_FALSE(send->chief_only());
  train({putter()}, {send}, 5, 1);
  // Steps 2 and 4 complete the pair; step 3's a/loss alone does not.
  EXPECT_EQ(read_out(), "0.2 2.0\n0.4 4.0\n");
}

TEST_F(SendMonitorDataTest, MissingStatMeansNothingRuns) {
  auto send = std::make_shared<SendMonitorData>("echo {a/loss} {c} >> " + out_path(),
                                                std::vector<std::string>{"a/loss", "c"});
  LogCapture log;
  train({putter()}, {send}, 3, 2);
  EXPECT_FALSE(std::filesystem::exists(out_path()));
  EXPECT_TRUE(log.lines().empty() || !log.contains("Command"));
}

TEST_F(SendMonitorDataTest, NonZeroExitIsAnErrorLineAndTrainingGoesOn) {
  auto send =
      std::make_shared<SendMonitorData>("exit 2 # {b (x)}", std::vector<std::string>{"b (x)"});
  LogCapture log;
  train({putter()}, {send}, 4, 1);
  std::vector<std::string> errors;
  for (const auto& l : log.lines()) {
    if (l.rfind("ERR ", 0) == 0) errors.push_back(l);
  }
  EXPECT_THAT(errors, ElementsAre("ERR Command 'exit 2 # 2.0' failed with ret=2!",
                                  "ERR Command 'exit 2 # 4.0' failed with ret=2!"));
}

TEST_F(SendMonitorDataTest, BadTemplateIsAnErrorAtConstruction) {
  try {
    SendMonitorData("echo {a/loss} {nope}", {"a/loss"});
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("SendMonitorData"));
    EXPECT_THAT(e.what(), HasSubstr("'{nope}'"));
    EXPECT_THAT(e.what(), HasSubstr("'echo {a/loss} {nope}'"));
  }
  EXPECT_THROW(SendMonitorData("echo {a/loss", {"a/loss"}), std::invalid_argument);
  EXPECT_THROW(SendMonitorData("echo a}", {"a"}), std::invalid_argument);
}

}  // namespace send_monitor_data_test
}  // namespace trainpack
