// TFEventWriter: event files read back by the strict reader of tests/support/event_reader.h.
#include "trainpack/callbacks/tf_event_writer.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support/command.h"
#include "support/event_reader.h"
#include "support/gate.h"
#include "support/sanitizers.h"
#include "support/temp_dir.h"
#include "trainpack/callbacks/monitor.h"
#include "trainpack/callbacks/saver.h"
#include "trainpack/callbacks/trigger.h"
#include "trainpack/core/session_init.h"
#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"
#include "trainpack/utils/histogram.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/png.h"

namespace trainpack {
namespace tf_event_writer_test {

namespace fs = std::filesystem;
using testing::ActionCallback;
using testing::LogCapture;
using testing::read_event_file;
using testing::tfpb::Event;

Summary scalar_summary(const std::string& tag, double v) {
  Summary s;
  s.values.push_back(SummaryValue::make_scalar(tag, v));
  return s;
}

// The event files in `dir`, sorted by the counter suffix (the order this process opened them in).
std::vector<std::string> event_files(const fs::path& dir) {
  std::vector<std::pair<long, std::string>> found;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("events.out.tfevents.", 0) != 0) continue;
    found.emplace_back(std::stol(name.substr(name.rfind('.') + 1)), e.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

// Runs a shell command; returns its exit status and stdout.
int run_command(const std::string& cmd, std::string* out) {
  const auto [text, st] = testing::run_command(cmd);
  out->append(text);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// The first Python 3 interpreter that imports `module`: the one on PATH, else Debian's own
// /usr/bin/python3 (where python3-pil installs PIL when PATH leads to another Python), else "".
std::string python_with(const std::string& module) {
  for (const std::string py : {"python3", "/usr/bin/python3"}) {
    std::string out;
    if (run_command(py + " -c 'import " + module + "' >/dev/null 2>&1 && echo ok", &out) == 0 &&
        out.find("ok") != std::string::npos) {
      return py;
    }
  }
  return "";
}

class TFEventWriterTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    testing::TempDirTest::SetUp();
    logger::unset_logger_dir();
  }
  std::shared_ptr<TFEventWriter> make_writer(TFEventWriterOptions o = {}) {
    if (!o.logdir()) o.logdir(dir().string());
    return std::make_shared<TFEventWriter>(o);
  }
  // Trains a NoOpTrainer with `callbacks` and the writer as the only monitor.
  static void train(std::vector<CallbackPtr> callbacks, std::vector<MonitorPtr> monitors,
                    int64_t steps, int64_t epochs) {
    NoOpTrainer trainer;
    trainer.set_handle_signals(false);
    trainer.train(callbacks, monitors, steps, 1, epochs);
  }
  // With split_files, after 3 epochs of 2 steps that each put the epoch number: 3 files, the
  // writer's own list, each file the version event and its epoch's 2 steps; event
  // `checked_event` holds the epoch's value.
  void expect_one_file_per_epoch(const TFEventWriter& w, size_t checked_event) const {
    const auto files = event_files(dir());
    ASSERT_EQ(files.size(), 3u);
    EXPECT_EQ(w.files(), files);
    for (int epoch = 1; epoch <= 3; ++epoch) {
      SCOPED_TRACE(epoch);
      const auto events = read_event_file(files[epoch - 1]);
      ASSERT_EQ(events.size(), 3u);
      EXPECT_EQ(events[1].step(), 2 * epoch - 1);
      EXPECT_EQ(events[2].step(), 2 * epoch);
      EXPECT_EQ(events[checked_event].summary().value(0).simple_value(), static_cast<float>(epoch));
    }
  }
};

TEST_F(TFEventWriterTest, ProcessSummaryWritesScalarEvents) {
  auto w = make_writer();
  const double before =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  w->process_summary(scalar_summary("loss", 0.5));
  w->process_summary(scalar_summary("acc", 0.1));
  w->flush();
  const auto files = event_files(dir());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(w->files(), files);
  const auto events = read_event_file(files[0]);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_EQ(events[0].step(), 0);
  EXPECT_NEAR(events[0].wall_time(), before, 60);
  ASSERT_EQ(events[1].summary().value_size(), 1);
  EXPECT_EQ(events[1].summary().value(0).tag(), "loss");
  EXPECT_EQ(events[1].summary().value(0).simple_value(), 0.5f);
  EXPECT_EQ(events[2].summary().value(0).tag(), "acc");
  EXPECT_EQ(events[2].summary().value(0).simple_value(), 0.1f);  // float32 on the wire
  EXPECT_GE(events[1].wall_time(), before - 1e-3);
  EXPECT_LE(events[1].wall_time(), events[2].wall_time());
  w->close();
  w->process_summary(scalar_summary("late", 1));  // dropped after close
  w->flush();
  EXPECT_EQ(read_event_file(files[0]).size(), 3u);
}

TEST_F(TFEventWriterTest, FileNamePattern) {
  auto w = make_writer();
  w->flush();
  const auto files = event_files(dir());
  ASSERT_EQ(files.size(), 1u);
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  const std::string name = fs::path(files[0]).filename().string();
  const std::regex re(R"(events\.out\.tfevents\.(\d{10})\.(.+)\.(\d+)\.(\d{6}))");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(name, m, re)) << name;
  EXPECT_EQ(m[2].str(), host);
  EXPECT_EQ(m[3].str(), std::to_string(::getpid()));
  EXPECT_NEAR(std::stod(m[1].str()), static_cast<double>(std::time(nullptr)), 60);
  EXPECT_EQ(fs::path(files[0]).parent_path(), dir());
}

TEST_F(TFEventWriterTest, TrainingRunThroughMonitors) {
  // With these options only the epoch-end flushes and after_train write the events.
  auto w = make_writer(TFEventWriterOptions().max_queue(1000).flush_secs(1000));
  auto cb = std::make_shared<ActionCallback>();
  cb->trigger_step_fn = [](ActionCallback& c) {
    c.trainer().monitors().put_scalar("loss", 0.25 * static_cast<double>(c.global_step()));
  };
  train({cb}, {w}, 3, 2);
  const auto files = event_files(dir());
  ASSERT_EQ(files.size(), 1u);
  const auto events = read_event_file(files[0]);
  ASSERT_EQ(events.size(), 7u);
  for (int i = 1; i <= 6; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(events[i].step(), i);
    ASSERT_EQ(events[i].summary().value_size(), 1);
    EXPECT_EQ(events[i].summary().value(0).tag(), "loss");
    EXPECT_EQ(events[i].summary().value(0).simple_value(), static_cast<float>(0.25 * i));
  }
}

TEST_F(TFEventWriterTest, DirectProcessSummaryInATrainingRunUsesGlobalStep) {
  auto w = make_writer();
  auto cb = std::make_shared<ActionCallback>();
  cb->trigger_step_fn = [&](ActionCallback& c) {
    w->process_summary(scalar_summary("x", static_cast<double>(c.global_step())));
  };
  train({cb}, {w}, 2, 2);
  const auto events = read_event_file(event_files(dir()).at(0));
  ASSERT_EQ(events.size(), 5u);
  for (int i = 1; i <= 4; ++i) {
    EXPECT_EQ(events[i].step(), i);
    EXPECT_EQ(events[i].summary().value(0).simple_value(), static_cast<float>(i));
  }
}

TEST_F(TFEventWriterTest, ReaderCatchesEveryFlippedByte) {
  auto w = make_writer();
  Summary s;
  s.values.push_back(SummaryValue::make_scalar("a", 1.5));
  s.values.push_back(SummaryValue::make_text("t", "hello"));
  w->process_summary(s);
  w->process_summary(scalar_summary("b", -2));
  w->close();
  const std::string path = event_files(dir()).at(0);
  const std::string good = testing::read_file_bytes(path);
  ASSERT_EQ(testing::parse_event_records(good, "good").size(), 3u);
  // The first record's layout: [0,8) length, [8,12) length CRC, data, 4 bytes data CRC.
  const uint64_t len0 = testing::read_le(good, 0, 8);
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x01);
    try {
      testing::parse_event_records(bad, "bad");
      ADD_FAILURE() << "flipped byte " << i << " not caught";
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      if (i < 12) {
        EXPECT_NE(what.find("offset 8: length CRC mismatch"), std::string::npos) << what;
      } else if (i < 12 + len0 + 4) {
        EXPECT_NE(what.find("offset " + std::to_string(12 + len0) + ": data CRC mismatch"),
                  std::string::npos)
            << what;
      }
    }
  }
  // A truncated file and a missing first record are caught too.
  EXPECT_THROW(testing::parse_event_records(good.substr(0, good.size() - 1), "cut"),
               std::runtime_error);
  EXPECT_THROW(testing::parse_event_records(good.substr(12 + len0 + 4), "no version"),
               std::runtime_error);
  EXPECT_THROW(testing::parse_event_records("", "empty"), std::runtime_error);
}

