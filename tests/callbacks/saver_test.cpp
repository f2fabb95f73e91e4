// ModelSaver, MinSaver, MaxSaver (callbacks/saver.h, callbacks/min_saver.h;
// docs/tensorpack-differences.md #5): which files exist after each save, the index's content,
// retention by count and by hours, failed saves, the save on a signal, and the best-checkpoint
// copies.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/errors.h"
#include "support/files.h"
#include "support/linear_regression.h"
#include "support/model_trainer.h"
#include "support/stat_putter.h"
#include "support/temp_dir.h"
#include "trainpack/callbacks/inference.h"
#include "trainpack/callbacks/inference_runner.h"
#include "trainpack/callbacks/saver.h"
#include "trainpack/callbacks/trigger.h"
#include "trainpack/core/session_init.h"
#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"
#include "trainpack/train/config.h"
#include "trainpack/train/single_cost.h"
#include "trainpack/utils/checkpoint.h"
#include "trainpack/utils/file_names.h"
#include "trainpack/utils/logger.h"

namespace trainpack {
namespace saver_test {

namespace fs = std::filesystem;
using testing::ActionCallback;
using testing::FileSizeLimit;
using testing::LogCapture;
using testing::message_of;
using testing::ModelTrainer;
using testing::read_text;

// The checkpoints (`model-*`, `min-*`, `max-*` prefixes of `.data` files) and any other file in
// `dir`, as one string: "model-2 model-4 | checkpoint". The index's swap file
// `checkpoint.previous`, there from the second save on, is left out (CheckpointTest and
// TheIndexSwapFileHoldsThePreviousIndex test it).
std::string listing(const fs::path& dir) {
  std::set<std::string> prefixes, others;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name == kCheckpointIndexSwapFile) continue;
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".data") == 0) {
      prefixes.insert(name.substr(0, name.size() - 5));
    } else {
      others.insert(name);
    }
  }
  // model-N in step order, then the rest by name.
  std::vector<std::string> sorted(prefixes.begin(), prefixes.end());
  std::sort(sorted.begin(), sorted.end(), [](const std::string& a, const std::string& b) {
    const bool ma = a.rfind("model-", 0) == 0, mb = b.rfind("model-", 0) == 0;
    if (ma != mb) return ma;
    if (ma) return std::stoll(a.substr(6)) < std::stoll(b.substr(6));
    return a < b;
  });
  std::string out;
  for (const auto& p : sorted) out += (out.empty() ? "" : " ") + p;
  out += " |";
  for (const auto& o : others) out += " " + o;
  return out;
}

// Records listing(dir) at every trigger (put it after the savers), once the save in flight of
// this trigger is written (ModelSaver writes on its own thread).
std::shared_ptr<ActionCallback> lister(const fs::path& dir, std::vector<std::string>* out) {
  auto cb = std::make_shared<ActionCallback>();
  cb->trigger_fn = [dir, out](ActionCallback& self) {
    wait_for_model_savers(self.trainer());
    out->push_back(listing(dir));
  };
  return cb;
}

using testing::stat_putter;

// A clock the test moves: `*now` seconds since the epoch.
std::function<double()> clock_of(std::shared_ptr<double> now) {
  return [now] { return *now; };
}

// Moves the clock by `seconds` at every epoch's start.
std::shared_ptr<ActionCallback> clock_mover(std::shared_ptr<double> now, double seconds) {
  auto cb = std::make_shared<ActionCallback>();
  cb->before_epoch_fn = [now, seconds](ActionCallback&) { *now += seconds; };
  return cb;
}

int count_lines(const LogCapture& log, const std::string& text) {
  int n = 0;
  for (const auto& l : log.lines()) n += l.find(text) != std::string::npos;
  return n;
}

class SaverTest : public testing::TempDirTest {
 protected:
  ModelSaverOptions options() const {
    return ModelSaverOptions().checkpoint_dir(dir().string()).fsync(false);
  }
  std::string prefix(const std::string& name) const { return (dir() / name).string(); }
};

// ---- ModelSaver ----

TEST_F(SaverTest, SavesEveryEpochAndWritesTheIndexLast) {
  auto now = std::make_shared<double>(1000);
  ModelTrainer m;
  auto saver = std::make_shared<ModelSaver>(options().fsync(true).clock(clock_of(now)));
  std::vector<std::string> seen;
  LogCapture log;
  m.train({clock_mover(now, 60), saver, lister(dir(), &seen)}, 2, 3);
  EXPECT_EQ(seen, (std::vector<std::string>{"model-2 | checkpoint", "model-2 model-4 | checkpoint",
                                            "model-2 model-4 model-6 | checkpoint"}));
  EXPECT_EQ(read_text(dir() / "checkpoint"),
            "model_checkpoint_path: \"model-6\"\n"
            "all_model_checkpoint_paths: \"model-2\"\n"
            "all_model_checkpoint_paths: \"model-4\"\n"
            "all_model_checkpoint_paths: \"model-6\"\n"
            "all_model_checkpoint_timestamps: 1060\n"
            "all_model_checkpoint_timestamps: 1120\n"
            "all_model_checkpoint_timestamps: 1180\n");
  EXPECT_TRUE(log.contains("Model saved to " + prefix("model-2") + "."));
  EXPECT_TRUE(log.contains("Model saved to " + prefix("model-6") + "."));
  EXPECT_EQ(saver->tracked().back(), std::make_pair(std::string("model-6"), 1180.0));
}

// The index is written into its swap file, which then holds the index of the save before.
TEST_F(SaverTest, TheIndexSwapFileHoldsThePreviousIndex) {
  auto now = std::make_shared<double>(1000);
  ModelTrainer m;
  m.train({clock_mover(now, 60),
           std::make_shared<ModelSaver>(options().max_to_keep(2).clock(clock_of(now)))},
          2, 3);
  EXPECT_EQ(read_text(dir() / "checkpoint"),
            "model_checkpoint_path: \"model-6\"\n"
            "all_model_checkpoint_paths: \"model-4\"\n"
            "all_model_checkpoint_paths: \"model-6\"\n"
            "all_model_checkpoint_timestamps: 1120\n"
            "all_model_checkpoint_timestamps: 1180\n");
  EXPECT_EQ(read_text(dir() / "checkpoint.previous"),
            "model_checkpoint_path: \"model-4\"\n"
            "all_model_checkpoint_paths: \"model-2\"\n"
            "all_model_checkpoint_paths: \"model-4\"\n"
            "all_model_checkpoint_timestamps: 1060\n"
            "all_model_checkpoint_timestamps: 1120\n");
}

TEST_F(SaverTest, TheCheckpointHoldsTheTrainingState) {
  ModelTrainer m;
  m.train({std::make_shared<ModelSaver>(options())}, 2, 2);
  const TensorMap state = read_checkpoint(prefix("model-4"));
  EXPECT_TRUE(torch::equal(state.at("weight"), m.net->weight));
  EXPECT_TRUE(torch::equal(state.at("bias"), m.net->bias));
  EXPECT_EQ(state.count("optimizer/type"), 1u);
  EXPECT_EQ(state.at("trainer/global_step").item<int64_t>(), 4);
  EXPECT_EQ(state.at("trainer/epoch").item<int64_t>(), 3);
  EXPECT_EQ(state.at("trainer/step_in_epoch").item<int64_t>(), 0);
}

TEST_F(SaverTest, MaxToKeepKeepsTheNewestAndDeletesTheOlderOnes) {
  ModelTrainer m;
  std::vector<std::string> seen;
  m.train(
      {std::make_shared<ModelSaver>(options().max_to_keep(2).keep_checkpoint_every_n_hours(1000)),
       lister(dir(), &seen)},
      2, 5);
  EXPECT_EQ(seen, (std::vector<std::string>{"model-2 | checkpoint", "model-2 model-4 | checkpoint",
                                            "model-4 model-6 | checkpoint",
                                            "model-6 model-8 | checkpoint",
                                            "model-8 model-10 | checkpoint"}));
  const auto index = read_checkpoint_index(dir().string());
  EXPECT_EQ(index->all_model_checkpoint_paths, (std::vector<std::string>{"model-8", "model-10"}));
  EXPECT_EQ(index->last_preserved_timestamp, 0);
}

