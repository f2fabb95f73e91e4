// Durable file replacement: write to a temporary name in the same directory, fsync, rename over
// the final name, fsync the directory. Every file trainpack replaces goes through here. A crash at
// any moment leaves either the old content or the new one under the final name, never a mix.
// Files that belong together are written with one AtomicFileWriter each and renamed only once all
// are written, so that a failed write replaces none. The temporary file is a new file,
// `<name>.tmp.<pid>.<n>` (O_CREAT|O_EXCL|O_NOFOLLOW): nothing already in the directory is written
// through, truncated or removed. More, with an example: docs/architecture.md, "Replacing a file".
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace trainpack {

// Removes from `dir` the regular files named `<name>.tmp.<pid>.<n>` whose process `pid` no longer
// runs, and returns their names; links, other files, and those of running processes are left
// alone. Call it only on a directory this process owns (logger::set_logger_dir does).
std::vector<std::string> remove_stale_temporary_files(const std::string& dir);

// Replaces `path` with `data`: a new temporary file in the same directory, written completely,
// fsynced (when `durable`), renamed to `path`, then the directory fsynced (when `durable`). Throws
// std::runtime_error naming the file and the system's reason ("No space left on device", "File
// too large", "Permission denied"); the temporary file is removed and `path` is left as it was.
void write_file_atomically(const std::string& path, std::string_view data, bool durable = true);

// Replaces `path` with `data` as write_file_atomically does, through a long-lived swap file
// (`swap_path`, same directory): `data` is written into it in place, the two names are exchanged
// (renameat2 RENAME_EXCHANGE), with fsyncs when `durable`; the swap file then holds the previous
// content. For a small file replaced often (the `checkpoint` index). A crash leaves
// `path` old or new (the swap file maybe partly written). Falls back to write_file_atomically
// when `path` is missing or not a plain file, or the swap file is not a plain file of its own.
// Errors: std::runtime_error naming the file and the system's reason; `path` is left as it was.
void replace_file_by_swap(const std::string& path, const std::string& swap_path,
                          std::string_view data, bool durable = true);

// fsyncs a directory, so that renames and unlinks in it survive a crash. Throws
// std::runtime_error naming the directory.
void fsync_directory(const std::string& dir);

// The directory part of `path` ("." when it has none).
std::string parent_directory(const std::string& path);

// One file being replaced, in steps: the constructor creates the temporary file
// `<path>.tmp.<pid>.<n>` (a new file: a name already taken is skipped), write() appends to it,
// finish() fsyncs (when `durable`) and closes it, commit() renames it over `path`. The directory is
// not fsynced here (the caller does it once for all files, with fsync_directory). Destroying a
// writer that was not committed removes the temporary file, so an exception anywhere leaves `path`
// as it was and no temporary file behind. Every step throws std::runtime_error naming the file and
// the system's reason; after an error the writer can only be destroyed.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path, bool durable = true);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(std::string_view data);
  void write(const void* data, size_t size) {
    write(std::string_view(static_cast<const char*>(data), size));
  }
  // fsync (when durable) and close; call after the last write().
  void finish();
  // Renames the temporary file to `path` (finish() first if it was not called).
  void commit();
  // The same for a new file: gives the temporary file the name `path` only when no file has it
  // (renameat2 with RENAME_NOREPLACE, or link() where the filesystem lacks it); when one has,
  // throws "cannot rename <tmp> to <path>: File exists" and the existing file is left as it is.
  void commit_as_new();

  const std::string& path() const { return path_; }
  const std::string& temporary_path() const { return tmp_; }

 private:
  void discard() noexcept;

  std::string path_;
  std::string tmp_;
  bool durable_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace trainpack
