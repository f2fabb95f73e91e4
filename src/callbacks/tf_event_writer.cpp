// TFEventWriter (see the header): the monitor around an EventFileWriter
// (trainpack/utils/event_file_writer.h), which owns the file, the encoding and the thread.
#include "trainpack/callbacks/tf_event_writer.h"

#include <chrono>
#include <exception>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "trainpack/core/callback_state.h"
#include "trainpack/core/distributed.h"
#include "trainpack/core/trainer.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/output_dir.h"

namespace trainpack {
namespace {

constexpr const char* kName = "TFEventWriter";
// The most scalars of one step that a checkpoint records.
constexpr size_t kMaxRecorded = 4096;

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

// `parts` joined by NUL bytes, and back.
std::string join_nul(const std::vector<std::pair<std::string, double>>& parts) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out.push_back('\0');
    out += parts[i].first;
  }
  return out;
}
std::vector<std::string> split_nul(const std::string& joined) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i <= joined.size(); ++i) {
    if (i == joined.size() || joined[i] == '\0') {
      out.push_back(joined.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
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
  const int64_t step = is_set_up() ? global_step() : 0;
  if (is_set_up()) note_scalars(step, summary);
  writer_.add_summary(now_seconds(), step, summary);
}

void TFEventWriter::note_scalars(int64_t step, const Summary& summary) {
  if (step != recent_step_) {
    recent_step_ = step;
    recent_count_ = 0;
  }
  for (const SummaryValue& v : summary.values) {
    if (v.kind != SummaryValue::Kind::kScalar || recent_count_ == kMaxRecorded) continue;
    if (recent_count_ == recent_.size()) recent_.emplace_back();
    recent_[recent_count_].first.assign(v.tag);  // reuses the string's room
    recent_[recent_count_].second = v.scalar;
    ++recent_count_;
  }
}

CallbackState TFEventWriter::state() const {
  // Only at an epoch end (the next step starts an epoch), before this writer's trigger.
  if (!is_set_up() || !at_epoch_end_ || recent_count_ == 0 || recent_step_ != global_step()) {
    return {};
  }
  if (trainer().resume_point().step_in_epoch != 0 || epoch_num() < 1) return {};
  // The last value of each tag, in the order of the tags' first puts.
  std::vector<std::pair<std::string, double>> kept;
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < recent_count_; ++i) {
    const auto [it, added] = index.emplace(recent_[i].first, kept.size());
    if (added) {
      kept.push_back(recent_[i]);
    } else {
      kept[it->second].second = recent_[i].second;
    }
  }
  std::vector<double> values;
  for (const auto& kv : kept) values.push_back(kv.second);
  return {{"record_epoch", state_scalar(epoch_num())},
          {"record_step", state_scalar(global_step())},
          {"record_tags", state_string(join_nul(kept))},
          {"record_values", state_vector(values)}};
}

void TFEventWriter::load_state(const CallbackState& state) {
  check_state_keys(name(), state, {"record_epoch", "record_step", "record_tags", "record_values"});
  Record r;
  r.epoch = state_int(name(), state, "record_epoch");
  r.step = state_int(name(), state, "record_step");
  const std::vector<std::string> tags = split_nul(state_string(name(), state, "record_tags"));
  const std::vector<double> values = state_doubles(name(), state, "record_values");
  if (tags.size() != values.size()) {
    throw std::invalid_argument(fmt::format("{}: the recorded scalars have {} tags but {} values",
                                            name(), tags.size(), values.size()));
  }
  for (size_t i = 0; i < values.size(); ++i) r.values.emplace_back(tags[i], values[i]);
  record_ = std::move(r);
}

void TFEventWriter::fill_from_record() {
  const auto& resumed = trainer().restored_resume_point();
  if (!record_ || !resumed || resumed->step_in_epoch != 0) return;
  if (record_->epoch != resumed->epoch - 1 || record_->step != resumed->global_step) return;
  // This writer's own file is left out (flush() makes sure it is open and named).
  flush();
  std::vector<std::string> own;
  for (const std::string& f : writer_.files()) {
    own.push_back(std::filesystem::path(f).filename().string());
  }
  const std::set<std::string> found = scalar_tags_at_step(writer_.logdir(), record_->step, own);
  std::string written;
  int count = 0;
  for (const auto& [tag, value] : record_->values) {
    if (found.count(tag) > 0) continue;
    writer_.add_scalar(now_seconds(), record_->step, tag, value);
    written += (count++ > 0 ? ", " : "") + tag;
  }
  if (count == 0) return;  // the run that saved the checkpoint wrote them (the normal case)
  TP_LOG_INFO(
      "The event files in {} had no {} at global_step {} (the end of epoch {}); wrote {} from "
      "the checkpoint's record.",
      writer_.logdir(), written, record_->step, record_->epoch, count == 1 ? "it" : "them");
}

void TFEventWriter::process_event(const Event& event) { writer_.add_event(event); }

void TFEventWriter::flush() {
  if (!writer_.flush()) flush_found_loss_ = true;
}

void TFEventWriter::close() { writer_.close(); }

std::vector<std::string> TFEventWriter::files() const { return writer_.files(); }

void TFEventWriter::_setup_graph() {
  recent_step_ = -1;
  recent_count_ = 0;
  writer_.start();
}

void TFEventWriter::_before_train() {
  at_epoch_end_ = false;
  fill_from_record();
  record_.reset();
}

void TFEventWriter::_trigger() {
  at_epoch_end_ = false;
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
