// Reading and writing whole buffers with POSIX calls: the loops that retry a call interrupted by
// a signal (EINTR) and continue after a short transfer, written once for every file trainpack
// reads or writes (checkpoints, stats.json, event files, the atomic file replacement).
//
//   const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
//   trainpack::write_all(fd, text, path);            // throws on a failed write
//   std::string text = trainpack::read_file(path);    // the whole file
//
// Only regular files are read whole: read_file opens without blocking (a FIFO named like a
// checkpoint never hangs the job), then refuses anything but a regular file, and a file larger
// than the caller's limit, before reading a byte (a link to /dev/zero is not read until memory
// runs out).
//
//   ReadFileOptions opts;
//   opts.max_bytes = 1 << 20;
//   opts.kind = "checkpoint index";
//   std::string index = trainpack::read_file("/logs/checkpoint", opts);
//
// Errors: std::system_error carrying the errno (std::generic_category()), whose what() is
// "cannot <action> <path>: <the system's reason>", e.g. "cannot write /logs/model-6.data.tmp:
// File too large" or "cannot open /logs/stats.json: No such file or directory"; a file refused
// before reading is a FileRefusedError ("/logs/checkpoint is not a regular file (a FIFO)"). Both
// are std::runtime_errors, so callers that catch those see them too.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace trainpack {

// What read_file accepts.
struct ReadFileOptions {
  // The largest file read, in bytes: a larger one is refused before it is read, and a file that
  // grows past it while being read is refused too. The default: the file's own size, whatever it
  // is (a regular file is finite).
  uint64_t max_bytes = std::numeric_limits<uint64_t>::max();
  // What the file is, for the message about the limit ("... limit for a checkpoint index").
  std::string kind = "file";
  // Whether a symbolic link as the last part of the path is followed; when not, it is refused
  // as "not a regular file (a symbolic link)".
  bool follow_symlinks = true;
  // Whether only a file owned by the process's effective user is read; another's is refused as
  // "is owned by user 1001, not by this process's user 0 ...". For the files a job finds in a
  // log directory that others may write (a checkpoint planted there is not the job's own).
  bool owner_only = false;
};

// A file refused by read_file before it was read: not a regular file (errno EINVAL in code()),
// owned by another user when owner_only (EPERM), or larger than the limit (EFBIG). what() is "<path> <reason>", reason() the part after the
// path ("is not a regular file (a FIFO)", "is 5000 bytes, more than the 1000-byte limit for a
// stats file").
class FileRefusedError : public std::system_error {
 public:
  FileRefusedError(int err, const std::string& path, const std::string& reason);
  const char* what() const noexcept override { return what_->c_str(); }
  const std::string& reason() const noexcept { return *reason_; }

 private:
  // Shared: copying an exception must not throw.
  std::shared_ptr<const std::string> what_, reason_;
};

// "a FIFO", "a character device", "a directory", ... for a file type of st_mode (S_IFMT bits).
std::string file_type_name(mode_t mode);

// Throws the std::system_error described above: `action` is a verb ("write", "open directory").
[[noreturn]] void throw_file_error(std::string_view action, const std::string& path, int err);

// Writes all of `data` to `fd` at its current offset, retrying after EINTR and short writes.
// Returns the number of bytes written: data.size(), or fewer when a write failed, in which case
// `*err` is its errno (EIO for a write that made no progress); `*err` is 0 on success. For
// callers that report a failure instead of throwing (a writer thread logs it).
size_t write_all_or_errno(int fd, std::string_view data, int* err) noexcept;

// Writes all of `data` to `fd` at its current offset. Throws "cannot write <path>: ...".
void write_all(int fd, std::string_view data, const std::string& path);

// Writes all of `data` at `offset` of `fd` (pwrite; the file offset is unchanged). Throws
// "cannot write <path>: ...".
void pwrite_all(int fd, std::string_view data, int64_t offset, const std::string& path);

// One read() of at most `size` bytes, retried while it is interrupted (EINTR): the number of bytes
// read, 0 at the end of the file, -1 with errno set on another error.
ssize_t read_some(int fd, void* buf, size_t size) noexcept;

// Appends everything from the current offset of `fd` to its end to `out` (reserving the file's
// size first when it is a regular file). Throws "cannot read <path>: ...". No check of the kind
// or size of the file: read_file makes them.
void read_all(int fd, std::string* out, const std::string& path);
void read_all(int fd, std::vector<char>* out, const std::string& path);

// The bytes of the regular file `path`, as a std::string or a std::vector<char>. It is opened
// with O_NONBLOCK, so that a FIFO does not block, and checked with fstat before anything is
// read. Throws "cannot open <path>: ..." or "cannot read <path>: ..." (a directory: "cannot read
// <path>: Is a directory"), and FileRefusedError for another kind of file or one larger than
// `options.max_bytes`.
template <class Bytes = std::string>
Bytes read_file(const std::string& path, const ReadFileOptions& options = {});

// The same, but nullopt when the file does not exist (open fails with ENOENT); other errors throw.
template <class Bytes = std::string>
std::optional<Bytes> read_file_if_exists(const std::string& path,
                                         const ReadFileOptions& options = {});

extern template std::string read_file<std::string>(const std::string&, const ReadFileOptions&);
extern template std::vector<char> read_file<std::vector<char>>(const std::string&,
                                                               const ReadFileOptions&);
extern template std::optional<std::string> read_file_if_exists<std::string>(const std::string&,
                                                                            const ReadFileOptions&);
extern template std::optional<std::vector<char>> read_file_if_exists<std::vector<char>>(
    const std::string&, const ReadFileOptions&);

}  // namespace trainpack
