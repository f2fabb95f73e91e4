// JSONWriter (docs/tensorpack-differences.md #8): stats.json byte for byte, append / back up on
// restart, truncated and malformed files, load_existing_json / load_existing_epoch_number, the cost
// of a write.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <thread>

#include "support/command.h"
#include "support/fifo.h"
#include "support/files.h"
#include "support/gate.h"
#include "support/sanitizers.h"
#include "support/temp_dir.h"
#include "trainpack/callbacks/monitor.h"
#include "trainpack/callbacks/saver.h"
#include "trainpack/core/session_init.h"
#include "trainpack/testing.h"

namespace trainpack {
namespace json_writer_test {

namespace fs = std::filesystem;
using testing::LogCapture;
using testing::read_text;
using testing::write_text;

// Puts `cost` at every step and `lr` at every epoch end, with values that depend on the counters.
class PutScalars : public Callback {
 public:
  std::function<void(Trainer&)> before_train_fn;

 protected:
  void _before_train() override {
    if (before_train_fn) before_train_fn(trainer());
  }
  void _trigger_step() override {
    trainer().monitors().put_scalar("cost", 1.0 / static_cast<double>(global_step()));
  }
  void _trigger_epoch() override {
    trainer().monitors().put_scalar("lr", 0.1 * static_cast<double>(epoch_num()));
  }
};

// The backups of stats.json in `dir`: names starting with `stats.json.`, not temporary files.
std::vector<fs::path> backups(const fs::path& dir, const std::string& prefix = "stats.json.") {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && name.find(".tmp.") == std::string::npos) {
      out.push_back(e.path());
    }
  }
  return out;
}

class JSONWriterTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    testing::TempDirTest::SetUp();
    logger::set_logger_dir(dir().string());  // empty: set_logger_dir needs no action
  }

  fs::path stats_path() const { return dir() / "stats.json"; }
  // The second name of the last version synced to the disk, while a training runs.
  fs::path synced_copy() const { return dir() / ".stats.json.synced"; }

  // Trains `epochs` epochs of `spe` steps from `starting_epoch` with a PutScalars callback and a
  // fresh JSONWriter; returns the writer.
  std::shared_ptr<JSONWriter> train(int64_t spe, int64_t starting_epoch, int64_t max_epoch,
                                    std::shared_ptr<PutScalars> cb = nullptr) {
    auto writer = std::make_shared<JSONWriter>();
    NoOpTrainer trainer;
    trainer.set_handle_signals(false);
    trainer.train({cb ? cb : std::make_shared<PutScalars>()}, {writer}, spe, starting_epoch,
                  max_epoch);
    return writer;
  }
};

// 2 epochs x 2 steps: the step-1 entry of each epoch, then the epoch entry (its last step merged).
const char* const kTwoEpochs = R"([{"cost": 1.0, "epoch_num": 1, "global_step": 1}, )"
                               R"({"cost": 0.5, "lr": 0.1, "epoch_num": 1, "global_step": 2}, )"
                               R"({"cost": 0.3333333333333333, "epoch_num": 2, "global_step": 3}, )"
                               R"({"cost": 0.25, "lr": 0.2, "epoch_num": 2, "global_step": 4}])";
// What train(2, 1, 1) writes, and kTwoEpochs followed by what train(2, 3, 3) appends.
const std::string kOneEpoch = R"([{"cost": 1.0, "epoch_num": 1, "global_step": 1}, )"
                              R"({"cost": 0.5, "lr": 0.1, "epoch_num": 1, "global_step": 2}])";
const char* const kThreeEpochs =
    R"([{"cost": 1.0, "epoch_num": 1, "global_step": 1}, )"
    R"({"cost": 0.5, "lr": 0.1, "epoch_num": 1, "global_step": 2}, )"
    R"({"cost": 0.3333333333333333, "epoch_num": 2, "global_step": 3}, )"
    R"({"cost": 0.25, "lr": 0.2, "epoch_num": 2, "global_step": 4}, )"
    R"({"cost": 1.0, "epoch_num": 3, "global_step": 1}, )"
    R"({"cost": 0.5, "lr": 0.30000000000000004, "epoch_num": 3, "global_step": 2}])";

TEST_F(JSONWriterTest, WritesTensorpacksLayoutByteForByte) {
  auto writer = train(2, 1, 2);
  EXPECT_EQ(read_text(stats_path()), kTwoEpochs);
  EXPECT_EQ(writer->stats().size(), 4u);
  EXPECT_EQ(testing::temporary_files(dir()), std::vector<std::string>{});
}

TEST_F(JSONWriterTest, WritesWhatEarlierCallbacksPutInBeforeTrainWithThePreviousEpoch) {
  auto cb = std::make_shared<PutScalars>();
  cb->before_train_fn = [](Trainer& t) {
    t.monitors().put_scalar("init", 2.0);
    // A scalar named like the counters is overwritten by them, which come last.
    t.monitors().put_scalar("epoch_num", 7.5);
    t.monitors().put_scalar("init", 3.0);  // the last value wins, the first position stays
  };
  train(1, 3, 3, cb);
  EXPECT_EQ(read_text(stats_path()),
            R"([{"init": 3.0, "epoch_num": 2, "global_step": 0}, )"
            R"({"cost": 1.0, "lr": 0.30000000000000004, "epoch_num": 3, "global_step": 1}])");
}

TEST_F(JSONWriterTest, NothingPutMeansNoFile) {
  auto writer = std::make_shared<JSONWriter>();
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train({}, {writer}, 2, 1, 2);
  EXPECT_FALSE(fs::exists(stats_path()));
}

