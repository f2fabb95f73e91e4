// StatsFileWriter (trainpack/utils/stats_file_writer.h): the queue shared with the producer, the
// writer's thread, the formatting of entries into the file's text, the whole-file writes with
// their rest, the synced writes and the synced copy.
#include "trainpack/utils/stats_file_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>
#include <utility>

#include "trainpack/utils/atomic_file.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/stats_json.h"

namespace trainpack {

namespace {

using SteadyClock = std::chrono::steady_clock;

// How long entries gather before a write (unless a sync, a flush or stop() calls it sooner): one
// write carries many entries, and the producer wakes the writer at most once per gathering.
constexpr auto kGather = std::chrono::milliseconds(10);
// Queued items that wake the writer before the gathering time is over (it formats them; it
// writes when the gathering time is over).
constexpr size_t kGatherItems = 4096;
// Queued items beyond which the producer waits (memory bound when the disk does not keep up):
// about 130,000 entries of one scalar.
constexpr size_t kMaxQueuedItems = size_t{1} << 18;
// After a write that took d, the next comes no sooner than kRestFactor * d later.
constexpr int kRestFactor = 9;

}  // namespace

struct StatsFileWriter::Shared {
  enum class Kind : uint8_t { kValue, kEntryEnd, kSync };
  // One queued item. An entry is its values (kValue: name id, value) followed by kEntryEnd (its
  // epoch_num and global_step); kSync asks for what came before to be synced to the disk.
  struct Item {
    Kind kind;
    uint32_t id;
    double value;
    int64_t epoch;
    int64_t step;
  };

  Shared(std::string path, std::string log_context, IoHook hook)
      : path(std::move(path)),
        dir(parent_directory(this->path)),
        synced_path(synced_copy_path(this->path)),
        log_context(std::move(log_context)),
        io_hook(std::move(hook)) {
    // Room for a gathering's items in both buffers (they are swapped): no allocation per entry.
    queue.reserve(2 * kGatherItems);
    batch.reserve(2 * kGatherItems);
  }

  const std::string path;
  const std::string dir;
  const std::string synced_path;
  const std::string log_context;
  const IoHook io_hook;

  // ---- guarded by mu ----
  mutable std::mutex mu;
  std::condition_variable work_cv;   // the writer waits here
  std::condition_variable idle_cv;   // flush() waits here for its pass of the writer
  std::condition_variable space_cv;  // the producer waits here when the queue is full
  std::vector<Item> queue;
  std::vector<std::string> new_keys;  // JSON text of the names added since the writer's last pass
  bool sleeping = false;              // waiting with nothing to write: the next item wakes it
  bool sync_queued = false;
  bool stop = false;
  bool producer_waiting = false;
  uint64_t flush_requests = 0;        // flush() calls so far
  uint64_t flush_served = 0;          // those the writer has written for
  std::vector<std::string> failures;  // write errors not yet taken
  std::thread thread;

  // ---- the writer thread's own while it runs; the producer's otherwise ----
  std::vector<Item> batch;
  std::vector<std::string> keys;  // JSON text of each name, by id
  std::string text = "[]";        // the file as it is to be
  size_t num_entries = 0;         // entries in text
  bool tail_open = false;         // text's closing `]` is removed: entries are being added
  bool entry_open = false;        // an entry's `{` is in text
  bool first_in_entry = true;
  bool unpublished = false;      // text holds entries that the file lacks
  bool sync_requested = false;   // a sync was asked for
  bool unsynced = false;         // the file was replaced by a version not synced to the disk
  bool last_failed = false;      // the last write failed: the file may lack entries
  bool has_synced_copy = false;  // synced_path names the last version synced to the disk
  SteadyClock::time_point pending_since;  // when text got its first entry that the file lacks
  SteadyClock::time_point last_end;       // when the last write ended
  SteadyClock::duration last_cost{0};     // how long it took
  std::vector<std::string> batch_failures;

  // Call with mu held: something the writer must not wait for.
  bool wake_now() const {
    return stop || flush_requests > flush_served || sync_queued || queue.size() >= kGatherItems;
  }
  // Whether a write is owed: new entries, or a sync asked for a file that is not synced.
  bool has_pending() const { return unpublished || (sync_requested && (unsynced || last_failed)); }
  // When the owed write is due: after the gathering time (a sync does not wait for it), and not
  // before the rest that the previous write earned.
  SteadyClock::time_point due() const {
    SteadyClock::time_point t = last_end + kRestFactor * last_cost;
    if (!sync_requested) t = std::max(t, pending_since + kGather);
    return t;
  }

