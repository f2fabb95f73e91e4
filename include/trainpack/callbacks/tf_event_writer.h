// TFEventWriter (tensorpack's TFEventWriter): writes what the monitors receive into a TensorFlow
// event file, so that TensorBoard shows the run (`tensorboard --logdir <logger dir>`). See
// docs/monitors.md, "TensorBoard" (the format, the file names, the writer's thread, resumed runs).
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
  // For tests: called on the writer's thread with "write" before each write and "fsync" before
  // each fsync (a hook that blocks shows what the training thread does not wait for).
  TORCH_ARG(std::function<void(const char* what)>, io_hook) = nullptr;
};

// The file: `events.out.tfevents.<10-digit unix seconds>.<hostname>.<pid>.<n>` in logdir (<n>: a
// 6-digit count of the files this process opened, so that names sort in write order), a TFRecord
// stream of Event protobufs starting with `brain.Event:2`, written by an EventFileWriter.
// What: every summary given to process_summary (what put_scalar, put_image and put_summary build)
// as an Event at the current global_step and time, and every event given to process_event.
// When: the training thread only queues; the writer's thread (setup_graph to after_train) writes
// when max_queue events are pending or flush_secs passed. Each epoch end (trigger) asks it to
// flush and fsync, without waiting (with split_files, also to close the file: the next event opens
// a new one); after_train flushes, fsyncs, closes and waits. 65536 pending events make the
// producer wait.
// Errors: a file that cannot be opened or written is an ERROR line naming it; training goes on
// without those events (the open is retried at the next epoch end), and the run ends with
// WriteFailedError (Trainer::report_write_failure, at the next epoch end or in after_train).
// State (checkpoints): the scalars given at the checkpoint's step when it is saved at an epoch end
// (`record_epoch`, `record_step`, `record_tags`, `record_values`; at most 4096). A run resuming
// from that epoch end writes, in before_train, those the directory's other event files lack.
class TFEventWriter : public MonitorBase {
 public:
  // Throws std::invalid_argument when neither logdir nor a logger directory is set, when the
  // directory does not exist, or for max_queue < 1 or flush_secs <= 0.
  explicit TFEventWriter(TFEventWriterOptions options = {});
  // Flushes, fsyncs and closes the file if the writer is still open (joins its thread).
  ~TFEventWriter() override;

  // tensorpack's `TFEventWriter()` in DEFAULT_MONITORS: without `options.logdir` and a logger
  // directory, logs the WARNING `logger directory was not set. Ignore TFEventWriter.` and returns
  // NoOpMonitor("TFEventWriter"); on a rank other than the chief in data-parallel training
  // (DistributedEnv), the same NoOpMonitor without the warning; otherwise a TFEventWriter.
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

  // See "State" in the class comment.
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
  // Keeps the scalars of `summary`, given at `step`, for state() (dropping older steps').
  void note_scalars(int64_t step, const Summary& summary);
  // In before_train of a resumed run: writes the recorded scalars the other files lack.
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