TEST_F(SaverTest, MaxToKeepOneKeepsOnlyTheLatest) {
  ModelTrainer m;
  std::vector<std::string> seen;
  m.train(
      {std::make_shared<ModelSaver>(options().max_to_keep(1).keep_checkpoint_every_n_hours(1000)),
       lister(dir(), &seen)},
      1, 3);
  EXPECT_EQ(seen, (std::vector<std::string>{"model-1 | checkpoint", "model-2 | checkpoint",
                                            "model-3 | checkpoint"}));
}

TEST_F(SaverTest, MaxToKeepZeroKeepsAndListsEveryCheckpoint) {
  ModelTrainer m;
  m.train({std::make_shared<ModelSaver>(options().max_to_keep(0))}, 1, 4);
  EXPECT_EQ(listing(dir()), "model-1 model-2 model-3 model-4 | checkpoint");
  EXPECT_EQ(read_checkpoint_index(dir().string())->all_model_checkpoint_paths.size(), 4u);
}

TEST_F(SaverTest, TheHoursRuleKeepsOneDroppedCheckpointEveryNHours) {
  // Built at t=0 with N=1 hour: next_keep_time=3600. One epoch (2 steps) every 20 minutes, so
  // model-2k is saved at t=1200k. A dropped checkpoint is kept when saved strictly after
  // next_keep_time, which then advances by an hour.
  auto now = std::make_shared<double>(0);
  ModelTrainer m;
  std::vector<std::string> seen;
  m.train({clock_mover(now, 1200),
           std::make_shared<ModelSaver>(
               options().max_to_keep(2).keep_checkpoint_every_n_hours(1).clock(clock_of(now))),
           lister(dir(), &seen)},
          2, 9);
  EXPECT_EQ(seen, (std::vector<std::string>{
                      "model-2 | checkpoint", "model-2 model-4 | checkpoint",
                      "model-4 model-6 | checkpoint",   // model-2 (t=1200) deleted
                      "model-6 model-8 | checkpoint",   // model-4 (t=2400) deleted
                      "model-8 model-10 | checkpoint",  // model-6 (t=3600, not > 3600) deleted
                      "model-8 model-10 model-12 | checkpoint",  // model-8 (t=4800) kept; 7200
                      "model-8 model-12 model-14 | checkpoint",  // model-10 (t=6000) deleted
                      "model-8 model-14 model-16 | checkpoint",  // model-12 (t=7200) deleted
                      "model-8 model-14 model-16 model-18 | checkpoint",  // model-14 kept
                  }));
  EXPECT_EQ(read_text(dir() / "checkpoint"),
            "model_checkpoint_path: \"model-18\"\n"
            "all_model_checkpoint_paths: \"model-16\"\n"
            "all_model_checkpoint_paths: \"model-18\"\n"
            "all_model_checkpoint_timestamps: 9600\n"
            "all_model_checkpoint_timestamps: 10800\n"
            "last_preserved_timestamp: 8400\n");
}

TEST_F(SaverTest, AResumedRunDoesNotDeleteTheCheckpointsOfTheRunBeforeIt) {
  {
    ModelTrainer run1;
    run1.train({std::make_shared<ModelSaver>(options().max_to_keep(2))}, 3, 2);  // model-3, 6
  }
  // Resumed from model-3 (at the end of epoch 1): it saves model-6 again and model-9, and its
  // max_to_keep of 1 deletes only what it saved itself.
  ModelTrainer run2;
  std::vector<std::string> seen;
  run2.train({std::make_shared<ModelSaver>(options().max_to_keep(1)), lister(dir(), &seen)}, 3, 3,
             std::make_shared<SaverRestore>(prefix("model-3")));
  EXPECT_EQ(seen, (std::vector<std::string>{"model-3 model-6 | checkpoint",
                                            "model-3 model-9 | checkpoint"}));
  EXPECT_EQ(read_checkpoint_index(dir().string())->all_model_checkpoint_paths,
            std::vector<std::string>{"model-9"});
}

TEST_F(SaverTest, AFreshRunWhereAnotherRunSavedIsRefusedAndChangesNothing) {
  {
    ModelTrainer run1;
    run1.train({std::make_shared<ModelSaver>(options())}, 3, 2);  // model-3, model-6
  }
  const std::string before = listing(dir());
  const std::string model3 = read_text(dir() / "model-3.data");
  ModelTrainer run2;
  const std::string what =
      message_of([&] { run2.train({std::make_shared<ModelSaver>(options())}, 3, 2); });
  EXPECT_NE(what.find("ModelSaver: " + dir().string() +
                      " holds the checkpoints of another run (checkpoint, model-3.data, "
                      "model-6.data), and this run starts from scratch: its saves would replace "
                      "them. To continue that run, resume it (AutoResumeTrainConfig, or "
                      "SaverRestore of its latest checkpoint); to start over, use a new "
                      "directory, or have the logger move the old one aside first "
                      "(logger::set_logger_dir(dir, 'b'); 'd' deletes it)."),
            std::string::npos)
      << what;
  EXPECT_EQ(run2.trainer.global_step(), 0);
  EXPECT_EQ(listing(dir()), before);
  EXPECT_EQ(read_text(dir() / "model-3.data"), model3);
}

TEST_F(SaverTest, AStepAlreadySavedInThisRunIsNotSavedAgain) {
  ModelTrainer m;
  auto saver = std::make_shared<ModelSaver>(options());
  std::vector<bool> again;
  auto second = std::make_shared<ActionCallback>();
  second->trigger_fn = [&](ActionCallback&) { again.push_back(saver->save()); };
  LogCapture log;
  m.train({saver, second}, 2, 2);
  EXPECT_EQ(again, (std::vector<bool>{false, false}));
  EXPECT_EQ(count_lines(log, "Model saved to"), 2);
}

TEST_F(SaverTest, AFailedSaveKeepsThePreviousCheckpointAndIndexAndTrainingGoesOn) {
  ModelTrainer m;
  std::unique_ptr<FileSizeLimit> limit;
  // The limit is set for epoch 2 only (its checkpoint's data file is far larger than 512 bytes).
  auto limiter = std::make_shared<ActionCallback>();
  limiter->before_epoch_fn = [&](ActionCallback& self) {
    if (self.epoch_num() == 2) limit = std::make_unique<FileSizeLimit>(512);
  };
  auto unlimiter = std::make_shared<ActionCallback>();
  std::vector<std::string> indexes;
  unlimiter->trigger_fn = [&](ActionCallback& self) {
    wait_for_model_savers(self.trainer());  // the limit holds until this epoch's save is done
    limit.reset();
    indexes.push_back(read_text(dir() / "checkpoint"));
  };
  std::vector<std::string> seen;
  LogCapture log;
  // The run ends with WriteFailedError after training went on (tests/train/write_failures_test).
  EXPECT_THROW(m.train({limiter, std::make_shared<ModelSaver>(options().fsync(true)), unlimiter,
                        lister(dir(), &seen)},
                       2, 3),
               WriteFailedError);
  EXPECT_EQ(seen, (std::vector<std::string>{"model-2 | checkpoint", "model-2 | checkpoint",
                                            "model-2 model-6 | checkpoint"}));
  ASSERT_EQ(indexes.size(), 3u);
  EXPECT_EQ(indexes[1], indexes[0]);  // still names model-2
  EXPECT_EQ(read_checkpoint_index(dir().string())->all_model_checkpoint_paths,
            (std::vector<std::string>{"model-2", "model-6"}));
  EXPECT_TRUE(log.contains("ERR Exception in ModelSaver! cannot write " + prefix("model-4") +
                           ".data.tmp."));
  EXPECT_TRUE(log.contains(": File too large"));
  EXPECT_EQ(m.trainer.global_step(), 6);
  EXPECT_EQ(verify_checkpoint(prefix("model-2")), "");
}