TEST_F(JSONWriterTest, FormatsValuesAsPythonsJsonDump) {
  EXPECT_EQ(JSONWriter::format_value(0.1), "0.1");
  EXPECT_EQ(JSONWriter::format_value(1.0 / 3), "0.3333333333333333");
  EXPECT_EQ(JSONWriter::format_value(1e-05), "1e-05");
  EXPECT_EQ(JSONWriter::format_value(0.0001), "0.0001");
  EXPECT_EQ(JSONWriter::format_value(100.0), "100.0");
  EXPECT_EQ(JSONWriter::format_value(12345678901234567.0), "1.2345678901234568e+16");
  EXPECT_EQ(JSONWriter::format_value(1e16), "1e+16");
  EXPECT_EQ(JSONWriter::format_value(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(JSONWriter::format_value(static_cast<double>(0.1f)), "0.10000000149011612");
  EXPECT_EQ(JSONWriter::format_value(-0.0), "-0.0");
  EXPECT_EQ(JSONWriter::format_value(1.5e-7), "1.5e-07");
  EXPECT_EQ(JSONWriter::format_value(1e300), "1e+300");
  EXPECT_EQ(JSONWriter::format_value(std::numeric_limits<double>::quiet_NaN()), "NaN");
  EXPECT_EQ(JSONWriter::format_value(std::numeric_limits<double>::infinity()), "Infinity");
  EXPECT_EQ(JSONWriter::format_value(-std::numeric_limits<double>::infinity()), "-Infinity");
  EXPECT_EQ(JSONWriter::format_value(int64_t{100}), "100");
  EXPECT_EQ(JSONWriter::format_value(int64_t{-3}), "-3");

  StatsEntry e;
  e.set("a\"b\\c\n\t\x01\x7f", 1.0);
  e.set("caf\xc3\xa9 \xf0\x9f\x98\x80", int64_t{2});  // "café 😀"
  e.set("bad\xff", 3.0);                              // invalid UTF-8: U+FFFD
  EXPECT_EQ(JSONWriter::dump(e),
            R"({"a\"b\\c\n\t\u0001\u007f": 1.0, "caf\u00e9 \ud83d\ude00": 2, "bad\ufffd": 3.0})");
  EXPECT_EQ(JSONWriter::dump(std::vector<StatsEntry>{}), "[]");
}

// Runs python3's json.load on `path` and returns print()'s output, or nullopt without python3.
std::optional<std::string> python_load(const fs::path& path) {
  if (std::system("python3 -c 'pass' >/dev/null 2>&1") != 0) return std::nullopt;
  const std::string cmd =
      "PYTHONIOENCODING=utf-8 python3 -c \"import json,sys; print(json.load(open(sys.argv[1])))\" "
      "'" +
      path.string() + "' 2>&1";
  const auto [out, rc] = testing::run_command(cmd);
  if (rc != 0) return "python3 failed: " + out;
  return out;
}

TEST_F(JSONWriterTest, PythonReadsTheSameValues) {
  class PutOdd : public Callback {
   protected:
    void _trigger_epoch() override {
      auto& m = trainer().monitors();
      m.put_scalar("a", 0.1);
      m.put_scalar("third", 1.0 / 3);
      m.put_scalar("small", 1e-05);
      m.put_scalar("hundred", 100.0);
      m.put_scalar("big", 12345678901234567.0);
      m.put_scalar("nan", std::numeric_limits<double>::quiet_NaN());
      m.put_scalar("inf", -std::numeric_limits<double>::infinity());
      m.put_scalar("f32", static_cast<double>(0.1f));
      m.put_scalar("caf\xc3\xa9", -0.0);
    }
  };
  auto writer = std::make_shared<JSONWriter>();
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train({std::make_shared<PutOdd>()}, {writer}, 1, 1, 2);
  const std::string entry =
      R"({"a": 0.1, "third": 0.3333333333333333, "small": 1e-05, "hundred": 100.0, )"
      R"("big": 1.2345678901234568e+16, "nan": NaN, "inf": -Infinity, )"
      R"("f32": 0.10000000149011612, "caf\u00e9": -0.0, )";
  EXPECT_EQ(read_text(stats_path()), "[" + entry + R"("epoch_num": 1, "global_step": 1}, )" +
                                         entry + R"("epoch_num": 2, "global_step": 2}])");

  const auto out = python_load(stats_path());
  if (!out) GTEST_SKIP() << "python3 is not installed";
  const std::string py_entry =
      "{'a': 0.1, 'third': 0.3333333333333333, 'small': 1e-05, 'hundred': 100.0, "
      "'big': 1.2345678901234568e+16, 'nan': nan, 'inf': -inf, 'f32': 0.10000000149011612, "
      "'caf\xc3\xa9': -0.0, ";
  EXPECT_EQ(*out, "[" + py_entry + "'epoch_num': 1, 'global_step': 1}, " + py_entry +
                      "'epoch_num': 2, 'global_step': 2}]\n");
}

TEST_F(JSONWriterTest, ReadsBackWhatItWrites) {
  train(2, 1, 2);
  const auto stats = JSONWriter::load_existing_json();
  ASSERT_TRUE(stats.has_value());
  EXPECT_EQ(JSONWriter::dump(*stats), kTwoEpochs);
  ASSERT_EQ(stats->size(), 4u);
  EXPECT_TRUE(std::holds_alternative<int64_t>(*stats->back().find("epoch_num")));
  EXPECT_TRUE(std::holds_alternative<double>(*stats->back().find("lr")));
  EXPECT_EQ(JSONWriter::load_existing_epoch_number(), 2);
  EXPECT_EQ(JSONWriter::load_existing_epoch_number(dir().string()), 2);

  // Python's non-finite literals, duplicate keys (the last value, the first position), an integer
  // that stays an integer and a float epoch (int() truncates).
  write_text(stats_path(),
             R"([{"x": NaN, "y": -Infinity, "z": Infinity, "x": 2, "epoch_num": 4.0}])");
  const auto odd = JSONWriter::load_existing_json();
  ASSERT_TRUE(odd.has_value());
  EXPECT_EQ(JSONWriter::dump(*odd),
            R"([{"x": 2, "y": -Infinity, "z": Infinity, "epoch_num": 4.0}])");
  EXPECT_EQ(JSONWriter::load_existing_epoch_number(), 4);
}

TEST_F(JSONWriterTest, AppendsWhenTheStartingEpochFollows) {
  train(2, 1, 2);
  LogCapture log;
  train(2, 3, 3);
  EXPECT_TRUE(
      log.contains("Found existing JSON inside " + dir().string() + ", will append to it."));
  EXPECT_EQ(read_text(stats_path()), kThreeEpochs);
  EXPECT_TRUE(backups(dir()).empty());
  EXPECT_FALSE(fs::exists(synced_copy()));  // removed at the end of training
  EXPECT_EQ(JSONWriter::load_existing_epoch_number(), 3);
}

TEST_F(JSONWriterTest, AppendsWhenTheLastEntryHasNoEpoch) {
  write_text(stats_path(), R"([{"a": 1}])");
  LogCapture log;
  train(1, 5, 5);
  EXPECT_TRUE(log.contains("will append to it."));
  EXPECT_EQ(read_text(stats_path()),
            R"([{"a": 1}, {"cost": 1.0, "lr": 0.5, "epoch_num": 5, "global_step": 1}])");
  write_text(stats_path(), "[]");
  train(1, 5, 5);
  EXPECT_EQ(read_text(stats_path()),
            R"([{"cost": 1.0, "lr": 0.5, "epoch_num": 5, "global_step": 1}])");
  EXPECT_TRUE(backups(dir()).empty());

  // Valid, but followed by a newline: rewritten once, the file as found kept.
  write_text(stats_path(), "[{\"epoch_num\": 4}]\n");
  LogCapture log2;
  train(1, 5, 5);
  EXPECT_EQ(read_text(stats_path()),
            R"([{"epoch_num": 4}, {"cost": 1.0, "lr": 0.5, "epoch_num": 5, "global_step": 1}])");
  const auto kept = backups(dir(), "stats.json.orig-");
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(read_text(kept[0]), "[{\"epoch_num\": 4}]\n");
  EXPECT_TRUE(log2.contains("the file as found is kept as " + kept[0].string()));
}

TEST_F(JSONWriterTest, BacksUpTheOldFileWhenTheStartingEpochDoesNotFollow) {
  train(2, 1, 2);
  LogCapture log;
  train(1, 1, 1);  // starts again at epoch 1: history epoch 2 is not its predecessor
  const auto old = backups(dir());
  ASSERT_EQ(old.size(), 1u);
  EXPECT_THAT(old[0].filename().string(),
              ::testing::MatchesRegex(R"(stats\.json\.[0-9]{4}-[0-9]{6})"));
  EXPECT_EQ(read_text(old[0]), kTwoEpochs);
  EXPECT_EQ(read_text(stats_path()),
            R"([{"cost": 1.0, "lr": 0.1, "epoch_num": 1, "global_step": 1}])");
  EXPECT_TRUE(log.contains(
      "WRN History epoch=2 from JSON is not the predecessor of the current starting_epoch=1"));
  EXPECT_TRUE(log.contains(
      "WRN If you want to resume old training, either use `AutoResumeTrainConfig` or correctly set "
      "the new starting_epoch yourself to avoid inconsistency. "));
  EXPECT_TRUE(log.contains("WRN Now, we will train with starting_epoch=1 and backup old json to " +
                           old[0].string()));

  // A second back-up in the same second gets a name of its own: nothing is overwritten.
  train(1, 1, 1);
  train(1, 1, 1);
  EXPECT_EQ(backups(dir()).size(), 3u);
}

TEST_F(JSONWriterTest, KeepsTheCompleteEntriesOfATruncatedFile) {
  const std::string good = R"([{"a": 0.5, "epoch_num": 1, "global_step": 10}, )"
                           R"({"a": 0.25, "epoch_num": 2, "global_step": 20})";
  const std::string cut = good + R"(, {"a": 1)";
  write_text(stats_path(), cut);
  {
    LogCapture log;
    const auto stats = JSONWriter::load_existing_json();
    ASSERT_TRUE(stats.has_value());
    EXPECT_EQ(JSONWriter::dump(*stats), good + "]");
    EXPECT_TRUE(log.contains("WRN " + stats_path().string() +
                             " is truncated (an append was cut short): kept its 2 complete "
                             "entries, ignored the last 9 bytes."));
    EXPECT_EQ(JSONWriter::load_existing_epoch_number(), 2);
  }
  LogCapture log;
  train(1, 3, 3);
  EXPECT_TRUE(log.contains("kept its 2 complete entries"));
  EXPECT_TRUE(log.contains("will append to it."));
  EXPECT_EQ(
      read_text(stats_path()),
      good + R"(, {"cost": 1.0, "lr": 0.30000000000000004, "epoch_num": 3, "global_step": 1}])");
  const auto kept = backups(dir(), "stats.json.truncated-");
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(read_text(kept[0]), cut);  // the file as found is kept
  EXPECT_TRUE(log.contains("the file as found is kept as " + kept[0].string()));
  const auto out = python_load(stats_path());
  if (out) {
    EXPECT_THAT(*out, ::testing::StartsWith("[{'a': 0.5,"));
  }
}

TEST_F(JSONWriterTest, TruncationsAtEveryByteAreRecoveredOrRejected) {
  // Every prefix of a file is either truncated (the complete entries kept) or, for the empty
  // prefix, malformed; never an error of another kind, never an entry more than was complete.
  // An append overwrites the closing ']' with `, {entry}]`, so every state that a crash in the
  // middle of it can leave is such a prefix of the new file.
  const std::string full =
      R"([{"a": NaN, "b": -Infinity, "s\"]}": 1e-05}, {"c": 2, "epoch_num": 3, "global_step": 4}])";
  for (size_t n = 0; n <= full.size(); ++n) {
    write_text(stats_path(), full.substr(0, n));
    SCOPED_TRACE(full.substr(0, n));
    if (n == 0) {
      EXPECT_THROW(JSONWriter::load_existing_json(), std::runtime_error);
      continue;
    }
    std::optional<std::vector<StatsEntry>> stats;
    ASSERT_NO_THROW(stats = JSONWriter::load_existing_json());
    ASSERT_TRUE(stats.has_value());
    // The first entry is complete once its closing brace is in; the second likewise.
    const size_t first_end = full.find("}, {") + 1;
    const size_t second_end = full.size() - 1;
    EXPECT_EQ(stats->size(), n >= second_end ? 2u : n >= first_end ? 1u : 0u);
  }
  // What a power loss can leave: NUL bytes where data never reached the disk.
  write_text(stats_path(), std::string(R"([{"a": 1}, {"b": )") + std::string(8, '\0'));
  EXPECT_EQ(JSONWriter::load_existing_json()->size(), 1u);
  write_text(stats_path(), std::string(R"([{"a": 1}])") + std::string(8, '\0'));
  EXPECT_EQ(JSONWriter::load_existing_json()->size(), 1u);
}

