// AutoResumeTrainConfig (docs/tensorpack-differences.md #7) and JSONWriter's part in a resume:
// which checkpoint is picked, the fallback past a corrupt one, the counters the run continues
// from, and what happens to stats.json.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>

#include "support/errors.h"
#include "support/files.h"
#include "support/linear_regression.h"
#include "support/temp_dir.h"
#include "trainpack/callbacks/json_writer.h"
#include "trainpack/callbacks/saver.h"
#include "trainpack/callbacks/trigger.h"
#include "trainpack/input/dataflow.h"
#include "trainpack/testing.h"
#include "trainpack/train/config.h"
#include "trainpack/train/single_cost.h"
#include "trainpack/utils/checkpoint.h"
#include "trainpack/utils/logger.h"

namespace trainpack {
namespace auto_resume_test {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::LogCapture;
using testing::write_text;

// The tests' small regression (3 steps per epoch), with momentum: the optimizer has a state.
class LinearModel : public testing::LinearRegressionModel {
 public:
  LinearModel() : LinearRegressionModel(/*momentum=*/0.9) {}
};
DataFlowPtr batches() { return testing::linear_regression_batches(); }

// Puts `steps` = global_step to the monitors after every step (so that stats.json has an entry
// per step) and records the global steps and epochs it ran.
class StepRecorder : public Callback {
 public:
  std::vector<int64_t> steps;
  std::vector<int64_t> epochs;

 protected:
  void _trigger_step() override {
    steps.push_back(global_step());
    trainer().monitors().put_scalar("steps", static_cast<double>(global_step()));
  }
  void _before_epoch() override { epochs.push_back(epoch_num()); }
};

// The (epoch_num, global_step) of every entry of <dir>/stats.json.
std::vector<std::pair<int64_t, int64_t>> stats_counters(const fs::path& dir) {
  std::vector<std::pair<int64_t, int64_t>> out;
  const auto stats = JSONWriter::load_existing_json(dir.string());
  if (!stats) return out;
  for (const auto& e : *stats) {
    out.emplace_back(std::get<int64_t>(*e.find("epoch_num")),
                     std::get<int64_t>(*e.find("global_step")));
  }
  return out;
}

class AutoResumeTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    testing::TempDirTest::SetUp();
    logger::set_logger_dir(dir().string(), 'k');
  }

  // Trains to `max_epoch` (auto-resuming from the logger directory) with a ModelSaver every
  // epoch, or every step when `save_every_step`; returns the recorder.
  std::shared_ptr<StepRecorder> run(int64_t max_epoch, bool save_every_step = false,
                                    std::shared_ptr<LinearModel> model = nullptr,
                                    std::string* found = nullptr) {
    if (!model) model = std::make_shared<LinearModel>();
    auto recorder = std::make_shared<StepRecorder>();
    auto saver = std::make_shared<ModelSaver>(ModelSaverOptions().fsync(false));
    std::vector<CallbackPtr> callbacks{recorder};
    if (save_every_step) {
      callbacks.push_back(
          std::make_shared<PeriodicTrigger>(saver, PeriodicTriggerOptions().every_k_steps(1)));
    } else {
      callbacks.push_back(saver);
    }
    AutoResumeTrainConfig config(TrainConfig()
                                     .model(model)
                                     .dataflow(batches())
                                     .callbacks(callbacks)
                                     .extra_callbacks(std::vector<CallbackPtr>{})
                                     .monitors(std::vector<MonitorPtr>{JSONWriter::create()})
                                     .max_epoch(max_epoch));
    if (found != nullptr) *found = config.found_checkpoint();
    SimpleTrainer trainer;
    trainer.set_handle_signals(false);
    launch_train_with_config(config, trainer);
    return recorder;
  }
};