TEST_F(TFEventWriterTest, SplitFilesMakesOneFilePerEpoch) {
  auto w = make_writer(TFEventWriterOptions().split_files(true));
  auto cb = std::make_shared<ActionCallback>();
  cb->trigger_step_fn = [](ActionCallback& c) {
    c.trainer().monitors().put_scalar("e", static_cast<double>(c.epoch_num()));
  };
  train({cb}, {w}, 2, 3);
  expect_one_file_per_epoch(*w, /*checked_event=*/1);
}

// TensorBoard's own loader (a script that loads a logdir with TensorBoard's code and prints every
// value it would serve as a JSON line; see tests/CMakeLists.txt), or "" when it is not there.
std::string tensorboard_reader() {
  const std::string path = TRAINPACK_TENSORBOARD_READER;
  std::error_code ec;
  return !path.empty() && fs::is_regular_file(path, ec) ? path : "";
}

TEST_F(TFEventWriterTest, SplitFilesSortByNameInWriteOrderAndTensorBoardReadsTheStepsInOrder) {
  // 13 epochs: 13 files, most of them opened within one second, so that only the counter orders
  // them, and the counter goes past 9 (an unpadded `.10` would sort before `.2`).
  const int epochs = 13;
  auto w = make_writer(TFEventWriterOptions().split_files(true));
  auto cb = std::make_shared<ActionCallback>();
  cb->trigger_step_fn = [](ActionCallback& c) {
    c.trainer().monitors().put_scalar("loss", static_cast<double>(c.global_step()));
  };
  train({cb}, {w}, 2, epochs);
  const std::vector<std::string> written = w->files();
  ASSERT_EQ(written.size(), static_cast<size_t>(epochs));
  std::vector<std::string> by_name;
  for (const auto& e : fs::directory_iterator(dir())) by_name.push_back(e.path().string());
  std::sort(by_name.begin(), by_name.end());
  EXPECT_EQ(by_name, written);
  for (int f = 0; f < epochs; ++f) {
    const auto events = read_event_file(written[f]);
    ASSERT_EQ(events.size(), 3u);
    EXPECT_EQ(events[1].step(), 2 * f + 1);
  }

  const std::string reader = tensorboard_reader();
  if (reader.empty()) {
    GTEST_SKIP() << "TensorBoard's reader is not there ('" << TRAINPACK_TENSORBOARD_READER
                 << "'); configure with -DTRAINPACK_TENSORBOARD_READER=<read_events.py>";
  }
  const std::string err_path = (dir() / "reader.stderr").string();
  std::string out;
  const int rc =
      run_command("/usr/bin/python3 " + reader + " " + dir().string() + " 2>" + err_path, &out);
  const std::string err = testing::read_file_bytes(err_path);
  if (rc == 2 && err.find("cannot import TensorBoard") != std::string::npos) {
    GTEST_SKIP() << "TensorBoard's reader cannot run here: " << err;
  }
  ASSERT_EQ(rc, 0) << err << out;
  // The reader's own check of the order TensorBoard loads and serves the values in.
  EXPECT_EQ(err.find("steps go backwards"), std::string::npos) << err;
  std::vector<int64_t> steps;
  const std::regex step_re(R"re("tag": "loss", "step": (\d+),)re");
  for (std::sregex_iterator it(out.begin(), out.end(), step_re), end; it != end; ++it) {
    steps.push_back(std::stoll((*it)[1].str()));
  }
  std::vector<int64_t> expected;
  for (int64_t s = 1; s <= 2 * epochs; ++s) expected.push_back(s);
  EXPECT_EQ(steps, expected) << out;
}