TEST_F(SaverTest, AFailedIndexWriteRemovesTheNewCheckpoint) {
  ModelTrainer m;
  // A directory named `checkpoint` (the index moved aside to `checkpoint.kept` meanwhile) makes
  // the index impossible to write: there is no file to swap with, and a file cannot be renamed
  // over a directory.
  auto blocker = std::make_shared<ActionCallback>();
  blocker->before_epoch_fn = [&](ActionCallback& self) {
    if (self.epoch_num() == 2) {
      fs::rename(dir() / "checkpoint", dir() / "checkpoint.kept");
      fs::create_directories(dir() / "checkpoint" / "x");
    }
    if (self.epoch_num() == 3) {
      fs::remove_all(dir() / "checkpoint");
      fs::rename(dir() / "checkpoint.kept", dir() / "checkpoint");
    }
  };
  std::vector<std::string> seen;
  LogCapture log;
  EXPECT_THROW(
      m.train({blocker, std::make_shared<ModelSaver>(options()), lister(dir(), &seen)}, 2, 3),
      WriteFailedError);
  EXPECT_EQ(seen, (std::vector<std::string>{"model-2 | checkpoint",
                                            "model-2 | checkpoint checkpoint.kept",
                                            "model-2 model-6 | checkpoint"}));
  EXPECT_TRUE(log.contains("ERR Exception in ModelSaver! cannot rename "));
  EXPECT_TRUE(log.contains(" to " + (dir() / "checkpoint").string() + ": Is a directory"));
}

TEST_F(SaverTest, AVanishedDirectoryIsAnErrorLineTrainingGoesOnAndTheRunFails) {
  const fs::path sub = dir() / "ckpt";
  ModelTrainer m;
  auto saver = std::make_shared<ModelSaver>(options().checkpoint_dir(sub.string()));
  // The directory is created at setup (not at construction: a saver skipped on a rank other than
  // the chief creates nothing), and removed once training has started.
  EXPECT_FALSE(fs::exists(sub));
  auto remover = std::make_shared<ActionCallback>();
  remover->before_train_fn = [&](ActionCallback&) {
    EXPECT_TRUE(fs::is_directory(sub));
    fs::remove_all(sub);
  };
  LogCapture log;
  EXPECT_THROW(m.train({saver, remover}, 1, 2), WriteFailedError);
  EXPECT_EQ(
      count_lines(log, "ERR Exception in ModelSaver! cannot create " + (sub / "model-").string()),
      2);
  EXPECT_TRUE(log.contains("No such file or directory"));
  EXPECT_EQ(m.trainer.global_step(), 2);
}

