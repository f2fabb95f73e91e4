// JSONWriter (trainpack/callbacks/json_writer.h): the monitor's side of stats.json: gathering an
// entry on the training thread, the file found at start (which policy applies), the checkpoint's
// record of an epoch-end entry, and the report of write failures. The file's writes are
// StatsFileWriter's (trainpack/utils/stats_file_writer.h), its repairs stats_json_repair's.
#include "trainpack/callbacks/json_writer.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <stdexcept>
#include <system_error>
#include <utility>

#include "trainpack/core/callback_state.h"
#include "trainpack/core/trainer.h"
#include "trainpack/utils/float_repr.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/output_dir.h"
#include "trainpack/utils/stats_json_repair.h"

namespace trainpack {

namespace fs = std::filesystem;

namespace {

// str() of a Python number, as tensorpack's log lines print it ("nan", "inf", "2.0", "2").
std::string python_str(const StatValue& v) {
  if (std::holds_alternative<int64_t>(v)) return std::to_string(std::get<int64_t>(v));
  return python_float_repr(std::get<double>(v));
}

// An entry's number under `key`, or nullopt when absent.
std::optional<double> entry_number(const StatsEntry& entry, const char* key) {
  const StatValue* v = entry.find(key);
  if (v == nullptr) return std::nullopt;
  if (std::holds_alternative<int64_t>(*v)) return static_cast<double>(std::get<int64_t>(*v));
  return std::get<double>(*v);
}

std::string stats_path_in(const std::string& dir) {
  return (fs::path(dir) / JSONWriter::FILENAME).string();
}

}  // namespace

JSONWriter::JSONWriter(JSONWriterOptions options)
    : dir_(resolve_output_dir(std::nullopt, "JSONWriter", "")),
      path_(stats_path_in(dir_)),
      options_(std::move(options)),
      file_(std::make_unique<StatsFileWriter>(path_, "JSONWriter._write_stat()",
                                              options_.io_hook())) {
  // The counters' names come first: a scalar put under one of them is overwritten by them.
  intern("epoch_num");
  intern("global_step");
}

JSONWriter::~JSONWriter() = default;  // the StatsFileWriter writes, syncs and joins

MonitorPtr JSONWriter::create() {
  if (!logger::get_logger_dir()) {
    TP_LOG_WARN("logger directory was not set. Ignore JSONWriter.");
    return std::make_shared<NoOpMonitor>("JSONWriter");
  }
  return std::make_shared<JSONWriter>();
}

std::optional<std::vector<StatsEntry>> JSONWriter::load_existing_json(
    std::optional<std::string> dir) {
  const std::string path =
      stats_path_in(resolve_output_dir(dir, "JSONWriter::load_existing_json", "its dir argument"));
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return std::nullopt;
  std::string text;
  try {
    uint64_t file_size = 0;
    text = read_stats_text(path, &file_size);
  } catch (const std::system_error& e) {
    throw std::runtime_error(fmt::format("JSONWriter: {}", e.what()));
  }
  ParsedStats p = parse_stats_file(text);
  if (p.status == ParsedStats::Status::kMalformed) {
    throw std::runtime_error(
        fmt::format("JSONWriter: {} is not a valid stats file: {}", path, p.message));
  }
  if (p.status == ParsedStats::Status::kTruncated) warn_truncated_stats(path, p);
  return std::move(p.entries);
}

std::optional<int64_t> JSONWriter::load_existing_epoch_number(std::optional<std::string> dir) {
  try {
    auto stats = load_existing_json(std::move(dir));
    if (!stats || stats->empty()) return std::nullopt;
    const StatValue* v = stats->back().find("epoch_num");
    if (v == nullptr) return std::nullopt;
    if (std::holds_alternative<int64_t>(*v)) return std::get<int64_t>(*v);
    const double d = std::get<double>(*v);  // Python's int(): truncation toward zero
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return std::nullopt;
    return static_cast<int64_t>(d);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

uint32_t JSONWriter::intern(const std::string& name) {
  const auto it = ids_.find(name);
  if (it != ids_.end()) return it->second;
  const auto id = static_cast<uint32_t>(names_.size());
  names_.push_back(name);
  ids_.emplace(name, id);
  file_->add_key(format_stats_key(name));
  return id;
}

void JSONWriter::process_scalar(const std::string& name, double value) {
  // Puts usually repeat the previous entry's names in the same order: one string comparison
  // finds the id, the hash lookup is the fallback.
  const size_t k = puts_.size();
  const uint32_t id = k < previous_puts_.size() && names_[previous_puts_[k]] == name
                          ? previous_puts_[k]
                          : intern(name);
  // Bounded: a writer whose entries are never triggered still allocates nothing per put.
  if (k < 1024) puts_.push_back(id);
  put_since_entry_ = true;
  if (id < 2) return;  // `epoch_num` / `global_step`: the counters overwrite them
  for (StatsFileWriter::Value& s : current_) {
    if (s.id == id) {  // the last value wins; the name keeps the position of its first put
      s.value = value;
      return;
    }
  }
  current_.push_back(StatsFileWriter::Value{id, value});
}

void JSONWriter::flush() { file_->flush(); }

std::vector<StatsEntry> JSONWriter::stats() const {
  file_->flush();
  return parse_stats_file(file_->text()).entries;
}

void JSONWriter::_setup_graph() {
  file_->reset();
  current_.clear();
  puts_.clear();
  put_since_entry_ = false;
  disabled_ = false;
}

CallbackState JSONWriter::state() const {
  // Only at an epoch end (the next step starts an epoch), before this writer made the entry.
  if (!is_set_up() || !at_epoch_end_ || !put_since_entry_ || current_.empty()) return {};
  if (trainer().resume_point().step_in_epoch != 0 || epoch_num() < 1) return {};
  std::string names;
  std::vector<double> values;
  for (const StatsFileWriter::Value& slot : current_) {
    if (!names.empty() || !values.empty()) names.push_back('\0');
    names += names_[slot.id];
    values.push_back(slot.value);
  }
  return {{"record_epoch", state_scalar(epoch_num())},
          {"record_step", state_scalar(global_step())},
          {"record_names", state_string(names)},
          {"record_values", state_vector(values)}};
}

void JSONWriter::load_state(const CallbackState& state) {
  check_state_keys(name(), state, {"record_epoch", "record_step", "record_names", "record_values"});
  Record r;
  r.epoch = state_int(name(), state, "record_epoch");
  r.step = state_int(name(), state, "record_step");
  const std::string names = state_string(name(), state, "record_names");
  const std::vector<double> values = state_doubles(name(), state, "record_values");
  std::vector<std::string> split;
  size_t start = 0;
  for (size_t i = 0; i <= names.size(); ++i) {
    if (i == names.size() || names[i] == '\0') {
      split.push_back(names.substr(start, i - start));
      start = i + 1;
    }
  }
  if (split.size() != values.size()) {
    throw std::invalid_argument(fmt::format("{}: the recorded entry has {} names but {} values",
                                            name(), split.size(), values.size()));
  }
  for (size_t i = 0; i < values.size(); ++i) r.values.emplace_back(split[i], values[i]);
  record_ = std::move(r);
}

void JSONWriter::fill_from_record() {
  const auto& resumed = trainer().restored_resume_point();
  if (!resumed || resumed->step_in_epoch != 0) return;
  const int64_t ended = resumed->epoch - 1;  // the epoch the checkpoint ended
  const double last = last_kept_epoch_.value_or(0);
  if (last >= static_cast<double>(ended)) return;  // no hole
  const bool usable = record_ && record_->epoch == ended && record_->step == resumed->global_step;
  const int64_t first_missing = static_cast<int64_t>(last) + 1;
  const int64_t last_lost = usable ? ended - 1 : ended;
  if (first_missing <= last_lost && last_kept_epoch_) {
    TP_LOG_WARN(
        "{} has no entry for epoch{} {}, which the checkpoint this run resumes from does not "
        "record{}: {} missing.",
        path_, first_missing == last_lost ? "" : "s",
        first_missing == last_lost ? fmt::format("{}", first_missing)
                                   : fmt::format("{} to {}", first_missing, last_lost),
        usable ? fmt::format(" (it records epoch {} only)", ended) : std::string(),
        first_missing == last_lost ? "it stays" : "they stay");
  }
  if (!usable) return;
  for (const auto& [stat, value] : record_->values) process_scalar(stat, value);
  // The entry of the epoch the checkpoint ended, with its counters (not the current ones).
  put_since_entry_ = false;
  previous_puts_.swap(puts_);
  puts_.clear();
  file_->append_entry(current_, record_->epoch, record_->step);
  current_.clear();
  TP_LOG_INFO(
      "{} had no entry for epoch {} (global_step {}); added it from the checkpoint's record.",
      path_, record_->epoch, record_->step);
}

void JSONWriter::_before_train() {
  last_kept_epoch_.reset();
  at_epoch_end_ = false;
  adopt_existing_file();
  if (disabled_) {
    // The ERROR line is logged; the run ends with an error saying stats.json was not written.
    trainer().report_write_failure(name(), path_,
                                   "the stats.json found at start could not be adopted safely; "
                                   "nothing was written to it in this training");
    return;
  }
  file_->start();
  // What earlier callbacks put in before_train waits for the recorded entry, which comes first.
  std::vector<StatsFileWriter::Value> put_before;
  put_before.swap(current_);
  const bool had_puts = put_since_entry_;
  fill_from_record();
  record_.reset();
  current_.swap(put_before);
  put_since_entry_ = had_puts;
  _trigger();
  file_->request_sync();
}

bool JSONWriter::follows_starting_epoch(const std::vector<StatsEntry>& entries) const {
  // tensorpack: `epoch = stats[-1]['epoch_num'] + 1`, None on any error.
  const StatValue* last = entries.empty() ? nullptr : entries.back().find("epoch_num");
  if (last == nullptr) return true;
  const int64_t starting_epoch = trainer().starting_epoch();
  const bool follows = std::holds_alternative<int64_t>(*last)
                           ? std::get<int64_t>(*last) + 1 == starting_epoch
                           : std::get<double>(*last) + 1 == static_cast<double>(starting_epoch);
  if (!follows) {
    TP_LOG_WARN(
        "History epoch={} from JSON is not the predecessor of the current starting_epoch={}",
        python_str(*last), starting_epoch);
    TP_LOG_WARN(
        "If you want to resume old training, either use `AutoResumeTrainConfig` or correctly "
        "set the new starting_epoch yourself to avoid inconsistency. ");
  }
  return follows;
}

bool JSONWriter::keep_entries_up_to(std::vector<StatsEntry>& entries,
                                    const ResumePoint& resumed) const {
  // The steps after the checkpoint's global_step run again: their entries (written before the
  // crash or stop) would otherwise appear twice, with different values.
  const auto first_after = std::find_if(entries.begin(), entries.end(), [&](const StatsEntry& e) {
    const auto gs = entry_number(e, "global_step");
    return gs && *gs > static_cast<double>(resumed.global_step);
  });
  const size_t dropped = static_cast<size_t>(entries.end() - first_after);
  if (dropped > 0) {
    TP_LOG_WARN(
        "{} holds {} entries after global_step={}, the step of the checkpoint this run resumes "
        "from (from global_step={} on); they are dropped, since those steps run again.",
        path_, dropped, resumed.global_step, python_str(*first_after->find("global_step")));
    entries.erase(first_after, entries.end());
  }
  // The last entry kept is of the epoch the checkpoint ends (an epoch entry, or a step entry
  // written during the epoch the run resumes in).
  if (!entries.empty()) {
    if (const auto last_epoch = entry_number(entries.back(), "epoch_num")) {
      const double e = static_cast<double>(resumed.epoch);
      if (*last_epoch != e && *last_epoch != e - 1) {
        TP_LOG_WARN(
            "The last entry of {} is of epoch {}, but the checkpoint resumes at epoch {} "
            "(global_step={}); the checkpoint's counters are used.",
            path_, python_str(*entries.back().find("epoch_num")), resumed.epoch,
            resumed.global_step);
      }
    }
  }
  return dropped > 0;
}

void JSONWriter::adopt_existing_file() {
  try {
    recover_synced_stats_copy(path_);
  } catch (const std::exception& e) {
    give_up_on_file(e.what());
    return;
  }
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path_, ec))) return;
  FoundStatsFile found = read_found_stats_file(path_);
  ParsedStats& p = found.parsed;
  try {
    if (p.status == ParsedStats::Status::kMalformed) {
      set_aside_malformed_stats(path_, p);
      return;
    }
    if (p.status == ParsedStats::Status::kTruncated) warn_truncated_stats(path_, p);

    bool drop_entries = false;
    if (const auto& resumed = trainer().restored_resume_point()) {
      // Resumed from a checkpoint: its counters are the truth
      // (docs/tensorpack-differences.md #7).
      drop_entries = keep_entries_up_to(p.entries, *resumed);
    } else if (!follows_starting_epoch(p.entries)) {
      const std::string backup = stats_backup_path(path_, "");
      TP_LOG_WARN("Now, we will train with starting_epoch={} and backup old json to {}",
                  trainer().starting_epoch(), backup);
      move_stats_file(path_, backup);
      return;
    }

    TP_LOG_INFO("Found existing JSON inside {}, will append to it.", dir_);
    last_kept_epoch_ =
        p.entries.empty() ? std::nullopt : entry_number(p.entries.back(), "epoch_num");
    const std::string& text = found.text;
    if (p.status == ParsedStats::Status::kValid && !text.empty() && text.back() == ']' &&
        !drop_entries && found.file_size == text.size()) {
      // Appended to as it is: the next write keeps its bytes as they are, up to the closing `]`.
      file_->reset(std::move(found.text), p.entries.size());
      return;
    }
    // Truncated, followed by white space or NUL bytes, or with entries dropped on resume: keep a
    // copy of the file as found, then rewrite it once with the entries kept.
    const char* label = p.status == ParsedStats::Status::kTruncated ? "truncated-"
                        : drop_entries                              ? "before-resume-"
                                                                    : "orig-";
    file_->reset(rewrite_stats_file(path_, found, p.entries, label), p.entries.size());
  } catch (const std::exception& e) {
    give_up_on_file(e.what());
  }
}

