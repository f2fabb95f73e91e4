// Durable file replacement: write to a temporary name in the same directory, fsync, rename over
// the final name, fsync the directory. Every file trainpack replaces goes through here. A crash at
// any moment leaves either the old content or the new one under the final name, never a mix.
//
//   trainpack::write_file_atomically("/logs/checkpoint", text);
//
// Several files that belong together (say a data file and its index) are written with one
// AtomicFileWriter each: every temporary file is written completely first, and only then are
// they renamed in turn, so that a failed write (disk full, a file-size limit) replaces nothing.
//
//   AtomicFileWriter data(prefix + ".data"), index(prefix + ".index");  // illustration
//   data.write(bytes); data.finish();
//   index.write(text); index.finish();
//   data.commit(); index.commit();
//   fsync_directory(parent_directory(prefix));
//
// The temporary file is a new file under a name of its own, `<name>.tmp.<pid>.<n>`, created with
// O_CREAT|O_EXCL|O_NOFOLLOW: whatever already lies in the directory (a leftover of a crashed run,
// a file or symlink someone planted at a temporary name) is never written through, truncated or
// removed, and the final rename replaces a symlink at the final name, not its target.
//
// A process killed while it wrote one leaves its temporary file behind (a checkpoint's can be
// large): remove_stale_temporary_files(dir), which logger::set_logger_dir calls once it owns the
// directory, removes those of processes that no longer run.
//
// Errors are std::runtime_error naming the file and the system's reason
// ("cannot write /logs/model-6.data.tmp.4242.0: File too large").
//
// Differences from tensorpack: tensorpack writes stats.json with a plain write and a move, and
// relies on TensorFlow's saver for checkpoints; neither fsyncs.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace trainpack {

// Removes from `dir` the regular files named `<name>.tmp.<pid>.<n>` (the temporary files of
// AtomicFileWriter) whose process `pid` no longer runs, and returns their names. Links, other
// kinds of file and the files of running processes (this one included) are left alone; a file
// that cannot be removed is skipped. Call it only on a directory this process owns (holds the
// lock of), so that no other writer is between creating such a file and renaming it.
std::vector<std::string> remove_stale_temporary_files(const std::string& dir);

// Replaces `path` with `data`: a new temporary file in the same directory, written completely,
// fsynced (when `durable`), renamed to `path`, then the directory fsynced (when `durable`). Throws
// std::runtime_error naming the file and the system's reason ("No space left on device", "File
// too large", "Permission denied"); the temporary file is removed and `path` is left as it was.
void write_file_atomically(const std::string& path, std::string_view data, bool durable = true);

// Replaces `path` with `data` as write_file_atomically does, through a long-lived swap file
// (`swap_path`, in the same directory) instead of a new temporary one: `data` is written into
// the swap file in place and fsynced (when `durable`), the two names are exchanged atomically
// (Linux's renameat2 with RENAME_EXCHANGE), and the directory is fsynced (when `durable`). The
// swap file then holds the previous content, and is written into at the next call. For a small
// file that is replaced often (the `checkpoint` index, at every save): no disk block is
// allocated or freed per call, where a temporary file renamed over `path` frees the old one's
// block, which costs about 0.2 ms on a filesystem that discards freed blocks synchronously
// (BENCHMARKS.md, "Checkpoints"). A crash at any moment leaves `path` with the old content or
// the new one, as write_file_atomically does; the swap file may be left partly written.
// Falls back to write_file_atomically when `path` does not exist yet or is not a plain file, and
// when the swap file is not a plain file of its own (a symlink, a directory, a file with other
// hard links: writing into it in place would change another file); a filesystem that cannot
// exchange names gets the swap file renamed over `path`. Errors: std::runtime_error naming the
// file and the system's reason; `path` is left as it was.
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