TEST_F(SaverTest, AReadOnlyDirectoryIsAnErrorLineTrainingGoesOnAndTheRunFails) {
  if (geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  ModelTrainer m;
  auto saver = std::make_shared<ModelSaver>(options());
  fs::permissions(dir(), fs::perms::owner_read | fs::perms::owner_exec);
  LogCapture log;
  EXPECT_THROW(m.train({saver}, 1, 2), WriteFailedError);
  fs::permissions(dir(), fs::perms::owner_all);
  EXPECT_EQ(count_lines(log, "Permission denied"), 2);
  EXPECT_EQ(listing(dir()), " |");
}

TEST_F(SaverTest, SavesACheckpointAtTheStepWhereASignalStoppedTraining) {
  ModelTrainer m;  // handle_signals is on by default
  auto raiser = std::make_shared<ActionCallback>();
  raiser->trigger_step_fn = [](ActionCallback& self) {
    if (self.global_step() == 3) std::raise(SIGTERM);
  };
  LogCapture log;
  m.trainer.set_handle_signals(true);
  m.train({raiser, std::make_shared<ModelSaver>(options())}, 4, 2);
  EXPECT_EQ(m.trainer.received_signal(), SIGTERM);
  EXPECT_EQ(listing(dir()), "model-3 | checkpoint");
  EXPECT_EQ(read_checkpoint_index(dir().string())->model_checkpoint_path, "model-3");
  EXPECT_TRUE(log.contains("Saving a checkpoint at global_step=3 before exiting on SIGTERM."));
  const TensorMap state = read_checkpoint(prefix("model-3"));
  EXPECT_EQ(state.at("trainer/global_step").item<int64_t>(), 3);
  EXPECT_EQ(state.at("trainer/epoch").item<int64_t>(), 1);
  EXPECT_EQ(state.at("trainer/step_in_epoch").item<int64_t>(), 3);
}

TEST_F(SaverTest, ASignalAtAnEpochEndSavesOnce) {
  ModelTrainer m;
  auto raiser = std::make_shared<ActionCallback>();
  raiser->trigger_step_fn = [](ActionCallback& self) {
    if (self.global_step() == 2) std::raise(SIGINT);
  };
  LogCapture log;
  m.train({raiser, std::make_shared<ModelSaver>(options())}, 2, 3);
  EXPECT_EQ(m.trainer.received_signal(), SIGINT);
  EXPECT_EQ(listing(dir()), "model-2 | checkpoint");
  EXPECT_EQ(count_lines(log, "Model saved to"), 1);
}

TEST_F(SaverTest, NoSaveOnASignalWhenDisabled) {
  ModelTrainer m;
  auto raiser = std::make_shared<ActionCallback>();
  raiser->trigger_step_fn = [](ActionCallback& self) {
    if (self.global_step() == 1) std::raise(SIGTERM);
  };
  m.train({raiser, std::make_shared<ModelSaver>(options().save_on_signal(false))}, 4, 2);
  EXPECT_EQ(m.trainer.received_signal(), SIGTERM);
  EXPECT_EQ(listing(dir()), " |");
}

TEST_F(SaverTest, DefaultsToTheLoggerDirectory) {
  const fs::path log_dir = dir() / "log";
  logger::set_logger_dir(log_dir.string());
  ModelSaver saver;
  EXPECT_EQ(saver.checkpoint_dir(), log_dir.string());
  MinSaver min("val-error");
  EXPECT_EQ(min.best_checkpoint_prefix(), (log_dir / "min-val-error").string());
}

TEST_F(SaverTest, NoDirectoryIsAnErrorAtSetup) {
  ASSERT_FALSE(logger::get_logger_dir().has_value());
  ModelTrainer m;
  const std::string msg = message_of([&] { m.train({std::make_shared<ModelSaver>()}, 1, 1); });
  EXPECT_NE(msg.find("ModelSaver: no directory was given and the logger directory is not set; "
                     "pass one with ModelSaverOptions().checkpoint_dir(dir), or call "
                     "trainpack::logger::set_logger_dir(dir) first"),
            std::string::npos)
      << msg;
}

TEST_F(SaverTest, BadOptionsAreRejectedAtConstruction) {
  EXPECT_EQ(message_of<std::invalid_argument>([&] { ModelSaver(options().max_to_keep(-1)); }),
            "ModelSaver: max_to_keep must be >= 0, got -1");
  EXPECT_EQ(message_of<std::invalid_argument>(
                [&] { ModelSaver(options().keep_checkpoint_every_n_hours(-0.5)); }),
            "ModelSaver: keep_checkpoint_every_n_hours must be a number >= 0, got -0.5");
  EXPECT_EQ(message_of<std::invalid_argument>(
                [&] { ModelSaver(options().var_collections({"TRAINABLE_VARIABLES"})); }),
            "ModelSaver: var_collections 'TRAINABLE_VARIABLES' is not supported; only "
            "\"GLOBAL_VARIABLES\" (the whole training state) can be saved");
  EXPECT_NO_THROW(ModelSaver(options().var_collections({"variables"})));
  EXPECT_TRUE(ModelSaver(options()).chief_only());
  EXPECT_EQ(
      message_of<std::invalid_argument>([&] { MinSaver("a", MinSaverOptions().filename("x/y")); }),
      "MinSaver: filename 'x/y' is not a plain file name (the directory is checkpoint_dir): it "
      "contains '/'; for example 'x_y'");
  EXPECT_EQ(message_of<std::invalid_argument>([&] { MaxSaver(""); }),
            "MaxSaver: monitor_stat is empty");
}

// ---- MinSaver / MaxSaver ----

TEST_F(SaverTest, MinSaverKeepsTheCheckpointOfTheMinimum) {
  ModelTrainer m;
  auto min = std::make_shared<MinSaver>(
      "val-error", MinSaverOptions().checkpoint_dir(dir().string()).fsync(false));
  std::vector<std::string> seen;
  LogCapture log;
  // Epoch 1: first value (a best); epoch 2: improvement; epoch 3: no improvement.
  m.train({stat_putter("val-error", {{1, 0.5}, {2, 0.25}, {3, 0.375}}),
           std::make_shared<ModelSaver>(options().max_to_keep(1)), min, lister(dir(), &seen)},
          2, 3);
  EXPECT_EQ(seen, (std::vector<std::string>{"model-2 min-val-error | checkpoint",
                                            "model-4 min-val-error | checkpoint",
                                            "model-6 min-val-error | checkpoint"}));
  ASSERT_TRUE(min->best().has_value());
  EXPECT_EQ(*min->best(), std::make_pair(int64_t{4}, 0.25));
  EXPECT_EQ(read_checkpoint(prefix("min-val-error")).at("trainer/global_step").item<int64_t>(), 4);
  EXPECT_TRUE(log.contains("Model at global_step=2 with minimum val-error=0.5 saved."));
  EXPECT_TRUE(log.contains("Model at global_step=4 with minimum val-error=0.25 saved."));
  EXPECT_EQ(count_lines(log, "Model at global_step="), 2);
}

TEST_F(SaverTest, MaxSaverKeepsTheCheckpointOfTheMaximum) {
  ModelTrainer m;
  auto max = std::make_shared<MaxSaver>(
      "val/accuracy", MaxSaverOptions().checkpoint_dir(dir().string()).fsync(false));
  EXPECT_EQ(max->best_checkpoint_prefix(), prefix("max-val_accuracy"));
  EXPECT_EQ(max->name(), "MaxSaver");
  LogCapture log;
  m.train({stat_putter("val/accuracy", {{1, 0.5}, {2, 0.75}, {3, 0.625}}),
           std::make_shared<ModelSaver>(options()), max},
          2, 3);
  EXPECT_EQ(*max->best(), std::make_pair(int64_t{4}, 0.75));
  EXPECT_EQ(read_text(prefix("max-val_accuracy") + ".data"),
            read_text(prefix("model-4") + ".data"));
  EXPECT_TRUE(log.contains("Model at global_step=4 with maximum val/accuracy=0.75 saved."));
}

TEST_F(SaverTest, MinSaverDoesNothingWhenTheLatestCheckpointIsNotAtTheBestStep) {
  // The stat is put at step 2, the checkpoint is model-12: tensorpack's suffix test would have
  // taken "model-12" for step 2. Here: two warnings, no copy, and no best.
  ModelTrainer m;
  auto early = std::make_shared<ActionCallback>();
  early->trigger_step_fn = [](ActionCallback& self) {
    if (self.global_step() == 2) self.trainer().monitors().put_scalar("val-error", 0.125);
  };
  auto min = std::make_shared<MinSaver>(
      "val-error", MinSaverOptions().checkpoint_dir(dir().string()).fsync(false));
  LogCapture log;
  m.train({early, std::make_shared<ModelSaver>(options()), min}, 12, 1);
  EXPECT_TRUE(
      log.contains("WRN [MinSaver] New minimum 'val-error' found at global_step=2, but "
                   "the latest checkpoint is " +
                   prefix("model-12") + "."));
  EXPECT_TRUE(
      log.contains("WRN MinSaver will do nothing this time. The callbacks may have "
                   "inconsistent frequency or wrong order."));
  EXPECT_FALSE(min->best().has_value());
  EXPECT_FALSE(fs::exists(prefix("min-val-error") + ".data"));
}

TEST_F(SaverTest, ASkippedCopyDoesNotUpdateTheBest) {
  // Epoch 1's value is put mid-epoch (no checkpoint at that step: skipped); epoch 2's value is
  // worse, but as there is no best yet it is saved. (tensorpack would keep 0.25 as the best and
  // never save anything.)
  ModelTrainer m;
  auto putter = std::make_shared<ActionCallback>();
  putter->trigger_step_fn = [](ActionCallback& self) {
    if (self.global_step() == 1) self.trainer().monitors().put_scalar("val-error", 0.25);
  };
  putter->trigger_fn = [](ActionCallback& self) {
    if (self.epoch_num() == 2) self.trainer().monitors().put_scalar("val-error", 0.5);
  };
  auto min = std::make_shared<MinSaver>(
      "val-error", MinSaverOptions().checkpoint_dir(dir().string()).fsync(false));
  LogCapture log;
  m.train({putter, std::make_shared<ModelSaver>(options()), min}, 2, 2);
  EXPECT_EQ(count_lines(log, "WRN MinSaver will do nothing this time."), 1);
  EXPECT_EQ(*min->best(), std::make_pair(int64_t{4}, 0.5));
  EXPECT_EQ(read_text(prefix("min-val-error") + ".data"), read_text(prefix("model-4") + ".data"));
}

TEST_F(SaverTest, MinSaverWithoutModelSaverIsAnError) {
  ModelTrainer m;
  const std::string msg = message_of([&] {
    m.train(
        {stat_putter("val-error", {{1, 0.5}}),
         std::make_shared<MinSaver>("val-error", MinSaverOptions().checkpoint_dir(dir().string()))},
        1, 1);
  });
  EXPECT_NE(msg.find("[MinSaver] Cannot find a checkpoint state. Do you forget to use ModelSaver?"),
            std::string::npos)
      << msg;
}

TEST_F(SaverTest, MinSaverWithoutDataDoesNothing) {
  ModelTrainer m;
  auto min = std::make_shared<MinSaver>(
      "val-error", MinSaverOptions().checkpoint_dir(dir().string()).strict(false));
  m.train({min}, 1, 2);  // no stat, no index: returns before reading it
  EXPECT_FALSE(min->best().has_value());
}

// A misspelt stat: strict (the default) stops training at the first epoch end where every
// validation has run, listing the stats that exist.
TEST_F(SaverTest, AMisspeltStatStopsTrainingOnceTheValidationHasRun) {
  ModelTrainer m;
  auto min = std::make_shared<MinSaver>(
      "val-mea", MinSaverOptions().checkpoint_dir(dir().string()).fsync(false));
  const std::string msg = message_of([&] {
    m.train({stat_putter("val-mae", {{1, 0.5}, {2, 0.25}}), std::make_shared<ModelSaver>(options()),
             min},
            2, 3);
  });
  EXPECT_EQ(msg,
            "Callback MinSaver failed in trigger_epoch: MinSaver: 'val-mea' has not been put by "
            "global_step=2 (epoch 1), though every validation has run (ActionCallback). The stats "
            "put so far: val-mae. Check the name, and that the callback that puts it comes before "
            "MinSaver in the callbacks; or, for a stat that comes later, pass "
            "MinSaverOptions().strict(false) to warn instead");
  EXPECT_EQ(m.trainer.global_step(), 2);
  EXPECT_FALSE(fs::exists(prefix("min-val-mea") + ".data"));
}

// No callback declares itself a validator: the name is checked at the first epoch end.
TEST_F(SaverTest, WithoutAValidatorTheNameIsCheckedAtTheFirstEpochEnd) {
  ModelTrainer m;
  auto putter = std::make_shared<ActionCallback>();  // puts, but is no validator
  putter->trigger_fn = [](ActionCallback& self) {
    self.trainer().monitors().put_scalar("cost", 0.5);
  };
  auto max = std::make_shared<MaxSaver>(
      "accuracy", MaxSaverOptions().checkpoint_dir(dir().string()).fsync(false));
  const std::string msg = message_of([&] {
    m.train({putter, std::make_shared<ModelSaver>(options()), max}, 2, 3);
  });
  EXPECT_EQ(msg,
            "Callback MaxSaver failed in trigger_epoch: MaxSaver: 'accuracy' has not been put by "
            "global_step=2 (epoch 1), and no callback validates (none called "
            "Monitors::add_validator, as InferenceRunner does) to put it later. The stats put so "
            "far: cost. Check the name, and that the callback that puts it comes before MaxSaver "
            "in the callbacks; or, for a stat that comes later, pass "
            "MaxSaverOptions().strict(false) to warn instead");
}

// With strict(false): one warning when the validation has run, and one at the end of training
// saying that the copy was never written.
TEST_F(SaverTest, AStatThatNeverComesIsWarnedAboutOnceAndAtTheEndWithoutStrict) {
  ModelTrainer m;
  auto min = std::make_shared<MinSaver>(
      "val-mea", MinSaverOptions().checkpoint_dir(dir().string()).fsync(false).strict(false));
  LogCapture log;
  m.train({stat_putter("val-mae", {{1, 0.5}, {2, 0.25}, {3, 0.375}}),
           std::make_shared<ModelSaver>(options()), min},
          2, 3);
  EXPECT_EQ(count_lines(log, "WRN [MinSaver] 'val-mea' has not been put"), 1);
  EXPECT_TRUE(log.contains(
      "WRN [MinSaver] 'val-mea' has not been put by global_step=2 (epoch 1), though every "
      "validation has run (ActionCallback). The stats put so far: val-mae. Check the name, and "
      "that the callback that puts it comes before MinSaver in the callbacks. Training goes on "
      "(strict(false))."));
  EXPECT_TRUE(log.contains(
      "WRN [MinSaver] 'val-mea' was never put during training: " + prefix("min-val-mea") +
      ".data was not written. The stats that were put: val-mae."));
  EXPECT_FALSE(fs::exists(prefix("min-val-mea") + ".data"));
}

// A stat put every second epoch, strict: the first epoch end, where its validation has not run,
// says nothing, and neither does the end of training.
TEST_F(SaverTest, AStatWhoseValidationHasNotRunYetIsNotMissing) {
  ModelTrainer m;
  auto min = std::make_shared<MaxSaver>(
      "val-accuracy", MaxSaverOptions().checkpoint_dir(dir().string()).fsync(false));
  LogCapture log;
  m.train({stat_putter("val-accuracy", {{2, 0.5}}), std::make_shared<ModelSaver>(options()), min},
          2, 2);
  EXPECT_EQ(count_lines(log, "'val-accuracy' has not been put"), 0);
  EXPECT_EQ(count_lines(log, "was never put during training"), 0);
  EXPECT_EQ(*min->best(), std::make_pair(int64_t{4}, 0.5));
}

// A validator that never runs (every 5 epochs in a run of 2): the name is never checked, and the
// end of training says that the copy was not written.
TEST_F(SaverTest, AValidatorThatNeverRunsLeavesTheNameUncheckedAndWarnsAtTheEnd) {
  ModelTrainer m;
  auto min = std::make_shared<MinSaver>(
      "val-error", MinSaverOptions().checkpoint_dir(dir().string()).fsync(false));
  LogCapture log;
  m.train({stat_putter("val-error", {{5, 0.5}}), std::make_shared<ModelSaver>(options()), min}, 2,
          2);
  EXPECT_EQ(m.trainer.global_step(), 4);
  EXPECT_EQ(count_lines(log, "has not been put"), 0);
  EXPECT_TRUE(log.contains(
      "WRN [MinSaver] 'val-error' was never put during training: " + prefix("min-val-error") +
      ".data was not written. The stats that "
      "were put: none."));
}

// A real InferenceRunner every second epoch: its stat is not missing at epoch 1, and a misspelt
// name is caught at epoch 2, after its first round.
TEST_F(SaverTest, AnInferenceRunnerEveryTwoEpochsIsWaitedForBeforeTheNameIsChecked) {
  const auto train = [&](const std::string& stat, std::shared_ptr<MinSaver>* min) {
    const std::string run_dir = (dir() / stat).string();  // each run its own checkpoints
    SimpleTrainer trainer;
    trainer.set_handle_signals(false);
    auto runner = std::make_shared<InferenceRunner>(
        testing::linear_regression_batches(),
        std::make_shared<ScalarStats>(std::vector<std::string>{"cost"}),
        InferenceRunnerOptions().progress_bar(false));
    *min = std::make_shared<MinSaver>(stat, MinSaverOptions().checkpoint_dir(run_dir).fsync(false));
    const std::string msg = message_of([&] {
      launch_train_with_config(
          TrainConfig()
              .model(std::make_shared<testing::LinearRegressionModel>())
              .dataflow(testing::linear_regression_batches())
              .callbacks({std::make_shared<PeriodicTrigger>(
                              runner, PeriodicTriggerOptions().every_k_epochs(2)),
                          std::make_shared<ModelSaver>(options().checkpoint_dir(run_dir)), *min})
              .extra_callbacks(std::vector<CallbackPtr>{})
              .monitors(std::vector<MonitorPtr>{})
              .max_epoch(3),
          trainer);
    });
    return std::make_pair(msg, trainer.global_step());
  };
  std::shared_ptr<MinSaver> min;
  EXPECT_EQ(train("validation_cost", &min),
            std::make_pair(std::string("<no exception>"), int64_t{9}));
  ASSERT_TRUE(min->best().has_value());
  EXPECT_EQ(min->best()->first, 6);  // epoch 2's round, 3 steps per epoch
  EXPECT_EQ(train("validation_cots", &min),
            std::make_pair(
                std::string("Callback MinSaver failed in trigger_epoch: MinSaver: "
                            "'validation_cots' has not been put by global_step=6 (epoch 2), "
                            "though every validation has run (InferenceRunner). The stats put "
                            "so far: validation_cost. Check the name, and that the callback that "
                            "puts it comes before MinSaver in the callbacks; or, for a stat that "
                            "comes later, pass MinSaverOptions().strict(false) to warn instead"),
                int64_t{6}));
}

// MinSaver copies the checkpoint ModelSaver writes at the same epoch end: placed before it, it is
// refused at setup, before any step, naming both callbacks (tensorpack fails after epoch 1 with
// "Do you forget to use ModelSaver?").
TEST_F(SaverTest, AMinSaverBeforeItsModelSaverIsRefusedAtSetup) {
  {
    ModelTrainer m;
    auto min = std::make_shared<MinSaver>(
        "val-error", MinSaverOptions().checkpoint_dir(dir().string()).fsync(false));
    const std::string msg = message_of([&] {
      m.train({stat_putter("val-error", {{1, 0.5}}), min, std::make_shared<ModelSaver>(options())},
              2, 1);
    });
    EXPECT_EQ(msg,
              "Callback MinSaver failed in setup_graph: MinSaver comes before ModelSaver in the "
              "callbacks, but it copies the checkpoint that ModelSaver saves at the same epoch "
              "end: put MinSaver after ModelSaver, e.g. {InferenceRunner, ModelSaver, MinSaver}");
    EXPECT_EQ(m.trainer.global_step(), 0);
  }
  {
    // Wrapped, each: the names are the list's.
    ModelTrainer m;
    auto max = std::make_shared<MaxSaver>(
        "val-accuracy", MaxSaverOptions().checkpoint_dir(dir().string()).fsync(false));
    const std::string msg = message_of([&] {
      m.train({std::make_shared<PeriodicTrigger>(max, PeriodicTriggerOptions().every_k_epochs(2)),
               std::make_shared<PeriodicTrigger>(std::make_shared<ModelSaver>(options()),
                                                 PeriodicTriggerOptions().every_k_epochs(2))},
              2, 1);
    });
    EXPECT_NE(
        msg.find(": PeriodicTrigger-MaxSaver comes before PeriodicTrigger-ModelSaver in "
                 "the callbacks, but it copies the checkpoint that PeriodicTrigger-ModelSaver "
                 "saves at the same epoch end: put PeriodicTrigger-MaxSaver after "
                 "PeriodicTrigger-ModelSaver, e.g. {InferenceRunner, ModelSaver, MaxSaver}"),
        std::string::npos)
        << msg;
  }
}

// Only a ModelSaver of MinSaver's directory counts: one of another directory after it, with one
// of its own directory before it, is fine.
TEST_F(SaverTest, AModelSaverOfAnotherDirectoryAfterMinSaverIsNotItsOwn) {
  ModelTrainer m;
  const fs::path other = dir() / "other";
  auto min = std::make_shared<MinSaver>(
      "val-error", MinSaverOptions().checkpoint_dir(dir().string()).fsync(false));
  m.train({stat_putter("val-error", {{1, 0.5}}), std::make_shared<ModelSaver>(options()), min,
           std::make_shared<ModelSaver>(options().checkpoint_dir(other.string()))},
          2, 1);
  EXPECT_EQ(*min->best(), std::make_pair(int64_t{2}, 0.5));
}

TEST_F(SaverTest, MinSaverStateRoundTrips) {
  MinSaver a("val-error", MinSaverOptions().checkpoint_dir(dir().string()));
  EXPECT_TRUE(a.state().empty());
  a.load_state({{"best_step", at::scalar_tensor(40, at::kLong)},
                {"best_value", at::scalar_tensor(0.125, at::kDouble)}});
  EXPECT_EQ(*a.best(), std::make_pair(int64_t{40}, 0.125));
  const CallbackState s = a.state();
  EXPECT_EQ(s.at("best_step").item<int64_t>(), 40);
  EXPECT_EQ(s.at("best_value").item<double>(), 0.125);
  a.load_state({});
  EXPECT_FALSE(a.best().has_value());
  EXPECT_EQ(message_of<std::invalid_argument>([&] {
              a.load_state({{"best_step", at::scalar_tensor(1, at::kLong)}});
            }),
            "MinSaver: state entry 'best_value' is missing");
  EXPECT_EQ(message_of<std::invalid_argument>([&] {
              a.load_state({{"best", at::scalar_tensor(1, at::kLong)}});
            }),
            "MinSaver: unknown state entry 'best'");
}

TEST_F(SaverTest, AResumedRunKeepsTheBestOfTheRunItResumes) {
  // Run 1 improves at both epochs; the latest checkpoint (model-4) is the best one, saved by
  // ModelSaver before MinSaver copied it. Run 2 resumes from it: its epoch-3 value (0.375) is
  // worse than 0.25, so the copy of model-4 must stay.
  const auto callbacks = [&](std::shared_ptr<MinSaver> min) {
    return std::vector<CallbackPtr>{stat_putter("val-error", {{1, 0.5}, {2, 0.25}, {3, 0.375}}),
                                    std::make_shared<ModelSaver>(options()), min};
  };
  {
    ModelTrainer run1;
    run1.train(callbacks(std::make_shared<MinSaver>(
                   "val-error", MinSaverOptions().checkpoint_dir(dir().string()))),
               2, 2);
  }
  const std::string best_data = read_text(prefix("min-val-error") + ".data");
  ASSERT_EQ(best_data, read_text(prefix("model-4") + ".data"));
  const TensorMap state = read_checkpoint(prefix("model-4"));
  EXPECT_EQ(state.at("callback/MinSaver/best_step").item<int64_t>(), 2);
  EXPECT_EQ(state.at("callback/MinSaver/pending_step").item<int64_t>(), 4);

  ModelTrainer run2;
  auto min =
      std::make_shared<MinSaver>("val-error", MinSaverOptions().checkpoint_dir(dir().string()));
  LogCapture log;
  run2.train(callbacks(min), 2, 3, std::make_shared<SaverRestore>(dir().string()));
  EXPECT_EQ(run2.trainer.global_step(), 6);
  EXPECT_EQ(*min->best(), std::make_pair(int64_t{4}, 0.25));
  EXPECT_EQ(read_text(prefix("min-val-error") + ".data"), best_data);
  EXPECT_EQ(count_lines(log, "Model at global_step="), 0);
}

// A run killed while MinSaver copied a new best (after ModelSaver saved that step): the
// checkpoint records the best as pending, the copy on disk is older. The resumed run makes the
// copy at its start instead of keeping the stale one for good.
TEST_F(SaverTest, ACopyTheCheckpointOwesIsMadeAtTheNextStart) {
  const auto callbacks = [&](std::shared_ptr<MinSaver> min) {
    return std::vector<CallbackPtr>{stat_putter("val-error", {{1, 0.5}, {2, 0.25}, {3, 0.375}}),
                                    std::make_shared<ModelSaver>(options()), min};
  };
  {
    ModelTrainer run1;
    run1.train(callbacks(std::make_shared<MinSaver>(
                   "val-error", MinSaverOptions().checkpoint_dir(dir().string()))),
               2, 2);
  }
  // As if the copy of model-4 never happened: the best copy is still epoch 1's.
  fs::copy_file(prefix("model-2") + ".data", prefix("min-val-error") + ".data",
                fs::copy_options::overwrite_existing);
  ModelTrainer run2;
  auto min =
      std::make_shared<MinSaver>("val-error", MinSaverOptions().checkpoint_dir(dir().string()));
  LogCapture log;
  run2.train(callbacks(min), 2, 3, std::make_shared<SaverRestore>(dir().string()));
  EXPECT_TRUE(
      log.contains("[MinSaver] The previous run found a new minimum 'val-error' at "
                   "global_step=4 but did not copy its checkpoint; copying it now."));
  EXPECT_TRUE(log.contains("Model at global_step=4 with minimum val-error=0.25 saved."));
  EXPECT_EQ(read_text(prefix("min-val-error") + ".data"), read_text(prefix("model-4") + ".data"));
  EXPECT_EQ(*min->best(), std::make_pair(int64_t{4}, 0.25));
}

// The owed copy's checkpoint is gone: the run says the copy cannot be made, and goes on.
TEST_F(SaverTest, AnOwedCopyWhoseCheckpointIsGoneIsNamed) {
  ModelTrainer m;
  // No stat is put in this run (strict(false): no error for that).
  auto owed = std::make_shared<MinSaver>(
      "val-error", MinSaverOptions().checkpoint_dir(dir().string()).strict(false));
  owed->load_state({{"best_step", at::scalar_tensor(2, at::kLong)},
                    {"best_value", at::scalar_tensor(0.5, at::kDouble)},
                    {"pending_step", at::scalar_tensor(4, at::kLong)},
                    {"pending_value", at::scalar_tensor(0.25, at::kDouble)}});
  LogCapture log;
  m.train({std::make_shared<ModelSaver>(options()), owed}, 2, 1);
  EXPECT_TRUE(
      log.contains("[MinSaver] The checkpoint records a new minimum 'val-error'=0.25 at "
                   "global_step=4 whose copy was not made, but " +
                   prefix("model-4") +
                   ".data is missing or damaged: the copy cannot be "
                   "made; " +
                   prefix("min-val-error") + ".data keeps global_step=2."));
  EXPECT_EQ(*owed->best(), std::make_pair(int64_t{2}, 0.5));
}

// A copy that failed (here: a directory stands at the copy's name) is retried at the next trigger
// while no better value comes, and recorded as owed in the checkpoints meanwhile; the failure
// still ends the run with WriteFailedError.
TEST_F(SaverTest, AFailedCopyIsRetriedAtTheNextTrigger) {
  const std::string copy = prefix("min-val-error") + ".data";
  auto block = std::make_shared<ActionCallback>();
  block->trigger_fn = [&](ActionCallback& self) {
    if (self.epoch_num() == 2) {
      fs::remove(copy);
      fs::create_directory(copy);
    } else if (self.epoch_num() == 3) {
      fs::remove(copy);
    }
  };
  ModelTrainer m;
  auto min =
      std::make_shared<MinSaver>("val-error", MinSaverOptions().checkpoint_dir(dir().string()));
  LogCapture log;
  EXPECT_THROW(m.train({stat_putter("val-error", {{1, 0.5}, {2, 0.25}, {3, 0.375}}),
                        std::make_shared<ModelSaver>(options()), block, min},
                       2, 3),
               WriteFailedError);
  EXPECT_TRUE(log.contains("[MinSaver] Cannot copy " + prefix("model-4") + " to " +
                           prefix("min-val-error")));
  EXPECT_EQ(read_text(copy), read_text(prefix("model-4") + ".data"));
  EXPECT_EQ(*min->best(), std::make_pair(int64_t{4}, 0.25));
  // Saved before the retry at epoch 3: the copy is owed there.
  const TensorMap at6 = read_checkpoint(prefix("model-6"));
  EXPECT_EQ(at6.at("callback/MinSaver/pending_step").item<int64_t>(), 4);
}

TEST_F(SaverTest, StatNamesAreMadeSafeForFileNames) {
  MinSaverOptions o = MinSaverOptions().checkpoint_dir(dir().string());
  EXPECT_EQ(MinSaver("tower0/val-error", o).best_checkpoint_prefix(),
            prefix("min-tower0_val-error"));
  EXPECT_EQ(MinSaver("../x", o).best_checkpoint_prefix(), prefix("min-_._x"));
  EXPECT_EQ(MinSaver("a\nb", o).best_checkpoint_prefix(), prefix("min-a_b"));
  EXPECT_EQ(MinSaver("x", MinSaverOptions(o).filename("best")).best_checkpoint_prefix(),
            prefix("best"));
  // The one rule of utils/file_names.h: no hidden file, no control character, bounded length.
  EXPECT_EQ(MinSaver(".hidden", o).best_checkpoint_prefix(), prefix("min-_hidden"));
  EXPECT_EQ(MinSaver(std::string(300, 's'), MinSaverOptions(o).reverse(true))
                .best_checkpoint_prefix()
                .size(),
            prefix("max-").size() + kMaxFileNameComponent);
}

TEST_F(SaverTest, AnExplicitFilenameMustBeSafeAndNotACheckpointName) {
  // `model-5` would be written as model-5.data / model-5.index: a checkpoint of ModelSaver.
  EXPECT_EQ(message_of<std::invalid_argument>(
                [] { MinSaver("a", MinSaverOptions().filename("model-5")); }),
            "MinSaver: filename 'model-5' is not a plain file name (the directory is "
            "checkpoint_dir): it is, or could be, one of trainpack's own files in the directory; "
            "for example '_model-5'");
  for (const char* bad : {".best", "checkpoint", "stats.json", "a\tb", ""}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(MaxSaver("a", MaxSaverOptions().filename(bad)), std::invalid_argument);
  }
}

// ---- ModelSaver's writer thread (async, the default) ----

// Takes an SGD step on a fixed batch at every step: the parameters and momentum buffers change in
// place, as in training (the NoOpTrainer's own steps change nothing).
std::shared_ptr<ActionCallback> sgd_stepper(ModelTrainer* m) {
  auto cb = std::make_shared<ActionCallback>();
  cb->trigger_step_fn = [m](ActionCallback&) { m->sgd_step(); };
  return cb;
}

// Runs `f` at the trigger of global step `step` (put it after the savers).
std::shared_ptr<ActionCallback> at_trigger(int64_t step, std::function<void()> f) {
  auto cb = std::make_shared<ActionCallback>();
  cb->trigger_fn = [step, f](ActionCallback& self) {
    if (self.global_step() == step) f();
  };
  return cb;
}

std::vector<std::string> temporary_files(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp") != std::string::npos) out.push_back(name);
  }
  return out;
}

