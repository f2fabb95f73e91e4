// Reading and writing whole buffers with POSIX calls: the loops that retry a call interrupted by
// a signal (EINTR) and continue after a short transfer, written once for every file trainpack
// reads or writes (checkpoints, stats.json, event files, the atomic file replacement).
//
// Only regular files are read whole: read_file opens without blocking (a FIFO named like a
// checkpoint never hangs the job), then refuses anything but a regular file, and a file larger
// than the caller's limit, before reading a byte (a link to /dev/zero is not read until memory
// runs out).
//
// Errors: std::system_error carrying the errno (std::generic_category()), whose what() is
// "cannot <action> <path>: <the system's reason>" ("cannot open /logs/stats.json: No such file or
// directory"); a file refused before reading is a FileRefusedError. Both are std::runtime_errors.
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
  // The largest file read, in bytes (also for a file that grows while being read); by default
  // the file's own size.
  uint64_t max_bytes = std::numeric_limits<uint64_t>::max();
  // What the file is, for the message about the limit ("... limit for a checkpoint index").
  std::string kind = "file";
  // Whether a symbolic link as the last part of the path is followed; when not, it is refused
  // as "not a regular file (a symbolic link)".
  bool follow_symlinks = true;
  // Whether only a file owned by the process's effective user is read (for a log directory that
  // others may write: a checkpoint planted there is not the job's own).
  bool owner_only = false;
};

// A file refused by read_file before it was read: not a regular file (errno EINVAL in code()),
// owned by another user when owner_only (EPERM), or larger than the limit (EFBIG). what() is
// "<path> <reason>", reason() the part after the path ("is not a regular file (a FIFO)").
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

// Writes all of `data` to `fd` at its current offset, retrying after EINTR and short writes, and
// returns the bytes written: fewer than data.size() when a write failed, with `*err` its errno
// (EIO for no progress; 0 on success). For callers that report a failure instead of throwing.
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

// The bytes of the regular file `path`, opened with O_NONBLOCK (a FIFO does not block) and
// checked with fstat before anything is read. Throws "cannot open <path>: ..." or "cannot read
// <path>: ...", and FileRefusedError for another kind of file or one over `options.max_bytes`.
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