TEST_F(JSONWriterTest, MovesAMalformedFileAside) {
  for (const std::string& bad :
       {std::string("not json"), std::string(R"({"a": 1})"), std::string(R"([{"a": 1}, 5])"),
        std::string(R"([{"a": "x"}])"), std::string(R"([{"a": 1}] extra)"), std::string(""),
        std::string(R"([{"a": 1},, {"b": 2}])")}) {
    SCOPED_TRACE(bad);
    write_text(stats_path(), bad);
    EXPECT_THROW(JSONWriter::load_existing_json(), std::runtime_error);
    EXPECT_EQ(JSONWriter::load_existing_epoch_number(), std::nullopt);
    LogCapture log;
    train(1, 1, 1);
    const auto moved = backups(dir(), "stats.json.malformed-");
    ASSERT_EQ(moved.size(), 1u);
    EXPECT_EQ(read_text(moved[0]), bad);
    EXPECT_TRUE(log.contains("WRN " + stats_path().string() + " is not a valid stats file"));
    EXPECT_TRUE(log.contains("moved it to " + moved[0].string()));
    EXPECT_EQ(read_text(stats_path()),
              R"([{"cost": 1.0, "lr": 0.1, "epoch_num": 1, "global_step": 1}])");
    fs::remove(moved[0]);
  }
}