TEST_F(SaverTest, AsyncTheTrainingThreadGoesOnWhileTheWriterWrites) {
  ModelTrainer m;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::mutex mutex;
  std::vector<std::thread::id> writers;
  const std::string held = prefix("model-4");
  auto saver = std::make_shared<ModelSaver>(options().before_write([&](const std::string& p) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      writers.push_back(std::this_thread::get_id());
    }
    if (p == held) released.wait_for(std::chrono::seconds(5));
  }));
  bool file_while_held = true;
  std::string index_while_held;
  size_t tracked_while_held = 0;
  auto check = at_trigger(4, [&] {
    // save() has returned while the writer holds model-4: nothing of it is visible yet.
    file_while_held = checkpoint_exists(held);
    index_while_held = read_checkpoint_index(dir().string())->model_checkpoint_path;
    tracked_while_held = saver->tracked().size();
    release.set_value();
  });
  LogCapture log;
  m.train({saver, check}, 2, 2);
  EXPECT_FALSE(file_while_held);
  EXPECT_EQ(index_while_held, "model-2");  // the index names the durable checkpoint only
  EXPECT_EQ(tracked_while_held, 1u);
  ASSERT_EQ(writers.size(), 2u);
  for (const auto& id : writers) EXPECT_NE(id, std::this_thread::get_id());  // not this thread
  // after_train waited for the held save.
  EXPECT_EQ(read_checkpoint_index(dir().string())->model_checkpoint_path, "model-4");
  EXPECT_EQ(verify_checkpoint(held), "");
  EXPECT_TRUE(log.contains("Model saved to " + held + "."));
  EXPECT_EQ(saver->tracked().size(), 2u);
}

