// Starting a run part-way without a checkpoint: starting_epoch and starting_global_step, as a
// tensorpack user sets starting_epoch and restores global_step.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainpack/core/session_init.h"
#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"
#include "trainpack/train/config.h"

namespace trainpack {
namespace starting_point_test {

using testing::LogCapture;
using testing::Trace;
using testing::TraceCallback;

TrainOptions no_defaults() { return TrainOptions().extra_callbacks({}).monitors({}); }

TEST(StartingPoint, StartingEpochAndGlobalStepSetTheCountersOfTheFirstStep) {
  auto trace = std::make_shared<Trace>();
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  LogCapture log;
  trainer.train_with_defaults(no_defaults()
                                  .callbacks({std::make_shared<TraceCallback>(trace)})
                                  .steps_per_epoch(2)
                                  .starting_epoch(3)
                                  .starting_global_step(20)
                                  .max_epoch(3));
  const Trace expected{"setup_graph ep=0 ls=-1 gs=20",  "before_train ep=2 ls=-1 gs=20",
                       "before_epoch ep=3 ls=-1 gs=20", "before_run ep=3 ls=0 gs=20",
                       "after_run ep=3 ls=0 gs=21",     "trigger_step ep=3 ls=0 gs=21",
                       "before_run ep=3 ls=1 gs=21",    "after_run ep=3 ls=1 gs=22",
                       "trigger_step ep=3 ls=1 gs=22",  "after_epoch ep=3 ls=1 gs=22",
                       "trigger_epoch ep=3 ls=1 gs=22", "trigger ep=3 ls=1 gs=22",
                       "after_train ep=3 ls=1 gs=22"};
  EXPECT_EQ(*trace, expected);
  EXPECT_TRUE(log.contains("Starting at epoch 3 with global_step 20."));
  EXPECT_EQ(trainer.global_step(), 22);
}

TEST(StartingPoint, UnsetStartsAtZero) {
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train_with_defaults(no_defaults().steps_per_epoch(2).starting_epoch(2).max_epoch(2));
  EXPECT_EQ(trainer.global_step(), 2);
}

TEST(StartingPoint, ResumePointBeforeTrainingShowsTheStartingGlobalStep) {
  NoOpTrainer trainer;
  trainer.set_starting_global_step(7);
  EXPECT_EQ(trainer.global_step(), 7);
  EXPECT_EQ(trainer.resume_point().global_step, 7);
}

// A SessionInit that restores counters, as SaverRestore does from a checkpoint.
class RestoresCounters : public SessionInit {
 public:
  void run_init(Trainer& trainer) override { trainer.set_resume_point(ResumePoint{2, 1, 5}); }
};

TEST(StartingPoint, ARestoredCheckpointsCountersWinWithAWarning) {
  auto trace = std::make_shared<Trace>();
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  LogCapture log;
  trainer.train_with_defaults(no_defaults()
                                  .callbacks({std::make_shared<TraceCallback>(trace)})
                                  .session_init(std::make_shared<RestoresCounters>())
                                  .steps_per_epoch(2)
                                  .starting_global_step(100)
                                  .max_epoch(2));
  EXPECT_EQ(trace->at(1), "before_train ep=1 ls=-1 gs=5");
  EXPECT_EQ(trainer.global_step(), 6);
  EXPECT_TRUE(
      log.contains("WRN starting_global_step=100 was given, but the restored checkpoint "
                   "continues at global_step 5. The checkpoint's counters are used."));
}

TEST(StartingPoint, BadValuesAreErrorsNamingTheSetting) {
  NoOpTrainer trainer;
  try {
    trainer.set_starting_global_step(-1);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "Trainer::set_starting_global_step: the step must be >= 0, got -1");
  }
  trainer.set_handle_signals(false);
  trainer.train({}, {}, 1, 1, 1);
  EXPECT_THROW(trainer.set_starting_global_step(3), std::logic_error);
}

}  // namespace starting_point_test
}  // namespace trainpack