TEST_F(TFEventWriterTest, HistogramEvent) {
  auto w = make_writer();
  SummaryValue v;
  v.tag = "weights";
  v.kind = SummaryValue::Kind::kHistogram;
  v.histogram = make_histogram(at::tensor({-1.0, 0.0, 0.0, 1.0, 2.5}));
  Summary s;
  s.values.push_back(v);
  w->process_summary(s);
  w->flush();
  const auto events = read_event_file(event_files(dir()).at(0));
  ASSERT_EQ(events.size(), 2u);
  const auto& val = events[1].summary().value(0);
  EXPECT_EQ(val.tag(), "weights");
  ASSERT_TRUE(val.has_histo());
  const auto& h = val.histo();
  EXPECT_EQ(h.min(), -1.0);
  EXPECT_EQ(h.max(), 2.5);
  EXPECT_EQ(h.num(), 5.0);
  EXPECT_EQ(h.sum(), 2.5);
  EXPECT_EQ(h.sum_squares(), 8.25);
  EXPECT_EQ(std::vector<double>(h.bucket_limit().begin(), h.bucket_limit().end()),
            v.histogram.bucket_limit);
  EXPECT_EQ(std::vector<double>(h.bucket().begin(), h.bucket().end()),
            (std::vector<double>{0, 1, 0, 2, 0, 1, 0, 1, 0}));
}

TEST_F(TFEventWriterTest, TextEventUsesTheTextPlugin) {
  auto w = make_writer();
  Summary s;
  s.values.push_back(SummaryValue::make_text("notes", "**hello** world"));
  w->process_summary(s);
  w->flush();
  const auto events = read_event_file(event_files(dir()).at(0));
  ASSERT_EQ(events.size(), 2u);
  const auto& val = events[1].summary().value(0);
  EXPECT_EQ(val.tag(), "notes");
  ASSERT_TRUE(val.has_tensor());
  EXPECT_EQ(static_cast<int>(val.tensor().dtype()), 7);  // DT_STRING
  ASSERT_EQ(val.tensor().string_val_size(), 1);
  EXPECT_EQ(val.tensor().string_val(0), "**hello** world");
  EXPECT_EQ(val.tensor().tensor_shape().dim_size(), 0);
  EXPECT_EQ(val.metadata().plugin_data().plugin_name(), "text");
}

