// StatsFileWriter: the text it writes, the file on the disk after flush and stop, writes inline
// without a thread, synced writes and the synced copy, a failed write and the write that repairs
// it, a producer that does not wait for a blocked disk.
#include <gtest/gtest.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/files.h"
#include "support/gate.h"
#include "support/temp_dir.h"
#include "trainpack/testing.h"
#include "trainpack/utils/stats_file_writer.h"

namespace trainpack {
namespace stats_file_writer_test {

namespace fs = std::filesystem;
using testing::read_text;
using testing::write_text;
using Value = StatsFileWriter::Value;

class StatsFileWriterTest : public testing::TempDirTest {
 protected:
  std::string stats_path() const { return path("stats.json").string(); }
  fs::path synced_copy() const { return dir() / ".stats.json.synced"; }
  // Names the two keys every test uses: id 0 `"cost"`, id 1 `"lr"`.
  static void add_keys(StatsFileWriter& writer) {
    writer.add_key("\"cost\"");
    writer.add_key("\"lr\"");
  }
};

TEST_F(StatsFileWriterTest, SyncedCopyIsAHiddenNameNextToTheFile) {
  EXPECT_EQ(StatsFileWriter::synced_copy_path("/logs/run/stats.json"),
            "/logs/run/.stats.json.synced");
}

TEST_F(StatsFileWriterTest, WithoutAThreadEachEntryIsWrittenAtOnce) {
  StatsFileWriter writer(stats_path(), "test");
  add_keys(writer);
  writer.append_entry({Value{0, 0.5}}, 1, 10);
  EXPECT_EQ(read_text(stats_path()), R"([{"cost": 0.5, "epoch_num": 1, "global_step": 10}])");
  writer.append_entry({Value{1, 0.1}, Value{0, 0.25}}, 2, 20);
  EXPECT_EQ(read_text(stats_path()),
            R"([{"cost": 0.5, "epoch_num": 1, "global_step": 10}, )"
            R"({"lr": 0.1, "cost": 0.25, "epoch_num": 2, "global_step": 20}])");
  EXPECT_EQ(writer.text(), read_text(stats_path()));
  EXPECT_FALSE(fs::exists(synced_copy()));
}

TEST_F(StatsFileWriterTest, AnEntryOfCountersAloneHasOnlyThem) {
  StatsFileWriter writer(stats_path(), "test");
  writer.append_entry({}, 0, 0);
  EXPECT_EQ(read_text(stats_path()), R"([{"epoch_num": 0, "global_step": 0}])");
}

TEST_F(StatsFileWriterTest, FlushWritesWhatIsQueuedAndStopSyncsAndDropsTheCopy) {
  StatsFileWriter writer(stats_path(), "test");
  add_keys(writer);
  writer.start();
  EXPECT_TRUE(writer.running());
  for (int step = 1; step <= 100; ++step) writer.append_entry({Value{0, 1.0 * step}}, 1, step);
  writer.flush();
  const std::string text = read_text(stats_path());
  EXPECT_EQ(text.rfind(R"([{"cost": 1.0, "epoch_num": 1, "global_step": 1}, )", 0), 0u);
  EXPECT_NE(text.find(R"({"cost": 100.0, "epoch_num": 1, "global_step": 100}])"),
            std::string::npos);
  writer.request_sync();
  writer.flush();
  EXPECT_TRUE(fs::exists(synced_copy()));  // the synced version's second name
  writer.stop();
  EXPECT_FALSE(writer.running());
  EXPECT_FALSE(fs::exists(synced_copy()));  // the file itself is synced now
  EXPECT_EQ(read_text(stats_path()), text);
}

TEST_F(StatsFileWriterTest, AFileFoundIsAppendedToAsItIs) {
  // Bytes a formatter would not write (a space, an integer value) stay as they are.
  const std::string found = R"([{"cost":  3, "epoch_num": 1, "global_step": 5}])";
  write_text(stats_path(), found);
  StatsFileWriter writer(stats_path(), "test");
  add_keys(writer);
  writer.reset(found, 1);
  writer.append_entry({Value{0, 2.0}}, 2, 6);
  EXPECT_EQ(read_text(stats_path()), R"([{"cost":  3, "epoch_num": 1, "global_step": 5}, )"
                                     R"({"cost": 2.0, "epoch_num": 2, "global_step": 6}])");
}

TEST_F(StatsFileWriterTest, ResetStartsFromAnEmptyListAndKeepsTheKeys) {
  StatsFileWriter writer(stats_path(), "test");
  add_keys(writer);
  writer.append_entry({Value{0, 1.0}}, 1, 1);
  writer.reset();
  EXPECT_EQ(writer.text(), "[]");
  writer.append_entry({Value{1, 0.5}}, 1, 2);
  EXPECT_EQ(read_text(stats_path()), R"([{"lr": 0.5, "epoch_num": 1, "global_step": 2}])");
}

TEST_F(StatsFileWriterTest, AFailedWriteIsLoggedKeptAndRepairedByTheNext) {
  bool fail = true;
  StatsFileWriter writer(stats_path(), "Writer._write()", [&](const char* what) {
    if (fail && std::string(what) == "write") throw std::runtime_error("disk full");
  });
  add_keys(writer);
  testing::LogCapture log;
  writer.append_entry({Value{0, 1.0}}, 1, 1);
  EXPECT_FALSE(fs::exists(stats_path()));
  EXPECT_TRUE(log.contains("ERR Exception in Writer._write()! disk full"));
  EXPECT_EQ(writer.take_failures(), std::vector<std::string>{"disk full"});
  EXPECT_TRUE(writer.take_failures().empty());  // taken once
  fail = false;
  writer.append_entry({Value{0, 2.0}}, 1, 2);  // holds every entry again
  EXPECT_EQ(read_text(stats_path()), R"([{"cost": 1.0, "epoch_num": 1, "global_step": 1}, )"
                                     R"({"cost": 2.0, "epoch_num": 1, "global_step": 2}])");
}

TEST_F(StatsFileWriterTest, TheProducerDoesNotWaitForABlockedDisk) {
  testing::Gate gate;
  StatsFileWriter writer(stats_path(), "test", gate.hook());
  add_keys(writer);
  writer.start();
  writer.append_entry({Value{0, 1.0}}, 1, 1);
  ASSERT_TRUE(gate.wait_for_call("write"));  // the writer's thread is held in its write
  for (int step = 2; step <= 1000; ++step) writer.append_entry({Value{0, 1.0}}, 1, step);
  writer.request_sync();
  // Had the producer waited for the held write, the gate would have given up by now.
  EXPECT_FALSE(gate.timed_out());
  gate.open();
  writer.stop();
  const std::string text = read_text(stats_path());
  EXPECT_NE(text.find(R"("global_step": 1000}])"), std::string::npos);
  bool synced = false;
  for (const auto& call : gate.calls()) synced = synced || call.what == "fdatasync";
  EXPECT_TRUE(synced);
}

}  // namespace stats_file_writer_test
}  // namespace trainpack
