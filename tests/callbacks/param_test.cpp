// Hyperparameter setters (docs/tensorpack-differences.md #3 and #4), including a port of
// tensorpack's callbacks/param_test.py.
#include "trainpack/callbacks/param.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "support/errors.h"
#include "support/learning_rate.h"
#include "support/temp_dir.h"
#include "trainpack/core/trainer.h"
#include "trainpack/utils/float_repr.h"
#include "trainpack/utils/logger.h"

namespace trainpack {
namespace param_test {

using testing::message_of;

using ::testing::HasSubstr;
using Sets = std::vector<std::pair<int64_t, double>>;
using Schedule = ScheduledHyperParamSetter::Schedule;

// Records every log line while it lives.
class LogCapture {
 public:
  LogCapture() {
    id_ = logger::add_sink([this](logger::Level level, std::string_view message) {
      lines_.emplace_back(level, std::string(message));
    });
  }
  ~LogCapture() { logger::remove_sink(id_); }

  std::vector<std::string> at(logger::Level level) const {
    std::vector<std::string> out;
    for (const auto& [l, m] : lines_) {
      if (l == level) out.push_back(m);
    }
    return out;
  }
  std::vector<std::string> warnings() const { return at(logger::Level::kWarning); }
  // The lines (any level) that contain `part`.
  std::vector<std::string> containing(const std::string& part) const {
    std::vector<std::string> out;
    for (const auto& entry : lines_) {
      if (entry.second.find(part) != std::string::npos) out.push_back(entry.second);
    }
    return out;
  }

 private:
  int id_;
  std::vector<std::pair<logger::Level, std::string>> lines_;
};

// Sets global_step in before_train: placed before a setter, training "starts in the middle".
class SetGlobalStep : public Callback {
 public:
  explicit SetGlobalStep(int64_t step) : step_(step) {}

 protected:
  void _before_train() override { graph().variable("global_step").set(static_cast<double>(step_)); }

 private:
  int64_t step_;
};

// Puts `values[epoch]` into the monitors under `name` at the end of each listed epoch.
class StatProducer : public Callback {
 public:
  StatProducer(std::string name, std::map<int64_t, double> values)
      : name_(std::move(name)), values_(std::move(values)) {}

 protected:
  void _trigger() override {
    auto it = values_.find(epoch_num());
    if (it != values_.end()) trainer().monitors().put_scalar(name_, it->second);
  }

 private:
  std::string name_;
  std::map<int64_t, double> values_;
};

// tensorpack's ParamObject: a param named "param", starting at 1.0, whose setter records
// {trainer.global_step: value} (`history`, as tensorpack's test) and every set in order (`sets`).
class ParamFixture : public ::testing::Test {
 protected:
  HyperParamPtr param() {
    return std::make_shared<ObjAttrParam>([this] { return value_; },
                                          [this](double v) {
                                            value_ = v;
                                            history_[trainer_.global_step()] = v;
                                            sets_.emplace_back(trainer_.global_step(), v);
                                          },
                                          "param");
  }

  void train(std::vector<CallbackPtr> callbacks, int64_t steps_per_epoch, int64_t max_epoch,
             int64_t starting_epoch = 1) {
    trainer_.set_handle_signals(false);
    trainer_.train(callbacks, {}, steps_per_epoch, starting_epoch, max_epoch);
  }

