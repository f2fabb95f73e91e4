// StatsFileWriter: keeps a stats file (stats.json's layout, trainpack/utils/stats_json.h) on the
// disk from a thread of its own, for a producer that must not wait for the disk.
//
// The producer queues entries (name ids and values, then epoch_num and global_step) under a
// mutex: no system call, and no allocation once the queue has grown. The writer's thread formats
// them into the file's text and replaces the whole file: the text goes to a temporary file in
// the same directory that is renamed over the path, so every version a reader opens is complete,
// valid JSON. Entries gather for at least 10 ms before a write; after a write that took d, the
// next comes no sooner than 9 d later (flush() and stop() excepted), so writing the file takes at
// most a tenth of the thread's time however large the file grows.
//
// Durability: request_sync() makes the next write synced (the temporary file fdatasynced before
// the rename, the directory after it) and gives that version a second name, synced_copy_path(),
// which stays while unsynced versions replace the file and is removed by stop() once the file
// itself is synced. Where the file system has no hard links, every write is synced.
//
// Errors: a failed write logs `Exception in <context>! <reason>` (ERROR), is kept for
// take_failures(), and the next write holds every entry again. Nothing throws to the producer.
//
// Threads: append_entry, request_sync, flush and take_failures are for one producer thread;
// start/stop/reset for the owner while no entry is being appended.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace trainpack {

class StatsFileWriter {
 public:
  // One scalar of an entry: the id of its name (add_key's order) and its value.
  struct Value {
    uint32_t id;
    double value;
  };
  // Called on the writer's thread with "write" before each write and "fdatasync" before a write
  // is synced. For tests: a hook that blocks shows what the producer does not wait for; one that
  // throws is a write error.
  using IoHook = std::function<void(const char* what)>;

  // `log_context` names the writer in its error lines (e.g. "JSONWriter._write_stat()").
  StatsFileWriter(std::string path, std::string log_context, IoHook io_hook = nullptr);
  // Stops the thread after writing and syncing what is queued (as stop()); never throws.
  ~StatsFileWriter();
  StatsFileWriter(const StatsFileWriter&) = delete;
  StatsFileWriter& operator=(const StatsFileWriter&) = delete;

  // `<dir of path>/.<file name>.synced`: the second name of the last version synced to the disk.
  static std::string synced_copy_path(const std::string& path);

  // Stops the thread, drops what is queued and the failures not taken, and starts from `text`
  // (the file as found, appended to as it is up to its closing `]`) holding `num_entries`.
  void reset(std::string text = "[]", size_t num_entries = 0);
  // Starts the writer's thread. Without it, append_entry writes on the calling thread.
  void start();
  // Writes and syncs what is queued, then joins the thread; the synced copy is then removed.
  void stop();
  bool running() const;

  // Adds the JSON text of the next name (`"loss"`); its id is the number of keys added before.
  void add_key(std::string json_key);
  // Queues one entry: `values` in order, then `"epoch_num": epoch, "global_step": step`. Waits
  // when about 130,000 one-scalar entries are queued and the disk has not kept up.
  void append_entry(const std::vector<Value>& values, int64_t epoch, int64_t step);
  // The next write (of everything queued so far) is synced to the disk.
  void request_sync();
  // Returns once everything queued is written (to the page cache, not necessarily the disk).
  void flush();
  // The write errors since the last call, in order.
  std::vector<std::string> take_failures();
  // The file's text as this writer knows it; call after flush() or while stopped.
  std::string text() const;

 private:
  struct Shared;
  std::unique_ptr<Shared> s_;
};

}  // namespace trainpack