TEST_F(AutoResumeTest, AnEmptyDirectoryStartsFromScratch) {
  std::string found = "unset";
  auto rec = run(1, false, nullptr, &found);
  EXPECT_EQ(found, "");
  EXPECT_EQ(rec->steps, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_TRUE(fs::exists(dir() / "model-3.data"));
}

TEST_F(AutoResumeTest, ContinuesFromTheLatestCheckpointsCountersAndAppendsToStatsJson) {
  run(2);
  const auto before = stats_counters(dir());
  ASSERT_EQ(before.size(), 6u);  // one entry per step: 3 steps x 2 epochs
  std::string found;
  LogCapture log;
  auto rec = run(4, false, nullptr, &found);
  EXPECT_EQ(found, (dir() / "model-6").string());
  EXPECT_TRUE(log.contains("Will load checkpoint at " + (dir() / "model-6").string() + "."));
  EXPECT_EQ(rec->epochs, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(rec->steps, (std::vector<int64_t>{7, 8, 9, 10, 11, 12}));
  const std::vector<std::pair<int64_t, int64_t>> expected{{1, 1}, {1, 2},  {1, 3},  {2, 4},
                                                          {2, 5}, {2, 6},  {3, 7},  {3, 8},
                                                          {3, 9}, {4, 10}, {4, 11}, {4, 12}};
  EXPECT_EQ(stats_counters(dir()), expected);
  EXPECT_TRUE(log.contains("will append to it"));
}

TEST_F(AutoResumeTest, ARunThatAlreadyEndedTrainsNoFurther) {
  run(2);
  auto rec = run(2);
  EXPECT_TRUE(rec->steps.empty());
  EXPECT_EQ(stats_counters(dir()).size(), 6u);
}

// The index names model-6, whose data file has a flipped byte: the fallback is model-3, with a
// warning naming the file; the entries of stats.json after step 3 are dropped (they run again).
TEST_F(AutoResumeTest, FallsBackToTheNewestValidCheckpointAndDropsLaterStats) {
  run(2);
  const std::string original_stats = [&] {
    std::ifstream in(dir() / "stats.json");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  {
    std::fstream f(dir() / "model-6.data", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x20);
    f.seekp(100);
    f.write(&c, 1);
  }
  std::string found;
  LogCapture log;
  auto rec = run(2, false, nullptr, &found);
  EXPECT_EQ(found, (dir() / "model-3").string());
  EXPECT_TRUE(log.contains("WRN Checkpoint " + (dir() / "model-6").string() + " cannot be used"))
      << "log lines: " << log.lines().size();
  EXPECT_TRUE(log.contains("holds 3 entries after global_step=3"));
  EXPECT_EQ(rec->steps, (std::vector<int64_t>{4, 5, 6}));
  const std::vector<std::pair<int64_t, int64_t>> expected{{1, 1}, {1, 2}, {1, 3},
                                                          {2, 4}, {2, 5}, {2, 6}};
  EXPECT_EQ(stats_counters(dir()), expected);
  // The file as found is kept beside it.
  int backups = 0;
  for (const auto& entry : fs::directory_iterator(dir())) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("stats.json.before-resume-", 0) != 0) continue;
    ++backups;
    std::ifstream in(entry.path());
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), original_stats);
  }
  EXPECT_EQ(backups, 1);
}

TEST_F(AutoResumeTest, ATruncatedLatestCheckpointIsSkipped) {
  run(2);
  fs::resize_file(dir() / "model-6.data", fs::file_size(dir() / "model-6.data") / 2);
  EXPECT_EQ(AutoResumeTrainConfig::find_latest_valid_checkpoint(dir().string()),
            (dir() / "model-3").string());
}

// ---- what cannot be resumed is never overwritten ----

// Rewrites checkpoint `prefix` with `change` applied to its tensors.
void rewrite_checkpoint(const fs::path& prefix, const std::function<void(TensorMap&)>& change) {
  TensorMap state = read_checkpoint(prefix.string());
  change(state);
  write_checkpoint(prefix.string(), state, CheckpointWriteOptions().fsync(false));
}