  void run();
  void wait_for_work(std::unique_lock<std::mutex>& lk);
  // Moves the queue and the new keys to the writer's side. Call with mu held.
  void take_queue();
  // Formats the batch into text; a kSync asks for a sync.
  void process();
  void begin_entry();
  // Writes text out when a write is owed and due (`force`: owed is enough).
  void publish_if_due(bool force);
  // Replaces the file with text (synced first when `durable`). A failure is logged and kept.
  void publish(bool durable);
  // After a synced version was renamed in: gives it the second name synced_path.
  void keep_synced_copy();
  // Removes the second name once the file itself is synced.
  void drop_synced_copy();
  // Moves batch_failures to failures. Call with mu held.
  void keep_failures() {
    for (std::string& f : batch_failures) failures.push_back(std::move(f));
    batch_failures.clear();
  }
  // Writes what is queued on the calling thread (when the writer's thread does not run).
  void drain_inline();
  void stop_thread();
};

std::string StatsFileWriter::synced_copy_path(const std::string& path) {
  const std::filesystem::path p(path);
  return (p.parent_path() / ("." + p.filename().string() + ".synced")).string();
}

void StatsFileWriter::Shared::run() {
  std::unique_lock<std::mutex> lk(mu);
  for (;;) {
    wait_for_work(lk);
    const bool stopping = stop;
    const uint64_t serving = flush_requests;
    const bool flush_asked = serving > flush_served;
    take_queue();
    if (producer_waiting) space_cv.notify_all();
    lk.unlock();

    process();
    publish_if_due(stopping || flush_asked);

    lk.lock();
    keep_failures();
    flush_served = serving;
    idle_cv.notify_all();
    if (stopping && queue.empty()) break;
  }
}

void StatsFileWriter::Shared::wait_for_work(std::unique_lock<std::mutex>& lk) {
  if (wake_now()) return;
  if (has_pending()) {
    // New entries gather in the queue meanwhile; the producer does not wake the writer.
    work_cv.wait_until(lk, due(), [&] { return wake_now(); });
    return;
  }
  if (!queue.empty()) return;  // a first entry: formatted now, written once it is due
  sleeping = true;
  work_cv.wait(lk, [&] { return !queue.empty() || wake_now(); });
  sleeping = false;
}

void StatsFileWriter::Shared::take_queue() {
  batch.swap(queue);
  for (std::string& k : new_keys) keys.push_back(std::move(k));
  new_keys.clear();
  sync_queued = false;  // the kSync items are in the batch
}

void StatsFileWriter::Shared::process() {
  for (const Item& item : batch) {
    switch (item.kind) {
      case Kind::kValue:
        begin_entry();
        if (!first_in_entry) text += ", ";
        first_in_entry = false;
        text += keys[item.id];
        text += ": ";
        append_stat_value(text, item.value);
        break;
      case Kind::kEntryEnd:
        begin_entry();
        text += first_in_entry ? "\"epoch_num\": " : ", \"epoch_num\": ";
        text += std::to_string(item.epoch);
        text += ", \"global_step\": ";
        text += std::to_string(item.step);
        text += '}';
        ++num_entries;
        entry_open = false;
        if (!unpublished) pending_since = SteadyClock::now();
        unpublished = true;
        break;
      case Kind::kSync:
        sync_requested = true;
        break;
    }
  }
  batch.clear();
  if (tail_open) {
    text += ']';
    tail_open = false;
  }
}

void StatsFileWriter::Shared::begin_entry() {
  if (entry_open) return;
  if (!tail_open) {
    text.pop_back();  // the closing `]`
    tail_open = true;
  }
  if (num_entries > 0) text += ", ";
  text += '{';
  entry_open = true;
  first_in_entry = true;
}

void StatsFileWriter::Shared::publish_if_due(bool force) {
  if (!has_pending()) {
    sync_requested = false;  // the file is synced as it is
    return;
  }
  if (!force && SteadyClock::now() < due()) return;
  // A version that is not synced replaces the file only while the last synced one keeps a
  // second name: a power loss may then lose it, never the synced one.
  publish(sync_requested || !has_synced_copy);
}

void StatsFileWriter::Shared::publish(bool durable) {
  const SteadyClock::time_point start = SteadyClock::now();
  try {
    if (io_hook) io_hook("write");
    AtomicFileWriter file(path, durable);
    file.write(text);
    if (durable && io_hook) io_hook("fdatasync");
    file.commit();  // syncs first when durable
    if (durable) {
      keep_synced_copy();
      fsync_directory(dir);
    }
    unsynced = !durable;
    last_failed = false;
  } catch (const std::exception& e) {
    TP_LOG_ERROR("Exception in {}! {}", log_context, e.what());
    batch_failures.push_back(e.what());
    last_failed = true;
  }
  unpublished = false;
  sync_requested = false;
  last_end = SteadyClock::now();
  last_cost = last_end - start;
}

void StatsFileWriter::Shared::keep_synced_copy() {
  // Renamed in first, then linked: at every moment one of the two names holds a synced version.
  if (::unlink(synced_path.c_str()) != 0 && errno != ENOENT) {
    has_synced_copy = false;
    return;
  }
  // A filesystem without hard links: every version is then synced before it is renamed in.
  has_synced_copy = ::link(path.c_str(), synced_path.c_str()) == 0;
}

void StatsFileWriter::Shared::drop_synced_copy() {
  if (!has_synced_copy || unsynced || unpublished || last_failed) return;
  if (::unlink(synced_path.c_str()) == 0) {
    try {
      fsync_directory(dir);
    } catch (const std::exception&) {  // the copy is only a safeguard; the next start removes it
    }
  }
  has_synced_copy = false;
}

void StatsFileWriter::Shared::drain_inline() {
  {
    std::lock_guard<std::mutex> lk(mu);
    take_queue();
  }
  process();
  publish_if_due(/*force=*/true);
  drop_synced_copy();
  std::lock_guard<std::mutex> lk(mu);
  keep_failures();
}

void StatsFileWriter::Shared::stop_thread() {
  if (!thread.joinable()) return;
  {
    std::lock_guard<std::mutex> lk(mu);
    queue.push_back(Item{Kind::kSync, 0, 0.0, 0, 0});
    stop = true;
  }
  work_cv.notify_one();
  thread.join();
  stop = false;
  // The file is synced now (unless its last write failed): its second name is not needed.
  drop_synced_copy();
}

// ---------------------------------------------------------------------------------------------

StatsFileWriter::StatsFileWriter(std::string path, std::string log_context, IoHook io_hook)
    : s_(std::make_unique<Shared>(std::move(path), std::move(log_context), std::move(io_hook))) {}

StatsFileWriter::~StatsFileWriter() {
  try {
    stop();
  } catch (...) {  // a destructor does not throw (thread errors would be std::system_error)
  }
}

void StatsFileWriter::reset(std::string text, size_t num_entries) {
  stop();
  Shared& s = *s_;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    s.queue.clear();
    s.failures.clear();
  }
  s.text = std::move(text);
  s.num_entries = num_entries;
  s.unpublished = false;
  s.sync_requested = false;
  s.unsynced = false;
  s.last_failed = false;
  s.last_cost = SteadyClock::duration{0};
}

