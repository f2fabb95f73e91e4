// Durable file replacement (trainpack/utils/atomic_file.h) with POSIX calls: open, write, fsync,
// rename, and Linux's renameat2 for the swap. Written by hand: neither the C++ library nor the
// Debian packages the project uses offer an fsyncing atomic replace.
#include "trainpack/utils/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>  // renameat2, RENAME_EXCHANGE (glibc >= 2.28, _GNU_SOURCE)

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainpack/utils/file_io.h"

namespace trainpack {

std::string parent_directory(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_file_error("open directory", dir, errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw_file_error("fsync directory", dir, err);
}

namespace {

// Numbers the temporary files of this process: with the process id, a name no other writer of
// this process or of another one uses at the same time.
std::atomic<uint64_t> g_temporary_files{0};

// The most names tried before giving up: each one taken is a file someone else put there.
constexpr int kMaxNameAttempts = 100;

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path, bool durable)
    : path_(std::move(path)), durable_(durable) {
  if (path_.empty()) throw std::invalid_argument("AtomicFileWriter: the path is empty");
  // A new file under a name of its own: O_EXCL fails on any existing name (O_NOFOLLOW makes it
  // explicit that a symlink there is not followed), so a file or link planted at a temporary
  // name, or a leftover of a crashed run, is never written through or truncated.
  const std::string base = path_ + ".tmp." + std::to_string(::getpid()) + ".";
  for (int attempt = 0;; ++attempt) {
    tmp_ = base + std::to_string(g_temporary_files.fetch_add(1));
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd_ >= 0) return;
    if (errno != EEXIST || attempt + 1 == kMaxNameAttempts) throw_file_error("create", tmp_, errno);
  }
}

AtomicFileWriter::~AtomicFileWriter() {
  if (!committed_) discard();
}

void AtomicFileWriter::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
}

void AtomicFileWriter::write(std::string_view data) {
  if (fd_ < 0) throw std::logic_error("AtomicFileWriter::write after finish: " + tmp_);
  write_all(fd_, data, tmp_);
}

void AtomicFileWriter::finish() {
  if (fd_ < 0) return;
  if (durable_ && ::fsync(fd_) != 0) throw_file_error("fsync", tmp_, errno);
  const int rc = ::close(fd_);
  fd_ = -1;
  // close() can report a deferred write error (e.g. on NFS); the descriptor is gone either way.
  if (rc != 0 && errno != EINTR) throw_file_error("close", tmp_, errno);
}

void AtomicFileWriter::commit() {
  if (committed_) return;
  finish();
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    throw std::runtime_error("cannot rename " + tmp_ + " to " + path_ + ": " + std::strerror(err));
  }
  committed_ = true;
}

void AtomicFileWriter::commit_as_new() {
  if (committed_) return;
  finish();
  if (::renameat2(AT_FDCWD, tmp_.c_str(), AT_FDCWD, path_.c_str(), RENAME_NOREPLACE) != 0) {
    int err = errno;
    if (err == EINVAL || err == ENOSYS || err == ENOTSUP) {
      // A filesystem without RENAME_NOREPLACE: link() never replaces an existing name either;
      // the temporary name is then removed by discard() below.
      err = ::link(tmp_.c_str(), path_.c_str()) == 0 ? 0 : errno;
      if (err == 0) {
        discard();
        committed_ = true;
        return;
      }
    }
    throw std::runtime_error("cannot rename " + tmp_ + " to " + path_ + ": " + std::strerror(err));
  }
  committed_ = true;
}

void write_file_atomically(const std::string& path, std::string_view data, bool durable) {
  AtomicFileWriter file(path, durable);
  file.write(data);
  file.commit();
  if (durable) fsync_directory(parent_directory(path));
}

namespace {

// Writes all of `data` at offset 0 of `fd` and cuts the file there.
void overwrite(int fd, std::string_view data, const std::string& path) {
  pwrite_all(fd, data, 0, path);
  if (::ftruncate(fd, static_cast<off_t>(data.size())) != 0)
    throw_file_error("truncate", path, errno);
}

}  // namespace

void replace_file_by_swap(const std::string& path, const std::string& swap_path,
                          std::string_view data, bool durable) {
  if (path.empty() || swap_path.empty() || path == swap_path) {
    throw std::invalid_argument("replace_file_by_swap: bad paths '" + path + "', '" + swap_path +
                                "'");
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    write_file_atomically(path, data, durable);  // nothing to swap with yet
    return;
  }
  // The swap file: reused when it is a plain file of its own, else created; O_NOFOLLOW: a
  // symlink is not followed.
  // symlink is not followed; O_NONBLOCK: a FIFO there does not block the open (it is then
  // refused as not a plain file, or fails with ENXIO when no one reads it).
  int fd = ::open(swap_path.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd >= 0 && (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1)) {
    ::close(fd);
    write_file_atomically(path, data, durable);  // not ours to write into
    return;
  }
  if (fd < 0) {
    if (errno != ENOENT) {
      write_file_atomically(path, data, durable);  // a symlink, a directory, no permission
      return;
    }
    // O_EXCL: a file or link that appeared since is not written through.
    fd = ::open(swap_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) throw_file_error("create", swap_path, errno);
  }
  try {
    overwrite(fd, data, swap_path);
    if (durable && ::fsync(fd) != 0) throw_file_error("fsync", swap_path, errno);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0 && errno != EINTR) throw_file_error("close", swap_path, errno);
  if (::renameat2(AT_FDCWD, swap_path.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE) != 0) {
    const int err = errno;
    // A filesystem (or kernel) without RENAME_EXCHANGE: the swap file, complete and synced, is
    // renamed over `path` as a temporary file would be.
    if (err != EINVAL && err != ENOSYS && err != ENOTSUP) {
      throw std::runtime_error("cannot exchange " + swap_path + " and " + path + ": " +
                               std::strerror(err));
    }
    if (::rename(swap_path.c_str(), path.c_str()) != 0) {
      const int e = errno;
      throw std::runtime_error("cannot rename " + swap_path + " to " + path + ": " +
                               std::strerror(e));
    }
  }
  if (durable) fsync_directory(parent_directory(path));
}

std::vector<std::string> remove_stale_temporary_files(const std::string& dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) return removed;
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (ec) break;
    const std::string name = it->path().filename().string();
    // <name>.tmp.<pid>.<n>: the last two dot-separated parts are numbers, ".tmp" before them.
    const size_t last_dot = name.rfind('.');
    if (last_dot == std::string::npos || last_dot == 0) continue;
    const size_t pid_dot = name.rfind('.', last_dot - 1);
    if (pid_dot == std::string::npos || pid_dot < 4 || name.compare(pid_dot - 4, 4, ".tmp") != 0) {
      continue;
    }
    const std::string pid_text = name.substr(pid_dot + 1, last_dot - pid_dot - 1);
    const std::string n_text = name.substr(last_dot + 1);
    const auto digits = [](const std::string& t) {
      return !t.empty() && t.size() <= 10 && t.find_first_not_of("0123456789") == std::string::npos;
    };
    if (!digits(pid_text) || !digits(n_text)) continue;
    const long pid = std::stol(pid_text);
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // still running
    struct stat st {};
    const std::string path = it->path().string();
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (::unlink(path.c_str()) == 0) removed.push_back(name);
  }
  return removed;
}

}  // namespace trainpack