// A full disk at resume: the backup of the file as found cannot be written. No empty or partial
// backup is left, and the file is left as it is.
TEST_F(JSONWriterTest, ARewriteThatCannotBeWrittenLeavesTheFileAsItWas) {
  const std::string cut = R"([{"a": 0.5, "epoch_num": 1, "global_step": 10}, {"a": 1)";
  write_text(stats_path(), cut);
  LogCapture log;
  {
    testing::FileSizeLimit limit(16);
    // Training goes on without statistics, and the run ends failed: they were not written.
    EXPECT_THROW(train(1, 2, 2), WriteFailedError);
  }
  // The backup is a second name of the file as found (a hard link: nothing is copied), so the
  // limit does not stop it; the rewrite fails, and the file stays as it was.
  const auto copies = backups(dir(), "stats.json.truncated-");
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(read_text(copies[0]), cut);
  EXPECT_EQ(testing::temporary_files(dir()), std::vector<std::string>{});
  EXPECT_EQ(read_text(stats_path()), cut);
  EXPECT_TRUE(log.contains("File too large"));
  EXPECT_TRUE(log.contains(stats_path().string() + " is left as it is"));
}

TEST_F(JSONWriterTest, AFifoAsStatsJsonIsMovedAsideWithoutBlocking) {
  testing::make_fifo(stats_path());
  {
    testing::FifoGuard guard(stats_path());
    EXPECT_THAT([&] { JSONWriter::load_existing_json(); },
                ::testing::ThrowsMessage<std::runtime_error>(::testing::HasSubstr(
                    stats_path().string() + " is not a regular file (a FIFO)")));
    LogCapture log;
    train(1, 1, 1);
    EXPECT_FALSE(guard.blocked());
    EXPECT_TRUE(log.contains("is not a regular file (a FIFO)"));
  }
  const auto moved = backups(dir(), "stats.json.malformed-");
  ASSERT_EQ(moved.size(), 1u);
  EXPECT_TRUE(fs::is_fifo(fs::symlink_status(moved[0])));
  EXPECT_EQ(read_text(stats_path()),
            R"([{"cost": 1.0, "lr": 0.1, "epoch_num": 1, "global_step": 1}])");
}

TEST_F(JSONWriterTest, ASymlinkAsStatsJsonIsNotWrittenThrough) {
  const fs::path outside = dir() / "outside.json";
  const std::string valid = R"([{"a": 1, "epoch_num": 1, "global_step": 1}])";
  write_text(outside, valid);
  fs::create_symlink(outside, stats_path());
  train(1, 2, 2);  // would append to it: the starting epoch follows
  EXPECT_EQ(read_text(outside), valid);
  EXPECT_FALSE(fs::is_symlink(stats_path()));
  const auto moved = backups(dir(), "stats.json.malformed-");
  ASSERT_EQ(moved.size(), 1u);
  EXPECT_TRUE(fs::is_symlink(moved[0]));
}

TEST_F(JSONWriterTest, LoadExistingEpochNumber) {
  EXPECT_EQ(JSONWriter::load_existing_epoch_number(), std::nullopt);  // no file
  EXPECT_EQ(JSONWriter::load_existing_json(), std::nullopt);
  write_text(stats_path(), "[]");
  EXPECT_EQ(JSONWriter::load_existing_epoch_number(), std::nullopt);  // no entry
  write_text(stats_path(), R"([{"epoch_num": 7}, {"cost": 1.0}])");
  EXPECT_EQ(JSONWriter::load_existing_epoch_number(), std::nullopt);  // the last has none
  write_text(stats_path(), R"([{"epoch_num": 7}, {"epoch_num": 8, "global_step": 80}])");
  EXPECT_EQ(JSONWriter::load_existing_epoch_number(), 8);
  write_text(stats_path(), R"([{"epoch_num": 7}, {"epoch_num": 8, "glob)");
  EXPECT_EQ(JSONWriter::load_existing_epoch_number(), 7);  // truncated
  write_text(stats_path(), R"([{"epoch_num": 7}, 8])");
  EXPECT_EQ(JSONWriter::load_existing_epoch_number(), std::nullopt);  // malformed
  write_text(stats_path(), R"([{"epoch_num": NaN}])");
  EXPECT_EQ(JSONWriter::load_existing_epoch_number(), std::nullopt);
  // Another directory, given explicitly.
  const fs::path other = dir() / "other";
  fs::create_directories(other);
  write_text(other / "stats.json", R"([{"epoch_num": 11}])");
  EXPECT_EQ(JSONWriter::load_existing_epoch_number(other.string()), 11);
  logger::unset_logger_dir();
  EXPECT_EQ(JSONWriter::load_existing_epoch_number(), std::nullopt);
  EXPECT_THROW(JSONWriter::load_existing_json(), std::invalid_argument);
}

TEST_F(JSONWriterTest, WithoutALoggerDirectoryItIsANoOpMonitor) {
  logger::unset_logger_dir();
  LogCapture log;
  const MonitorPtr m = JSONWriter::create();
  EXPECT_EQ(m->name(), "NoOpMonitor(JSONWriter)");
  EXPECT_TRUE(log.contains("WRN logger directory was not set. Ignore JSONWriter."));
  EXPECT_THROW(JSONWriter(), std::invalid_argument);
  logger::set_logger_dir(dir().string(), 'k');
  EXPECT_EQ(JSONWriter::create()->name(), "JSONWriter");
  EXPECT_FALSE(JSONWriter().chief_only());
}