TEST_F(TFEventWriterTest, ProcessEventIsWrittenAsIs) {
  auto w = make_writer();
  trainpack::Event e;
  e.step = 42;
  e.wall_time = 1234.5;
  e.summary = scalar_summary("s", 3);
  w->process_event(e);
  w->flush();
  const auto events = read_event_file(event_files(dir()).at(0));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].step(), 42);
  EXPECT_EQ(events[1].wall_time(), 1234.5);
  EXPECT_EQ(events[1].summary().value(0).simple_value(), 3.0f);
}

TEST_F(TFEventWriterTest, ImageEventDecodedByPil) {
  const std::string py = python_with("PIL");
  if (py.empty()) GTEST_SKIP() << "python3 with PIL (Debian's python3-pil) is not available";
  // A 2x3 RGB image with distinct pixels.
  const int h = 2, wd = 3;
  std::vector<uint8_t> px(h * wd * 3);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 13);
  auto w = make_writer();
  SummaryValue v;
  v.tag = "img";
  v.kind = SummaryValue::Kind::kImage;
  v.image.height = h;
  v.image.width = wd;
  v.image.colorspace = 3;
  v.image.encoded_png = encode_png(px.data(), h, wd, 3);
  Summary s;
  s.values.push_back(v);
  w->process_summary(s);
  w->flush();
  const auto events = read_event_file(event_files(dir()).at(0));
  ASSERT_EQ(events.size(), 2u);
  const auto& img = events[1].summary().value(0).image();
  EXPECT_EQ(img.height(), h);
  EXPECT_EQ(img.width(), wd);
  EXPECT_EQ(img.colorspace(), 3);
  const std::string png_path = (dir() / "extracted.png").string();
  {
    std::ofstream out(png_path, std::ios::binary);
    out << img.encoded_image_string();
  }
  std::string out;
  const int rc =
      run_command(py +
                      " -c \"import sys; from PIL import Image; im = Image.open(sys.argv[1]); "
                      "print(im.size[0], im.size[1], im.mode); print(' '.join(str(c) for c in "
                      "im.tobytes()))\" " +
                      png_path,
                  &out);
  ASSERT_EQ(rc, 0) << out;
  std::string expected = "3 2 RGB\n";
  for (size_t i = 0; i < px.size(); ++i) expected += (i ? " " : "") + std::to_string(px[i]);
  expected += "\n";
  EXPECT_EQ(out, expected);
}

TEST_F(TFEventWriterTest, PutImageThroughMonitorsWritesAPng) {
  auto w = make_writer();
  auto cb = std::make_shared<ActionCallback>();
  cb->trigger_fn = [](ActionCallback& c) {
    c.trainer().monitors().put_image("gray", at::full({4, 5}, 7, at::kByte));
  };
  train({cb}, {w}, 1, 1);
  const auto events = read_event_file(event_files(dir()).at(0));
  ASSERT_EQ(events.size(), 2u);
  const auto& img = events[1].summary().value(0).image();
  EXPECT_EQ(events[1].summary().value(0).tag(), "gray");
  EXPECT_EQ(img.height(), 4);
  EXPECT_EQ(img.width(), 5);
  EXPECT_EQ(img.encoded_image_string().substr(1, 3), "PNG");
}

TEST_F(TFEventWriterTest, TensorBoardReadsTheFileWhenInstalled) {
  const std::string py = python_with("tensorboard");
  if (py.empty()) GTEST_SKIP() << "tensorboard is not installed for python3";
  auto w = make_writer();
  w->process_summary(scalar_summary("loss", 0.75));
  w->close();
  std::string out;
  const int rc =
      run_command(py +
                      " -c \"import sys; from tensorboard.backend.event_processing import "
                      "event_accumulator as ea; a = ea.EventAccumulator(sys.argv[1]); a.Reload(); "
                      "print([(s.step, s.value) for s in a.Scalars('loss')])\" " +
                      event_files(dir()).at(0) + " 2>/dev/null",
                  &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("(0, 0.75)"), std::string::npos) << out;
}

