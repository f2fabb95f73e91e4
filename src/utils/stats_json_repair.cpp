// Reading, setting aside, restoring and rewriting a stats file found at start
// (trainpack/utils/stats_json_repair.h).
#include "trainpack/utils/stats_json_repair.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <filesystem>
#include <stdexcept>
#include <system_error>

#include "trainpack/utils/atomic_file.h"
#include "trainpack/utils/file_io.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/stats_file_writer.h"

namespace trainpack {

namespace fs = std::filesystem;

namespace {

std::string backup_timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%m%d-%H%M%S", &tm);
  return buf;
}

}  // namespace

std::string stats_backup_path(const std::string& path, const std::string& label) {
  const std::string base = path + "." + label + backup_timestamp();
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
namespace {

void write_backup(const std::string& from, const std::string& data, const std::string& to,
                  const std::string& dir) {
  // A second name for the file as found: nothing is copied, so the backup is exactly the file
  // (a sparse one stays sparse) and costs no space; link() never replaces a name that is taken.
  // Where the file system has no hard links, the bytes read are copied.
  if (::link(from.c_str(), to.c_str()) == 0) {
    fsync_directory(dir);
    return;
  }
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

// stats.json as found, without the NUL bytes at its end, and the file's size. A power loss can
// leave a file extended by NUL bytes (or by a hole, on a file system that makes one), and a
// tool can pad one: the text is read only up to its last byte that is not NUL, found from the
// end (holes are skipped with SEEK_DATA/SEEK_HOLE without reading them), so a file padded with
// gigabytes of NULs is neither refused as too large nor read whole. The 1 GiB limit applies to
// the text.
}  // namespace

std::string read_stats_text(const std::string& path, uint64_t* file_size) {
  const ReadFileOptions options = stats_read_options();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW);
  if (fd < 0) {
    const int err = errno;
    struct stat lst {};
    if (err == ELOOP && ::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
      throw FileRefusedError(EINVAL, path, "is not a regular file (a symbolic link)");
    }
    throw_file_error("open", path, err);
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw_file_error("stat", path, errno);
  if (!S_ISREG(st.st_mode)) {
    throw FileRefusedError(EINVAL, path,
                           "is not a regular file (" + file_type_name(st.st_mode) + ")");
  }
  *file_size = static_cast<uint64_t>(st.st_size);
  // The end of the last data region (the file's size where SEEK_DATA is not supported).
  off_t end = st.st_size;
  {
    off_t at = 0, data_end = 0;
    bool supported = true;
    while (at < st.st_size) {
      const off_t data = ::lseek(fd, at, SEEK_DATA);
      if (data < 0) {
        supported = errno == ENXIO;  // no data after `at`
        break;
      }
      const off_t hole = ::lseek(fd, data, SEEK_HOLE);
      if (hole < 0) {
        supported = false;
        break;
      }
      data_end = hole;
      at = hole;
    }
    if (supported) end = std::min<off_t>(end, data_end);
  }
  // Back over NUL bytes written as data, a chunk at a time.
  constexpr off_t kChunk = 64 * 1024;
  std::string chunk;
  while (end > 0) {
    const off_t from = std::max<off_t>(0, end - kChunk);
    chunk.resize(static_cast<size_t>(end - from));
    size_t got = 0;
    while (got < chunk.size()) {
      const ssize_t n =
          ::pread(fd, chunk.data() + got, chunk.size() - got, from + static_cast<off_t>(got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw_file_error("read", path, errno);
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    chunk.resize(got);
    const size_t last = chunk.find_last_not_of('\0');
    if (last != std::string::npos) {
      end = from + static_cast<off_t>(last) + 1;
      break;
    }
    end = from;
  }
  if (static_cast<uint64_t>(end) > options.max_bytes) {
    throw FileRefusedError(EFBIG, path,
                           fmt::format("holds {} bytes of text, more than the {}-byte limit for a "
                                       "stats file",
                                       static_cast<long long>(end), options.max_bytes));
  }
  std::string text(static_cast<size_t>(end), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::pread(fd, text.data() + got, text.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_file_error("read", path, errno);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  return text;
}

void move_stats_file(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw_file_error("rename " + from + " to", to, errno);
  fsync_directory(parent_directory(to));
}

void warn_truncated_stats(const std::string& path, const ParsedStats& p) {
  TP_LOG_WARN(
      "{} is truncated (an append was cut short): kept its {} complete entries, ignored the last "
      "{} bytes.",
      path, p.entries.size(), p.bytes_ignored);
}

FoundStatsFile read_found_stats_file(const std::string& path) {
  FoundStatsFile found;
  try {
    found.text = read_stats_text(path, &found.file_size);
    found.parsed = parse_stats_file(found.text);
  } catch (const std::system_error& e) {
    found.parsed.status = ParsedStats::Status::kMalformed;
    found.parsed.message = e.what();
  }
  return found;
}

namespace {

// The complete entries of the stats file at `path`, or -1 when it is unreadable or malformed;
// `why` says which (for a log line).
int64_t count_stats_entries(const std::string& path, std::string* why) {
  try {
    uint64_t file_size = 0;
    const ParsedStats p = parse_stats_file(read_stats_text(path, &file_size));
    if (p.status == ParsedStats::Status::kMalformed) {
      *why = fmt::format("not a valid stats file ({})", p.message);
      return -1;
    }
    *why = fmt::format("holds {} complete entries", p.entries.size());
    return static_cast<int64_t>(p.entries.size());
  } catch (const std::exception& e) {
    *why = fmt::format("not readable ({})", e.what());
    return -1;
  }
}

// Syncs the file at `path` to the disk (not following a symlink); false if it cannot.
bool sync_stats_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return false;
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

void recover_synced_stats_copy(const std::string& path) {
  // A run that did not end (a crash, a kill, a power loss) leaves the second name of its last
  // synced version. After a power loss the file can be older than that version, or empty. A
  // power loss does not remove the file: when it is missing, someone removed it, and the copy
  // goes with it.
  const std::string synced = StatsFileWriter::synced_copy_path(path);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(synced, ec))) return;
  const bool found = fs::exists(fs::symlink_status(path, ec));
  std::string synced_why, found_why;
  const int64_t in_synced = found ? count_stats_entries(synced, &synced_why) : -1;
  const int64_t in_found = found ? count_stats_entries(path, &found_why) : -1;
  if (in_synced > in_found) {
    const std::string kept = stats_backup_path(path, "incomplete-");
    move_stats_file(path, kept);
    move_stats_file(synced, path);
    TP_LOG_WARN(
        "{} {} after the run that wrote it was cut off; restored the copy synced at its last "
        "epoch end, which holds {} entries (the file as found is kept as {}).",
        path, in_found < 0 ? "is " + found_why : found_why, in_synced, kept);
    return;
  }
  // The file holds every entry of the copy: once it is on the disk, the copy is not needed.
  if (in_found >= 0 && !sync_stats_file(path)) return;
  if (::unlink(synced.c_str()) == 0) fsync_directory(parent_directory(path));
}

void set_aside_malformed_stats(const std::string& path, const ParsedStats& parsed) {
  const std::string backup = stats_backup_path(path, "malformed-");
  move_stats_file(path, backup);
  TP_LOG_WARN("{} is not a valid stats file ({}); moved it to {} and starting a new {}.", path,
              parsed.message, backup, fs::path(path).filename().string());
}

std::string rewrite_stats_file(const std::string& path, const FoundStatsFile& found,
                               const std::vector<StatsEntry>& entries, const std::string& label) {
  // The copy is complete before the file is rewritten; when it cannot be made, nothing changes.
  const std::string backup = stats_backup_path(path, label);
  write_backup(path, found.text, backup, parent_directory(path));
  std::string text = format_stats_file(entries);
  write_file_atomically(path, text);
  TP_LOG_WARN("Rewrote {} with its {} complete entries; the file as found is kept as {}.", path,
              entries.size(), backup);
  return text;
}

}  // namespace trainpack
