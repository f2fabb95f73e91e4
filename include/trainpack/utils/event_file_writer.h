// EventFileWriter: writes Events into a TensorFlow event file from a thread of its own (what
// TensorFlow's EventsWriter and the Python EventFileWriter around it do). TFEventWriter, the
// monitor, is built on it; use it directly to write an event file outside of a training.
// The file (named by file_name()) holds TFRecord-framed `Event` protobufs, the first one the
// file_version record. Its format and how the thread batches writes: docs/architecture.md, "The
// event file".
//
// Threads: add_* only copies the event into a queue, under a mutex. The writer's thread (started
// by start() or flush(), or by add_* and close() when needed) writes when max_queue events are
// pending or flush_secs have passed. A producer 65536 events ahead of the disk waits for it.
//
// Errors: a file that cannot be created or written is an ERROR line naming the file (prefixed by
// `name`); the events meanwhile are dropped, a new file is opened at the next flush request, and
// the next flush call returns false.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "trainpack/utils/arg.h"
#include "trainpack/utils/summary.h"

namespace trainpack {

struct EventFileWriterOptions {
  // Write to the file once this many events are pending (>= 1).
  TRAINPACK_ARG(int64_t, max_queue) = 10;
  // Write pending events at least this often, in seconds (> 0).
  TRAINPACK_ARG(double, flush_secs) = 120;
  // What the error messages and log lines start with ("TFEventWriter" for the monitor).
  TRAINPACK_ARG(std::string, name) = "EventFileWriter";
  // Called on the writer's thread with "write" before each write to the file and with "fsync"
  // before each fsync. For tests: a hook that blocks shows what the caller does not wait for.
  TRAINPACK_ARG(std::function<void(const char* what)>, io_hook) = nullptr;
};

class EventFileWriter {
 public:
  // `logdir` must be an existing directory (normalised here: `a//b/` is `a/b`). Throws
  // std::invalid_argument for a missing directory, max_queue < 1 or flush_secs <= 0. No file is
  // created before the thread starts.
  explicit EventFileWriter(std::string logdir, EventFileWriterOptions options = {});
  // close().
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // Queue one event: a summary of one scalar (the fast path), a whole summary, or an Event as it
  // is. Dropped after close() until start().
  void add_scalar(double wall_time, int64_t step, std::string tag, double value);
  void add_summary(double wall_time, int64_t step, const Summary& summary);
  void add_event(const Event& event);

  // Starts the writer's thread if it is not running (after close(): a new file). The thread
  // creates the file and writes its file_version record at once.
  void start();
  // Writes everything queued so far, fsyncs the file, and returns when that is done (starting
  // the thread if needed). False when an event was dropped or a write failed since the last
  // flush call (the ERROR line says which); true after close().
  bool flush();
  // flush(), then closes the file: the next event opens a new one.
  bool start_new_file();
  // What flush() (or, with `new_file`, start_new_file()) does for the events queued so far,
  // without waiting (starting the thread if needed). False when an earlier flush found a loss not
  // yet reported; this request's own outcome is reported by the next flush call.
  bool request_flush(bool new_file = false);
  // Writes what is queued, fsyncs and closes the file and joins the thread. Events added
  // afterwards are dropped until start().
  void close();

  // The normalised directory.
  const std::string& logdir() const { return logdir_; }
  // The paths of the event files opened so far, in order.
  std::vector<std::string> files() const;

  // `events.out.tfevents.<10-digit seconds>.<hostname>.<pid>.<n>`: the name of the process's file
  // number `n` (zero-padded to 6 digits, so that name order is the order written) opened at unix
  // time `seconds`.
  static std::string file_name(int64_t seconds, const std::string& hostname, int pid, uint64_t n);

 private:
  struct Impl;
  struct Pending;
  void enqueue(Pending&& item);
  // Queues a flush marker (closing the file after it with `split`); waits for it with `wait`.
  bool flush_ticket(bool split, bool wait);

  std::string logdir_;
  std::unique_ptr<Impl> impl_;
};

// For a resumed run: the tags of the scalar values (`simple_value`) that the event files in `dir`
// (its plain files named `events.out.tfevents.*`, whoever wrote them) hold at `step`, leaving out
// the files named in `skip` (names, not paths). A file that cannot be read holds nothing; one with
// a damaged record (a run killed while writing) holds what comes before it. Never throws for a
// file's content or a missing directory.
std::set<std::string> scalar_tags_at_step(const std::string& dir, int64_t step,
                                          const std::vector<std::string>& skip = {});

}  // namespace trainpack