// The cost of a write is the new entry: each trigger adds the entry's bytes to the file, the
// bytes before the old closing bracket stay as they were, and the file is never replaced.
// Each write gives stats.json the entries added since the previous one, in a new file renamed over
// it: a reader that opened the previous version keeps reading that version, unchanged.
TEST_F(JSONWriterTest, EachWriteAddsTheNewEntryInANewFile) {
  struct Snapshot {
    std::string text;
    std::string previous_as_read_later;  // the previous version, read through its open fd now
  };
  auto snaps = std::make_shared<std::vector<Snapshot>>();
  class Observe : public Callback {
   public:
    Observe(std::shared_ptr<std::vector<Snapshot>> s, std::string path,
            std::shared_ptr<JSONWriter> writer)
        : s_(std::move(s)), path_(std::move(path)), writer_(std::move(writer)) {}
    ~Observe() override {
      if (fd_ >= 0) ::close(fd_);
    }

   protected:
    void _trigger_step() override { trainer().monitors().put_scalar("cost", 0.5); }
    // Runs after the writer's trigger_step of the previous step: look at the file then, once the
    // writer's thread has written what was queued.
    RunArgs _before_run(const StepContext&) override {
      writer_->flush();
      const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return RunArgs();
      Snapshot snap{read_fd(fd), fd_ >= 0 ? read_fd(fd_) : std::string()};
      s_->push_back(std::move(snap));
      if (fd_ >= 0) ::close(fd_);
      fd_ = fd;
      return RunArgs();
    }

   private:
    static std::string read_fd(int fd) {
      std::string text;
      char buf[4096];
      for (ssize_t n; (n = ::pread(fd, buf, sizeof buf, static_cast<off_t>(text.size()))) > 0;) {
        text.append(buf, static_cast<size_t>(n));
      }
      return text;
    }
    std::shared_ptr<std::vector<Snapshot>> s_;
    std::string path_;
    std::shared_ptr<JSONWriter> writer_;
    int fd_ = -1;
  };
  auto writer = std::make_shared<JSONWriter>();
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train({std::make_shared<Observe>(snaps, stats_path().string(), writer)}, {writer}, 50, 1,
                1);
  ASSERT_EQ(snaps->size(), 49u);  // before steps 2..50 (the first write is after step 1)
  for (size_t i = 1; i < snaps->size(); ++i) {
    const auto& prev = (*snaps)[i - 1];
    const auto& cur = (*snaps)[i];
    EXPECT_EQ(cur.previous_as_read_later, prev.text) << "the version a reader had open changed";
    const std::string entry =
        fmt::format(R"(, {{"cost": 0.5, "epoch_num": 1, "global_step": {}}})", i + 1);
    EXPECT_EQ(cur.text, prev.text.substr(0, prev.text.size() - 1) + entry + "]");
  }
  for (const auto& e : fs::directory_iterator(dir())) {  // no temporary file, no synced copy
    const std::string name = e.path().filename().string();
    if (name.find("stats.json") != std::string::npos) {
      EXPECT_EQ(name, "stats.json");
    }
  }
}

// A reader that polls stats.json while entries are added (here a write every step: the training
// thread flushes before each step) only ever finds a complete file: each write is a new file
// renamed over stats.json, never a change to the file a reader may be reading.
TEST_F(JSONWriterTest, AReaderPollingTheFileAlwaysSeesACompleteFile) {
  std::atomic<bool> done{false};
  std::atomic<int64_t> reads{0};
  std::atomic<int64_t> incomplete{0};
  std::string first_incomplete;  // written by the reader, read after join
  std::thread reader([&] {
    std::string text;
    char buf[65536];
    while (!done.load()) {
      const int fd = ::open(stats_path().c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;  // not created yet
      text.clear();
      for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;)
        text.append(buf, static_cast<size_t>(n));
      ::close(fd);
      ++reads;
      if (parse_stats_file(text).status != ParsedStats::Status::kValid && incomplete++ == 0) {
        first_incomplete = text.substr(text.size() > 120 ? text.size() - 120 : 0);
      }
    }
  });
  auto writer = std::make_shared<JSONWriter>();
  auto cb = std::make_shared<testing::ActionCallback>();
  cb->before_run_fn = [&](testing::ActionCallback&) { writer->flush(); };
  cb->trigger_step_fn = [](testing::ActionCallback& c) {
    c.trainer().monitors().put_scalar("cost", 0.5);
  };
  const auto start = std::chrono::steady_clock::now();
  cb->trigger_epoch_fn = [&](testing::ActionCallback&) {
    const auto elapsed = std::chrono::steady_clock::now() - start;
    if ((elapsed > std::chrono::milliseconds(1500) && reads.load() >= 200) ||
        elapsed > std::chrono::seconds(20)) {
      throw StopTraining("enough reads");
    }
  };
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train({cb}, {writer}, 50, 1, 1000000);
  done = true;
  reader.join();
  // 200 reads within 1.5 s on a plain build; an instrumented one (ASan) reads more slowly and
  // stops at 20 s, after about 100.
  EXPECT_GE(reads.load(), 50);
  EXPECT_EQ(incomplete.load(), 0) << "of " << reads.load()
                                  << " reads; the first ended with: " << first_incomplete;
  const auto entries = parse_stats_file(read_text(stats_path())).entries;
  ASSERT_EQ(static_cast<int64_t>(entries.size()), trainer.global_step());
  EXPECT_EQ(std::get<int64_t>(*entries.back().find("global_step")), trainer.global_step());
}

TEST_F(JSONWriterTest, AWriteErrorIsLoggedAndTrainingGoesOn) {
  // The directory disappears before training and comes back during step 2, once the writer's
  // thread has tried the first write: that write fails (logged, training goes on), the next one
  // rewrites the whole file with every entry.
  class Recreate : public Callback {
   public:
    Recreate(fs::path p, std::shared_ptr<JSONWriter> writer)
        : p_(std::move(p)), writer_(std::move(writer)) {}

   protected:
    void _trigger_step() override {
      if (global_step() == 2) {
        writer_->flush();
        fs::create_directories(p_);
      }
      trainer().monitors().put_scalar("cost", static_cast<double>(global_step()));
    }

   private:
    fs::path p_;
    std::shared_ptr<JSONWriter> writer_;
  };
  auto writer = std::make_shared<JSONWriter>();
  fs::remove_all(dir());
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  LogCapture log;
  // Training goes on, and the run ends with an error naming stats.json.
  try {
    trainer.train({std::make_shared<Recreate>(dir(), writer)}, {writer}, 3, 1, 1);
    ADD_FAILURE() << "no WriteFailedError";
  } catch (const WriteFailedError& e) {
    EXPECT_EQ(e.files(), std::vector<std::string>{stats_path().string()});
    EXPECT_EQ(e.failure_count(), 1);
  }
  int errors = 0;
  for (const auto& line : log.lines()) {
    if (line.rfind("ERR Exception in JSONWriter._write_stat()! ", 0) == 0) ++errors;
  }
  EXPECT_EQ(errors, 1);
  EXPECT_TRUE(log.contains("stats.json.tmp"));  // the reason names the file
  EXPECT_EQ(read_text(stats_path()), R"([{"cost": 1.0, "epoch_num": 1, "global_step": 1}, )"
                                     R"({"cost": 2.0, "epoch_num": 1, "global_step": 2}, )"
                                     R"({"cost": 3.0, "epoch_num": 1, "global_step": 3}])");
}

// ---- the writer's thread ----

