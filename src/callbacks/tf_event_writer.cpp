// TFEventWriter (see the header): the monitor around an EventFileWriter
// (trainpack/utils/event_file_writer.h), which owns the file, the encoding and the thread.
#include "trainpack/callbacks/tf_event_writer.h"

#include <chrono>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "trainpack/train/distributed.h"
#include "trainpack/train/trainer.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/output_dir.h"

namespace trainpack {
namespace {

constexpr const char* kName = "TFEventWriter";

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Whether this process is a rank other than the chief of a data-parallel group. A bad variable
// counts as the chief: joining the group reports it.
bool other_rank_than_chief() {
  try {
    const DistributedEnv env = DistributedEnv::from_environment();
    return env.distributed() && env.rank > 0;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

TFEventWriter::TFEventWriter(TFEventWriterOptions options)
    : options_(std::move(options)),
      writer_(resolve_output_dir(options_.logdir(), kName, "TFEventWriterOptions().logdir(dir)"),
              EventFileWriterOptions()
                  .max_queue(options_.max_queue())
                  .flush_secs(options_.flush_secs())
                  .name(kName)
                  .io_hook(options_.io_hook())) {}

TFEventWriter::~TFEventWriter() = default;  // the writer flushes, fsyncs and closes

MonitorPtr TFEventWriter::create(TFEventWriterOptions options) {
  if (!options.logdir() && other_rank_than_chief()) {
    return std::make_shared<NoOpMonitor>("TFEventWriter");
  }
  if (!output_dir_or_logger_dir(options.logdir())) {
    TP_LOG_WARN("logger directory was not set. Ignore TFEventWriter.");
    return std::make_shared<NoOpMonitor>("TFEventWriter");
  }
  return std::make_shared<TFEventWriter>(std::move(options));
}

void TFEventWriter::process_summary(const Summary& summary) {
  writer_.add_summary(now_seconds(), is_set_up() ? global_step() : 0, summary);
}

void TFEventWriter::process_event(const Event& event) { writer_.add_event(event); }

void TFEventWriter::flush() {
  if (!writer_.flush()) flush_found_loss_ = true;
}

void TFEventWriter::close() { writer_.close(); }

std::vector<std::string> TFEventWriter::files() const { return writer_.files(); }

void TFEventWriter::_setup_graph() { writer_.start(); }

void TFEventWriter::_trigger() {
  // The writer's thread writes and fsyncs what was put so far (and with split_files closes the
  // file); the training thread does not wait for the disk. What it returns is what earlier
  // flushes found.
  const bool ok = writer_.request_flush(options_.split_files());
  if (!ok || flush_found_loss_.exchange(false)) report_lost_events();
}

void TFEventWriter::_after_train() {
  // flush() tells whether something was lost since the last report; close() does not.
  const bool ok = writer_.flush();
  if (!ok || flush_found_loss_.exchange(false)) report_lost_events();
  writer_.close();
}

void TFEventWriter::report_lost_events() {
  // The writer logged the ERROR line naming the file; the run ends with an error naming it too.
  const std::vector<std::string> files = writer_.files();
  trainer().report_write_failure(
      kName, files.empty() ? writer_.logdir() : files.back(),
      "events were dropped or could not be written (see the TFEventWriter ERROR lines)");
}

}  // namespace trainpack
