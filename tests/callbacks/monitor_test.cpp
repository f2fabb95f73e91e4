// The core of Monitors: put_scalar, get_history, get_latest.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "trainpack/callbacks/monitor.h"
#include "trainpack/testing.h"

namespace trainpack {
namespace monitor_test {

class Recorder : public MonitorBase {
 public:
  std::vector<std::pair<std::string, double>> seen;
  void process_scalar(const std::string& name, double value) override {
    seen.emplace_back(name, value);
  }
};

class PutsEveryStep : public Callback {
 protected:
  void _trigger_step() override {
    trainer().monitors().put_scalar("loss", 1.0 / static_cast<double>(global_step()));
  }
};

TEST(Monitors, RecordHistoryWithTheGlobalStepAtPutTime) {
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  auto rec = std::make_shared<Recorder>();
  trainer.train({std::make_shared<PutsEveryStep>()}, {rec}, 2, 1, 2);
  const Monitors::History expected = {{1, 1.0}, {2, 0.5}, {3, 1.0 / 3}, {4, 0.25}};
  EXPECT_EQ(trainer.monitors().get_history("loss"), expected);
  EXPECT_DOUBLE_EQ(trainer.monitors().get_latest("loss"), 0.25);
  EXPECT_EQ(rec->seen.size(), 4u);
  EXPECT_EQ(rec->seen.front(), (std::pair<std::string, double>{"loss", 1.0}));
}

TEST(Monitors, UnknownNamesHaveAnEmptyHistoryAndNoLatest) {
  Monitors monitors({});
  EXPECT_TRUE(monitors.get_history("nothing").empty());
  try {
    monitors.get_latest("nothing");
    FAIL();
  } catch (const std::out_of_range& e) {
    EXPECT_STREQ(e.what(), "No available data for the key: nothing; the names with data: none yet");
  }
}

TEST(Monitors, TheErrorForAMisspeltNameListsTheNamesWithData) {
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  auto validation = std::make_shared<testing::ActionCallback>();
  validation->trigger_epoch_fn = [](testing::ActionCallback& cb) {
    cb.trainer().monitors().put_scalar("val-mae", 0.5);
  };
  trainer.train({std::make_shared<PutsEveryStep>(), validation}, {}, 2, 1, 1);
  try {
    trainer.monitors().get_latest("val-mea");
    FAIL();
  } catch (const std::out_of_range& e) {
    EXPECT_STREQ(e.what(),
                 "No available data for the key: val-mea; the names with data: loss, val-mae");
  }
}

TEST(Monitors, AreNotChiefOnly) {
  EXPECT_FALSE(Monitors({}).chief_only());
  EXPECT_FALSE(Recorder().chief_only());
  EXPECT_EQ(NoOpMonitor("JSONWriter").name(), "NoOpMonitor(JSONWriter)");
  EXPECT_EQ(NoOpMonitor().name(), "NoOpMonitor");
}

TEST(Monitors, ANullMonitorIsAnError) { EXPECT_THROW(Monitors({nullptr}), std::invalid_argument); }

}  // namespace monitor_test
}  // namespace trainpack
