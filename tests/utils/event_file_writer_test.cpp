// EventFileWriter (utils/event_file_writer.h): the records and their framing, read back by the
// strict reader of tests/support/event_reader.h (every CRC checked), the file names, flush and
// start_new_file, and the errors of a directory or file that cannot be written.
#include "trainpack/utils/event_file_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/errors.h"
#include "support/event_reader.h"
#include "support/files.h"
#include "support/gate.h"
#include "support/temp_dir.h"
#include "trainpack/testing.h"
#include "trainpack/utils/crc32c.h"

namespace trainpack {
namespace event_file_writer_test {

namespace fs = std::filesystem;
using testing::LogCapture;
using testing::message_of;
using testing::read_event_file;
using testing::read_le;

class EventFileWriterTest : public testing::TempDirTest {
 protected:
  // The event files in the directory, sorted by name.
  std::vector<std::string> files_by_name() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir())) out.push_back(e.path().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

TEST_F(EventFileWriterTest, RecordsAreFramedWithMaskedCrcsAndKeepTheirOrder) {
  EventFileWriter w(dir().string());
  w.add_scalar(1000.5, 3, "loss", 0.25);
  Summary two;
  two.values.push_back(SummaryValue::make_scalar("a", 1));
  two.values.push_back(SummaryValue::make_text("t", "hi"));
  w.add_summary(1001.0, 4, two);
  Event e;
  e.wall_time = 1002.0;
  e.step = 5;
  e.summary = Summary{{SummaryValue::make_scalar("b", -2)}};
  w.add_event(e);
  EXPECT_TRUE(w.flush());
  ASSERT_EQ(w.files().size(), 1u);
  const std::string path = w.files()[0];
  EXPECT_EQ(files_by_name(), w.files());

  // The strict reader checks both CRCs of every record and the version record first.
  const auto events = read_event_file(path);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_EQ(events[0].step(), 0);
  EXPECT_EQ(events[1].wall_time(), 1000.5);
  EXPECT_EQ(events[1].step(), 3);
  EXPECT_EQ(events[1].summary().value(0).tag(), "loss");
  EXPECT_EQ(events[1].summary().value(0).simple_value(), 0.25f);
  EXPECT_EQ(events[2].step(), 4);
  ASSERT_EQ(events[2].summary().value_size(), 2);
  EXPECT_EQ(events[2].summary().value(1).tensor().string_val(0), "hi");
  EXPECT_EQ(events[3].wall_time(), 1002.0);
  EXPECT_EQ(events[3].step(), 5);
  EXPECT_EQ(events[3].summary().value(0).simple_value(), -2.0f);

  // The framing by hand: length, masked CRC-32C of the 8 length bytes, the bytes, masked
  // CRC-32C of the bytes; the records fill the file exactly.
  const std::string bytes = testing::read_file_bytes(path);
  size_t pos = 0;
  for (const auto& ev : events) {
    const uint64_t len = read_le(bytes, pos, 8);
    EXPECT_EQ(len, ev.ByteSizeLong());
    EXPECT_EQ(read_le(bytes, pos + 8, 4), crc32c::mask(crc32c::value(bytes.data() + pos, 8)));
    EXPECT_EQ(read_le(bytes, pos + 12 + len, 4),
              crc32c::mask(crc32c::value(bytes.data() + pos + 12, len)));
    pos += 12 + len + 4;
  }
  EXPECT_EQ(pos, bytes.size());
}

TEST_F(EventFileWriterTest, FileNameIsTensorFlowsWithAZeroPaddedCount) {
  EXPECT_EQ(EventFileWriter::file_name(1700000000, "vm", 4242, 7),
            "events.out.tfevents.1700000000.vm.4242.000007");
  EXPECT_EQ(EventFileWriter::file_name(5, "h", 1, 123456),
            "events.out.tfevents.0000000005.h.1.123456");
  // Name order is the order of the count, across a change in the number of digits.
  EXPECT_LT(EventFileWriter::file_name(1700000000, "vm", 4242, 9),
            EventFileWriter::file_name(1700000000, "vm", 4242, 10));
  EXPECT_LT(EventFileWriter::file_name(1700000000, "vm", 4242, 99999),
            EventFileWriter::file_name(1700000000, "vm", 4242, 100000));

  EventFileWriter w(dir().string());
  w.start();
  ASSERT_TRUE(w.flush());
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  const std::string name = fs::path(w.files().at(0)).filename().string();
  const std::string prefix = "events.out.tfevents.";
  ASSERT_EQ(name.rfind(prefix, 0), 0u) << name;
  const std::string suffix = std::string(".") + host + "." + std::to_string(::getpid()) + ".";
  const size_t at = name.find(suffix);
  ASSERT_NE(at, std::string::npos) << name;
  EXPECT_EQ(at, prefix.size() + 10) << name;                // 10 digits of unix time
  EXPECT_EQ(name.size() - at - suffix.size(), 6u) << name;  // the 6-digit count
}

TEST_F(EventFileWriterTest, EventsWaitForMaxQueueOrFlush) {
  EventFileWriter w(dir().string(), EventFileWriterOptions().max_queue(100).flush_secs(1000));
  EXPECT_TRUE(w.files().empty());  // no file before the thread starts
  w.start();
  ASSERT_TRUE(w.flush());
  const std::string path = w.files().at(0);
  EXPECT_EQ(read_event_file(path).size(), 1u);  // the version record
  for (int i = 0; i < 3; ++i) w.add_scalar(1, i, "x", i);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(read_event_file(path).size(), 1u);  // 3 < max_queue pending
  EXPECT_TRUE(w.flush());
  EXPECT_EQ(read_event_file(path).size(), 4u);
}

TEST_F(EventFileWriterTest, StartNewFileClosesTheFileAndTheNextEventOpensANewOne) {
  EventFileWriter w(dir().string());
  for (int f = 0; f < 3; ++f) {
    w.add_scalar(1, f, "x", f);
    EXPECT_TRUE(w.start_new_file());
    EXPECT_EQ(w.files().size(), static_cast<size_t>(f + 1));
  }
  EXPECT_TRUE(w.start_new_file());  // no event since: no new file
  w.close();
  ASSERT_EQ(w.files().size(), 3u);
  EXPECT_EQ(files_by_name(), w.files());  // name order is write order
  for (int f = 0; f < 3; ++f) {
    const auto events = read_event_file(w.files()[f]);
    ASSERT_EQ(events.size(), 2u);
    EXPECT_EQ(events[1].step(), f);
  }
}

TEST_F(EventFileWriterTest, CloseWritesWhatIsQueuedAndLaterEventsAreDropped) {
  EventFileWriter w(dir().string());
  const int n = 100000;  // beyond the 65536 pending events at which the producer waits
  for (int i = 0; i < n; ++i) w.add_scalar(1, i, "v", i);
  w.close();
  w.add_scalar(1, n, "late", 0);
  EXPECT_TRUE(w.flush());  // nothing to do after close
  ASSERT_EQ(w.files().size(), 1u);
  const auto events = read_event_file(w.files()[0]);
  ASSERT_EQ(events.size(), static_cast<size_t>(n) + 1);
  EXPECT_EQ(events[n].step(), n - 1);
  // start() after close(): a new file.
  w.start();
  w.close();
  EXPECT_EQ(w.files().size(), 2u);
}

TEST_F(EventFileWriterTest, AnUnwritableDirectoryIsReportedAndRetriedAtTheNextFlush) {
  const fs::path gone = dir() / "gone";
  fs::create_directories(gone);
  EventFileWriter w(gone.string(), EventFileWriterOptions().name("MyWriter"));
  fs::remove_all(gone);
  LogCapture log;
  w.add_scalar(1, 1, "x", 1);
  EXPECT_FALSE(w.flush());
  bool named = false;
  for (const auto& line : log.lines()) {
    if (line.rfind(
            "ERR MyWriter: cannot create the event file " + gone.string() + "/events.out.tfevents.",
            0) == 0 &&
        line.find(": No such file or directory; events are dropped") != std::string::npos) {
      named = true;
    }
  }
  EXPECT_TRUE(named) << "no ERROR line naming the file";
  EXPECT_TRUE(w.files().empty());
  // The directory is back: the next event after a flush opens a file.
  fs::create_directories(gone);
  w.add_scalar(1, 2, "x", 2);
  EXPECT_TRUE(w.flush());
  ASSERT_EQ(w.files().size(), 1u);
  const auto events = read_event_file(w.files()[0]);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].step(), 2);
}