// The AutoResumeError of find_latest_valid_checkpoint(dir); fails the test when there is none.
std::string refusal(const fs::path& dir) {
  try {
    AutoResumeTrainConfig::find_latest_valid_checkpoint(dir.string());
  } catch (const AutoResumeError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no AutoResumeError";
  return "";
}

TEST_F(AutoResumeTest, NoValidCheckpointAtAllIsRefusedListingEachAndHowToStartOver) {
  run(1);
  fs::resize_file(dir() / "model-3.data", 10);
  LogCapture log;
  const std::string what = refusal(dir());
  EXPECT_THAT(what, HasSubstr("log directory " + dir().string() +
                              " holds checkpoints of a previous run, but none can be resumed"));
  EXPECT_THAT(what, HasSubstr((dir() / "model-3.data").string() + ": "));
  EXPECT_THAT(what, HasSubstr("logger::set_logger_dir(dir, 'b')"));
  EXPECT_TRUE(log.contains("cannot be used"));
  // Nothing was touched, and launching refuses too.
  EXPECT_EQ(fs::file_size(dir() / "model-3.data"), 10u);
  EXPECT_THROW(run(2), AutoResumeError);
  EXPECT_EQ(fs::file_size(dir() / "model-3.data"), 10u);
}

TEST_F(AutoResumeTest, ABestCopyWithoutAResumableCheckpointIsRefused) {
  run(1);
  fs::copy_file(dir() / "model-3.data", dir() / "min-val-error-top1.data");
  for (const char* name : {"model-3.data", "checkpoint", "checkpoint.previous"}) {
    fs::remove(dir() / name);
  }
  const std::string what = refusal(dir());
  EXPECT_THAT(what, HasSubstr((dir() / "min-val-error-top1.data").string() +
                              ": a copy of a best checkpoint"));
}

TEST_F(AutoResumeTest, ADirectoryWithOnlyLogsAndStatisticsStartsFromScratch) {
  run(1);
  for (const char* name : {"model-3.data", "checkpoint", "checkpoint.previous"}) {
    fs::remove(dir() / name);
  }
  EXPECT_EQ(AutoResumeTrainConfig::find_latest_valid_checkpoint(dir().string()), std::nullopt);
  auto rec = run(1);
  EXPECT_EQ(rec->steps, (std::vector<int64_t>{1, 2, 3}));
}

TEST_F(AutoResumeTest, ACheckpointWithoutCountersIsNotResumedNorOverwritten) {
  run(2);
  rewrite_checkpoint(dir() / "model-6", [](TensorMap& m) {
    for (auto it = m.begin(); it != m.end();) {
      it = it->first.rfind("trainer/", 0) == 0 ? m.erase(it) : std::next(it);
    }
  });
  const std::string what = refusal(dir());
  EXPECT_THAT(what,
              HasSubstr((dir() / "model-6.data").string() + ": it holds no trainer counters"));
  EXPECT_THAT(what, HasSubstr("would restart at epoch 1"));
  EXPECT_THAT(what, HasSubstr("newest checkpoint that can be resumed in " + dir().string() +
                              " is " + (dir() / "model-3").string()));
  // Alone, it is refused as well.
  fs::remove(dir() / "model-3.data");
  EXPECT_THAT(refusal(dir()), HasSubstr("none can be resumed"));
}

TEST_F(AutoResumeTest, ACheckpointWithNonFiniteWeightsIsSkipped) {
  run(2);
  rewrite_checkpoint(dir() / "model-6", [](TensorMap& m) {
    m.at("weight") = m.at("weight").clone().fill_(std::numeric_limits<float>::quiet_NaN());
  });
  LogCapture log;
  EXPECT_EQ(AutoResumeTrainConfig::find_latest_valid_checkpoint(dir().string()),
            (dir() / "model-3").string());
  EXPECT_TRUE(log.contains("its weights are not finite (NaN or inf in weight)"));
}

TEST_F(AutoResumeTest, CountersOutOfRangeAreSkippedNamingTheValue) {
  run(2);
  rewrite_checkpoint(dir() / "model-6", [](TensorMap& m) {
    m.at("trainer/global_step") = at::scalar_tensor(std::numeric_limits<int64_t>::max(), at::kLong);
  });
  LogCapture log;
  EXPECT_EQ(AutoResumeTrainConfig::find_latest_valid_checkpoint(dir().string()),
            (dir() / "model-3").string());
  EXPECT_TRUE(log.contains("checkpoint " + (dir() / "model-6").string() +
                           ": 'trainer/global_step' is 9223372036854775807, outside the range"));
}

TEST_F(AutoResumeTest, BadIndexEntriesAreWarnedAboutAndIgnored) {
  run(2);
  fs::create_symlink("loop.data", dir() / "loop.data");
  {
    std::ofstream index(dir() / "checkpoint", std::ios::trunc);
    index << "model_checkpoint_path: \"../../etc/passwd\"\n"
          << "all_model_checkpoint_paths: \"/etc/passwd\"\n"
          << "all_model_checkpoint_paths: \"loop\"\n"
          << "all_model_checkpoint_paths: \"model-99\"\n";
  }
  LogCapture log;
  EXPECT_EQ(AutoResumeTrainConfig::find_latest_valid_checkpoint(dir().string()),
            (dir() / "model-6").string());
  EXPECT_TRUE(log.contains("names \"../../etc/passwd\": a path outside the directory"));
  EXPECT_TRUE(log.contains("names \"/etc/passwd\": a path outside the directory"));
  EXPECT_TRUE(log.contains("names \"loop\": " + (dir() / "loop.data").string() +
                           " is a symbolic link (ModelSaver writes regular files"));
  EXPECT_TRUE(log.contains("names \"model-99\": " + (dir() / "model-99.data").string() +
                           " does not exist"));
  try {
    resolve_checkpoint_path(dir().string());
    FAIL() << "no CheckpointError";
  } catch (const CheckpointError& e) {
    EXPECT_THAT(e.what(), HasSubstr("a path outside the directory"));
  }
}

// ---- a resume over another input ----

// Resumes the run in dir() over `flow` (after run(2) over batches of 8), with `steps_per_epoch`
// when it is set.
std::string resume_over(const DataFlowPtr& flow, bool allow,
                        std::optional<int64_t> steps_per_epoch = std::nullopt) {
  return testing::message_of<std::invalid_argument>([&] {
    TrainConfig train =
        TrainConfig()
            .model(std::make_shared<LinearModel>())
            .dataflow(flow)
            .callbacks({std::make_shared<ModelSaver>(ModelSaverOptions().fsync(false))})
            .extra_callbacks(std::vector<CallbackPtr>{})
            .monitors(std::vector<MonitorPtr>{})
            .max_epoch(3)
            .allow_changed_input(allow);
    if (steps_per_epoch) train.steps_per_epoch(*steps_per_epoch);
    AutoResumeTrainConfig config(train);
    SimpleTrainer trainer;
    trainer.set_handle_signals(false);
    launch_train_with_config(config, trainer);
  });
}

// The 24 points of linear_regression_batches() in batches of `batch_size`.
DataFlowPtr points_in_batches(int64_t batch_size) {
  std::vector<Datapoint> points;
  auto source = testing::linear_regression_batches();
  source->reset_state();
  source->begin_pass();
  while (auto batch = source->next()) {
    for (int64_t i = 0; i < (*batch)[0].size(0); ++i) {
      points.push_back({(*batch)[0][i], (*batch)[1][i]});
    }
  }
  return std::make_shared<BatchData>(std::make_shared<DataFromList>(points), batch_size);
}

TEST_F(AutoResumeTest, AResumeWithAnotherBatchSizeIsRefusedNamingBoth) {
  run(2);
  const std::string what = resume_over(points_in_batches(4), /*allow=*/false);
  EXPECT_NE(what.find("the checkpoint's data position counts batches of another input: it was "
                      "saved over\n  BatchData(batch_size=8) over DataFromList (24 datapoints)\n"
                      "and this run reads\n  BatchData(batch_size=4) over DataFromList (24 "
                      "datapoints)\n"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("TrainConfig().allow_changed_input(true)"), std::string::npos) << what;
  // Nothing was trained or saved: model-6 is still the latest.
  EXPECT_FALSE(fs::exists(dir() / "model-9.data"));
}

TEST_F(AutoResumeTest, AResumeWithAnotherInputMayBeAllowed) {
  run(2);
  LogCapture log;
  EXPECT_EQ(resume_over(points_in_batches(4), /*allow=*/true), "<no exception>");
  EXPECT_TRUE(log.contains("Continuing anyway (allow_changed_input)"));
  EXPECT_TRUE(fs::exists(dir() / "model-12.data"));  // 6 + one epoch of 6 batches of 4
}

TEST_F(AutoResumeTest, AResumeWithAnotherEpochLengthIsRefusedNamingBoth) {
  run(2);  // 3 steps per epoch: model-6 continues at epoch 3, step 0
  const std::string what = resume_over(points_in_batches(8), /*allow=*/false, 2);
  EXPECT_NE(what.find("the restored checkpoint was saved by a run of 3 steps per epoch, and this "
                      "run has 2: its epoch 3 (step 0 of it) would count other steps."),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("TrainConfig().allow_changed_input(true)"), std::string::npos) << what;
  EXPECT_FALSE(fs::exists(dir() / "model-8.data"));
  LogCapture log;
  EXPECT_EQ(resume_over(points_in_batches(8), /*allow=*/true, 2), "<no exception>");
  EXPECT_TRUE(log.contains("would count other steps. Continuing anyway (allow_changed_input)"));
  EXPECT_TRUE(fs::exists(dir() / "model-8.data"));  // 6 + one epoch of 2
}

TEST_F(AutoResumeTest, TheSameInputResumesWithoutAWord) {
  run(2);
  LogCapture log;
  EXPECT_EQ(resume_over(points_in_batches(8), /*allow=*/false), "<no exception>");
  EXPECT_FALSE(log.contains("another input"));
  EXPECT_TRUE(fs::exists(dir() / "model-9.data"));
}

// ---- files another user planted in the directory ----

TEST_F(AutoResumeTest, APlantedCheckpointLinkIsNotFollowed) {
  // model-99.data links to a valid checkpoint of another (private) run: a root job followed it,
  // continued that run and saved its weights here.
  run(2);
  const fs::path other = dir() / "private";
  fs::create_directory(other);
  fs::copy_file(dir() / "model-6.data", other / "model-6.data");
  fs::create_symlink(other / "model-6.data", dir() / "model-99.data");
  LogCapture log;
  EXPECT_EQ(AutoResumeTrainConfig::find_latest_valid_checkpoint(dir().string()),
            (dir() / "model-6").string());
  EXPECT_TRUE(log.contains("Checkpoint " + (dir() / "model-99").string() +
                           " cannot be used (not a regular file (a symbolic link))"))
      << ::testing::PrintToString(log.lines());
}

TEST_F(AutoResumeTest, AnotherUsersCheckpointIsNotResumed) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to give a file to another user";
  run(2);
  fs::copy_file(dir() / "model-6.data", dir() / "model-99.data");
  ASSERT_EQ(::chown((dir() / "model-99.data").c_str(), 4242, 4242), 0);
  LogCapture log;
  EXPECT_EQ(AutoResumeTrainConfig::find_latest_valid_checkpoint(dir().string()),
            (dir() / "model-6").string());
  EXPECT_TRUE(log.contains("cannot be used (owned by user 4242, not by this process's user 0"))
      << ::testing::PrintToString(log.lines());
}

TEST_F(AutoResumeTest, AnIndexLinkedToAPrivateFileIsNotReadNorQuoted) {
  run(2);
  const fs::path secret = dir() / "token";
  write_text(secret, "ghp_S3cretToken\n");
  fs::remove(dir() / "checkpoint");
  fs::create_symlink(secret, dir() / "checkpoint");
  LogCapture log;
  EXPECT_EQ(AutoResumeTrainConfig::find_latest_valid_checkpoint(dir().string()),
            (dir() / "model-6").string());
  EXPECT_TRUE(
      log.contains((dir() / "checkpoint").string() + ": not a regular file (a symbolic link)"))
      << ::testing::PrintToString(log.lines());
  EXPECT_FALSE(log.contains("S3cret")) << ::testing::PrintToString(log.lines());
  // Nor is the text of a malformed index quoted when it is a regular file.
  fs::remove(dir() / "checkpoint");
  write_text(dir() / "checkpoint", "ghp_S3cretToken\n");
  LogCapture log2;
  (void)AutoResumeTrainConfig::find_latest_valid_checkpoint(dir().string());
  EXPECT_TRUE(log2.contains("line 1: expected 'field: value'"))
      << ::testing::PrintToString(log2.lines());
  EXPECT_FALSE(log2.contains("S3cret")) << ::testing::PrintToString(log2.lines());
}

TEST_F(AutoResumeTest, ADirectoryEveryoneCanWriteIsWarnedAbout) {
  run(1);
  fs::permissions(dir(), fs::perms::others_write, fs::perm_options::add);
  LogCapture log;
  (void)AutoResumeTrainConfig::find_latest_valid_checkpoint(dir().string());
  EXPECT_TRUE(
      log.contains("The log directory " + dir().string() + " can be written by every user (mode 0"))
      << ::testing::PrintToString(log.lines());
  EXPECT_TRUE(log.contains("chmod o-w " + dir().string())) << ::testing::PrintToString(log.lines());
}

TEST_F(AutoResumeTest, AnIndexNamingAnOlderCheckpointResumesFromTheNewestSayingWhy) {
  run(2);
  {
    std::ofstream index(dir() / "checkpoint", std::ios::trunc);
    index << "model_checkpoint_path: \"model-3\"\nall_model_checkpoint_paths: \"model-3\"\n";
  }
  LogCapture log;
  EXPECT_EQ(AutoResumeTrainConfig::find_latest_valid_checkpoint(dir().string()),
            (dir() / "model-6").string());
  EXPECT_TRUE(log.contains("The checkpoint index names " + (dir() / "model-3").string() +
                           " as the latest, but " + (dir() / "model-6").string() +
                           " is newer and valid"));
}

// Saved every step, stopped mid-epoch (max_epoch reached in the middle is impossible, so the
// last checkpoints are removed to simulate a crash after the save of step 4).
TEST_F(AutoResumeTest, MidEpochResumeRunsTheRestOfTheEpoch) {
  run(2, /*save_every_step=*/true);
  // Keep model-4 only, and an index naming it, as a crash right after that save leaves them.
  for (int step : {5, 6}) {
    fs::remove(dir() / ("model-" + std::to_string(step) + ".data"));
  }
  {
    std::ofstream index(dir() / "checkpoint", std::ios::trunc);
    index << "model_checkpoint_path: \"model-4\"\nall_model_checkpoint_paths: \"model-4\"\n";
  }
  auto rec = run(2, true);
  EXPECT_EQ(rec->epochs, (std::vector<int64_t>{2}));
  EXPECT_EQ(rec->steps, (std::vector<int64_t>{5, 6}));
  const std::vector<std::pair<int64_t, int64_t>> expected{{1, 1}, {1, 2}, {1, 3},
                                                          {2, 4}, {2, 5}, {2, 6}};
  EXPECT_EQ(stats_counters(dir()), expected);
}

TEST_F(AutoResumeTest, AUserSessionInitIsKeptWhenNotAlwaysResuming) {
  run(1);
  auto init = std::make_shared<JustCurrentSession>();
  AutoResumeTrainConfig config(
      TrainConfig().model(std::make_shared<LinearModel>()).dataflow(batches()).session_init(init),
      /*always_resume=*/false);
  EXPECT_EQ(config.found_checkpoint(), "");
  EXPECT_EQ(config.session_init(), init);
  LogCapture log;
  AutoResumeTrainConfig always(
      TrainConfig().model(std::make_shared<LinearModel>()).dataflow(batches()).session_init(init));
  EXPECT_EQ(always.found_checkpoint(), (dir() / "model-3").string());
  EXPECT_TRUE(log.contains("Found checkpoint at " + (dir() / "model-3").string() +
                           ". session_init arguments will be overwritten."));
}

TEST(AutoResumeErrors, NeedsTheLoggerDirectory) {
  logger::unset_logger_dir();
  try {
    AutoResumeTrainConfig config(TrainConfig().model(std::make_shared<LinearModel>()));
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("trainpack::logger::set_logger_dir"), std::string::npos)
        << e.what();
  }
}