  NoOpTrainer trainer_;
  double value_ = 1.0;
  std::map<int64_t, double> history_;
  Sets sets_;
  LogCapture log_;
};

// ---------------------------------------------------------------------------------------------
// tensorpack's param_test.py

class ScheduledHyperParamSetterTest : public ParamFixture {};

TEST_F(ScheduledHyperParamSetterTest, testInterpolation) {
  auto scheduler = std::make_shared<ScheduledHyperParamSetter>(
      param(), Schedule{{30, 0.3}, {40, 0.4}, {50, 0.5}},
      ScheduledHyperParamSetterOptions().interp("linear").step_based(true));
  train({scheduler}, 10, 50, /*starting_epoch=*/20);
  EXPECT_EQ(history_.begin()->first, 30);
  EXPECT_EQ(history_[30], 0.3);
  EXPECT_EQ(history_[40], 0.4);
  EXPECT_EQ(history_[45], 0.45);
  EXPECT_EQ(history_.rbegin()->first, 50);  // nothing after the last point
  EXPECT_EQ(history_.size(), 21u);
}

TEST_F(ScheduledHyperParamSetterTest, testSchedule) {
  auto scheduler = std::make_shared<ScheduledHyperParamSetter>(
      param(), Schedule{{10, 0.3}, {20, 0.4}, {30, 0.5}});
  train({scheduler}, 1, 50);
  EXPECT_EQ(history_.begin()->first, 10);
  EXPECT_EQ(history_.size(), 3u);
  EXPECT_EQ(history_, (std::map<int64_t, double>{{10, 0.3}, {20, 0.4}, {30, 0.5}}));
}

TEST_F(ScheduledHyperParamSetterTest, testStartAfterSchedule) {
  auto scheduler = std::make_shared<ScheduledHyperParamSetter>(
      param(), Schedule{{10, 0.3}, {20, 0.4}, {30, 0.5}},
      ScheduledHyperParamSetterOptions().set_at_beginning(false));
  train({scheduler}, 1, 92, /*starting_epoch=*/90);
  EXPECT_TRUE(history_.empty());
}

TEST_F(ScheduledHyperParamSetterTest, testStartAfterSchedule_SetAtBeginning) {
  auto scheduler = std::make_shared<ScheduledHyperParamSetter>(
      param(), Schedule{{10, 0.3}, {20, 0.4}, {30, 0.5}},
      ScheduledHyperParamSetterOptions().set_at_beginning(true));
  train({scheduler}, 1, 92, /*starting_epoch=*/90);
  EXPECT_EQ(history_, (std::map<int64_t, double>{{0, 0.5}}));
}

TEST_F(ScheduledHyperParamSetterTest, testWarningStartInTheMiddle) {
  auto scheduler = std::make_shared<ScheduledHyperParamSetter>(
      param(), Schedule{{10, 0.3}, {20, 0.4}, {30, 0.5}});
  train({scheduler}, 1, 21, /*starting_epoch=*/20);
  // tensorpack's test; the second warning is trainpack's (point 30 is after max_epoch).
  EXPECT_EQ(log_.warnings(),
            (std::vector<std::string>{
                "According to scheduler ScheduledHyperParamSetter(schedule=[(10, 0.3), (20, 0.4), "
                "(30, 0.5)]), parameter 'param' should become 0.3 at the current point (epoch19). "
                "However its current value is 1. ",
                "[ScheduledHyperParamSetter(schedule=[(10, 0.3), (20, 0.4), (30, 0.5)])] the "
                "schedule's point 30 is after max_epoch=21, so its value is never set (a point N "
                "is an epoch, set when epoch N ends); the last value it sets is param = 0.4, at "
                "the end of epoch 20. Shorten the schedule or raise max_epoch; if the points are "
                "global steps, pass ScheduledHyperParamSetterOptions().step_based(true)."}));
  EXPECT_EQ(log_.containing("Setting 'param'"),
            std::vector<std::string>{"Setting 'param' to 0.3."});
  EXPECT_EQ(history_, (std::map<int64_t, double>{{0, 0.3}, {1, 0.4}}));
}

TEST_F(ScheduledHyperParamSetterTest, testNoWarningStartInTheMiddle) {
  auto scheduler = std::make_shared<ScheduledHyperParamSetter>(
      param(), Schedule{{10, 0.3}, {20, 1.0}, {30, 1.5}});
  train({scheduler}, 1, 22, /*starting_epoch=*/21);
  // tensorpack's test: no start-up warning. Only trainpack's about point 30, after max_epoch.
  ASSERT_EQ(log_.warnings().size(), 1u);
  EXPECT_THAT(log_.warnings()[0], HasSubstr("the schedule's point 30 is after max_epoch=22"));
  EXPECT_EQ(history_, (std::map<int64_t, double>{{0, 1.0}}));
}

// ---------------------------------------------------------------------------------------------
// ScheduledHyperParamSetter

class ScheduledHyperParamSetterSchedule : public ParamFixture {};

TEST_F(ScheduledHyperParamSetterSchedule, EpochPointTakesEffectWhenThatEpochEnds) {
  auto setter = std::make_shared<ScheduledHyperParamSetter>(param(), Schedule{{1, 0.5}, {2, 0.25}});
  train({setter}, 2, 3);
  EXPECT_EQ(sets_, (Sets{{2, 0.5}, {4, 0.25}}));
}

TEST_F(ScheduledHyperParamSetterSchedule, EpochBasedDoesNothingInTriggerStep) {
  auto setter = std::make_shared<ScheduledHyperParamSetter>(param(), Schedule{{1, 0.5}});
  train({setter}, 3, 2);
  EXPECT_EQ(sets_, (Sets{{3, 0.5}}));
}

TEST_F(ScheduledHyperParamSetterSchedule, ZeroPointIsSetInBeforeTrain) {
  auto setter = std::make_shared<ScheduledHyperParamSetter>(param(), Schedule{{0, 0.1}, {2, 0.01}});
  train({setter}, 3, 3);
  EXPECT_EQ(sets_, (Sets{{0, 0.1}, {6, 0.01}}));
  EXPECT_EQ(log_.containing("[HyperParamSetter]"),
            (std::vector<std::string>{
                "[HyperParamSetter] At global_step=0, param is set to 0.100000",
                "[HyperParamSetter] At global_step=6, param changes from 0.100000 to 0.010000"}));
}

TEST_F(ScheduledHyperParamSetterSchedule, StepBasedSetsInTriggerStepAtTheIncrementedGlobalStep) {
  // Epoch 2 ends at global_step 4: the point is set once, by trigger_step, not again at the end.
  auto setter = std::make_shared<ScheduledHyperParamSetter>(
      param(), Schedule{{0, 0.1}, {3, 0.2}, {4, 0.3}},
      ScheduledHyperParamSetterOptions().step_based(true));
  train({setter}, 2, 3);
  EXPECT_EQ(sets_, (Sets{{0, 0.1}, {3, 0.2}, {4, 0.3}}));
}

TEST_F(ScheduledHyperParamSetterSchedule, LinearInterpolationSetsEveryStepBetweenPoints) {
  auto setter = std::make_shared<ScheduledHyperParamSetter>(
      param(), Schedule{{2, 1.0}, {6, 3.0}},
      ScheduledHyperParamSetterOptions().interp("linear").step_based(true));
  train({setter}, 8, 1);
  EXPECT_EQ(sets_, (Sets{{2, 1.0}, {3, 1.5}, {4, 2.0}, {5, 2.5}, {6, 3.0}}));
}

TEST_F(ScheduledHyperParamSetterSchedule, LinearInterpolationOfAnEpochSchedule) {
  auto setter = std::make_shared<ScheduledHyperParamSetter>(
      param(), Schedule{{0, 1.0}, {4, 0.0}}, ScheduledHyperParamSetterOptions().interp("linear"));
  train({setter}, 1, 6);
  EXPECT_EQ(sets_, (Sets{{0, 1.0}, {1, 0.75}, {2, 0.5}, {3, 0.25}, {4, 0.0}}));
}

TEST_F(ScheduledHyperParamSetterSchedule, NoExtrapolationAfterTheLastPoint) {
  auto setter = std::make_shared<ScheduledHyperParamSetter>(
      param(), Schedule{{1, 0.5}, {2, 1.0}},
      ScheduledHyperParamSetterOptions().interp("linear").step_based(true));
  train({setter}, 5, 2);
  EXPECT_EQ(sets_, (Sets{{1, 0.5}, {2, 1.0}}));
  EXPECT_EQ(value_, 1.0);
}

TEST_F(ScheduledHyperParamSetterSchedule, ValueAtFollowsTheSchedule) {
  ScheduledHyperParamSetter plain(param(), Schedule{{2, 1.0}, {6, 3.0}});
  EXPECT_EQ(plain.value_at(1), std::nullopt);
  EXPECT_EQ(plain.value_at(2), 1.0);
  EXPECT_EQ(plain.value_at(4), std::nullopt);
  EXPECT_EQ(plain.value_at(6), 3.0);
  EXPECT_EQ(plain.value_at(7), std::nullopt);
  ScheduledHyperParamSetter linear(param(), Schedule{{2, 1.0}, {6, 3.0}},
                                   ScheduledHyperParamSetterOptions().interp("linear"));
  EXPECT_EQ(linear.value_at(1), std::nullopt);
  EXPECT_EQ(linear.value_at(3), 1.5);
  EXPECT_EQ(linear.value_at(7), std::nullopt);
}

TEST_F(ScheduledHyperParamSetterSchedule, ChangesAreLoggedAtMostOncePerEpoch) {
  auto setter = std::make_shared<ScheduledHyperParamSetter>(
      param(), Schedule{{0, 0.0}, {4, 1.0}},
      ScheduledHyperParamSetterOptions().interp("linear").step_based(true));
  train({setter}, 4, 1);
  EXPECT_EQ(sets_, (Sets{{0, 0.0}, {1, 0.25}, {2, 0.5}, {3, 0.75}, {4, 1.0}}));
  EXPECT_EQ(log_.containing("[HyperParamSetter]"),
            (std::vector<std::string>{
                "[HyperParamSetter] At global_step=0, param is set to 0.000000",
                "[HyperParamSetter] At global_step=1, param changes from 0.000000 to 0.250000"}));
}

TEST_F(ScheduledHyperParamSetterSchedule, NameIsTensorpacksStr) {
  ScheduledHyperParamSetter setter(param(), Schedule{{30, 0.01}, {60, 1e-3}, {85, 1}, {95, 1e-5}});
  EXPECT_EQ(
      setter.name(),
      "ScheduledHyperParamSetter(schedule=[(30, 0.01), (60, 0.001), (85, 1.0), (95, 1e-05)])");
}

// ---- points after max_epoch ----

TEST_F(ScheduledHyperParamSetterSchedule, PointsAfterMaxEpochAreWarnedAboutOnceAtTheStart) {
  auto setter = std::make_shared<ScheduledHyperParamSetter>(
      param(), Schedule{{0, 0.5}, {2, 0.25}, {30, 0.125}, {60, 0.0625}});
  train({setter}, 1, 3);
  EXPECT_EQ(log_.warnings(),
            std::vector<std::string>{
                "[ScheduledHyperParamSetter(schedule=[(0, 0.5), (2, 0.25), (30, 0.125), (60, "
                "0.0625)])] the schedule's points 30, 60 are after max_epoch=3, so their values "
                "are never set (a point N is an epoch, set when epoch N ends); the last value it "
                "sets is param = 0.25, at the end of epoch 2. Shorten the schedule or raise "
                "max_epoch; if the points are global steps, pass "
                "ScheduledHyperParamSetterOptions().step_based(true)."});
  EXPECT_EQ(sets_, (Sets{{0, 0.5}, {2, 0.25}}));
}

TEST_F(ScheduledHyperParamSetterSchedule, ALinearScheduleAfterMaxEpochNamesTheInterpolatedValue) {
  auto setter = std::make_shared<ScheduledHyperParamSetter>(
      param(), Schedule{{0, 1.0}, {8, 0.0}}, ScheduledHyperParamSetterOptions().interp("linear"));
  train({setter}, 1, 2);
  EXPECT_EQ(log_.warnings(),
            std::vector<std::string>{
                "[ScheduledHyperParamSetter(schedule=[(0, 1.0), (8, 0.0)])] the schedule's point "
                "8 is after max_epoch=2, so its value is never set (a point N is an epoch, set "
                "when epoch N ends); the last value it sets is param = 0.75, at the end of epoch 2 "
                "(interpolated towards point 8). Shorten the schedule or raise max_epoch; if the "
                "points are global steps, pass "
                "ScheduledHyperParamSetterOptions().step_based(true)."});
}

TEST_F(ScheduledHyperParamSetterSchedule, AScheduleEntirelyAfterMaxEpochSetsNothing) {
  auto setter = std::make_shared<ScheduledHyperParamSetter>(param(), Schedule{{100, 0.5}});
  train({setter}, 1, 2);
  ASSERT_EQ(log_.warnings().size(), 1u);
  EXPECT_THAT(log_.warnings()[0],
              HasSubstr("the schedule's point 100 is after max_epoch=2, so its value is never set "
                        "(a point N is an epoch, set when epoch N ends); it sets no value during "
                        "training."));
  EXPECT_TRUE(sets_.empty());
}

// A point at max_epoch is set at the last epoch's end; step-based points are global steps. Neither
// is warned about.
TEST_F(ScheduledHyperParamSetterSchedule, APointAtMaxEpochOrAStepPointIsNotWarnedAbout) {
  auto at_end = std::make_shared<ScheduledHyperParamSetter>(param(), Schedule{{0, 0.5}, {3, 0.25}});
  auto steps = std::make_shared<ScheduledHyperParamSetter>(
      param(), Schedule{{0, 0.5}, {100, 0.25}},
      ScheduledHyperParamSetterOptions().step_based(true));
  train({at_end, steps}, 2, 3);
  EXPECT_TRUE(log_.warnings().empty()) << ::testing::PrintToString(log_.warnings());
}

// ---- the start-up check (docs/tensorpack-differences.md #3) ----

// The state is saved under a key without the schedule's values, so a run resumed with another
// schedule (a larger max_epoch) finds it; the run then continues by epoch: the value the
// checkpoint holds stands, and the new schedule takes over at its next point.
TEST_F(ScheduledHyperParamSetterSchedule, AResumeWithAnotherScheduleContinuesByEpoch) {
  auto first = std::make_shared<ScheduledHyperParamSetter>(
      param(), Schedule{{0, 0.1}, {1, 0.01}, {2, 0.001}});
  train({first}, 1, 3);
  ASSERT_EQ(value_, 0.001);
  const CallbackState saved = first->state();
  EXPECT_EQ(first->state_key(), "ScheduledHyperParamSetter(param)");

  NoOpTrainer resumed;
  resumed.set_handle_signals(false);
  auto second = std::make_shared<ScheduledHyperParamSetter>(
      param(), Schedule{{0, 0.1}, {6, 0.01}, {8, 0.001}});
  EXPECT_EQ(second->state_key(), first->state_key());
  sets_.clear();
  value_ = 0.5;  // the param as constructed: the state brings the checkpoint's value back
  second->load_state(saved);
  EXPECT_EQ(value_, 0.001);
  resumed.train({second}, {}, 1, 4, 7);
  // The values set (the steps recorded are the fixture trainer's): load_state's, then the point
  // (6, 0.01) at the end of epoch 6; not 0.1 at the start.
  std::vector<double> values;
  for (const auto& set : sets_) values.push_back(set.second);
  EXPECT_EQ(values, (std::vector<double>{0.001, 0.01}));
  EXPECT_EQ(value_, 0.01);
  EXPECT_EQ(log_.containing("resumed at epoch3").size(), 1u);
  EXPECT_FALSE(
      log_.containing("resumed at epoch3 with 'param' = 0.001 as the checkpoint's schedule "
                      "left it; this schedule gives 0.1 there (it is not the schedule the "
                      "checkpoint was trained with). Keeping 0.001; this schedule sets 0.01 "
                      "at the end of epoch 6.")
          .empty());
}

class ScheduledHyperParamSetterStartup : public ParamFixture {};

TEST_F(ScheduledHyperParamSetterStartup, AScheduledZeroCountsAtStartup) {
  // tensorpack's `value or previous` would skip the 0.0 and ask for 0.5.
  auto setter = std::make_shared<ScheduledHyperParamSetter>(param(), Schedule{{1, 0.5}, {5, 0.0}});
  train({setter}, 1, 8, /*starting_epoch=*/8);
  ASSERT_EQ(log_.warnings().size(), 1u);
  EXPECT_THAT(log_.warnings()[0],
              HasSubstr("parameter 'param' should become 0 at the current point (epoch7). However "
                        "its current value is 1. "));
  EXPECT_EQ(sets_, (Sets{{0, 0.0}}));
}

TEST_F(ScheduledHyperParamSetterStartup, AParamAlreadyAtAScheduledZeroIsNotReported) {
  value_ = 0.0;
  auto setter = std::make_shared<ScheduledHyperParamSetter>(param(), Schedule{{1, 0.5}, {5, 0.0}});
  train({setter}, 1, 8, /*starting_epoch=*/8);
  EXPECT_TRUE(log_.warnings().empty());
  EXPECT_TRUE(sets_.empty());
}

TEST_F(ScheduledHyperParamSetterStartup, StepBasedWarningNamesTheStep) {
  auto setter = std::make_shared<ScheduledHyperParamSetter>(
      param(), Schedule{{100, 0.1}}, ScheduledHyperParamSetterOptions().step_based(true));
  train({std::make_shared<SetGlobalStep>(150), setter}, 1, 1);
  EXPECT_EQ(log_.warnings(),
            std::vector<std::string>{
                "According to scheduler ScheduledHyperParamSetter(schedule=[(100, 0.1)]), "
                "parameter 'param' should become 0.1 at the current point (step 150). However its "
                "current value is 1. "});
  EXPECT_EQ(sets_, (Sets{{150, 0.1}}));
}

TEST_F(ScheduledHyperParamSetterStartup, StepBasedInterpolatedValueAtTheRestoredStep) {
  auto setter = std::make_shared<ScheduledHyperParamSetter>(
      param(), Schedule{{100, 1.0}, {200, 2.0}},
      ScheduledHyperParamSetterOptions().step_based(true).interp("linear"));
  train({std::make_shared<SetGlobalStep>(150), setter}, 1, 1);
  // before_train sets the interpolated value itself, so the check finds nothing to report.
  EXPECT_TRUE(log_.warnings().empty());
  ASSERT_EQ(sets_.size(), 2u);
  EXPECT_EQ(sets_[0], (std::pair<int64_t, double>{150, 1.5}));
  EXPECT_EQ(sets_[1].first, 151);
  EXPECT_DOUBLE_EQ(sets_[1].second, 1.51);
}

TEST_F(ScheduledHyperParamSetterStartup, WithoutSetAtBeginningOnlyWarns) {
  auto setter = std::make_shared<ScheduledHyperParamSetter>(
      param(), Schedule{{10, 0.3}}, ScheduledHyperParamSetterOptions().set_at_beginning(false));
  train({setter}, 1, 20, /*starting_epoch=*/20);
  ASSERT_EQ(log_.warnings().size(), 2u);
  EXPECT_THAT(log_.warnings()[0], HasSubstr("should become 0.3 at the current point (epoch19)"));
  EXPECT_EQ(log_.warnings()[1],
            "If there is no other scheduler being used, you may want to check whether your "
            "initialization of the parameter is as expected");
  EXPECT_TRUE(log_.containing("Setting 'param'").empty());
  EXPECT_TRUE(sets_.empty());
}

// ---- bad arguments ----

class ScheduledHyperParamSetterArgs : public ParamFixture {};

TEST_F(ScheduledHyperParamSetterArgs, EmptyScheduleThrows) {
  const std::string msg = message_of<std::invalid_argument>(
      [&] { std::make_shared<ScheduledHyperParamSetter>(param(), Schedule{}); });
  EXPECT_THAT(msg, HasSubstr("ScheduledHyperParamSetter"));
  EXPECT_THAT(msg, HasSubstr("schedule is empty"));
}

TEST_F(ScheduledHyperParamSetterArgs, DecreasingPointsThrowNamingTheIndexAndPoints) {
  const std::string msg = message_of<std::invalid_argument>([&] {
    std::make_shared<ScheduledHyperParamSetter>(param(), Schedule{{20, 0.4}, {10, 0.3}});
  });
  EXPECT_THAT(msg, HasSubstr("ScheduledHyperParamSetter"));
  EXPECT_THAT(msg,
              HasSubstr("schedule[1] = (10, 0.3) does not come after schedule[0] = (20, 0.4)"));
}

TEST_F(ScheduledHyperParamSetterArgs, RepeatedPointThrows) {
  const std::string msg = message_of<std::invalid_argument>([&] {
    std::make_shared<ScheduledHyperParamSetter>(param(), Schedule{{10, 0.4}, {10, 0.3}});
  });
  EXPECT_THAT(msg, HasSubstr("ScheduledHyperParamSetter"));
  EXPECT_THAT(msg, HasSubstr("schedule points must be strictly increasing"));
}

TEST_F(ScheduledHyperParamSetterArgs, NegativePointThrows) {
  const std::string msg = message_of<std::invalid_argument>([&] {
    std::make_shared<ScheduledHyperParamSetter>(param(), Schedule{{-1, 0.4}});
  });
  EXPECT_THAT(msg, HasSubstr("ScheduledHyperParamSetter"));
  EXPECT_THAT(msg, HasSubstr("schedule[0] = (-1, 0.4) has a negative point"));
}

TEST_F(ScheduledHyperParamSetterArgs, UnknownInterpThrows) {
  const std::string msg = message_of<std::invalid_argument>([&] {
    std::make_shared<ScheduledHyperParamSetter>(param(), Schedule{{1, 0.4}},
                                                ScheduledHyperParamSetterOptions().interp("cubic"));
  });
  EXPECT_THAT(msg, HasSubstr("ScheduledHyperParamSetter"));
  EXPECT_THAT(msg, HasSubstr("interp"));
  EXPECT_THAT(msg, HasSubstr("cubic"));
}

TEST_F(ScheduledHyperParamSetterArgs, NullParamThrows) {
  const std::string msg = message_of<std::invalid_argument>([&] {
    std::make_shared<ScheduledHyperParamSetter>(HyperParamPtr(), Schedule{{1, 0.4}});
  });
  EXPECT_THAT(msg, HasSubstr("ScheduledHyperParamSetter"));
  EXPECT_THAT(msg, HasSubstr("param"));
}

// ---------------------------------------------------------------------------------------------
// GraphVarParam, ObjAttrParam

class GraphVarParamTest : public ParamFixture {};

TEST_F(GraphVarParamTest, SetterWithANameSetsThatGraphVariable) {
  double lr = 0.5;
  std::vector<std::pair<int64_t, double>> lr_sets;
  trainer_.graph().add_variable(
      "learning_rate", [&] { return lr; },
      [&](double v) {
        lr = v;
        lr_sets.emplace_back(trainer_.global_step(), v);
      });
  auto setter =
      std::make_shared<ScheduledHyperParamSetter>("learning_rate", Schedule{{0, 0.1}, {1, 0.01}});
  train({setter}, 2, 2);
  EXPECT_EQ(lr_sets, (Sets{{0, 0.1}, {2, 0.01}}));
  EXPECT_EQ(setter->param().readable_name(), "learning_rate");
  EXPECT_EQ(setter->get_current_value(), 0.01);
}

TEST_F(GraphVarParamTest, UnknownVariableThrowsListingTheVariablesThatExist) {
  Graph graph;
  graph.add_variable(
      "learning_rate", [] { return 0.1; }, [](double) {});
  GraphVarParam lr("lr");
  const std::string msg = message_of<std::invalid_argument>([&] { lr.setup_graph(graph); });
  EXPECT_THAT(msg, HasSubstr("GraphVarParam('lr')"));
  EXPECT_THAT(msg, HasSubstr("'learning_rate'"));
}

TEST_F(GraphVarParamTest, UnknownVariableFailsTrainingAtSetupGraph) {
  auto setter = std::make_shared<ScheduledHyperParamSetter>("lr", Schedule{{0, 0.1}});
  try {
    train({setter}, 1, 1);
    FAIL() << "training did not fail";
  } catch (const CallbackError& e) {
    EXPECT_EQ(e.hook(), "setup_graph");
    EXPECT_THAT(e.what(), HasSubstr("GraphVarParam('lr')"));
    EXPECT_THAT(e.what(), HasSubstr("'global_step'"));
  }
}

TEST_F(GraphVarParamTest, IntegerVariableRejectsANonIntegralValue) {
  Graph graph;
  double step = 0;
  graph.add_variable(
      "step", [&] { return step; }, [&](double v) { step = v; }, /*is_floating=*/false);
  GraphVarParam p("step");
  p.setup_graph(graph);
  const std::string msg = message_of<std::invalid_argument>([&] { p.set_value(0.5); });
  EXPECT_THAT(msg, HasSubstr("HyperParam step has an integer type. Cannot update it using float"));
  EXPECT_EQ(step, 0);
}

TEST_F(GraphVarParamTest, IntegerVariableAcceptsAnIntegralValue) {
  Graph graph;
  double step = 0;
  graph.add_variable(
      "step", [&] { return step; }, [&](double v) { step = v; }, /*is_floating=*/false);
  GraphVarParam p("step");
  p.setup_graph(graph);
  p.set_value(7);
  EXPECT_EQ(p.get_value(), 7);
}

TEST_F(GraphVarParamTest, UseBeforeSetupGraphThrows) {
  GraphVarParam p("learning_rate");
  EXPECT_THROW(p.get_value(), std::logic_error);
  EXPECT_THROW(p.set_value(0.1), std::logic_error);
}

TEST_F(GraphVarParamTest, EmptyNameThrows) {
  const std::string msg =
      message_of<std::invalid_argument>([] { std::make_shared<GraphVarParam>(""); });
  EXPECT_THAT(msg, HasSubstr("GraphVarParam"));
  EXPECT_THAT(msg, HasSubstr("name"));
}

class ObjAttrParamTest : public ParamFixture {};

TEST_F(ObjAttrParamTest, GetsAndSetsThroughTheFunctions) {
  HyperParamPtr p = param();
  p->set_value(0.25);
  EXPECT_EQ(value_, 0.25);
  EXPECT_EQ(p->get_value(), 0.25);
  EXPECT_EQ(p->readable_name(), "param");
}

TEST_F(ObjAttrParamTest, EmptyGetThrows) {
  const std::string msg = message_of<std::invalid_argument>([] {
    std::make_shared<ObjAttrParam>(
        nullptr, [](double) {}, "x");
  });
  EXPECT_THAT(msg, HasSubstr("ObjAttrParam"));
  EXPECT_THAT(msg, HasSubstr("get"));
}

TEST_F(ObjAttrParamTest, EmptySetThrows) {
  const std::string msg = message_of<std::invalid_argument>(
      [] { std::make_shared<ObjAttrParam>([] { return 0.0; }, nullptr, "x"); });
  EXPECT_THAT(msg, HasSubstr("ObjAttrParam"));
  EXPECT_THAT(msg, HasSubstr("set"));
}

TEST_F(ObjAttrParamTest, EmptyReadableNameThrows) {
  const std::string msg = message_of<std::invalid_argument>(
      [] { std::make_shared<ObjAttrParam>([] { return 0.0; }, [](double) {}, ""); });
  EXPECT_THAT(msg, HasSubstr("ObjAttrParam"));
  EXPECT_THAT(msg, HasSubstr("readable_name"));
}

// ---------------------------------------------------------------------------------------------
// HyperParamSetterWithFunc (docs/tensorpack-differences.md #4)

class HyperParamSetterWithFuncTest : public ParamFixture {};

TEST_F(HyperParamSetterWithFuncTest, DecaysInBeforeTrainWithEpochNumStartingEpochMinusOne) {
  std::vector<int64_t> epochs;
  auto setter = std::make_shared<HyperParamSetterWithFunc>(param(), [&](int64_t e, double x) {
    epochs.push_back(e);
    return e % 2 == 0 ? x * 0.5 : x;
  });
  train({setter}, 1, 3);
  EXPECT_EQ(epochs, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(sets_, (Sets{{0, 0.5}, {1, 0.5}, {2, 0.25}, {3, 0.25}}));
}

TEST_F(HyperParamSetterWithFuncTest, BeforeTrainSeesTheEpochBeforeTheStartingEpoch) {
  std::vector<int64_t> epochs;
  auto setter = std::make_shared<HyperParamSetterWithFunc>(param(), [&](int64_t e, double x) {
    epochs.push_back(e);
    return x;
  });
  train({setter}, 1, 5, /*starting_epoch=*/5);
  EXPECT_EQ(epochs, (std::vector<int64_t>{4, 5}));
}

TEST_F(HyperParamSetterWithFuncTest, EmptyFuncThrows) {
  const std::string msg = message_of<std::invalid_argument>([&] {
    std::make_shared<HyperParamSetterWithFunc>(param(), HyperParamSetterWithFunc::Func());
  });
  EXPECT_THAT(msg, HasSubstr("HyperParamSetterWithFunc"));
  EXPECT_THAT(msg, HasSubstr("func"));
}

TEST_F(HyperParamSetterWithFuncTest, NullParamThrows) {
  const std::string msg = message_of<std::invalid_argument>([] {
    std::make_shared<HyperParamSetterWithFunc>(HyperParamPtr(),
                                               [](int64_t, double x) { return x; });
  });
  EXPECT_THAT(msg, HasSubstr("HyperParamSetterWithFunc"));
  EXPECT_THAT(msg, HasSubstr("param"));
}

// ---------------------------------------------------------------------------------------------
// StatMonitorParamSetter

class StatMonitorParamSetterTest : public ParamFixture {
 protected:
  std::shared_ptr<StatMonitorParamSetter> setter(double threshold, int64_t last_k,
                                                 bool reverse = false) {
    return std::make_shared<StatMonitorParamSetter>(
        param(), "val-error", [](double x) { return x * 0.1; }, threshold, last_k,
        StatMonitorParamSetterOptions().reverse(reverse));
  }
  CallbackPtr producer(std::map<int64_t, double> values) {
    return std::make_shared<StatProducer>("val-error", std::move(values));
  }
};

TEST_F(StatMonitorParamSetterTest, TriggersWhenTheStatDidNotImproveOverLastK) {
  // Windows of 3: [1.0 .8 .9] improved; [.8 .9 .85] did not -> change at epoch 4, history
  // cleared; [.85 .85 .85] (epochs 5-7) did not -> change at epoch 7.
  train({producer({{1, 1.0}, {2, 0.8}, {3, 0.9}, {4, 0.85}, {5, 0.85}, {6, 0.85}, {7, 0.85}}),
         setter(0, 3)},
        1, 7);
  ASSERT_EQ(sets_.size(), 2u);
  EXPECT_EQ(sets_[0], (std::pair<int64_t, double>{4, 1.0 * 0.1}));
  EXPECT_EQ(sets_[1], (std::pair<int64_t, double>{7, 1.0 * 0.1 * 0.1}));
  EXPECT_EQ(log_.containing("[StatMonitorParamSetter] Triggered"),
            (std::vector<std::string>{
                "[StatMonitorParamSetter] Triggered, history of val-error: 0.8,0.9,0.85",
                "[StatMonitorParamSetter] Triggered, history of val-error: 0.85,0.85,0.85"}));
}

TEST_F(StatMonitorParamSetterTest, DoesNotTriggerWhileTheStatImproves) {
  train({producer({{1, 1.0}, {2, 0.9}, {3, 0.8}, {4, 0.7}, {5, 0.6}}), setter(0, 2)}, 1, 5);
  EXPECT_TRUE(sets_.empty());
  EXPECT_TRUE(log_.warnings().empty());
}

TEST_F(StatMonitorParamSetterTest, ImprovementWithinTheThresholdCountsAsNone) {
  // min 0.92 is not below 1.0 - 0.1.
  train({producer({{1, 1.0}, {2, 0.95}, {3, 0.92}}), setter(0.1, 3)}, 1, 3);
  EXPECT_EQ(sets_, (Sets{{3, 0.1}}));
}

TEST_F(StatMonitorParamSetterTest, ReverseTriggersWhenTheStatDidNotIncrease) {
  // Windows of 3: [.5 .6 .55] increased; [.6 .55 .58] did not -> change at epoch 4.
  train({producer({{1, 0.5}, {2, 0.6}, {3, 0.55}, {4, 0.58}}), setter(0, 3, /*reverse=*/true)}, 1,
        4);
  EXPECT_EQ(sets_, (Sets{{4, 0.1}}));
}

TEST_F(StatMonitorParamSetterTest, WarnsWhenNoNewDataWasAddedSinceTheLastTrigger) {
  train({producer({{1, 1.0}}), setter(0, 2)}, 1, 2);
  EXPECT_EQ(log_.warnings(),
            std::vector<std::string>{"StatMonitorParamSetter is triggered, but no new data has "
                                     "been added since last time."});
  EXPECT_TRUE(sets_.empty());
}

TEST_F(StatMonitorParamSetterTest, WarnsWhenTheStatHasNoHistory) {
  train({setter(0, 2)}, 1, 1);
  EXPECT_EQ(log_.warnings(),
            std::vector<std::string>{
                "[StatMonitorParamSetter] No history data available for key 'val-error'."});
}

TEST_F(StatMonitorParamSetterTest, DoesNotRunInBeforeTrain) {
  train({setter(0, 1)}, 1, 0);  // zero epochs: only before_train and after_train
  // The one warning is the trainer's (no epoch will run), none is the setter's.
  ASSERT_EQ(log_.warnings().size(), 1u);
  EXPECT_THAT(log_.warnings()[0], HasSubstr("no epoch will run"));
  EXPECT_TRUE(sets_.empty());
}

TEST_F(StatMonitorParamSetterTest, EmptyStatNameThrows) {
  const std::string msg = message_of<std::invalid_argument>([&] {
    std::make_shared<StatMonitorParamSetter>(
        param(), "", [](double x) { return x; }, 0, 1);
  });
  EXPECT_THAT(msg, HasSubstr("StatMonitorParamSetter"));
  EXPECT_THAT(msg, HasSubstr("stat_name"));
}

TEST_F(StatMonitorParamSetterTest, EmptyValueFuncThrows) {
  const std::string msg = message_of<std::invalid_argument>(
      [&] { std::make_shared<StatMonitorParamSetter>(param(), "val-error", nullptr, 0, 1); });
  EXPECT_THAT(msg, HasSubstr("StatMonitorParamSetter"));
  EXPECT_THAT(msg, HasSubstr("value_func"));
}

TEST_F(StatMonitorParamSetterTest, LastKBelowOneThrows) {
  const std::string msg = message_of<std::invalid_argument>([&] {
    std::make_shared<StatMonitorParamSetter>(
        param(), "val-error", [](double x) { return x; }, 0, 0);
  });
  EXPECT_THAT(msg, HasSubstr("StatMonitorParamSetter"));
  EXPECT_THAT(msg, HasSubstr("last_k"));
}

TEST_F(StatMonitorParamSetterTest, NullParamThrows) {
  const std::string msg = message_of<std::invalid_argument>([] {
    std::make_shared<StatMonitorParamSetter>(
        HyperParamPtr(), "val-error", [](double x) { return x; }, 0, 1);
  });
  EXPECT_THAT(msg, HasSubstr("StatMonitorParamSetter"));
  EXPECT_THAT(msg, HasSubstr("param"));
}

// ---------------------------------------------------------------------------------------------
// HumanHyperParamSetter

// Writes `text` to `path` during trigger() of epoch `epoch` (placed before the setter).
class WriteFileAtEpoch : public Callback {
 public:
  WriteFileAtEpoch(std::string path, int64_t epoch, std::string text)
      : path_(std::move(path)), epoch_(epoch), text_(std::move(text)) {}

 protected:
  void _trigger() override {
    if (epoch_num() == epoch_) std::ofstream(path_) << text_;
  }

 private:
  std::string path_;
  int64_t epoch_;
  std::string text_;
};

class HumanHyperParamSetterTest : public testing::TempDirFixture<ParamFixture> {
 protected:
  void SetUp() override {
    testing::TempDirFixture<ParamFixture>::SetUp();
    logger::set_logger_dir(dir().string());
  }

  std::string hyper_path() const { return (dir() / "hyper.txt").string(); }
  void write(const std::string& text) { std::ofstream(hyper_path()) << text; }
  std::shared_ptr<HumanHyperParamSetter> setter() {
    return std::make_shared<HumanHyperParamSetter>(param());
  }
  // Trains one epoch of one step with a file holding `text`; the param must keep its value.
  void expect_kept(const std::string& text, const std::string& warning) {
    write(text);
    train({setter()}, 1, 1);
    EXPECT_TRUE(sets_.empty());
    EXPECT_EQ(value_, 1.0);
    // before_train and the end of epoch 1 each read the file; the file did not change, so the
    // warning is logged once.
    EXPECT_EQ(log_.warnings(), (std::vector<std::string>{warning}));
  }
};

// hyper.txt over a schedule at the same epoch end: the schedule logs its change, and the value the
// file puts back is logged after it, naming the setter, so the log's last word is what is in
// effect.
TEST_F(HumanHyperParamSetterTest, TheLastSetterToRunSaysWhatIsInEffect) {
  write("param: 0.05\n");
  train({std::make_shared<ScheduledHyperParamSetter>(param(), Schedule{{1, 0.01}}), setter()}, 1,
        1);
  EXPECT_EQ(value_, 0.05);
  const auto lines = log_.containing("[HyperParamSetter] At global_step=1");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "[HyperParamSetter] At global_step=1, param is set to 0.010000");
  EXPECT_EQ(lines[1],
            "[HyperParamSetter] At global_step=1, param changes from 0.010000 to 0.050000 "
            "(HumanHyperParamSetter)");
}

TEST_F(HumanHyperParamSetterTest, ReadsTheValueFromTheFile) {
  write("other: 3\nparam: 1e-4\n");
  train({setter()}, 1, 1);
  EXPECT_EQ(sets_, (Sets{{0, 1e-4}, {1, 1e-4}}));
  EXPECT_TRUE(log_.warnings().empty());
}

TEST_F(HumanHyperParamSetterTest, RereadsTheFileEveryTimeItRuns) {
  write("param: 0.5\n");
  train({std::make_shared<WriteFileAtEpoch>(hyper_path(), 1, "param:0.25"), setter()}, 1, 2);
  EXPECT_EQ(sets_, (Sets{{0, 0.5}, {1, 0.25}, {2, 0.25}}));
}

TEST_F(HumanHyperParamSetterTest, LogsTheFileItReads) {
  auto s = setter();
  EXPECT_EQ(s->path(), hyper_path());
  EXPECT_EQ(log_.containing("Use "),
            std::vector<std::string>{"Use " + hyper_path() + " to set hyperparam: 'param'."});
}

TEST_F(HumanHyperParamSetterTest, MissingFileChangesNothingSilently) {
  train({setter()}, 1, 2);
  EXPECT_TRUE(sets_.empty());
  EXPECT_TRUE(log_.warnings().empty());
}

TEST_F(HumanHyperParamSetterTest, NonNumericValueWarnsNamingFileAndLineAndKeepsTheValue) {
  expect_kept("other: 3\nparam: abc\n", "HumanHyperParamSetter: " + hyper_path() +
                                            " line 2 is not 'name: value'; keeping param = 1.0");
}

TEST_F(HumanHyperParamSetterTest, TwoColonsWarnNamingFileAndLineAndKeepTheValue) {
  expect_kept("param: 0.5:1\n", "HumanHyperParamSetter: " + hyper_path() +
                                    " line 1 is not 'name: value'; keeping "
                                    "param = 1.0");
}

TEST_F(HumanHyperParamSetterTest, LineWithoutColonWarnsNamingFileAndLineAndKeepsTheValue) {
  expect_kept("param 0.5\n", "HumanHyperParamSetter: " + hyper_path() +
                                 " line 1 is not 'name: value'; keeping param = 1.0");
}

TEST_F(HumanHyperParamSetterTest, BlankAndCommentLinesAreSkipped) {
  write("# the learning rate\n\nparam: 0.5\n   \n  # other: x\nother: 1\n");
  train({setter()}, 1, 1);
  EXPECT_EQ(sets_, (Sets{{0, 0.5}, {1, 0.5}}));
  EXPECT_TRUE(log_.warnings().empty());
}

TEST_F(HumanHyperParamSetterTest, EmptyNameWarnsNamingFileAndLineAndKeepsTheValue) {
  expect_kept("param: 0.5\n: 0.3\n", "HumanHyperParamSetter: " + hyper_path() +
                                         " line 2 is not 'name: value'; keeping "
                                         "param = 1.0");
}

TEST_F(HumanHyperParamSetterTest, FileWithoutTheNameWarnsAndKeepsTheValue) {
  expect_kept("other: 3\n", "HumanHyperParamSetter: cannot find 'param' in " + hyper_path() +
                                "; keeping param = 1.0");
}

TEST_F(HumanHyperParamSetterTest, WithoutLoggerDirThrows) {
  logger::unset_logger_dir();
  const std::string msg =
      message_of<std::invalid_argument>([&] { std::make_shared<HumanHyperParamSetter>(param()); });
  EXPECT_THAT(msg, HasSubstr("HumanHyperParamSetter"));
  EXPECT_THAT(msg, HasSubstr("file_name"));
  EXPECT_THAT(msg, HasSubstr("call trainpack::logger::set_logger_dir(dir) first"));
}

TEST_F(HumanHyperParamSetterTest, AbsoluteFileNameNeedsNoLoggerDir) {
  logger::unset_logger_dir();
  const std::string path = (dir() / "my-hyper.txt").string();
  std::filesystem::create_directories(dir());
  std::ofstream(path) << "param: 0.5\n";
  train({std::make_shared<HumanHyperParamSetter>(param(), path)}, 1, 1);
  EXPECT_EQ(sets_, (Sets{{0, 0.5}, {1, 0.5}}));
}

TEST_F(HumanHyperParamSetterTest, NullParamThrows) {
  const std::string msg = message_of<std::invalid_argument>(
      [] { std::make_shared<HumanHyperParamSetter>(HyperParamPtr()); });
  EXPECT_THAT(msg, HasSubstr("HumanHyperParamSetter"));
  EXPECT_THAT(msg, HasSubstr("param"));
}

// ---- ranges: a value outside the param's range is refused, the value kept ----

class HumanHyperParamSetterRangeTest : public HumanHyperParamSetterTest {
 protected:
  // A "learning_rate" graph variable with the learning rate's range, as SingleCostTrainer binds it.
  void add_learning_rate() { testing::add_learning_rate_variable(trainer_.graph(), &lr_); }
  double lr_ = 0.5;
};

TEST_F(HumanHyperParamSetterRangeTest, NanInfNegativeAndZeroLearningRatesAreRefused) {
  add_learning_rate();
  for (const char* bad_text : {"nan", "inf", "-inf", "-1", "0", "-0"}) {
    const std::string bad = bad_text;
    SCOPED_TRACE(bad);
    LogCapture log;
    NoOpTrainer trainer;  // a fresh trainer per value, sharing the variable
    testing::add_learning_rate_variable(trainer.graph(), &lr_);
    write("other: 3\nlearning_rate: " + bad + "\n");
    trainer.set_handle_signals(false);
    trainer.train({std::make_shared<HumanHyperParamSetter>("learning_rate")}, {}, 1, 1, 2);
    EXPECT_EQ(lr_, 0.5);
    const double v = std::stod(bad);
    EXPECT_EQ(log.warnings(),
              std::vector<std::string>{"HumanHyperParamSetter: " + hyper_path() +
                                       " line 2: learning_rate = " + python_float_repr(v) +
                                       " is outside its range (finite and > 0); keeping "
                                       "learning_rate = 0.5"});
  }
  write("learning_rate: 1e-3\n");  // a valid value applies
  train({std::make_shared<HumanHyperParamSetter>("learning_rate")}, 1, 1);
  EXPECT_EQ(lr_, 1e-3);
}

TEST_F(HumanHyperParamSetterRangeTest, AUserParamsRangeIsKept) {
  auto p =
      std::make_shared<ObjAttrParam>([this] { return value_; }, [this](double v) { value_ = v; },
                                     "param", ValueRange().min(0).max(1));
  write("param: 1.5\n");
  train({std::make_shared<WriteFileAtEpoch>(hyper_path(), 1, "param: 1\n"),
         std::make_shared<HumanHyperParamSetter>(p)},
        1, 1);
  EXPECT_EQ(value_, 1.0);
  EXPECT_EQ(log_.warnings(),
            std::vector<std::string>{"HumanHyperParamSetter: " + hyper_path() +
                                     " line 1: param = 1.5 is outside its range (finite, >= 0 and "
                                     "<= 1); keeping param = 1.0"});
}

TEST_F(HumanHyperParamSetterTest, ALargeFileIsNotReadAndWarnedOnce) {
  write("param: 0.5\n" + std::string(HumanHyperParamSetter::kMaxFileSize, '#'));
  train({setter()}, 1, 3);
  EXPECT_TRUE(sets_.empty());
  const std::string size = std::to_string(HumanHyperParamSetter::kMaxFileSize + 11);
  EXPECT_EQ(log_.warnings(),
            std::vector<std::string>{"HumanHyperParamSetter: " + hyper_path() + " is " + size +
                                     " bytes, more than the 65536-byte limit for a hyper-parameter "
                                     "file and is not read; keeping param = 1.0"});
}

// A hyper.txt planted as a link (in a shared directory, to a file the job may read but the log's
// readers may not) is not followed, and nothing of the linked file reaches the log.
TEST_F(HumanHyperParamSetterTest, ASymbolicLinkIsNotFollowedAndNothingOfItsTargetIsLogged) {
  std::filesystem::create_directories(dir());
  const std::string secret = (dir() / "secret.txt").string();
  {
    std::ofstream out(secret);
    out << "param: 0.5 SECRET-value\nSECRET-line\n";
  }
  ASSERT_EQ(::symlink(secret.c_str(), hyper_path().c_str()), 0);
  train({setter()}, 1, 2);
  EXPECT_TRUE(sets_.empty());
  EXPECT_EQ(log_.warnings(),
            std::vector<std::string>{"HumanHyperParamSetter: " + hyper_path() +
                                     " is not a regular file (a symbolic link) and is not read; "
                                     "keeping param = 1.0"});
  EXPECT_TRUE(log_.containing("SECRET").empty());
}

// A malformed line is named by its number, never quoted: the file may hold what the log (more
// readable than the file) should not.
TEST_F(HumanHyperParamSetterTest, AMalformedLineIsNamedNotQuoted) {
  expect_kept("param: 0.5\nthis is SECRET-junk\n",
              "HumanHyperParamSetter: " + hyper_path() +
                  " line 2 is not 'name: value'; keeping param = 1.0");
}

TEST_F(HumanHyperParamSetterTest, BinaryContentIsNamedByLineNotQuotedAndWarnedOncePerChange) {
  std::string binary = "param: 0.5\n";
  for (int i = 0; i < 2000; ++i) {
    if (i % 256 != '\n') binary += static_cast<char>(i % 256);  // one long line
  }
  write(binary);
  train({std::make_shared<WriteFileAtEpoch>(hyper_path(), 2, "param: 0.5\nparam 0.25\n"), setter()},
        1, 4);
  EXPECT_TRUE(sets_.empty());
  const std::vector<std::string> warnings = log_.warnings();
  ASSERT_EQ(warnings.size(), 2u);  // one for each version of the file, over five reads
  EXPECT_THAT(warnings[0], HasSubstr(" line 2 is not 'name: value'; keeping param = 1.0"));
  EXPECT_LT(warnings[0].size(), 300u);  // the line is named, not quoted
  for (const std::string& w : warnings) {
    for (const char c : w) {
      EXPECT_TRUE(static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f)
          << static_cast<int>(c);
    }
  }
  EXPECT_EQ(warnings[1], "HumanHyperParamSetter: " + hyper_path() +
                             " line 2 is not 'name: value'; keeping param = 1.0");
}

TEST_F(HumanHyperParamSetterTest, ManyBadLinesGiveOneWarning) {
  std::string text;
  for (int i = 0; i < 1000; ++i) text += "garbage\n";
  expect_kept(text, "HumanHyperParamSetter: " + hyper_path() +
                        " line 1 is not 'name: value' (999 more lines are "
                        "malformed); keeping param = 1.0");
}

TEST_F(HumanHyperParamSetterTest, AFifoIsNotReadAndWarnedOnce) {
  std::filesystem::create_directories(dir());
  ASSERT_EQ(::mkfifo(hyper_path().c_str(), 0600), 0);
  train({setter()}, 1, 2);
  EXPECT_TRUE(sets_.empty());
  EXPECT_EQ(log_.warnings(), std::vector<std::string>{
                                 "HumanHyperParamSetter: " + hyper_path() +
                                 " is not a regular file (a FIFO) and is not read; keeping param = "
                                 "1.0"});
}

class SetterRangeTest : public ParamFixture {
 protected:
  HyperParamPtr positive_param() {
    return std::make_shared<ObjAttrParam>([this] { return value_; },
                                          [this](double v) {
                                            value_ = v;
                                            sets_.emplace_back(trainer_.global_step(), v);
                                          },
                                          "param", ValueRange().min_exclusive(0));
  }
};

TEST_F(SetterRangeTest, AScheduleToANegativeValueIsRefused) {
  auto setter =
      std::make_shared<ScheduledHyperParamSetter>(positive_param(), Schedule{{0, 0.1}, {1, -1}});
  train({setter}, 1, 2);
  EXPECT_EQ(sets_, (Sets{{0, 0.1}}));
  EXPECT_EQ(value_, 0.1);
  EXPECT_EQ(log_.warnings(),
            std::vector<std::string>{
                "[HyperParamSetter] ScheduledHyperParamSetter(schedule=[(0, 0.1), (1, -1.0)]) "
                "gives param = -1.0, outside its range (finite and > 0); keeping param = 0.1"});
}

TEST_F(SetterRangeTest, AScheduleOutOfRangeAtStartIsRefusedOnce) {
  auto setter = std::make_shared<ScheduledHyperParamSetter>(positive_param(), Schedule{{0, 0}});
  train({setter}, 1, 1);
  EXPECT_TRUE(sets_.empty());
  EXPECT_EQ(log_.warnings(),
            std::vector<std::string>{
                "[HyperParamSetter] ScheduledHyperParamSetter(schedule=[(0, 0.0)]) gives param = "
                "0.0, outside its range (finite and > 0); keeping param = 1.0"});
}

TEST_F(SetterRangeTest, AFunctionGivingNanIsRefused) {
  auto setter = std::make_shared<HyperParamSetterWithFunc>(
      param(), [](int64_t e, double x) { return e == 1 ? std::nan("") : x / 2; });
  train({setter}, 1, 2);  // the default range: any finite value
  EXPECT_EQ(sets_, (Sets{{0, 0.5}, {2, 0.25}}));
  EXPECT_EQ(log_.warnings(),
            std::vector<std::string>{"[HyperParamSetter] HyperParamSetterWithFunc gives param = "
                                     "nan, outside its range (finite); keeping param = 0.5"});
}

TEST_F(SetterRangeTest, AStatMonitorGivingANegativeValueIsRefused) {
  auto setter = std::make_shared<StatMonitorParamSetter>(
      positive_param(), "val-error", [](double x) { return x - 2; }, 0, 1);
  train({std::make_shared<StatProducer>("val-error", std::map<int64_t, double>{{1, 0.5}}), setter},
        1, 1);
  EXPECT_TRUE(sets_.empty());
  EXPECT_THAT(log_.warnings(),
              ::testing::Contains("[HyperParamSetter] StatMonitorParamSetter gives param = -1.0, "
                                  "outside its range (finite and > 0); keeping param = 1.0"));
}

TEST_F(SetterRangeTest, AGraphVarParamsRangeIsWithinTheVariables) {
  testing::add_learning_rate_variable(trainer_.graph(), &value_);
  auto p = std::make_shared<GraphVarParam>("learning_rate", ValueRange().max(0.5));
  auto setter = std::make_shared<HyperParamSetterWithFunc>(
      p, [](int64_t e, double) { return e == 0 ? 0.25 : 0.75; });
  train({setter}, 1, 1);
  EXPECT_EQ(p->range().str(), "finite, > 0 and <= 0.5");
  EXPECT_EQ(value_, 0.25);
  EXPECT_THAT(log_.warnings(),
              ::testing::ElementsAre(HasSubstr("gives learning_rate = 0.75, outside its range "
                                               "(finite, > 0 and <= 0.5); keeping learning_rate = "
                                               "0.25")));
}

TEST_F(SetterRangeTest, AGraphVarParamWhoseRangeLeavesNoValueFailsAtSetup) {
  testing::add_learning_rate_variable(trainer_.graph(), &value_);
  auto setter = std::make_shared<HyperParamSetterWithFunc>(
      std::make_shared<GraphVarParam>("learning_rate", ValueRange().max(0)),
      [](int64_t, double x) { return x; });
  const std::string msg = message_of<CallbackError>([&] { train({setter}, 1, 1); });
  EXPECT_THAT(msg, HasSubstr("GraphVarParam('learning_rate'): its range (finite and <= 0) "
                             "leaves no value of the variable's (finite and > 0)"));
}

TEST(ValueRangeTest, BoundsAndText) {
  EXPECT_EQ(ValueRange().str(), "finite");
  EXPECT_TRUE(ValueRange().contains(-1e300));
  EXPECT_FALSE(ValueRange().contains(HUGE_VAL));
  EXPECT_FALSE(ValueRange().contains(std::nan("")));
  const ValueRange r = ValueRange().min(0).max_exclusive(1);
  EXPECT_EQ(r.str(), "finite, >= 0 and < 1");
  EXPECT_TRUE(r.contains(0));
  EXPECT_FALSE(r.contains(1));
  EXPECT_FALSE(r.contains(-1e-300));
  EXPECT_EQ(message_of<std::invalid_argument>([] { ValueRange().min(std::nan("")); }),
            "ValueRange: the lower bound is NaN");
  EXPECT_EQ(message_of<std::invalid_argument>([] { ValueRange().min(1).max_exclusive(1); }),
            "ValueRange: no value is finite, >= 1 and < 1; check the bounds");
}

}  // namespace param_test
}  // namespace trainpack

namespace trainpack {
namespace param_test {

TEST(HyperParamRefTest, AcceptsASharedPtrToAnyHyperParamSubclass) {
  double value = 1.0;
  auto param = std::make_shared<ObjAttrParam>([&] { return value; }, [&](double v) { value = v; },
                                              "dropout");
  auto setter = std::make_shared<HyperParamSetterWithFunc>(
      param, [](int64_t, double current) { return current / 2; });
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train({setter}, {}, 1, 1, 2);
  EXPECT_DOUBLE_EQ(value, 0.125);  // before_train, then after epochs 1 and 2
}

}  // namespace param_test
}  // namespace trainpack