TEST_F(SaverTest, AsyncANewSaveWaitsUntilThePreviousOneIsDurable) {
  // Every step is saved and every write is slow: if saves queued up, a step's trigger would come
  // before the previous step's checkpoint is written.
  ModelTrainer m;
  auto saver = std::make_shared<ModelSaver>(options().before_write(
      [](const std::string&) { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }));
  std::vector<std::string> problems;
  auto check = std::make_shared<ActionCallback>();
  check->trigger_fn = [&](ActionCallback& self) {
    const int64_t gs = self.global_step();
    if (gs == 1) return;
    const std::string previous = fmt::format("model-{}", gs - 1);
    if (verify_checkpoint(prefix(previous)) != "") problems.push_back(previous + " not written");
    // The index names the previous checkpoint, or this step's if the writer was quick.
    const std::string latest = read_checkpoint_index(dir().string())->model_checkpoint_path;
    if (latest != previous && latest != fmt::format("model-{}", gs)) {
      problems.push_back(fmt::format("step {}: index {}", gs, latest));
    }
  };
  m.train({saver, check}, 1, 6);
  EXPECT_EQ(problems, std::vector<std::string>{});
  EXPECT_EQ(listing(dir()), "model-1 model-2 model-3 model-4 model-5 model-6 | checkpoint");
}