// ---- where the run continues, known before initialize() ----

AutoResumeTrainConfig auto_resume_config() {
  return AutoResumeTrainConfig(TrainConfig()
                                   .model(std::make_shared<LinearModel>())
                                   .dataflow(batches())
                                   .extra_callbacks({})
                                   .monitors({})
                                   .max_epoch(9));
}

TEST_F(AutoResumeTest, ReportsTheResumePointBeforeInitialize) {
  EXPECT_FALSE(auto_resume_config().resume_point().has_value());  // nothing to resume yet
  run(2);
  const auto at = auto_resume_config().resume_point();
  ASSERT_TRUE(at.has_value());
  EXPECT_EQ(at->epoch, 3);
  EXPECT_EQ(at->step_in_epoch, 0);
  EXPECT_EQ(at->global_step, 6);
}

TEST_F(AutoResumeTest, ReportsAMidEpochResumePoint) {
  run(1, /*save_every_step=*/true);
  fs::remove(dir() / "model-3.data");  // the newest left is model-2: step 2 of epoch 1 runs next
  const auto at = auto_resume_config().resume_point();
  ASSERT_TRUE(at.has_value());
  EXPECT_EQ(at->epoch, 1);
  EXPECT_EQ(at->step_in_epoch, 2);
  EXPECT_EQ(at->global_step, 2);
}

TEST_F(AutoResumeTest, ANegativeStartingGlobalStepIsAnError) {
  SimpleTrainer trainer;
  try {
    launch_train_with_config(TrainConfig()
                                 .model(std::make_shared<LinearModel>())
                                 .dataflow(batches())
                                 .starting_global_step(-2),
                             trainer);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "TrainConfig: starting_global_step must be >= 0, got -2");
  }
}

}  // namespace auto_resume_test
}  // namespace trainpack
