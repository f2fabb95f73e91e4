// Reading and writing whole buffers with POSIX calls: the loops that retry a call interrupted by
// a signal (EINTR) and continue after a short transfer, written once for every file trainpack
// reads or writes (checkpoints, stats.json, event files, the atomic file replacement).
//
//   const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
//   trainpack::write_all(fd, text, path);            // throws on a failed write
//   std::string text = trainpack::read_file(path);    // the whole file
//
// Errors: std::system_error carrying the errno (std::generic_category()), whose what() is
// "cannot <action> <path>: <the system's reason>", e.g. "cannot write /logs/model-6.data.tmp:
// File too large" or "cannot open /logs/stats.json: No such file or directory". It is a
// std::runtime_error, so callers that catch those see it too.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainpack {

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
// size first when it is a regular file). Throws "cannot read <path>: ...".
void read_all(int fd, std::string* out, const std::string& path);
void read_all(int fd, std::vector<char>* out, const std::string& path);

// The bytes of the file `path`, as a std::string or a std::vector<char>. Throws "cannot open
// <path>: ..." or "cannot read <path>: ...".
template <class Bytes = std::string>
Bytes read_file(const std::string& path);

// The same, but nullopt when the file does not exist (open fails with ENOENT); other errors throw.
template <class Bytes = std::string>
std::optional<Bytes> read_file_if_exists(const std::string& path);

extern template std::string read_file<std::string>(const std::string&);
extern template std::vector<char> read_file<std::vector<char>>(const std::string&);
extern template std::optional<std::string> read_file_if_exists<std::string>(const std::string&);
extern template std::optional<std::vector<char>> read_file_if_exists<std::vector<char>>(
    const std::string&);

}  // namespace trainpack