TEST_F(SaverTest, AsyncAFailedWriteIsReportedOnTheTrainingThreadAndLeavesNoTemporaryFile) {
  ModelTrainer m;
  std::unique_ptr<FileSizeLimit> limit;
  // model-4's data file is written under a 512-byte file-size limit (the writer sets it; the
  // limit is the process's), lifted before model-6 is written.
  auto saver = std::make_shared<ModelSaver>(options().before_write([&](const std::string& p) {
    if (p == prefix("model-4")) limit = std::make_unique<FileSizeLimit>(512);
    if (p == prefix("model-6")) limit.reset();
  }));
  std::vector<int64_t> failures_seen;
  auto counter = std::make_shared<ActionCallback>();
  counter->trigger_fn = [&](ActionCallback& self) {
    failures_seen.push_back(self.trainer().write_failure_count());
  };
  LogCapture log;
  const std::string msg = message_of<WriteFailedError>([&] { m.train({saver, counter}, 2, 3); });
  // Reported when the training thread next waited for the writer: at model-6's save, not at the
  // trigger of step 4 (which only handed the snapshot over), and with the step of the save.
  EXPECT_EQ(failures_seen, (std::vector<int64_t>{0, 0, 1}));
  ASSERT_EQ(m.trainer.write_failures().size(), 1u);
  EXPECT_EQ(m.trainer.write_failures()[0].global_step, 4);
  EXPECT_EQ(m.trainer.write_failures()[0].path, prefix("model-4") + ".data");
  EXPECT_NE(msg.find(prefix("model-4") + ".data (ModelSaver, 1 failure)"), std::string::npos)
      << msg;
  EXPECT_TRUE(log.contains("ERR Exception in ModelSaver! cannot write " + prefix("model-4") +
                           ".data.tmp."));
  EXPECT_EQ(temporary_files(dir()), std::vector<std::string>{});
  EXPECT_EQ(listing(dir()), "model-2 model-6 | checkpoint");
  EXPECT_EQ(read_checkpoint_index(dir().string())->all_model_checkpoint_paths,
            (std::vector<std::string>{"model-2", "model-6"}));
}