TEST_F(EventFileWriterTest, AFailedWriteIsReportedWithTheBytesLost) {
  EventFileWriter w(dir().string());
  w.start();
  ASSERT_TRUE(w.flush());
  const std::string path = w.files().at(0);
  const auto version_bytes = fs::file_size(path);
  LogCapture log;
  {
    testing::FileSizeLimit limit(version_bytes + 10);  // the next record does not fit
    w.add_scalar(1, 1, "a-long-enough-tag", 1);
    EXPECT_FALSE(w.flush());
  }
  EXPECT_TRUE(log.contains("ERR EventFileWriter: cannot write to the event file " + path +
                           ": File too large; "))
      << (log.lines().empty() ? "" : log.lines().back());
  EXPECT_TRUE(log.contains(" bytes lost, the file is closed"));
  // The file keeps its complete records (a reader stops at the cut record).
  EXPECT_THROW(read_event_file(path), std::runtime_error);
  EXPECT_TRUE(w.flush());  // nothing lost since the previous flush
}

TEST_F(EventFileWriterTest, BadArgumentsThrowNamingTheWriter) {
  using O = EventFileWriterOptions;
  EXPECT_EQ(
      message_of<std::invalid_argument>([&] { EventFileWriter(dir().string(), O().max_queue(0)); }),
      "EventFileWriter: max_queue must be >= 1, got 0");
  EXPECT_EQ(message_of<std::invalid_argument>(
                [&] { EventFileWriter(dir().string(), O().flush_secs(0).name("W")); }),
            "W: flush_secs must be a positive number of seconds");
  const std::string missing = (dir() / "missing").string();
  EXPECT_EQ(message_of<std::invalid_argument>([&] { EventFileWriter w(missing); }),
            "EventFileWriter: logdir '" + missing + "' is not a directory");
  EventFileWriter w(dir().string() + "/./");
  EXPECT_EQ(w.logdir(), dir().string());  // normalised
}