TEST_F(TFEventWriterTest, MaxQueueAndFlushSecsWriteWithoutAnExplicitFlush) {
  auto poll_records = [&](size_t want) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      const auto files = event_files(dir());
      if (!files.empty()) {
        try {
          if (read_event_file(files[0]).size() >= want) return true;
        } catch (const std::runtime_error&) {  // a record being written: try again
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  };
  {
    auto w = make_writer(TFEventWriterOptions().max_queue(3).flush_secs(1000));
    w->flush();  // starts the thread and writes the version record
    w->process_summary(scalar_summary("a", 1));
    w->process_summary(scalar_summary("a", 2));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(read_event_file(event_files(dir()).at(0)).size(), 1u);  // 2 < max_queue pending
    w->process_summary(scalar_summary("a", 3));
    EXPECT_TRUE(poll_records(4));
  }
  fs::remove_all(dir());
  fs::create_directories(dir());
  {
    auto w = make_writer(TFEventWriterOptions().max_queue(1000).flush_secs(0.05));
    w->flush();
    w->process_summary(scalar_summary("b", 1));
    EXPECT_TRUE(poll_records(2));
  }
}

TEST_F(TFEventWriterTest, DestructorWritesPendingEvents) {
  {
    auto w = make_writer();
    w->process_summary(scalar_summary("a", 1));
  }  // never started: the destructor starts the writer, writes and closes
  const auto events = read_event_file(event_files(dir()).at(0));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].summary().value(0).tag(), "a");
}

TEST_F(TFEventWriterTest, ManyEventsBeyondThePendingLimit) {
  auto w = make_writer();
  const int n = 200000;  // more than the 65536 pending events at which the producer waits
  for (int i = 0; i < n; ++i) {
    trainpack::Event e;
    e.step = i;
    e.summary = scalar_summary("v", i);
    w->process_event(e);
  }
  w->close();
  const auto events = read_event_file(event_files(dir()).at(0));
  ASSERT_EQ(events.size(), static_cast<size_t>(n) + 1);
  for (int i = 0; i < n; i += 9973) EXPECT_EQ(events[i + 1].step(), i);
  EXPECT_EQ(events[n].step(), n - 1);
}

TEST_F(TFEventWriterTest, PendingLimitBelowMaxQueueDoesNotStallTheProducer) {
  // max_queue above the 65536 pending events at which the producer waits: the writer is woken
  // by the waiting producer, not left sleeping until flush_secs.
  auto w = make_writer(TFEventWriterOptions().max_queue(1000000).flush_secs(1000));
  w->flush();
  const auto start = std::chrono::steady_clock::now();
  const int n = 70000;
  for (int i = 0; i < n; ++i) w->process_summary(scalar_summary("v", i));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  w->close();
  EXPECT_EQ(read_event_file(event_files(dir()).at(0)).size(), static_cast<size_t>(n) + 1);
}

TEST_F(TFEventWriterTest, CreateWithoutLoggerDirGivesNoOpMonitor) {
  LogCapture log;
  MonitorPtr m = TFEventWriter::create();
  ASSERT_NE(m, nullptr);
  EXPECT_NE(std::dynamic_pointer_cast<NoOpMonitor>(m), nullptr);
  EXPECT_EQ(m->name(), "NoOpMonitor(TFEventWriter)");
  EXPECT_TRUE(log.contains("WRN logger directory was not set. Ignore TFEventWriter."));
  EXPECT_THROW(TFEventWriter(), std::invalid_argument);

  logger::set_logger_dir((dir() / "log").string());
  MonitorPtr real = TFEventWriter::create();
  auto tw = std::dynamic_pointer_cast<TFEventWriter>(real);
  ASSERT_NE(tw, nullptr);
  EXPECT_EQ(tw->logdir(), (dir() / "log").string());
  // An explicit logdir needs no logger directory.
  logger::unset_logger_dir();
  EXPECT_NE(std::dynamic_pointer_cast<TFEventWriter>(
                TFEventWriter::create(TFEventWriterOptions().logdir(dir().string()))),
            nullptr);
}

TEST_F(TFEventWriterTest, CreateOnARankOtherThanTheChiefGivesNoOpMonitorAndTouchesNothing) {
  // Rank 1 of 2 (torchrun's variables): the logger directory is the chief's, only its name is
  // recorded here, and it need not exist on this rank's machine.
  const std::vector<std::pair<const char*, const char*>> rank1{
      {"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1"}};
  for (const auto& [name, value] : rank1) setenv(name, value, 1);
  const fs::path chiefs = dir() / "chiefs";
  LogCapture log;
  logger::set_logger_dir(chiefs.string());
  MonitorPtr m = TFEventWriter::create();
  logger::unset_logger_dir();
  for (const auto& [name, value] : rank1) unsetenv(name);
  EXPECT_NE(std::dynamic_pointer_cast<NoOpMonitor>(m), nullptr);
  EXPECT_FALSE(log.contains("Ignore TFEventWriter"));
  EXPECT_FALSE(fs::exists(chiefs));
}

TEST_F(TFEventWriterTest, BadOptionsThrow) {
  EXPECT_THROW(make_writer(TFEventWriterOptions().max_queue(0)), std::invalid_argument);
  EXPECT_THROW(make_writer(TFEventWriterOptions().flush_secs(0)), std::invalid_argument);
  EXPECT_THROW(make_writer(TFEventWriterOptions().logdir((dir() / "missing").string())),
               std::invalid_argument);
  // A normalized path.
  auto w = make_writer(TFEventWriterOptions().logdir(dir().string() + "/./"));
  EXPECT_EQ(w->logdir(), dir().string());
}

