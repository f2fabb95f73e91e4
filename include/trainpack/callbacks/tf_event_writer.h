// TFEventWriter: writes what the monitors receive into a TensorFlow event file, so that
// TensorBoard shows the run (`tensorboard --logdir <logger dir>`).
//
//   monitors.push_back(TFEventWriter::create());  // a NoOpMonitor when no logger dir is set
//   monitors.push_back(std::make_shared<TFEventWriter>(
//       TFEventWriterOptions().logdir("/tmp/run").flush_secs(30).split_files(true)));
//
// The file: `events.out.tfevents.<10-digit unix seconds>.<hostname>.<pid>.<n>` in logdir, where
// <n> is a 6-digit, zero-padded count of the event files this process opened (`.000000`,
// `.000001`, ...): two files opened in one second never collide, and the names sort in the order
// the files were written, which is the order TensorBoard reads them in (with split_files, an
// unpadded `.10` would be read before `.2`). A TFRecord stream (uint64 length, uint32 masked
// CRC-32C of the length, the bytes, uint32 masked CRC-32C of the bytes, all little-endian) of
// `Event` protobufs; the first record is `Event{wall_time, step 0, file_version "brain.Event:2"}`.
// The file, its encoding and the writer's thread are an EventFileWriter
// (trainpack/utils/event_file_writer.h).
//
// What is written: every summary given to process_summary (the ones that Monitors::put_scalar,
// put_image and put_summary build) as an Event at the current global_step and the current time;
// every event given to process_event as it is. Scalars become `simple_value` (float32), images
// `Summary.Image` with their PNG, histograms `HistogramProto`, text a DT_STRING tensor with the
// `text` plugin's metadata. process_scalar / process_image are not used (tensorpack's writer
// takes only summaries; put_scalar's summary carries the scalar).
//
// Threads: the training thread only copies the summary into a queue (under a mutex). A thread
// owned by the writer, started at setup_graph (or by flush()) and joined at after_train (or in the
// destructor), encodes the events and writes them to the file when max_queue events are pending
// or flush_secs have passed since the last write. At every epoch end (trigger) the training
// thread queues a request to flush and fsync and goes on without waiting; the writer's thread
// writes and fsyncs everything queued before the request (with split_files it then closes the
// file, and the next event, of the next epoch, opens a new one; epoch ends that come while it is
// still in an fsync share the next one). So the events of an epoch are on the disk shortly after
// its end, not at its end. after_train flushes, fsyncs and closes, and
// waits for that. A producer far ahead of the disk (65536 events pending) waits for the writer
// instead of growing memory without bound.
//
// Errors: a file that cannot be opened or written is an ERROR line naming the file; training
// goes on, and the events meanwhile are dropped (the open is retried at the next epoch end). The
// loss is reported to the trainer (Trainer::report_write_failure) on the training thread: at the
// first epoch end after the writer's thread found it, or at after_train at the latest, so that
// the run ends with WriteFailedError naming the event file.
//
// State (checkpoints): at an epoch end a checkpoint is saved (ModelSaver) before the monitors'
// trigger_epoch flushes the event file, so a run killed between the two (SIGKILL, a crash)
// loses that epoch's scalars from the event file although the resumed run continues after them.
// The checkpoint therefore records the scalars this writer was given at the checkpoint's
// global_step so far (`record_epoch`, `record_step`, `record_tags`: the tags joined by NUL
// bytes, `record_values`; the last value of a tag, at most 4096 scalars), as JSONWriter records
// its entry. Only a save during the epoch-end callbacks (after_epoch to trigger_epoch) records
// them; one during the epoch records nothing. In before_train of a run that resumes from such a
// checkpoint (Trainer::restored_resume_point at the start of an epoch, whose epoch and
// global_step are the record's), the writer reads the event files of its directory but its own
// (scalar_tags_at_step: one pass over the record headers) and writes the recorded scalars that
// none of them holds at that step, at that step and the current time, with INFO `The event files
// in <dir> had no <tags> at global_step S (the end of epoch E); wrote them from the checkpoint's
// record.` In the normal case (the run was not killed there) every recorded scalar is found and
// nothing is written twice. Images, histograms and text are not recorded.
//
// Differences from tensorpack: no graph definition is written (there is no TF graph); the `.pid.n`
// suffix of the file name; the epoch-end flush also fsyncs (on the writer's thread); after a split
// the new file is opened by the next event (so an epoch without events leaves no file, and a run
// with split_files leaves one file per epoch rather than an extra, empty one at the end); the
// scalars of the epoch end a checkpoint records reach the event file after a kill (above).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/arg.h>