// request_flush returns while the writer's thread is held, and covers exactly the events queued
// before it: with a new file, the events added after it go to the next file.
TEST_F(EventFileWriterTest, RequestFlushReturnsAtOnceAndCoversTheEventsQueuedBeforeIt) {
  testing::Gate gate;
  EventFileWriter w(dir().string(), EventFileWriterOptions().io_hook(gate.hook()));
  w.add_scalar(1, 1, "x", 1);
  w.add_scalar(1, 2, "x", 2);
  EXPECT_TRUE(w.request_flush(/*new_file=*/true));
  w.add_scalar(1, 3, "x", 3);
  EXPECT_TRUE(w.request_flush());
  for (const auto& c : gate.calls()) EXPECT_TRUE(c.before_open);  // held: at most its first write
  EXPECT_LE(gate.calls().size(), 1u);
  gate.open();
  EXPECT_TRUE(w.flush());
  w.close();
  EXPECT_FALSE(gate.timed_out()) << "request_flush waited for the writer";
  ASSERT_EQ(w.files().size(), 2u);
  const auto first = read_event_file(w.files()[0]);
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(first[1].step(), 1);
  EXPECT_EQ(first[2].step(), 2);
  const auto second = read_event_file(w.files()[1]);
  ASSERT_EQ(second.size(), 2u);
  EXPECT_EQ(second[1].step(), 3);
}

// A loss found by a flush that request_flush did not wait for is returned by the next call.
TEST_F(EventFileWriterTest, ALossFoundAfterRequestFlushIsReturnedByTheNextFlush) {
  const fs::path gone = dir() / "gone";
  fs::create_directories(gone);
  EventFileWriter w(gone.string());
  fs::remove_all(gone);
  LogCapture log;
  w.add_scalar(1, 1, "x", 1);
  EXPECT_TRUE(w.request_flush());  // nothing known yet: its flush has not run
  EXPECT_FALSE(w.flush());         // the previous request's flush dropped the event
  EXPECT_TRUE(w.flush());          // reported once
}

}  // namespace event_file_writer_test
}  // namespace trainpack