TEST_F(TFEventWriterTest, UnwritableDirectoryIsAnErrorLineNotACrashAndTheRunFails) {
  const fs::path gone = dir() / "gone";
  fs::create_directories(gone);
  auto w = make_writer(TFEventWriterOptions().logdir(gone.string()));
  fs::remove_all(gone);  // the directory vanishes before training
  LogCapture log;
  auto cb = std::make_shared<ActionCallback>();
  int steps = 0;
  cb->trigger_step_fn = [&](ActionCallback& c) {
    c.trainer().monitors().put_scalar("loss", 1.0);
    ++steps;
  };
  // Training goes on; the run ends with an error naming the lost events' directory (no file
  // could be opened there).
  try {
    train({cb}, {w}, 2, 2);
    ADD_FAILURE() << "no WriteFailedError";
  } catch (const WriteFailedError& e) {
    EXPECT_EQ(e.files(), std::vector<std::string>{gone.string()});
  }
  EXPECT_EQ(steps, 4);
  bool named = false;
  for (const auto& line : log.lines()) {
    if (line.rfind("ERR ", 0) == 0 &&
        line.find(gone.string() + "/events.out.tfevents.") != std::string::npos) {
      named = true;
    }
  }
  EXPECT_TRUE(named) << "no ERROR line naming the file";
}

// ---- the writer's thread at the epoch end ----

// The epoch-end fsync is held: the epoch end asks for it and goes on, the training thread runs the
// second epoch while the writer's thread waits in the first epoch's fsync, and after_train waits
// for everything.
TEST_F(TFEventWriterTest, TheEpochEndFsyncRunsOnTheWritersThread) {
  auto gate =
      std::make_shared<testing::Gate>([](const std::string& what) { return what == "fsync"; });
  auto w = make_writer(TFEventWriterOptions().io_hook(gate->hook()));
  auto cb = std::make_shared<ActionCallback>();
  int64_t steps_before_open = -1;
  bool writer_held = false;
  cb->trigger_step_fn = [](ActionCallback& c) {
    c.trainer().monitors().put_scalar("loss", static_cast<double>(c.global_step()));
  };
  cb->trigger_epoch_fn = [&](ActionCallback& c) {
    if (c.epoch_num() != 2) return;
    writer_held = gate->wait_for_call("fsync");  // the first epoch's, which cannot end yet
    steps_before_open = c.global_step();
    gate->open();
  };
  train({cb}, {w}, 3, 2);
  EXPECT_FALSE(gate->timed_out()) << "the training thread waited for an fsync";
  EXPECT_TRUE(writer_held);
  EXPECT_EQ(steps_before_open, 6);
  int fsyncs_while_closed = 0;
  for (const auto& c : gate->calls()) {
    EXPECT_NE(c.thread, std::this_thread::get_id()) << c.what;
    if (c.what == "fsync" && c.before_open) ++fsyncs_while_closed;
  }
  EXPECT_EQ(fsyncs_while_closed, 1);
  EXPECT_EQ(gate->calls().back().what, "fsync");  // after_train's, before train() returned
  const auto files = event_files(dir());
  ASSERT_EQ(files.size(), 1u);
  const auto events = read_event_file(files[0]);
  ASSERT_EQ(events.size(), 7u);
  for (int i = 1; i <= 6; ++i) EXPECT_EQ(events[i].step(), i);
}

// With split_files, an epoch end asks for a new file without waiting: while the writer's thread
// is held (from its first write on, until the last epoch ends), the events of all three epochs
// are queued; each still lands in its own epoch's file.
TEST_F(TFEventWriterTest, SplitFilesKeepEachEpochInItsFileWhenTheWriterIsBehind) {
  auto gate = std::make_shared<testing::Gate>();
  auto w = make_writer(TFEventWriterOptions().split_files(true).io_hook(gate->hook()));
  auto cb = std::make_shared<ActionCallback>();
  int64_t steps_before_open = -1;
  cb->trigger_step_fn = [](ActionCallback& c) {
    c.trainer().monitors().put_scalar("e", static_cast<double>(c.epoch_num()));
  };
  bool writer_held = false;
  cb->trigger_epoch_fn = [&](ActionCallback& c) {
    if (c.epoch_num() != 3) return;
    writer_held = gate->wait_for_call("write");  // the version record of the first file
    steps_before_open = c.global_step();
    gate->open();
  };
  train({cb}, {w}, 2, 3);
  EXPECT_FALSE(gate->timed_out()) << "the training thread waited for the writer";
  EXPECT_TRUE(writer_held);
  EXPECT_EQ(steps_before_open, 6);
  expect_one_file_per_epoch(*w, /*checked_event=*/2);
}

