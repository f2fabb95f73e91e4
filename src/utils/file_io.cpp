// The read and write loops of trainpack/utils/file_io.h.
#include "trainpack/utils/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
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

template <class Bytes>
std::optional<Bytes> read_file_impl(const std::string& path, bool missing_is_nullopt) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (missing_is_nullopt && errno == ENOENT) return std::nullopt;
    throw_file_error("open", path, errno);
  }
  FdCloser closer{fd};
  Bytes data;
  read_all_into(fd, &data, path);
  return data;
}

}  // namespace

void throw_file_error(std::string_view action, const std::string& path, int err) {
  std::string what = "cannot ";
  what += action;
  what += ' ';
  what += path;
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
Bytes read_file(const std::string& path) {
  return *read_file_impl<Bytes>(path, false);
}

template <class Bytes>
std::optional<Bytes> read_file_if_exists(const std::string& path) {
  return read_file_impl<Bytes>(path, true);
}

template std::string read_file<std::string>(const std::string&);
template std::vector<char> read_file<std::vector<char>>(const std::string&);
template std::optional<std::string> read_file_if_exists<std::string>(const std::string&);
template std::optional<std::vector<char>> read_file_if_exists<std::vector<char>>(
    const std::string&);

}  // namespace trainpack
