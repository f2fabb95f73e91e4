// EarlyStopping (callbacks/early_stopping.h): the exact epoch at which it stops for scripted
// values of a stat (min and max mode, the min_delta edge, NaN, a stat put every other epoch, a
// misspelt stat, strict or not), its state in checkpoints (a resumed run stops at the uninterrupted
// run's epoch) and its argument checks.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "support/errors.h"
#include "support/model_trainer.h"
#include "support/stat_putter.h"
#include "support/temp_dir.h"
#include "trainpack/callbacks/early_stopping.h"
#include "trainpack/callbacks/saver.h"
#include "trainpack/core/callback_state.h"
#include "trainpack/core/exceptions.h"
#include "trainpack/core/session_init.h"
#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"
#include "trainpack/utils/checkpoint.h"

namespace trainpack {
namespace early_stopping_test {

using testing::ActionCallback;
using testing::LogCapture;
using testing::message_of;
using testing::stat_putter;

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// A testing::ModelTrainer (plain SGD, signals not handled) that trains 2 steps per epoch and
// records the epochs that began.
struct EpochRecordingTrainer : testing::ModelTrainer {
  std::vector<int64_t> epochs;  // the epochs that began

  EpochRecordingTrainer()
      : ModelTrainer(testing::ModelTrainerOptions().momentum(0).handle_signals(false)) {}
  // Trains 2 steps per epoch up to `max_epoch` (or until a StopTraining).
  void train(std::vector<CallbackPtr> callbacks, int64_t max_epoch,
             std::shared_ptr<SessionInit> init = nullptr) {
    auto rec = std::make_shared<ActionCallback>();
    rec->before_epoch_fn = [this](ActionCallback& self) { epochs.push_back(self.epoch_num()); };
    callbacks.insert(callbacks.begin(), rec);
    ModelTrainer::train(callbacks, 2, max_epoch, std::move(init));
  }
  int64_t last_epoch() const { return epochs.empty() ? 0 : epochs.back(); }
};

// Trains with `values` put as "val-error" at those epochs' ends, then `es`; returns the last
// epoch that ran.
int64_t stop_epoch(std::map<int64_t, double> values, std::shared_ptr<EarlyStopping> es,
                   int64_t max_epoch = 20) {
  EpochRecordingTrainer m;
  m.train({stat_putter("val-error", std::move(values)), es}, max_epoch);
  return m.last_epoch();
}

TEST(EarlyStopping, MinModeStopsWhenPatienceChecksInARowDidNotImprove) {
  auto es = std::make_shared<EarlyStopping>("val-error", EarlyStoppingOptions().patience(3));
  LogCapture log;
  // best 0.5 at epoch 2; 0.6, 0.5 (equal: no improvement), 0.7: three checks -> stop at 5.
  EXPECT_EQ(stop_epoch({{1, 1.0}, {2, 0.5}, {3, 0.6}, {4, 0.5}, {5, 0.7}, {6, 0.1}}, es), 5);
  EXPECT_EQ(es->wait_count(), 3);
  EXPECT_EQ(*es->best_value(), 0.5);
  EXPECT_EQ(es->best_epoch(), 2);
  EXPECT_EQ(es->best_step(), 4);
  EXPECT_TRUE(
      log.contains("Training was stopped by exception EarlyStopping: 'val-error' did not "
                   "improve by more than 0 for 3 checks; best 0.5 at epoch 2 "
                   "(global_step 4)."));
  EXPECT_TRUE(
      log.contains("[EarlyStopping] 'val-error' did not improve (2/3); best 0.5 at epoch 2 "
                   "(global_step 4)."));
}

TEST(EarlyStopping, AnImprovementResetsTheCount) {
  auto es = std::make_shared<EarlyStopping>("val-error", EarlyStoppingOptions().patience(2));
  // 1.0; 1.5 (wait 1); 0.9 (best, wait 0); 0.95 (1); 0.99 (2) -> stop at 5.
  EXPECT_EQ(stop_epoch({{1, 1.0}, {2, 1.5}, {3, 0.9}, {4, 0.95}, {5, 0.99}, {6, 0.1}}, es), 5);
  EXPECT_EQ(es->best_epoch(), 3);
}

TEST(EarlyStopping, MaxModeStopsWhenTheStatStopsRising) {
  auto es =
      std::make_shared<EarlyStopping>("val-error", EarlyStoppingOptions().patience(2).mode("max"));
  // 0.5, 0.75 (best), 0.75 (equal: 1), 0.25 (2) -> stop at 4.
  EXPECT_EQ(stop_epoch({{1, 0.5}, {2, 0.75}, {3, 0.75}, {4, 0.25}, {5, 0.9}}, es), 4);
  EXPECT_EQ(*es->best_value(), 0.75);
  EXPECT_EQ(es->best_epoch(), 2);
}

TEST(EarlyStopping, AnImprovementOfExactlyMinDeltaDoesNotCount) {
  auto es = std::make_shared<EarlyStopping>("val-error",
                                            EarlyStoppingOptions().patience(2).min_delta(0.25));
  // 1.0; 0.75 (exactly 0.25 better: wait 1); 0.625 (0.375 better: best, wait 0);
  // 0.375 (exactly 0.25 better: 1); 0.5 (2) -> stop at 5.
  EXPECT_EQ(stop_epoch({{1, 1.0}, {2, 0.75}, {3, 0.625}, {4, 0.375}, {5, 0.5}, {6, 0.0}}, es), 5);
  EXPECT_EQ(*es->best_value(), 0.625);
  EXPECT_EQ(es->best_epoch(), 3);

  auto max = std::make_shared<EarlyStopping>(
      "val-error", EarlyStoppingOptions().patience(1).min_delta(0.25).mode("max"));
  // 0.5; 0.75 is exactly 0.25 higher: no improvement -> stop at 2.
  EXPECT_EQ(stop_epoch({{1, 0.5}, {2, 0.75}, {3, 2.0}}, max), 2);
}

TEST(EarlyStopping, ANaNStopsAtOnceWithCheckFinite) {
  auto es = std::make_shared<EarlyStopping>("val-error", EarlyStoppingOptions().patience(5));
  LogCapture log;
  EXPECT_EQ(stop_epoch({{1, 1.0}, {2, 0.5}, {3, kNaN}, {4, 0.1}}, es), 3);
  EXPECT_TRUE(
      log.contains("EarlyStopping: 'val-error' is nan at epoch 3; best 0.5 at epoch 2 "
                   "(global_step 4)."));
  EXPECT_EQ(*es->best_value(), 0.5);
}

TEST(EarlyStopping, WithoutCheckFiniteANaNIsNotAnImprovement) {
  auto es = std::make_shared<EarlyStopping>("val-error",
                                            EarlyStoppingOptions().patience(2).check_finite(false));
  // NaN first: not better than +inf (wait 1); 1.0 (best); NaN (1); NaN (2) -> stop at 4.
  EXPECT_EQ(stop_epoch({{1, kNaN}, {2, 1.0}, {3, kNaN}, {4, kNaN}, {5, 0.1}}, es), 4);
  EXPECT_EQ(es->best_epoch(), 2);
}

TEST(EarlyStopping, OnlyNewValuesAreCounted) {
  auto es = std::make_shared<EarlyStopping>("val-error", EarlyStoppingOptions().patience(2));
  // Put every other epoch: epochs 3, 5 see no new value. 1 (best), 2 (1), 3 (2) -> stop at 6.
  EXPECT_EQ(stop_epoch({{2, 1.0}, {4, 2.0}, {6, 3.0}, {8, 0.0}}, es), 6);
  EXPECT_EQ(es->best_epoch(), 2);
}

// A misspelt stat, strict (the default): training fails at the first epoch end where every
// validation has run, listing the stats that exist.
TEST(EarlyStopping, AMisspeltStatStopsTrainingOnceTheValidationHasRun) {
  auto es = std::make_shared<EarlyStopping>("val-eror", EarlyStoppingOptions().patience(1));
  EpochRecordingTrainer m;
  // A StopTraining would end training without an exception: the run fails instead.
  const std::string msg = message_of<CallbackError>([&] {
    m.train({stat_putter("val-error", {{2, 0.5}, {3, 0.25}}), es}, 3);
  });
  EXPECT_EQ(msg,
            "Callback EarlyStopping failed in trigger_epoch: EarlyStopping: 'val-eror' has not "
            "been put by global_step=4 (epoch 2), though every validation has run "
            "(ActionCallback). The stats put so far: val-error. Check the name, and that the "
            "callback that puts it comes before EarlyStopping in the callbacks; or, for a stat "
            "that comes later, pass EarlyStoppingOptions().strict(false) to warn instead");
  EXPECT_EQ(m.last_epoch(), 2);  // epoch 1, before the validation ran, said nothing
}

// With strict(false): one warning, listing the stats, when the validation has run, never
// repeated; nothing counted, training not stopped.
TEST(EarlyStopping, WithoutStrictAStatNeverPutWarnsOnceAndNeverStops) {
  auto es =
      std::make_shared<EarlyStopping>("val-eror", EarlyStoppingOptions().patience(1).strict(false));
  LogCapture log;
  EXPECT_EQ(stop_epoch({{1, 0.5}, {2, 0.25}, {3, 0.125}}, es, 3), 3);
  int warnings = 0;
  for (const auto& line : log.lines()) warnings += line.find("'val-eror'") != std::string::npos;
  EXPECT_EQ(warnings, 1);
  EXPECT_TRUE(log.contains(
      "WRN [EarlyStopping] 'val-eror' has not been put by global_step=2 (epoch 1), though every "
      "validation has run (ActionCallback). The stats put so far: val-error. Check the name, and "
      "that the callback that puts it comes before EarlyStopping in the callbacks. Training goes "
      "on (strict(false))."));
  EXPECT_FALSE(es->best_value().has_value());
  EXPECT_EQ(es->wait_count(), 0);
}

// A validator that has not run yet: its stat is not missing, whatever strict says.
TEST(EarlyStopping, AStatWhoseValidationHasNotRunIsNotMissing) {
  auto es = std::make_shared<EarlyStopping>("val-error", EarlyStoppingOptions().patience(1));
  LogCapture log;
  EXPECT_EQ(stop_epoch({{9, 0.5}}, es, 3), 3);
  EXPECT_FALSE(log.contains("has not been put"));
  EXPECT_FALSE(es->best_value().has_value());
}

TEST(EarlyStopping, BadArgumentsNameTheOption) {
  EXPECT_EQ(message_of<std::invalid_argument>(
                [] { EarlyStopping("val-error", EarlyStoppingOptions().patience(0)); }),
            "EarlyStopping: patience must be >= 1 (the checks without an improvement that stop "
            "training), got 0");
  EXPECT_EQ(message_of<std::invalid_argument>(
                [] { EarlyStopping("val-error", EarlyStoppingOptions().min_delta(-0.5)); }),
            "EarlyStopping: min_delta must be a finite number >= 0 (the smallest change that "
            "counts as an improvement), got -0.5");
  EXPECT_EQ(message_of<std::invalid_argument>(
                [] { EarlyStopping("val-error", EarlyStoppingOptions().min_delta(kNaN)); }),
            "EarlyStopping: min_delta must be a finite number >= 0 (the smallest change that "
            "counts as an improvement), got nan");
  EXPECT_EQ(message_of<std::invalid_argument>(
                [] { EarlyStopping("val-error", EarlyStoppingOptions().mode("avg")); }),
            "EarlyStopping: mode must be \"min\" (lower is better) or \"max\" (higher is "
            "better), got \"avg\"");
  EXPECT_EQ(message_of<std::invalid_argument>([] { EarlyStopping(""); }),
            "EarlyStopping: monitor_stat is empty; name the stat to watch");
}

TEST(EarlyStopping, StateRoundTripsAndIsChecked) {
  EarlyStopping a("val-error");
  const CallbackState fresh = a.state();
  EXPECT_EQ(fresh.at("best_value").item<double>(), std::numeric_limits<double>::infinity());
  EXPECT_EQ(fresh.at("best_step").item<int64_t>(), -1);
  EXPECT_EQ(fresh.at("wait_count").item<int64_t>(), 0);
  a.load_state({{"best_value", state_scalar(0.25)},
                {"best_epoch", state_scalar(int64_t{3})},
                {"best_step", state_scalar(int64_t{6})},
                {"wait_count", state_scalar(int64_t{2})},
                {"last_step", state_scalar(int64_t{10})}});
  EXPECT_EQ(*a.best_value(), 0.25);
  EXPECT_EQ(a.best_epoch(), 3);
  EXPECT_EQ(a.wait_count(), 2);
  EXPECT_EQ(a.state().at("last_step").item<int64_t>(), 10);
  EXPECT_EQ(message_of<std::invalid_argument>([&] {
              a.load_state({{"best_value", state_scalar(0.25)}});
            }),
            "EarlyStopping: the saved state has no entry 'best_epoch'; it was not saved by this "
            "callback (a different callback of the same name, or another version)");
}

class EarlyStoppingResumeTest : public testing::TempDirTest {
 protected:
  // The values of both runs: best 0.5 at epoch 2, then no improvement: with patience 3 an
  // uninterrupted run stops at epoch 5.
  std::map<int64_t, double> values() const {
    return {{1, 1.0}, {2, 0.5}, {3, 0.6}, {4, 0.7}, {5, 0.8}, {6, 0.9}, {7, 0.1}};
  }
  std::vector<CallbackPtr> callbacks(std::shared_ptr<EarlyStopping> es, bool saver_first) {
    auto saver = std::make_shared<ModelSaver>(
        ModelSaverOptions().checkpoint_dir(dir().string()).fsync(false));
    if (saver_first) return {stat_putter("val-error", values()), saver, es};
    return {stat_putter("val-error", values()), es, saver};
  }
  // Removes every file of dir() (one run's checkpoints before the next).
  void fs_clear() {
    for (const auto& e : std::filesystem::directory_iterator(dir())) {
      std::filesystem::remove_all(e.path());
    }
  }
  std::shared_ptr<EarlyStopping> make() const {
    return std::make_shared<EarlyStopping>("val-error", EarlyStoppingOptions().patience(3));
  }
};

TEST_F(EarlyStoppingResumeTest, AResumedRunContinuesTheCount) {
  for (const bool saver_first : {true, false}) {
    SCOPED_TRACE(saver_first ? "ModelSaver before EarlyStopping" : "EarlyStopping first");
    fs_clear();
    {
      EpochRecordingTrainer uninterrupted;
      uninterrupted.train(callbacks(make(), saver_first), 20);
      ASSERT_EQ(uninterrupted.last_epoch(), 5);
    }
    fs_clear();
    {
      EpochRecordingTrainer run1;
      run1.train(callbacks(make(), saver_first), 3);  // ends at epoch 3 with one check waiting
    }
    // The checkpoint of epoch 3 counted epoch 3's value, whichever ran first.
    const TensorMap saved = read_checkpoint((dir() / "model-6").string());
    EXPECT_EQ(saved.at("callback/EarlyStopping/wait_count").item<int64_t>(), 1);
    EXPECT_EQ(saved.at("callback/EarlyStopping/best_epoch").item<int64_t>(), 2);
    EXPECT_EQ(saved.at("callback/EarlyStopping/last_step").item<int64_t>(), 6);

    EpochRecordingTrainer run2;
    auto es = make();
    LogCapture log;
    run2.train(callbacks(es, saver_first), 20, std::make_shared<SaverRestore>(dir().string()));
    EXPECT_EQ(run2.epochs, (std::vector<int64_t>{4, 5}));
    EXPECT_EQ(es->wait_count(), 3);
    EXPECT_EQ(es->best_epoch(), 2);
    EXPECT_TRUE(log.contains("best 0.5 at epoch 2 (global_step 4)."));
  }
}

}  // namespace early_stopping_test
}  // namespace trainpack