// ---- the scalars of an epoch end that a checkpoint records ----

// Puts `cost` (1 / global_step) at every step and `lr` (0.1 * epoch) at every epoch end.
std::shared_ptr<ActionCallback> put_cost_and_lr() {
  auto cb = std::make_shared<ActionCallback>();
  cb->trigger_step_fn = [](ActionCallback& c) {
    c.trainer().monitors().put_scalar("cost", 1.0 / static_cast<double>(c.global_step()));
  };
  cb->trigger_epoch_fn = [](ActionCallback& c) {
    c.trainer().monitors().put_scalar("lr", 0.1 * static_cast<double>(c.epoch_num()));
  };
  return cb;
}

// How many times each (step, tag) of a scalar is in the event files of `dir`, and its value.
std::map<std::pair<int64_t, std::string>, std::pair<int, float>> scalars_in(const fs::path& dir) {
  std::map<std::pair<int64_t, std::string>, std::pair<int, float>> out;
  for (const std::string& file : event_files(dir)) {
    for (const Event& e : read_event_file(file)) {
      for (const auto& v : e.summary().value()) {
        auto& seen = out[{e.step(), v.tag()}];
        ++seen.first;
        seen.second = v.simple_value();
      }
    }
  }
  return out;
}

// In a child process: trains epochs 1..2 of 2 steps, saving a checkpoint (synchronously) at each
// epoch end, and is killed (SIGKILL) right after epoch 2's save, before the monitors'
// trigger_epoch. The event file then holds epoch 1 (flushed before epoch 2) and nothing of epoch
// 2 (max_queue and flush_secs are large: the writer had not written it).
void train_and_get_killed_after_epoch_2s_save(const fs::path& dir) {
  std::fflush(stdout);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    try {
      auto w = std::make_shared<TFEventWriter>(
          TFEventWriterOptions().logdir(dir.string()).max_queue(1000).flush_secs(1000));
      auto killer = std::make_shared<ActionCallback>();
      // Epoch 1 is in the file (its end asked for a flush without waiting for it).
      killer->before_epoch_fn = [w](ActionCallback& c) {
        if (c.epoch_num() == 2) w->flush();
      };
      killer->trigger_epoch_fn = [](ActionCallback& c) {
        if (c.epoch_num() == 2) ::raise(SIGKILL);
      };
      auto saver = std::make_shared<ModelSaver>(
          ModelSaverOptions().checkpoint_dir(dir.string()).fsync(false).async(false));
      NoOpTrainer trainer;
      trainer.set_handle_signals(false);
      trainer.train({put_cost_and_lr(), saver, killer}, {w}, 2, 1, 3);
    } catch (...) {
    }
    ::_exit(3);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child ended by itself: " << status;
}

// Resumes from the latest checkpoint in `dir` and trains epoch 3.
void resume_for_epoch_3(const fs::path& dir) {
  auto saver = std::make_shared<ModelSaver>(
      ModelSaverOptions().checkpoint_dir(dir.string()).fsync(false).async(false));
  auto w = std::make_shared<TFEventWriter>(TFEventWriterOptions().logdir(dir.string()));
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train({put_cost_and_lr(), saver}, {w}, 2, 1, 3,
                std::make_shared<SaverRestore>(dir.string()));
}

// A run killed between epoch 2's checkpoint and its monitors: the checkpoint records the scalars
// of that epoch end, and the resumed run writes them to its event file, once. (Step 3, in the
// middle of epoch 2, is lost: no checkpoint records it.)
TEST_F(TFEventWriterTest, AResumeWritesTheScalarsTheCheckpointRecordsWhenTheEventFilesLackThem) {
  TRAINPACK_SKIP_FORK_UNDER_TSAN();
  train_and_get_killed_after_epoch_2s_save(dir());
  const TensorMap saved = read_checkpoint((dir() / "model-4").string());
  EXPECT_EQ(saved.at("callback/TFEventWriter/record_epoch").item<int64_t>(), 2);
  EXPECT_EQ(saved.at("callback/TFEventWriter/record_step").item<int64_t>(), 4);
  ASSERT_EQ(scalars_in(dir()).count({4, "cost"}), 0u) << "the kill came too late";
  LogCapture log;
  resume_for_epoch_3(dir());
  EXPECT_TRUE(log.contains("The event files in " + dir().string() +
                           " had no cost, lr at global_step 4 (the end of epoch 2); wrote them "
                           "from the checkpoint's record."));
  const std::map<std::pair<int64_t, std::string>, std::pair<int, float>> want = {
      {{1, "cost"}, {1, 1.0f}},
      {{2, "cost"}, {1, 0.5f}},
      {{2, "lr"}, {1, 0.1f}},
      {{4, "cost"}, {1, 0.25f}},
      {{4, "lr"}, {1, 0.2f}},
      {{5, "cost"}, {1, 0.2f}},
      {{6, "cost"}, {1, static_cast<float>(1.0 / 6)}},
      {{6, "lr"}, {1, 0.3f}}};
  EXPECT_EQ(scalars_in(dir()), want);
}