#include "trainpack/core/monitor_base.h"
#include "trainpack/utils/event_file_writer.h"

namespace trainpack {

struct TFEventWriterOptions {
  // The directory of the event files; unset: the logger directory. Must exist.
  TORCH_ARG(std::optional<std::string>, logdir);
  // Write to the file once this many events are pending (>= 1).
  TORCH_ARG(int64_t, max_queue) = 10;
  // Write pending events at least this often, in seconds (> 0).
  TORCH_ARG(double, flush_secs) = 120;
  // Start a new event file at every epoch end.
  TORCH_ARG(bool, split_files) = false;
  // Called on the writer's thread with "write" before each write to the file and with "fsync"
  // before each fsync. For tests: a hook that blocks shows what the training thread does not
  // wait for.
  TORCH_ARG(std::function<void(const char* what)>, io_hook) = nullptr;
};

class TFEventWriter : public MonitorBase {
 public:
  // Throws std::invalid_argument when logdir is unset and no logger directory is set ("pass one
  // with TFEventWriterOptions().logdir(dir), or call trainpack::logger::set_logger_dir(dir)
  // first"), when the directory does not exist, or for max_queue < 1 or flush_secs <= 0.
  explicit TFEventWriter(TFEventWriterOptions options = {});
  // Flushes, fsyncs and closes the file if the writer is still open (joins its thread).
  ~TFEventWriter() override;

  // tensorpack's `TFEventWriter()` in DEFAULT_MONITORS: when neither `options.logdir` nor the
  // logger directory is set, logs the WARNING `logger directory was not set. Ignore
  // TFEventWriter.` and returns NoOpMonitor("TFEventWriter"); otherwise a TFEventWriter. On a rank
  // other than the chief in data-parallel training (DistributedEnv: RANK > 0 of WORLD_SIZE > 1),
  // where the trainer skips the monitors and the logger directory is the chief's (it need not
  // exist on this rank's machine), it returns the NoOpMonitor without the warning.
  static MonitorPtr create(TFEventWriterOptions options = {});

  void process_summary(const Summary& summary) override;
  void process_event(const Event& event) override;

  // Writes everything put so far to the file, fsyncs it, and returns when that is done (starts
  // the writer's thread if setup_graph has not). Does nothing after after_train. A loss it finds
  // is reported to the trainer at the next epoch end.
  void flush();
  // Flushes, fsyncs and closes the file and joins the thread (what after_train does). Events
  // given afterwards are dropped, until a new training's setup_graph opens a new file.
  void close();

  // The normalized directory.
  const std::string& logdir() const { return writer_.logdir(); }
  // The paths of the event files opened so far, in order.
  std::vector<std::string> files() const;

  std::string name() const override { return "TFEventWriter"; }

  // See "State" above.
  CallbackState state() const override;
  void load_state(const CallbackState& state) override;

 protected:
  void _setup_graph() override;
  void _before_train() override;
  void _after_epoch() override { at_epoch_end_ = true; }
  void _trigger() override;
  void _after_train() override;

 private:
  // Tells the trainer that events were lost (the writer logged why).
  void report_lost_events();
  // Keeps the scalars of `summary`, given at `step`, for state() (the previous step's are
  // dropped; no allocation once the tags have been seen).
  void note_scalars(int64_t step, const Summary& summary);
  // In before_train of a resumed run: writes the recorded scalars that the directory's other
  // event files lack at the recorded step.
  void fill_from_record();

  TFEventWriterOptions options_;
  EventFileWriter writer_;
  // A loss found by flush(), to be reported on the training thread at the next trigger.
  std::atomic<bool> flush_found_loss_{false};

  // The scalars given at recent_step_ (the first recent_count_ of recent_), for state().
  int64_t recent_step_ = -1;
  size_t recent_count_ = 0;
  std::vector<std::pair<std::string, double>> recent_;
  bool at_epoch_end_ = false;  // between after_epoch and this writer's trigger
  // The epoch end that the restored checkpoint recorded (load_state).
  struct Record {
    int64_t epoch = 0;
    int64_t step = 0;
    std::vector<std::pair<std::string, double>> values;
  };
  std::optional<Record> record_;
};

}  // namespace trainpack
