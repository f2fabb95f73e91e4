// JSONWriter: the monitor that keeps `<logger dir>/stats.json` (trainpack/callbacks/json_writer.h):
// its state and hooks, appending an entry by one pwrite over the closing `]`, the back-up /
// move-aside / repair of a file found at start, and the fsync policy. The text of the file (its
// layout and the tolerant reader) is trainpack/utils/stats_json.h.
#include "trainpack/callbacks/json_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include "trainpack/train/trainer.h"
#include "trainpack/utils/atomic_file.h"
#include "trainpack/utils/file_io.h"
#include "trainpack/utils/float_repr.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/output_dir.h"

namespace trainpack {

namespace fs = std::filesystem;

namespace {

// str() of a Python number, as tensorpack's log lines print it ("nan", "inf", "2.0", "2").
std::string python_str(const StatValue& v) {
  if (std::holds_alternative<int64_t>(v)) return std::to_string(std::get<int64_t>(v));
  return python_float_repr(std::get<double>(v));
}

// ---------------------------------------------------------------------------------------------
// Files

std::string timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%m%d-%H%M%S", &tm);
  return buf;
}

// `<dir>/stats.json.<label><MMDD-HHMMSS>`, with `-1`, `-2`, ... added if that name is taken.
std::string backup_path(const std::string& path, const std::string& label) {
  const std::string base = path + "." + label + timestamp();
  std::string candidate = base;
  std::error_code ec;
  for (int k = 1; fs::exists(fs::symlink_status(candidate, ec)); ++k) {
    candidate = base + "-" + std::to_string(k);
  }
  return candidate;
}

// Writes `data` (a file as found) to the new file `to` as a backup: completely, to a temporary
// file that is fsynced and only then given the name `to`, which is not replaced if it was taken
// meanwhile. A failure (a full disk) leaves no backup, not an empty or partial one, and throws
// "cannot back up <from> to <to>: <reason>"; the caller then leaves `from` as it is.
void write_backup(const std::string& from, const std::string& data, const std::string& to,
                  const std::string& dir) {
  try {
    AtomicFileWriter file(to);
    file.write(data);
    file.commit_as_new();
    fsync_directory(dir);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("cannot back up {} to {}: {}", from, to, e.what()));
  }
}

// How stats.json is read: a regular file (a FIFO never blocks, a symlink is not followed: it is
// moved aside like any file that is not a stats file), of at most 1 GiB.
ReadFileOptions stats_read_options() {
  ReadFileOptions options;
  options.max_bytes = uint64_t{1} << 30;
  options.kind = "stats file";
  options.follow_symlinks = false;
  return options;
}

void move_file(const std::string& from, const std::string& to, const std::string& dir) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw_file_error("rename " + from + " to", to, errno);
  fsync_directory(dir);
}

std::string join(const std::string& dir, const char* name) {
  return (fs::path(dir) / name).string();
}