void StatsFileWriter::start() {
  Shared* s = s_.get();
  if (s->thread.joinable()) return;
  s->stop = false;
  s->thread = std::thread([s] { s->run(); });
}

void StatsFileWriter::stop() { s_->stop_thread(); }

bool StatsFileWriter::running() const { return s_->thread.joinable(); }

void StatsFileWriter::add_key(std::string json_key) {
  std::lock_guard<std::mutex> lk(s_->mu);
  s_->new_keys.push_back(std::move(json_key));
}

void StatsFileWriter::append_entry(const std::vector<Value>& values, int64_t epoch, int64_t step) {
  Shared& s = *s_;
  bool wake = false;
  {
    std::unique_lock<std::mutex> lk(s.mu);
    if (s.queue.size() >= kMaxQueuedItems && s.thread.joinable()) {
      // The disk does not keep up: wait rather than grow memory without bound.
      s.producer_waiting = true;
      s.work_cv.notify_one();
      s.space_cv.wait(lk, [&] { return s.queue.size() < kMaxQueuedItems; });
      s.producer_waiting = false;
    }
    const size_t before = s.queue.size();
    for (const Value& v : values) {
      s.queue.push_back(Shared::Item{Shared::Kind::kValue, v.id, v.value, 0, 0});
    }
    s.queue.push_back(Shared::Item{Shared::Kind::kEntryEnd, 0, 0.0, epoch, step});
    // Wake the writer when it waits for a first item, or when the queue grows large; otherwise
    // it is gathering and writes when its time is up.
    if (s.sleeping || (before < kGatherItems && s.queue.size() >= kGatherItems)) {
      s.sleeping = false;
      wake = true;
    }
  }
  if (wake) s.work_cv.notify_one();
  if (!s.thread.joinable()) s.drain_inline();
}

void StatsFileWriter::request_sync() {
  Shared& s = *s_;
  if (!s.thread.joinable()) return;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    s.queue.push_back(Shared::Item{Shared::Kind::kSync, 0, 0.0, 0, 0});
    s.sync_queued = true;
    s.sleeping = false;
  }
  s.work_cv.notify_one();
}

void StatsFileWriter::flush() {
  Shared& s = *s_;
  if (!s.thread.joinable()) return;
  std::unique_lock<std::mutex> lk(s.mu);
  const uint64_t ticket = ++s.flush_requests;
  s.work_cv.notify_one();
  s.idle_cv.wait(lk, [&] { return s.flush_served >= ticket; });
}

std::vector<std::string> StatsFileWriter::take_failures() {
  std::vector<std::string> failures;
  std::lock_guard<std::mutex> lk(s_->mu);
  failures.swap(s_->failures);
  return failures;
}

std::string StatsFileWriter::text() const {
  // The writer's thread is idle (or not running) after flush(), and the producer appends nothing.
  std::lock_guard<std::mutex> lk(s_->mu);
  return s_->text;
}

}  // namespace trainpack