// At the end of the last epoch (before the monitors' trigger_epoch: monitors come after the
// callbacks), waits until the writer's thread is held at the gate in a call of kind `what`, then
// opens the gate, recording how far training got meanwhile.
class OpenGateAtTheLastEpochEnd : public Callback {
 public:
  OpenGateAtTheLastEpochEnd(std::shared_ptr<testing::Gate> gate, std::string what)
      : gate_(std::move(gate)), what_(std::move(what)) {}
  bool writer_held = false;
  int64_t steps_before_open = -1;
  size_t calls_before_open = 0;

 protected:
  void _trigger_epoch() override {
    if (epoch_num() != trainer().max_epoch()) return;
    writer_held = gate_->wait_for_call(what_);
    steps_before_open = global_step();
    calls_before_open = gate_->calls().size();
    gate_->open();
  }

 private:
  std::shared_ptr<testing::Gate> gate_;
  std::string what_;
};

// The writer's thread is held at its first write until the last epoch ends: the training thread
// went through every step and the first epoch end meanwhile (so neither a step's write nor the
// epoch end's fdatasync ran on it), the entries reach the file in order once the writer goes on,
// and after_train leaves the complete file, fdatasynced, when train() returns.
TEST_F(JSONWriterTest, TheTrainingThreadDoesNotWaitForTheWritesAndAfterTrainWritesEverything) {
  auto gate = std::make_shared<testing::Gate>();
  auto writer = std::make_shared<JSONWriter>(JSONWriterOptions().io_hook(gate->hook()));
  auto opener = std::make_shared<OpenGateAtTheLastEpochEnd>(gate, "write");
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train({std::make_shared<PutScalars>(), opener}, {writer}, 2, 1, 2);

  EXPECT_FALSE(gate->timed_out()) << "the training thread waited for a write";
  EXPECT_TRUE(opener->writer_held);
  EXPECT_EQ(opener->steps_before_open, 4);
  EXPECT_EQ(opener->calls_before_open, 1u);  // the first write, held
  EXPECT_EQ(read_text(stats_path()), kTwoEpochs);
  const auto calls = gate->calls();
  ASSERT_FALSE(calls.empty());
  for (const auto& c : calls) EXPECT_NE(c.thread, std::this_thread::get_id()) << c.what;
  EXPECT_EQ(calls.front().what, "write");
  EXPECT_EQ(calls.back().what, "fdatasync");  // after the last write, before train() returned
}

// Only fdatasync is held: an epoch end asks for it and goes on; the training thread runs to the
// end of the last epoch while an earlier epoch's fdatasync cannot end. (The file is there from
// the start, so that every write appends and every epoch end has something to fdatasync: a
// first write that creates the file does it durably, with nothing left to fdatasync.)
TEST_F(JSONWriterTest, TheEpochEndFdatasyncRunsOnTheWritersThread) {
  write_text(stats_path(), "[]");
  auto gate =
      std::make_shared<testing::Gate>([](const std::string& what) { return what == "fdatasync"; });
  auto writer = std::make_shared<JSONWriter>(JSONWriterOptions().io_hook(gate->hook()));
  auto opener = std::make_shared<OpenGateAtTheLastEpochEnd>(gate, "fdatasync");
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train({std::make_shared<PutScalars>(), opener}, {writer}, 2, 1, 3);

  // An earlier epoch's fdatasync could not end before the gate opened at the end of the last.
  EXPECT_FALSE(gate->timed_out()) << "the training thread waited for an fdatasync";
  EXPECT_TRUE(opener->writer_held);
  EXPECT_EQ(opener->steps_before_open, 6);
  int syncs_while_closed = 0;
  for (const auto& c : gate->calls()) {
    EXPECT_NE(c.thread, std::this_thread::get_id()) << c.what;
    if (c.what == "fdatasync" && c.before_open) ++syncs_while_closed;
  }
  EXPECT_EQ(syncs_while_closed, 1);  // held until the last epoch's end
  EXPECT_EQ(read_text(stats_path()),
            std::string(kTwoEpochs, std::strlen(kTwoEpochs) - 1) +
                R"(, {"cost": 0.2, "epoch_num": 3, "global_step": 5}, )"
                R"({"cost": 0.16666666666666666, "lr": 0.30000000000000004, "epoch_num": 3, )"
                R"("global_step": 6}])");
}

// Epoch ends that come while the writer's thread is in an fdatasync share the next one: with the
// first fdatasync held until the fifth epoch ends, the three or four epoch ends queued meanwhile
// cost one fdatasync (two if the last comes after it started), not one each.
TEST_F(JSONWriterTest, EpochEndsQueuedDuringAnFdatasyncShareTheNextOne) {
  write_text(stats_path(), "[]");  // every write appends (see the test above)
  auto gate =
      std::make_shared<testing::Gate>([](const std::string& what) { return what == "fdatasync"; });
  auto writer = std::make_shared<JSONWriter>(JSONWriterOptions().io_hook(gate->hook()));
  auto opener = std::make_shared<OpenGateAtTheLastEpochEnd>(gate, "fdatasync");
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train({std::make_shared<PutScalars>(), opener}, {writer}, 2, 1, 5);
  EXPECT_TRUE(opener->writer_held);
  int syncs = 0;
  for (const auto& c : gate->calls()) syncs += c.what == "fdatasync" ? 1 : 0;
  EXPECT_GE(syncs, 2);
  EXPECT_LE(syncs, 3);
  EXPECT_EQ(parse_stats_file(read_text(stats_path())).entries.size(), 10u);
}

