// EventFileWriter: writes Events into a TensorFlow event file from a thread of its own (what
// TensorFlow's EventsWriter and the Python EventFileWriter around it do). TFEventWriter, the
// monitor, is built on it; use it directly to write an event file outside of a training.
//
//   EventFileWriter w("/tmp/run", EventFileWriterOptions().max_queue(100));
//   w.add_scalar(wall_time, /*step=*/1, "loss", 0.25);
//   w.flush();   // on disk and fsynced when it returns
//   w.close();
//
// The file: `events.out.tfevents.<10-digit unix seconds>.<hostname>.<pid>.<n>` in the directory,
// where <n> is a 6-digit, zero-padded count of the event files this process opened (000000,
// 000001, ...). TensorBoard reads the files of a directory in the order of their names, and a
// running TensorBoard does not go back to a file that sorts before the one it is reading: the
// zero padding makes name order the order the files were written in, also for the files opened
// within one second (with an unpadded count, `.10` would sort before `.2`). The content is a
// TFRecord stream (uint64 length, uint32 masked CRC-32C of the length, the bytes, uint32 masked
// CRC-32C of the bytes, all little-endian) of `Event` protobufs; the first record is
// `Event{wall_time, step 0, file_version "brain.Event:2"}`.
//
// Threads: add_* only copies the event into a queue (under a mutex); a summary of one scalar
// is held inline, with no heap allocation beyond a long tag's. The writer's thread, started by
// start() or flush() (or by add_* when the producer is far ahead, or by close() when events are
// pending), opens the file, encodes the events and writes them when max_queue events are pending
// or flush_secs have passed since the last write; after a write it rests 5 ms before max_queue
// pending events alone bring it back (a producer putting an event every microsecond would
// otherwise wake it every max_queue events, a system call on the producer's thread each time).
// While more than max_queue events are already waiting, it keeps encoding into its buffer and
// writes once it has caught up (at most 256 KiB per write call). A producer 65536 events ahead of
// the disk waits for the writer instead of growing memory without bound.
//
// Flushing: flush() and start_new_file() wait until the file is written and fsynced (and, for
// start_new_file, closed); request_flush() asks for the same and returns at once. A request is
// queued behind the events added before it, so it covers exactly those, however many come after
// it before the writer gets to it (with a new file, those go to the next file). Requests that
// come while the writer is busy (in an fsync, typically) share the next fsync, which covers all
// their events; a request for a new file is always done where it stands.
//
// Reading back: scalar_tags_at_step (below) says which scalar tags a directory's event files hold
// at a step, for TFEventWriter's resume.
//
// Errors: a file that cannot be created or written is an ERROR line naming the file (prefixed by
// `name`); the events meanwhile are dropped, and the file is opened again (a new one) at the
// next flush request. flush(), start_new_file() and request_flush() return false when a flush
// that completed since the previous such call found something lost (for the waiting ones, their
// own flush included; request_flush, which does not wait, reports its flush at the next call).
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
  // the thread if needed). Returns false when an event was dropped or a write failed before
  // this flush and was not yet reported by a flush call (the ERROR line says which); true after
  // close().
  bool flush();
  // flush(), then closes the file: the next event opens a new one.
  bool start_new_file();
  // Asks the writer's thread to do what flush() (or, with `new_file`, start_new_file()) does for
  // the events queued so far, and returns without waiting (starting the thread if needed).
  // Returns false when an earlier flush found a loss not yet reported; this request's own
  // outcome is reported by the next flush call.
  bool request_flush(bool new_file = false);
  // Writes what is queued, fsyncs and closes the file and joins the thread. Events added
  // afterwards are dropped until start().
  void close();

  // The normalised directory.
  const std::string& logdir() const { return logdir_; }
  // The paths of the event files opened so far, in order.
  std::vector<std::string> files() const;

  // The file name for a file opened at unix time `seconds` as the process's file number `n`.
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

// Reading back, for a resumed run: the tags of the scalar values (`simple_value`) that the event
// files in `dir` (its plain files named `events.out.tfevents.*`, whoever wrote them) hold at
// `step`, leaving out the files named in `skip` (names, not paths). One forward pass over each
// file's record headers: a record is parsed only when its first bytes say it is at `step` (or do
// not say), the data of the others is skipped. A file that cannot be read holds nothing, and one
// with a damaged record (a CRC that does not match, a record that runs past the end: a run killed
// while writing) holds what comes before it. Never throws for a file's content or a missing
// directory.
std::set<std::string> scalar_tags_at_step(const std::string& dir, int64_t step,
                                          const std::vector<std::string>& skip = {});

}  // namespace trainpack