// The normal case: the run that saved the checkpoint wrote that epoch end's scalars, so the
// resumed run finds them in the event files and writes nothing twice.
TEST_F(TFEventWriterTest, AResumeWritesNothingTwiceWhenTheEventFilesHoldTheRecordedScalars) {
  {
    auto saver = std::make_shared<ModelSaver>(
        ModelSaverOptions().checkpoint_dir(dir().string()).fsync(false).async(false));
    train({put_cost_and_lr(), saver}, {make_writer()}, 2, 2);
  }
  ASSERT_EQ(read_checkpoint((dir() / "model-4").string())
                .at("callback/TFEventWriter/record_step")
                .item<int64_t>(),
            4);
  LogCapture log;
  resume_for_epoch_3(dir());
  EXPECT_FALSE(log.contains("from the checkpoint's record"));
  const auto seen = scalars_in(dir());
  EXPECT_EQ(seen.size(), 9u);  // cost at steps 1..6, lr at steps 2, 4, 6
  for (const auto& [key, count_value] : seen) {
    EXPECT_EQ(count_value.first, 1) << "step " << key.first << " " << key.second;
  }
}

// Only a checkpoint saved among the epoch-end callbacks records the scalars of its step (the
// step's and the epoch end's, put before the save); one saved at a step in the middle of an epoch
// records none.
TEST_F(TFEventWriterTest, OnlyACheckpointSavedAtAnEpochEndRecordsScalars) {
  auto saver = std::make_shared<ModelSaver>(
      ModelSaverOptions().checkpoint_dir(dir().string()).fsync(false).async(false));
  auto periodic = std::make_shared<PeriodicTrigger>(
      saver, PeriodicTriggerOptions().every_k_steps(3).every_k_epochs(1));
  train({put_cost_and_lr(), periodic}, {make_writer()}, 2, 2);  // saves at steps 2, 3 and 4
  const TensorMap epoch_1 = read_checkpoint((dir() / "model-2").string());
  EXPECT_EQ(epoch_1.at("callback/TFEventWriter/record_epoch").item<int64_t>(), 1);
  EXPECT_EQ(epoch_1.at("callback/TFEventWriter/record_step").item<int64_t>(), 2);
  const at::Tensor tags = epoch_1.at("callback/TFEventWriter/record_tags");
  EXPECT_EQ(std::string(tags.data_ptr<int64_t>(), tags.data_ptr<int64_t>() + tags.numel()),
            std::string("cost\0lr", 7));
  const at::Tensor values = epoch_1.at("callback/TFEventWriter/record_values");
  EXPECT_EQ(std::vector<double>(values.data_ptr<double>(), values.data_ptr<double>() + 2),
            (std::vector<double>{0.5, 0.1}));
  const TensorMap mid_epoch_2 = read_checkpoint((dir() / "model-3").string());
  EXPECT_EQ(mid_epoch_2.count("callback/TFEventWriter/record_step"), 0u);
  const TensorMap epoch_2 = read_checkpoint((dir() / "model-4").string());
  EXPECT_EQ(epoch_2.at("callback/TFEventWriter/record_step").item<int64_t>(), 4);
}

// scalar_tags_at_step reads only the events at the step asked for, across files, skips the files
// named, and stops at a damaged record (the tail of a killed run).
TEST_F(TFEventWriterTest, ScalarTagsAtStepReadsTheEventFilesOfADirectory) {
  {
    EventFileWriter a(dir().string());
    a.add_scalar(1.0, 3, "cost", 0.5);
    a.add_scalar(1.0, 4, "cost", 0.25);
    a.add_scalar(1.0, 4, "lr", 0.2);
    a.add_scalar(1.0, 5, "acc", 0.9);
    a.close();
    EventFileWriter b(dir().string());
    b.add_scalar(1.0, 4, "val-error", 0.1);
    b.close();
  }
  const auto files = event_files(dir());
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(scalar_tags_at_step(dir().string(), 4),
            (std::set<std::string>{"cost", "lr", "val-error"}));
  EXPECT_EQ(scalar_tags_at_step(dir().string(), 4, {fs::path(files[1]).filename().string()}),
            (std::set<std::string>{"cost", "lr"}));
  EXPECT_TRUE(scalar_tags_at_step(dir().string(), 7).empty());
  EXPECT_TRUE(scalar_tags_at_step((dir() / "missing").string(), 4).empty());
  // The second file cut inside its last record: what comes before it still counts.
  fs::resize_file(files[1], fs::file_size(files[1]) - 3);
  EXPECT_EQ(scalar_tags_at_step(dir().string(), 4), (std::set<std::string>{"cost", "lr"}));
}

}  // namespace tf_event_writer_test
}  // namespace trainpack