// A write that fails on the writer's thread is reported to the trainer on the training thread at
// the next epoch end (not when it happens), and the run ends with WriteFailedError naming
// stats.json; the file then holds every entry (the next write rewrote it).
TEST_F(JSONWriterTest, AWriteFailureOnTheWritersThreadIsReportedAtTheNextEpochEnd) {
  auto writer = std::make_shared<JSONWriter>();
  auto cb = std::make_shared<testing::ActionCallback>();
  int64_t failures_after_the_failed_write = -1;
  int64_t failures_at_epoch_2 = -1;
  cb->trigger_step_fn = [&](testing::ActionCallback& c) {
    if (c.global_step() == 2) {
      writer->flush();  // the step-1 entry's write has failed (no directory)
      failures_after_the_failed_write = c.trainer().write_failure_count();
      fs::create_directories(dir());
    }
    c.trainer().monitors().put_scalar("cost", static_cast<double>(c.global_step()));
  };
  cb->before_epoch_fn = [&](testing::ActionCallback& c) {
    if (c.epoch_num() == 2) failures_at_epoch_2 = c.trainer().write_failure_count();
  };
  fs::remove_all(dir());
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  LogCapture log;
  try {
    trainer.train({cb}, {writer}, 3, 1, 2);
    ADD_FAILURE() << "no WriteFailedError";
  } catch (const WriteFailedError& e) {
    EXPECT_EQ(e.files(), std::vector<std::string>{stats_path().string()});
    EXPECT_EQ(e.failure_count(), 1);
  }
  EXPECT_EQ(failures_after_the_failed_write, 0);
  EXPECT_EQ(failures_at_epoch_2, 1);
  ASSERT_EQ(trainer.write_failures().size(), 1u);
  EXPECT_EQ(trainer.write_failures()[0].callback, "JSONWriter");
  EXPECT_EQ(trainer.write_failures()[0].global_step, 3);  // reported at the end of epoch 1
  EXPECT_TRUE(log.contains("ERR Exception in JSONWriter._write_stat()! "));
  std::string want = "[";
  for (int s = 1; s <= 6; ++s) {
    want += fmt::format(R"({}{{"cost": {}.0, "epoch_num": {}, "global_step": {}}})",
                        s == 1 ? "" : ", ", s, (s + 2) / 3, s);
  }
  EXPECT_EQ(read_text(stats_path()), want + "]");
}

// A process killed (SIGKILL) while it writes an entry every step leaves a stats.json that
// Python's json.load reads: each write is a complete new file renamed over stats.json.
TEST_F(JSONWriterTest, AProcessKilledWhileWritingLeavesValidJson) {
  TRAINPACK_SKIP_FORK_UNDER_TSAN();
  std::mt19937 rng(12345);
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE(round);
    fs::remove(stats_path());
    std::fflush(stdout);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      logger::set_level(logger::Level::kWarning);  // no epoch lines: hundreds of epochs a second
      try {
        NoOpTrainer trainer;
        trainer.set_handle_signals(false);
        trainer.train({std::make_shared<PutScalars>()}, {std::make_shared<JSONWriter>()}, 1000, 1,
                      1000000);
      } catch (...) {
      }
      ::_exit(3);
    }
    // Kill it at a random moment once the file holds a few pages of entries.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    std::error_code ec;
    auto size = [&] {
      const uintmax_t n = fs::file_size(stats_path(), ec);
      return ec ? 0 : n;
    };
    while (size() < 16384 + 8192 * static_cast<uintmax_t>(round) &&
           std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the child ended by itself: " << status;
    const std::string text = read_text(stats_path());
    const ParsedStats parsed = parse_stats_file(text);
    EXPECT_EQ(parsed.status, ParsedStats::Status::kValid)
        << text.substr(text.size() > 200 ? text.size() - 200 : 0);
    EXPECT_GT(parsed.entries.size(), 100u);
    if (round == 0) {
      const auto out = python_load(stats_path());
      if (out) {
        EXPECT_THAT(*out, ::testing::StartsWith("[{'cost': 1.0, 'epoch_num': 1,"));
      }
    }
  }
}

// Between epoch ends, the versions written are not synced to the disk; the last synced one keeps
// a second name (`.stats.json.synced`) until a newer one is synced, so that a power loss cannot
// take both. The end of training syncs stats.json and removes the second name.
TEST_F(JSONWriterTest, TheLastSyncedVersionKeepsASecondNameUntilTheEndOfTraining) {
  auto writer = std::make_shared<JSONWriter>();
  std::vector<std::pair<std::string, std::string>> seen;  // (stats.json, synced copy), by step
  auto cb = std::make_shared<testing::ActionCallback>();
  cb->before_run_fn = [&](testing::ActionCallback& c) {
    if (c.global_step() < 2) return;
    writer->flush();
    seen.emplace_back(read_text(stats_path()), read_text(synced_copy()));
  };
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train({std::make_shared<PutScalars>(), cb}, {writer}, 2, 1, 2);
  ASSERT_EQ(seen.size(), 2u);
  // At the first step of epoch 2: epoch 1's end was synced, under both names.
  EXPECT_EQ(seen[0].first, kOneEpoch);
  EXPECT_EQ(seen[0].second, kOneEpoch);
  // A step later: stats.json has the step's entry; the synced copy is still epoch 1's end.
  EXPECT_EQ(seen[1].first, std::string(kTwoEpochs, 0, kOneEpoch.size() - 1) +
                               R"(, {"cost": 0.3333333333333333, "epoch_num": 2, )"
                               R"("global_step": 3}])");
  EXPECT_EQ(seen[1].second, kOneEpoch);
  EXPECT_EQ(read_text(stats_path()), kTwoEpochs);
  EXPECT_FALSE(fs::exists(synced_copy()));
}

// A run cut off by a power loss on a filesystem that may write a rename before the renamed
// file's data: stats.json can hold less than the version synced at the last epoch end (or
// nothing). The next run restores that version and keeps the file as found.
TEST_F(JSONWriterTest, TheSyncedCopyOfACutOffRunIsRestoredWhenStatsJsonHoldsLess) {
  for (const std::string& found : {kOneEpoch, std::string()}) {
    SCOPED_TRACE(found);
    fs::remove_all(dir());
    fs::create_directories(dir());
    write_text(synced_copy(), kTwoEpochs);
    write_text(stats_path(), found);
    LogCapture log;
    train(2, 3, 3);
    const auto kept = backups(dir(), "stats.json.incomplete-");
    ASSERT_EQ(kept.size(), 1u);
    EXPECT_EQ(read_text(kept[0]), found);
    EXPECT_TRUE(log.contains(
        "WRN " + stats_path().string() +
        (found.empty() ? " is not a valid stats file (the file is empty)"
                       : " holds 2 complete entries") +
        " after the run that wrote it was cut off; restored the copy synced at its last epoch end, "
        "which holds 4 entries (the file as found is kept as " +
        kept[0].string() + ")."));
    EXPECT_EQ(read_text(stats_path()), kThreeEpochs);
    EXPECT_FALSE(fs::exists(synced_copy()));
  }
}

// The synced copy left by a run that was killed (no power loss) holds no more than stats.json:
// it is removed, and stats.json is appended to as usual. When stats.json is missing, someone
// removed it (a power loss does not), and the copy goes too.
TEST_F(JSONWriterTest, TheSyncedCopyOfAKilledRunIsRemovedWhenStatsJsonHoldsItAll) {
  write_text(synced_copy(), kOneEpoch);
  write_text(stats_path(), kTwoEpochs);
  LogCapture log;
  train(2, 3, 3);
  EXPECT_EQ(read_text(stats_path()), kThreeEpochs);
  EXPECT_FALSE(fs::exists(synced_copy()));
  EXPECT_TRUE(backups(dir()).empty());
  EXPECT_FALSE(log.contains("restored the copy"));

  fs::remove(stats_path());
  write_text(synced_copy(), kTwoEpochs);
  train(2, 1, 1);
  EXPECT_EQ(read_text(stats_path()),
            R"([{"cost": 1.0, "epoch_num": 1, "global_step": 1}, )"
            R"({"cost": 0.5, "lr": 0.1, "epoch_num": 1, "global_step": 2}])");
  EXPECT_FALSE(fs::exists(synced_copy()));
  EXPECT_TRUE(backups(dir()).empty());
}

