// The read and write loops of trainpack/utils/file_io.h, and the checks made before a file is read.
#include "trainpack/utils/file_io.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <string>
#include <system_error>

namespace trainpack {
namespace {

// One call moves at most this much: well inside ssize_t, and Linux moves at most 0x7ffff000
// bytes per call anyway.
constexpr size_t kMaxChunk = size_t{1} << 30;

// Closes `fd` on scope exit, keeping errno (the caller may still be reading it).
struct FdCloser {
  int fd;
  ~FdCloser() {
    const int saved = errno;
    ::close(fd);
    errno = saved;
  }
};

std::string too_large_reason(uint64_t size, const ReadFileOptions& options) {
  return "is " + std::to_string(size) + " bytes, more than the " +
         std::to_string(options.max_bytes) + "-byte limit for a " + options.kind;
}

template <class Bytes>
void read_all_into(int fd, Bytes* out, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    out->reserve(out->size() + static_cast<size_t>(st.st_size));
  }
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = read_some(fd, buf, sizeof buf);
    if (n < 0) throw_file_error("read", path, errno);
    if (n == 0) return;
    out->insert(out->end(), buf, buf + n);
  }
}

// Opens `path` for reading without blocking and checks what it is before anything is read: a
// regular file no larger than the limit. -1 with errno ENOENT when it does not exist and
// `missing_ok`; every other failure throws.
int open_regular_file(const std::string& path, const ReadFileOptions& options, bool missing_ok,
                      uint64_t* size) {
  // O_NONBLOCK: opening a FIFO (or a device) would otherwise wait for a writer, with no timeout
  // and no way for a signal handler's flag to be looked at. A regular file ignores the flag.
  int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
  if (!options.follow_symlinks) flags |= O_NOFOLLOW;
  const int fd = ::open(path.c_str(), flags);
  if (fd < 0) {
    const int err = errno;
    if (missing_ok && err == ENOENT) return -1;
    struct stat lst {};
    if (err == ELOOP && !options.follow_symlinks && ::lstat(path.c_str(), &lst) == 0 &&
        S_ISLNK(lst.st_mode)) {
      throw FileRefusedError(EINVAL, path, "is not a regular file (a symbolic link)");
    }
    throw_file_error("open", path, err);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw_file_error("stat", path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    // The message read() gives for a directory, as before this check.
    if (S_ISDIR(st.st_mode)) throw_file_error("read", path, EISDIR);
    throw FileRefusedError(EINVAL, path,
                           "is not a regular file (" + file_type_name(st.st_mode) + ")");
  }
  if (options.owner_only && st.st_uid != ::geteuid()) {
    ::close(fd);
    throw FileRefusedError(
        EPERM, path,
        fmt::format("is owned by user {}, not by this process's user {} (a file another user put "
                    "in the directory is not read; move it away, or name it explicitly)",
                    st.st_uid, ::geteuid()));
  }
  *size = static_cast<uint64_t>(st.st_size);
  if (*size > options.max_bytes) {
    ::close(fd);
    throw FileRefusedError(EFBIG, path, too_large_reason(*size, options));
  }
  return fd;
}

template <class Bytes>
std::optional<Bytes> read_file_impl(const std::string& path, const ReadFileOptions& options,
                                    bool missing_is_nullopt) {
  uint64_t size = 0;
  const int fd = open_regular_file(path, options, missing_is_nullopt, &size);
  if (fd < 0) return std::nullopt;
  FdCloser closer{fd};
  Bytes data;
  data.reserve(static_cast<size_t>(size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = read_some(fd, buf, sizeof buf);
    if (n < 0) throw_file_error("read", path, errno);
    if (n == 0) break;
    // A file that grows while it is read (another process appending) stops at the limit too.
    if (data.size() + static_cast<size_t>(n) > options.max_bytes) {
      throw FileRefusedError(EFBIG, path,
                             too_large_reason(data.size() + static_cast<uint64_t>(n), options) +
                                 " (it grew while being read)");
    }
    data.insert(data.end(), buf, buf + n);
  }
  return data;
}

}  // namespace

FileRefusedError::FileRefusedError(int err, const std::string& path, const std::string& reason)
    : std::system_error(err, std::generic_category(), path + " " + reason),
      what_(std::make_shared<const std::string>(path + " " + reason)),
      reason_(std::make_shared<const std::string>(reason)) {}

std::string file_type_name(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "a regular file";
    case S_IFDIR:
      return "a directory";
    case S_IFIFO:
      return "a FIFO";
    case S_IFCHR:
      return "a character device";
    case S_IFBLK:
      return "a block device";
    case S_IFSOCK:
      return "a socket";
    case S_IFLNK:
      return "a symbolic link";
    default:
      return "a file of unknown type";
  }
}

void throw_file_error(std::string_view action, const std::string& path, int err) {
  std::string what = "cannot ";
  what += action;
  what += ' ';
  what += path;
  if (err == EFBIG) {
    // Past the process's file-size limit (SIGXFSZ is ignored: process_io.h), or the file system's
    // largest file: say which, since the fix differs.
    struct rlimit limit {};
    if (::getrlimit(RLIMIT_FSIZE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
      what += fmt::format(
          " (EFBIG: this process may not write files larger than {} bytes, its file-size limit "
          "`ulimit -f`; raise the limit or free the run from it)",
          static_cast<unsigned long long>(limit.rlim_cur));
    } else {
      what += " (EFBIG: larger than the file system allows)";
    }
  }
  throw std::system_error(err, std::generic_category(), what);
}

size_t write_all_or_errno(int fd, std::string_view data, int* err) noexcept {
  size_t done = 0;
  *err = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, std::min(data.size() - done, kMaxChunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *err = n < 0 ? errno : EIO;
      break;
    }
    done += static_cast<size_t>(n);
  }
  return done;
}

void write_all(int fd, std::string_view data, const std::string& path) {
  int err = 0;
  write_all_or_errno(fd, data, &err);
  if (err != 0) throw_file_error("write", path, err);
}

void pwrite_all(int fd, std::string_view data, int64_t offset, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::pwrite(fd, data.data() + done, std::min(data.size() - done, kMaxChunk),
                               static_cast<off_t>(offset + static_cast<int64_t>(done)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw_file_error("write", path, n < 0 ? errno : EIO);
    done += static_cast<size_t>(n);
  }
}

ssize_t read_some(int fd, void* buf, size_t size) noexcept {
  for (;;) {
    const ssize_t n = ::read(fd, buf, std::min(size, kMaxChunk));
    if (n >= 0 || errno != EINTR) return n;
  }
}

void read_all(int fd, std::string* out, const std::string& path) { read_all_into(fd, out, path); }

void read_all(int fd, std::vector<char>* out, const std::string& path) {
  read_all_into(fd, out, path);
}

template <class Bytes>
Bytes read_file(const std::string& path, const ReadFileOptions& options) {
  return *read_file_impl<Bytes>(path, options, false);
}

template <class Bytes>
std::optional<Bytes> read_file_if_exists(const std::string& path, const ReadFileOptions& options) {
  return read_file_impl<Bytes>(path, options, true);
}

template std::string read_file<std::string>(const std::string&, const ReadFileOptions&);
template std::vector<char> read_file<std::vector<char>>(const std::string&, const ReadFileOptions&);
template std::optional<std::string> read_file_if_exists<std::string>(const std::string&,
                                                                     const ReadFileOptions&);
template std::optional<std::vector<char>> read_file_if_exists<std::vector<char>>(
    const std::string&, const ReadFileOptions&);

}  // namespace trainpack
