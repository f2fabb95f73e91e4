// Promised writes (core/trainer.h, "Promised writes"): a callback that cannot write a file it
// promised reports it to the trainer, training goes on, and main_loop ends with WriteFailedError
// after every after_train ran: ModelSaver's checkpoints (a file-size limit, which binds root too;
// a read-only directory), MinSaver's copy after a failed save, the save at a signal.
#include <sys/resource.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "support/errors.h"
#include "support/files.h"
#include "support/model_trainer.h"
#include "support/stat_putter.h"
#include "support/temp_dir.h"
#include "trainpack/callbacks/saver.h"
#include "trainpack/core/exceptions.h"
#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"
#include "trainpack/utils/checkpoint.h"

namespace trainpack {
namespace write_failures_test {

namespace fs = std::filesystem;
using testing::ActionCallback;
using testing::FileSizeLimit;
using testing::LogCapture;
using testing::ModelTrainer;

// A testing::ModelTrainer without an optimizer, signals not handled: its module makes a checkpoint
// far larger than a few hundred bytes.
const testing::ModelTrainerOptions kModelOnly =
    testing::ModelTrainerOptions().optimizer(false).handle_signals(false);

// Counts the after_train calls it sees.
std::shared_ptr<ActionCallback> after_train_counter(int* count) {
  auto cb = std::make_shared<ActionCallback>();
  cb->after_train_fn = [count](ActionCallback&) { ++*count; };
  return cb;
}

// Limits the size of files written during the epochs listed (a 512-byte limit: a checkpoint does
// not fit, and root is bound by it too); lifted at every other epoch's start and in after_train.
std::shared_ptr<ActionCallback> size_limiter(std::unique_ptr<FileSizeLimit>* limit,
                                             std::vector<int64_t> epochs) {
  auto cb = std::make_shared<ActionCallback>();
  cb->before_epoch_fn = [limit, epochs](ActionCallback& self) {
    // The previous epoch's checkpoint may still be on ModelSaver's writer thread: the limit must
    // hold until it is written (or failed), or the write would land after the reset and succeed.
    wait_for_model_savers(self.trainer());
    limit->reset();
    for (int64_t e : epochs) {
      if (self.epoch_num() == e) *limit = std::make_unique<FileSizeLimit>(512);
    }
  };
  cb->after_train_fn = [limit](ActionCallback&) { limit->reset(); };
  return cb;
}

using testing::stat_putter;

class WriteFailuresTest : public testing::TempDirTest {
 protected:
  ModelSaverOptions options() const {
    return ModelSaverOptions().checkpoint_dir(dir().string()).fsync(false);
  }
  std::string file(const std::string& name) const { return (dir() / name).string(); }
};

TEST_F(WriteFailuresTest, AReportedFailureEndsTrainingWithWriteFailedErrorAfterEveryAfterTrain) {
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  auto reporter = std::make_shared<ActionCallback>();
  reporter->trigger_fn = [](ActionCallback& self) {
    self.trainer().report_write_failure("Writer", "/x/a.data", "No space left on device");
    if (self.epoch_num() == 2)
      self.trainer().report_write_failure("Other", "/x/b", "File too large");
  };
  int after_trains = 0;
  const std::string what = testing::message_of<WriteFailedError>([&] {
    trainer.train({reporter, after_train_counter(&after_trains)}, {}, 1, 1, 2);
  });
  EXPECT_EQ(after_trains, 1);
  EXPECT_EQ(trainer.global_step(), 2);  // training went on
  EXPECT_EQ(trainer.write_failure_count(), 3);
  ASSERT_EQ(trainer.write_failures().size(), 3u);
  EXPECT_EQ(trainer.write_failures()[2].global_step, 2);
  EXPECT_EQ(what,
            "Training ended, but not everything it was to write was written: 3 writes failed (2 "
            "files): /x/a.data (Writer, 2 failures), /x/b (Other, 1 failure); the first error: No "
            "space left on device. The ERROR lines of the log say more; the files named are "
            "missing or out of date (free space or fix the permissions of their directory, then "
            "resume)");
}

TEST_F(WriteFailuresTest, TheErrorListsTheFilesAndTheCount) {
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  auto reporter = std::make_shared<ActionCallback>();
  reporter->trigger_fn = [](ActionCallback& self) {
    self.trainer().report_write_failure("W", "/x/" + std::to_string(self.epoch_num()), "e");
  };
  try {
    trainer.train({reporter}, {}, 1, 1, 12);
    FAIL() << "no WriteFailedError";
  } catch (const WriteFailedError& e) {
    EXPECT_EQ(e.failure_count(), 12);
    ASSERT_EQ(e.files().size(), 12u);
    EXPECT_EQ(e.files().front(), "/x/1");
    EXPECT_NE(std::string(e.what()).find("/x/10 (W, 1 failure) and 2 more"), std::string::npos)
        << e.what();
  }
}

TEST_F(WriteFailuresTest, TorchrunsErrorFileGetsTheFailure) {
  // Under torchrun (which sets TORCHELASTIC_ERROR_FILE) its summary said `error_file: <N/A>`.
  const std::string error_file = file("error.json");
  ASSERT_EQ(::setenv("TORCHELASTIC_ERROR_FILE", error_file.c_str(), 1), 0);
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  auto reporter = std::make_shared<ActionCallback>();
  reporter->trigger_fn = [](ActionCallback& self) {
    self.trainer().report_write_failure("ModelSaver", "/x/model-1.data", "No space left on device");
  };
  EXPECT_THROW(trainer.train({reporter}, {}, 1, 1, 1), WriteFailedError);
  ::unsetenv("TORCHELASTIC_ERROR_FILE");
  const std::string text = testing::read_text(error_file);
  EXPECT_NE(text.find("\"message\""), std::string::npos) << text;
  EXPECT_NE(text.find("Training ended, but not everything it was to write was written: 1 write "
                      "failed (1 file): /x/model-1.data"),
            std::string::npos)
      << text;
}

TEST_F(WriteFailuresTest, NoFailureNoError) {
  ModelTrainer m(kModelOnly);
  EXPECT_NO_THROW(m.trainer.train({std::make_shared<ModelSaver>(options())}, {}, 1, 1, 2));
  EXPECT_EQ(m.trainer.write_failure_count(), 0);
  EXPECT_EQ(m.trainer.write_failure_summary(), "");
}

TEST_F(WriteFailuresTest, AnErrorThatEndedTrainingWinsAndTheFailuresAreLogged) {
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  auto cb = std::make_shared<ActionCallback>();
  cb->trigger_fn = [](ActionCallback& self) {
    self.trainer().report_write_failure("W", "/x/a", "e");
    throw std::runtime_error("boom");
  };
  LogCapture log;
  EXPECT_THROW(trainer.train({cb}, {}, 1, 1, 2), CallbackError);
  EXPECT_TRUE(log.contains("ERR Besides: 1 write failed (1 file): /x/a (W, 1 failure)"));
}

TEST_F(WriteFailuresTest, AFailedCheckpointSaveFailsTheRunAfterTrainingWentOn) {
  ModelTrainer m(kModelOnly);
  std::unique_ptr<FileSizeLimit> limit;
  int after_trains = 0;
  LogCapture log;
  try {
    m.trainer.train({size_limiter(&limit, {2}), std::make_shared<ModelSaver>(options()),
                     after_train_counter(&after_trains)},
                    {}, 2, 1, 3);
    FAIL() << "no WriteFailedError";
  } catch (const WriteFailedError& e) {
    EXPECT_EQ(e.files(), std::vector<std::string>{file("model-4.data")});
    EXPECT_EQ(e.failure_count(), 1);
    EXPECT_NE(std::string(e.what()).find("1 write failed (1 file): " + file("model-4.data") +
                                         " (ModelSaver, 1 failure); the first error: cannot "
                                         "write"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(after_trains, 1);
  EXPECT_EQ(m.trainer.global_step(), 6);  // all three epochs ran
  EXPECT_EQ(read_checkpoint_index(dir().string())->model_checkpoint_path, "model-6");
  EXPECT_TRUE(log.contains("ERR Exception in ModelSaver!"));
}

TEST_F(WriteFailuresTest, AReadOnlyDirectoryFailsTheRun) {
  if (geteuid() == 0)
    GTEST_SKIP() << "root ignores directory permissions (the size limit tests "
                    "cover root)";
  ModelTrainer m(kModelOnly);
  auto saver = std::make_shared<ModelSaver>(options());
  fs::permissions(dir(), fs::perms::owner_read | fs::perms::owner_exec);
  int after_trains = 0;
  try {
    m.trainer.train({saver, after_train_counter(&after_trains)}, {}, 1, 1, 2);
    FAIL() << "no WriteFailedError";
  } catch (const WriteFailedError& e) {
    EXPECT_EQ(e.files(), (std::vector<std::string>{file("model-1.data"), file("model-2.data")}));
    EXPECT_NE(std::string(e.what()).find("Permission denied"), std::string::npos) << e.what();
  }
  fs::permissions(dir(), fs::perms::owner_all);
  EXPECT_EQ(after_trains, 1);
}

TEST_F(WriteFailuresTest, AFailedSaveAtASignalIsReportedAndTheSignalKept) {
  ModelTrainer m(kModelOnly);
  m.trainer.set_handle_signals(true);
  std::unique_ptr<FileSizeLimit> limit;
  auto raiser = std::make_shared<ActionCallback>();
  raiser->trigger_step_fn = [&](ActionCallback& self) {
    if (self.global_step() == 3) {
      limit = std::make_unique<FileSizeLimit>(512);
      std::raise(SIGTERM);
    }
  };
  int after_trains = 0;
  try {
    m.trainer.train(
        {raiser, std::make_shared<ModelSaver>(options()), after_train_counter(&after_trains)}, {},
        4, 1, 2);
    FAIL() << "no WriteFailedError";
  } catch (const WriteFailedError& e) {
    EXPECT_EQ(e.files(), std::vector<std::string>{file("model-3.data")});
  }
  limit.reset();
  EXPECT_EQ(after_trains, 1);
  EXPECT_EQ(m.trainer.received_signal(), SIGTERM);
  EXPECT_FALSE(checkpoint_exists(file("model-3")));
}

TEST_F(WriteFailuresTest, MinSaverAfterAFailedFirstSaveSaysSoAndTrainingGoesOn) {
  // The first save fails, so there is no index at all: MinSaver says that the save failed
  // (rather than "Do you forget to use ModelSaver?", which would stop training), reports its copy
  // as not written, and copies the next new minimum.
  ModelTrainer m(kModelOnly);
  std::unique_ptr<FileSizeLimit> limit;
  auto min = std::make_shared<MinSaver>(
      "val-error", MinSaverOptions().checkpoint_dir(dir().string()).fsync(false));
  int after_trains = 0;
  LogCapture log;
  try {
    m.trainer.train(
        {size_limiter(&limit, {1}), stat_putter("val-error", {{1, 0.5}, {2, 0.25}}),
         std::make_shared<ModelSaver>(options()), min, after_train_counter(&after_trains)},
        {}, 2, 1, 2);
    FAIL() << "no WriteFailedError";
  } catch (const WriteFailedError& e) {
    EXPECT_EQ(e.files(),
              (std::vector<std::string>{file("model-2.data"), file("min-val-error.data")}));
    EXPECT_EQ(e.failure_count(), 2);
  }
  EXPECT_EQ(after_trains, 1);
  EXPECT_EQ(m.trainer.global_step(), 4);
  EXPECT_FALSE(log.contains("Do you forget to use ModelSaver?"));
  EXPECT_TRUE(log.contains(
      "ERR [MinSaver] New minimum 'val-error'=0.5 found at global_step=2, but its checkpoint "
      "could not be saved (cannot write"));
  EXPECT_TRUE(log.contains("so it was not copied to " + file("min-val-error.data") + "."));
  ASSERT_TRUE(min->best().has_value());
  EXPECT_EQ(min->best()->first, 4);
  EXPECT_TRUE(log.contains("Model at global_step=4 with minimum val-error=0.25 saved."));
}

TEST_F(WriteFailuresTest, MinSaverAfterALaterFailedSaveSaysSo) {
  // The index names model-2 when the save of model-4 fails.
  ModelTrainer m(kModelOnly);
  std::unique_ptr<FileSizeLimit> limit;
  auto max = std::make_shared<MaxSaver>(
      "accuracy", MaxSaverOptions().checkpoint_dir(dir().string()).fsync(false));
  LogCapture log;
  EXPECT_THROW(
      m.trainer.train({size_limiter(&limit, {2}), stat_putter("accuracy", {{1, 0.5}, {2, 0.75}}),
                       std::make_shared<ModelSaver>(options()), max},
                      {}, 2, 1, 2),
      WriteFailedError);
  EXPECT_TRUE(log.contains(
      "ERR [MaxSaver] New maximum 'accuracy'=0.75 found at global_step=4, but its checkpoint "
      "could not be saved"));
  EXPECT_FALSE(log.contains("The callbacks may have inconsistent frequency"));
  EXPECT_EQ(max->best()->first, 2);
}

}  // namespace write_failures_test
}  // namespace trainpack