// A run killed between an epoch's checkpoint and its stats.json entry: the checkpoint records the
// entry (JSONWriter's state), and the resumed run adds it before its own.
TEST_F(JSONWriterTest, AResumeAddsTheEntryTheCheckpointRecordsWhenTheFileLacksIt) {
  const auto saver = [&] {
    return std::make_shared<ModelSaver>(
        ModelSaverOptions().checkpoint_dir(dir().string()).fsync(false));
  };
  {
    NoOpTrainer trainer;
    trainer.set_handle_signals(false);
    trainer.train({std::make_shared<PutScalars>(), saver()}, {std::make_shared<JSONWriter>()}, 2, 1,
                  2);
  }
  ASSERT_EQ(read_text(stats_path()), kTwoEpochs);
  const TensorMap saved = read_checkpoint((dir() / "model-4").string());
  EXPECT_EQ(saved.at("callback/JSONWriter/record_epoch").item<int64_t>(), 2);
  EXPECT_EQ(saved.at("callback/JSONWriter/record_step").item<int64_t>(), 4);
  // The entry of epoch 2's end is lost (and the step entry of epoch 2 with it).
  const std::string first_epoch = R"([{"cost": 1.0, "epoch_num": 1, "global_step": 1}, )"
                                  R"({"cost": 0.5, "lr": 0.1, "epoch_num": 1, "global_step": 2}])";
  write_text(stats_path(), first_epoch);
  LogCapture log;
  {
    NoOpTrainer trainer;
    trainer.set_handle_signals(false);
    trainer.train({std::make_shared<PutScalars>(), saver()}, {std::make_shared<JSONWriter>()}, 2, 1,
                  3, std::make_shared<SaverRestore>(dir().string()));
  }
  EXPECT_TRUE(log.contains(stats_path().string() +
                           " had no entry for epoch 2 (global_step 4); added it from the "
                           "checkpoint's record."));
  EXPECT_EQ(read_text(stats_path()),
            std::string(first_epoch, 0, first_epoch.size() - 1) +
                R"(, {"cost": 0.25, "lr": 0.2, "epoch_num": 2, "global_step": 4}, )"
                R"({"cost": 0.2, "epoch_num": 3, "global_step": 5}, )"
                R"({"cost": 0.16666666666666666, "lr": 0.30000000000000004, "epoch_num": 3, )"
                R"("global_step": 6}])");
}

// Holes that no checkpoint records are named, not invented.
TEST_F(JSONWriterTest, AResumeNamesTheEpochsNoCheckpointRecords) {
  const auto saver = [&] {
    return std::make_shared<ModelSaver>(
        ModelSaverOptions().checkpoint_dir(dir().string()).fsync(false));
  };
  {
    NoOpTrainer trainer;
    trainer.set_handle_signals(false);
    trainer.train({std::make_shared<PutScalars>(), saver()}, {std::make_shared<JSONWriter>()}, 1, 1,
                  3);
  }
  write_text(stats_path(), R"([{"cost": 1.0, "lr": 0.1, "epoch_num": 1, "global_step": 1}])");
  LogCapture log;
  {
    NoOpTrainer trainer;
    trainer.set_handle_signals(false);
    trainer.train({std::make_shared<PutScalars>(), saver()}, {std::make_shared<JSONWriter>()}, 1, 1,
                  3, std::make_shared<SaverRestore>(dir().string()));
  }
  EXPECT_TRUE(log.contains(stats_path().string() +
                           " has no entry for epoch 2, which the checkpoint this run resumes from "
                           "does not record (it records epoch 3 only): it stays missing."));
  const auto entries = JSONWriter::load_existing_json();
  ASSERT_TRUE(entries.has_value());
  std::vector<int64_t> epochs;
  for (const auto& e : *entries) epochs.push_back(std::get<int64_t>(*e.find("epoch_num")));
  EXPECT_EQ(epochs, (std::vector<int64_t>{1, 3}));
}

// A StopTraining at an epoch end (the console's `stop`, EarlyStopping) ends the round, but the
// epoch was trained: the monitors still record it.
TEST_F(JSONWriterTest, AStopAtAnEpochEndStillWritesThatEpochsEntry) {
  auto stopper = std::make_shared<testing::ActionCallback>();
  stopper->trigger_epoch_fn = [](testing::ActionCallback& self) {
    if (self.epoch_num() == 2) throw StopTraining("stop from the console");
  };
  auto after = std::make_shared<testing::ActionCallback>();
  int after_calls = 0;
  after->trigger_epoch_fn = [&](testing::ActionCallback&) { ++after_calls; };
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train({std::make_shared<PutScalars>(), stopper, after}, {std::make_shared<JSONWriter>()},
                2, 1, 5);
  EXPECT_EQ(read_text(stats_path()), kTwoEpochs);
  EXPECT_EQ(after_calls, 1);  // a callback that is not a monitor does not run after the stop
  EXPECT_FALSE(trainer.finished());
}

// NUL bytes after the entries (a power loss; here 64 MiB of hole): the file is read up to its
// last other byte, rewritten, and its backup is a second name of the file, as sparse as it was.
TEST_F(JSONWriterTest, AFilePaddedWithNulBytesIsReadWithoutTheThemAndItsBackupStaysSparse) {
  write_text(stats_path(), kTwoEpochs);
  const uintmax_t padded = std::strlen(kTwoEpochs) + (uintmax_t{64} << 20);
  fs::resize_file(stats_path(), padded);
  LogCapture log;
  train(2, 3, 3);
  EXPECT_EQ(read_text(stats_path()), kThreeEpochs);
  const auto copies = backups(dir(), "stats.json.orig-");
  ASSERT_EQ(copies.size(), 1u);
  struct stat st {};
  ASSERT_EQ(::stat(copies[0].c_str(), &st), 0);
  EXPECT_EQ(static_cast<uintmax_t>(st.st_size), padded);
  EXPECT_LT(static_cast<int64_t>(st.st_blocks) * 512, int64_t{1} << 20);
}

}  // namespace json_writer_test
}  // namespace trainpack