void warn_truncated(const std::string& path, const ParsedStats& p) {
  TP_LOG_WARN(
      "{} is truncated (an append was cut short): kept its {} complete entries, ignored the last "
      "{} bytes.",
      path, p.entries.size(), p.bytes_ignored);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// JSONWriter

JSONWriter::JSONWriter() {
  dir_ = resolve_output_dir(std::nullopt, "JSONWriter", "");
  path_ = join(dir_, FILENAME);
}

JSONWriter::~JSONWriter() {
  if (fd_ >= 0) {
    if (dirty_) (void)::fdatasync(fd_);
    ::close(fd_);
  }
}

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
      join(resolve_output_dir(dir, "JSONWriter::load_existing_json", "its dir argument"), FILENAME);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return std::nullopt;
  std::string text;
  try {
    text = read_file(path, stats_read_options());
  } catch (const std::system_error& e) {
    throw std::runtime_error(fmt::format("JSONWriter: {}", e.what()));
  }
  ParsedStats p = parse_stats_file(text);
  if (p.status == ParsedStats::Status::kMalformed) {
    throw std::runtime_error(
        fmt::format("JSONWriter: {} is not a valid stats file: {}", path, p.message));
  }
  if (p.status == ParsedStats::Status::kTruncated) warn_truncated(path, p);
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

void JSONWriter::process_scalar(const std::string& name, double value) {
  stat_now_.set(name, value);
}

void JSONWriter::_setup_graph() {
  close_file();
  stats_.clear();
  stat_now_ = StatsEntry();
  need_rewrite_ = false;
  disabled_ = false;
}

void JSONWriter::_before_train() {
  adopt_existing_file();
  if (disabled_) {
    // The ERROR line is logged; the run ends with an error saying stats.json was not written.
    trainer().report_write_failure(name(), path_,
                                   "the stats.json found at start could not be adopted safely; "
                                   "nothing was written to it in this training");
  }
  _trigger();
  sync();
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

namespace {

// An entry's integer field `key`, or nullopt when absent or not a number.
std::optional<double> entry_number(const StatsEntry& entry, const char* key) {
  const StatValue* v = entry.find(key);
  if (v == nullptr) return std::nullopt;
  if (std::holds_alternative<int64_t>(*v)) return static_cast<double>(std::get<int64_t>(*v));
  if (std::holds_alternative<double>(*v)) return std::get<double>(*v);
  return std::nullopt;
}

}  // namespace

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
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path_, ec))) return;
  std::string text;
  ParsedStats p;
  try {
    text = read_file(path_, stats_read_options());
    p = parse_stats_file(text);
  } catch (const std::system_error& e) {
    p.status = ParsedStats::Status::kMalformed;
    p.message = e.what();
  }
  try {
    if (p.status == ParsedStats::Status::kMalformed) {
      const std::string backup = backup_path(path_, "malformed-");
      move_file(path_, backup, dir_);
      TP_LOG_WARN("{} is not a valid stats file ({}); moved it to {} and starting a new {}.", path_,
                  p.message, backup, FILENAME);
      return;
    }
    if (p.status == ParsedStats::Status::kTruncated) warn_truncated(path_, p);

    bool drop_entries = false;
    if (const auto& resumed = trainer().restored_resume_point()) {
      // Resumed from a checkpoint: its counters are the truth
      // (docs/tensorpack-differences.md #7).
      drop_entries = keep_entries_up_to(p.entries, *resumed);
    } else if (!follows_starting_epoch(p.entries)) {
      const std::string backup = backup_path(path_, "");
      TP_LOG_WARN("Now, we will train with starting_epoch={} and backup old json to {}",
                  trainer().starting_epoch(), backup);
      move_file(path_, backup, dir_);
      return;
    }

    TP_LOG_INFO("Found existing JSON inside {}, will append to it.", dir_);
    stats_ = std::move(p.entries);
    if (p.status == ParsedStats::Status::kValid && text.back() == ']' && !drop_entries) {
      // Appended to as it is: the bytes already there are never touched.
      // O_NOFOLLOW: a symlink put there since the read is not written through.
      fd_ = ::open(path_.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
      if (fd_ < 0) throw_file_error("open", path_, errno);
      close_offset_ = static_cast<int64_t>(text.size()) - 1;
      return;
    }
    // Truncated, followed by white space, or with entries dropped on resume: keep a copy of the
    // file as found, then rewrite it once (temporary file and rename) with the entries kept. The
    // copy is complete before the file is rewritten; when it cannot be made, nothing is changed.
    const char* label = p.status == ParsedStats::Status::kTruncated ? "truncated-"
                        : drop_entries                              ? "before-resume-"
                                                                    : "orig-";
    const std::string backup = backup_path(path_, label);
    write_backup(path_, text, backup, dir_);
    rewrite_all();
    TP_LOG_WARN("Rewrote {} with its {} complete entries; the file as found is kept as {}.", path_,
                stats_.size(), backup);
  } catch (const std::exception& e) {
    // The file could not be set aside, copied or opened: leave it as it is, and write nothing
    // this run rather than risk replacing it.
    close_file();
    stats_.clear();
    disabled_ = true;
    TP_LOG_ERROR(
        "Exception in JSONWriter._write_stat()! {}; {} is left as it is and nothing is "
        "written to it in this training.",
        e.what(), path_);
  }
}

void JSONWriter::_trigger_step() {
  // The last step of an epoch is written together with the epoch's entry.
  if (trainer().local_step() != trainer().steps_per_epoch() - 1) _trigger();
}

void JSONWriter::_trigger_epoch() {
  _trigger();
  sync();
}

void JSONWriter::_trigger() {
  if (stat_now_.empty()) return;
  stat_now_.erase("epoch_num");
  stat_now_.erase("global_step");
  stat_now_.items.emplace_back("epoch_num", StatValue(epoch_num()));
  stat_now_.items.emplace_back("global_step", StatValue(global_step()));
  stats_.push_back(std::move(stat_now_));
  stat_now_ = StatsEntry();
  write_stat();
}

void JSONWriter::_after_train() {
  // Nothing is written here (tensorpack's behaviour); what was written reaches the disk.
  sync();
  close_file();
}

void JSONWriter::write_stat() {
  if (disabled_) return;
  try {
    if (fd_ < 0 || need_rewrite_) {
      rewrite_all();
      return;
    }
    // Overwrite the closing ']' with `, {entry}]` in one write: the file is valid JSON again as
    // soon as the write completes, and the bytes before the ']' are never touched.
    std::string tail = stats_.size() > 1 ? ", " : "";
    tail += format_stats_entry(stats_.back());
    tail += ']';
    dirty_ = true;
    pwrite_all(fd_, tail, close_offset_, path_);
    close_offset_ += static_cast<int64_t>(tail.size()) - 1;
  } catch (const std::exception& e) {
    TP_LOG_ERROR("Exception in JSONWriter._write_stat()! {}", e.what());
    trainer().report_write_failure(name(), path_, e.what());
    close_file();
    need_rewrite_ = true;
  }
}

void JSONWriter::rewrite_all() {
  close_file();
  const std::string text = format_stats_file(stats_);
  write_file_atomically(path_, text);
  fd_ = ::open(path_.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd_ < 0) throw_file_error("open", path_, errno);
  close_offset_ = static_cast<int64_t>(text.size()) - 1;
  need_rewrite_ = false;
}

void JSONWriter::sync() {
  if (fd_ < 0 || !dirty_) return;
  if (::fdatasync(fd_) != 0) {
    const std::string error = fmt::format("cannot fdatasync {}: {}", path_, std::strerror(errno));
    TP_LOG_ERROR("Exception in JSONWriter._write_stat()! {}", error);
    if (is_set_up()) trainer().report_write_failure(name(), path_, error);
    return;
  }
  dirty_ = false;
}

void JSONWriter::close_file() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  dirty_ = false;
}

}  // namespace trainpack