void JSONWriter::give_up_on_file(const char* reason) {
  // The file could not be set aside, copied or restored: leave it as it is, and write nothing
  // this run rather than risk replacing it.
  file_->reset();
  disabled_ = true;
  TP_LOG_ERROR(
      "Exception in JSONWriter._write_stat()! {}; {} is left as it is and nothing is "
      "written to it in this training.",
      reason, path_);
}

void JSONWriter::_trigger_step() {
  // The last step of an epoch is written together with the epoch's entry.
  if (trainer().local_step() != trainer().steps_per_epoch() - 1) _trigger();
}

void JSONWriter::_trigger_epoch() {
  at_epoch_end_ = false;
  _trigger();
  // The fdatasync runs on the writer's thread; a failure of it (or of any write) is reported at
  // the next epoch end or at after_train.
  file_->request_sync();
  report_failures();
}

void JSONWriter::_trigger() {
  if (!put_since_entry_) return;
  put_since_entry_ = false;
  previous_puts_.swap(puts_);
  puts_.clear();
  if (!disabled_) file_->append_entry(current_, epoch_num(), global_step());
  current_.clear();
}

void JSONWriter::_after_train() {
  // Nothing is written here (tensorpack's behaviour); what was written reaches the disk before
  // train() returns.
  file_->stop();
  report_failures();
}

void JSONWriter::report_failures() {
  std::vector<std::string> failures = file_->take_failures();
  if (!is_set_up()) return;
  for (const std::string& error : failures) {
    trainer().report_write_failure(name(), path_, error);
  }
}

}  // namespace trainpack