TEST_F(SaverTest, AsyncAFailureOfTheLastSaveIsReportedByAfterTrain) {
  ModelTrainer m;
  auto saver = std::make_shared<ModelSaver>(options().before_write([&](const std::string& p) {
    if (p != prefix("model-4")) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    throw std::runtime_error("the disk went away");
  }));
  LogCapture log;
  const std::string msg = message_of<WriteFailedError>([&] { m.train({saver}, 2, 2); });
  EXPECT_NE(msg.find(prefix("model-4") + ".data (ModelSaver, 1 failure)"), std::string::npos)
      << msg;
  EXPECT_TRUE(log.contains("ERR Exception in ModelSaver! the disk went away"));
  EXPECT_EQ(listing(dir()), "model-2 | checkpoint");
  EXPECT_EQ(read_checkpoint_index(dir().string())->model_checkpoint_path, "model-2");
}

TEST_F(SaverTest, AsyncAfterTrainWaitsForTheSaveInFlight) {
  ModelTrainer m;
  auto saver = std::make_shared<ModelSaver>(options().before_write([&](const std::string& p) {
    if (p == prefix("model-4")) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }));
  m.train({saver}, 2, 2);
  // The saver is still alive here: only after_train can have waited.
  EXPECT_EQ(listing(dir()), "model-2 model-4 | checkpoint");
  EXPECT_EQ(read_checkpoint_index(dir().string())->model_checkpoint_path, "model-4");
  EXPECT_EQ(saver->tracked().back().first, "model-4");
}

TEST_F(SaverTest, AsyncTheSaveAtASignalIsWrittenBeforeTrainingEnds) {
  ModelTrainer m;
  auto raiser = std::make_shared<ActionCallback>();
  raiser->trigger_step_fn = [](ActionCallback& self) {
    if (self.global_step() == 3) std::raise(SIGTERM);
  };
  // model-2 is still being written when the signal arrives at step 3.
  auto saver = std::make_shared<ModelSaver>(options().before_write(
      [](const std::string&) { std::this_thread::sleep_for(std::chrono::milliseconds(100)); }));
  LogCapture log;
  m.trainer.set_handle_signals(true);
  m.train({raiser, saver}, 2, 3);
  EXPECT_EQ(m.trainer.received_signal(), SIGTERM);
  EXPECT_EQ(listing(dir()), "model-2 model-3 | checkpoint");
  EXPECT_EQ(read_checkpoint_index(dir().string())->model_checkpoint_path, "model-3");
  EXPECT_EQ(read_checkpoint(prefix("model-3")).at("trainer/global_step").item<int64_t>(), 3);
  EXPECT_TRUE(log.contains("Saving a checkpoint at global_step=3 before exiting on SIGTERM."));
  EXPECT_TRUE(log.contains("Model saved to " + prefix("model-3") + "."));
}

TEST_F(SaverTest, AsyncTheCheckpointHoldsTheStateOfItsStepThoughTrainingWentOn) {
  ModelTrainer m;
  // The writer of model-2 waits until step 3 has changed the parameters and momentum buffers.
  std::promise<void> step3;
  std::shared_future<void> step3_done = step3.get_future().share();
  std::atomic<bool> waited_for_step3{false};
  auto saver = std::make_shared<ModelSaver>(options().before_write([&](const std::string& p) {
    if (p != prefix("model-2")) return;
    waited_for_step3 = step3_done.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  }));
  TensorMap at_save;  // the state right after the save of step 2, copied
  auto recorder = at_trigger(2, [&] {
    for (const auto& [k, v] : collect_training_state(m.trainer)) at_save[k] = v.clone();
  });
  auto releaser = std::make_shared<ActionCallback>();
  releaser->trigger_step_fn = [&](ActionCallback& self) {
    if (self.global_step() == 3) step3.set_value();
  };
  m.train({sgd_stepper(&m), releaser, saver, recorder}, 2, 2);
  EXPECT_TRUE(waited_for_step3);
  const TensorMap saved = read_checkpoint(prefix("model-2"));
  ASSERT_EQ(saved.size(), at_save.size());
  for (const auto& [k, v] : at_save) {
    ASSERT_EQ(saved.count(k), 1u) << k;
    EXPECT_TRUE(torch::equal(saved.at(k), v)) << k;
  }
  EXPECT_FALSE(torch::equal(saved.at("weight"), m.net->weight.detach()));  // training went on
}

TEST_F(SaverTest, AsyncAResumeFromAnAsyncCheckpointEndsWithTheSameParameters) {
  const fs::path a = dir() / "a", b = dir() / "b";
  const auto slow = [](const std::string&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // training runs ahead
  };
  ModelTrainer whole;
  whole.train({sgd_stepper(&whole), std::make_shared<ModelSaver>(
                                        options().checkpoint_dir(a.string()).before_write(slow))},
              2, 4);
  ModelTrainer resumed;
  resumed.train(
      {sgd_stepper(&resumed),
       std::make_shared<ModelSaver>(options().checkpoint_dir(b.string()).before_write(slow))},
      2, 4, std::make_shared<SaverRestore>((a / "model-4").string()));
  EXPECT_EQ(resumed.trainer.global_step(), 8);
  EXPECT_TRUE(torch::equal(resumed.net->weight, whole.net->weight));
  EXPECT_TRUE(torch::equal(resumed.net->bias, whole.net->bias));
  const TensorMap want = read_checkpoint((a / "model-8").string());
  const TensorMap got = read_checkpoint((b / "model-8").string());
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [k, v] : want) EXPECT_TRUE(torch::equal(got.at(k), v)) << k;
}

TEST_F(SaverTest, AsyncMinSaverCopiesTheCheckpointOfItsStepWhileItIsStillBeingWritten) {
  ModelTrainer m;
  auto min = std::make_shared<MinSaver>(
      "val-error", MinSaverOptions().checkpoint_dir(dir().string()).fsync(false));
  auto saver = std::make_shared<ModelSaver>(options().before_write(
      [](const std::string&) { std::this_thread::sleep_for(std::chrono::milliseconds(100)); }));
  LogCapture log;
  m.train({stat_putter("val-error", {{1, 0.5}, {2, 0.25}}), saver, min}, 2, 2);
  EXPECT_TRUE(log.contains("Model at global_step=2 with minimum val-error=0.5 saved."));
  EXPECT_TRUE(log.contains("Model at global_step=4 with minimum val-error=0.25 saved."));
  EXPECT_EQ(count_lines(log, "MinSaver will do nothing this time"), 0);
  EXPECT_EQ(checkpoint_fingerprint(prefix("min-val-error")),
            checkpoint_fingerprint(prefix("model-4")));
  EXPECT_EQ(*min->best(), std::make_pair(int64_t{4}, 0.25));
}

TEST_F(SaverTest, SyncSavesOnTheTrainingThreadBeforeSaveReturns) {
  ModelTrainer m;
  std::vector<std::thread::id> writers;
  auto saver = std::make_shared<ModelSaver>(options().async(false).before_write(
      [&](const std::string&) { writers.push_back(std::this_thread::get_id()); }));
  std::vector<std::string> seen;
  auto check = std::make_shared<ActionCallback>();
  check->trigger_fn = [&](ActionCallback&) { seen.push_back(listing(dir())); };  // no waiting
  m.train({saver, check}, 2, 2);
  EXPECT_EQ(seen,
            (std::vector<std::string>{"model-2 | checkpoint", "model-2 model-4 | checkpoint"}));
  EXPECT_EQ(writers, (std::vector<std::thread::id>(2, std::this_thread::get_id())));
}

}  // namespace saver_test
}  // namespace trainpack
