// JSONWriter: the monitor that keeps `<logger dir>/stats.json` (trainpack/callbacks/json_writer.h):
// the training thread's side (gathering an entry, queueing it), the writer's thread (formatting
// the entries, writing the whole file to a temporary file renamed over stats.json, the rest after
// a write, the sync after an epoch end and the synced copy), the back-up / move-aside / repair of
// a file found at start, and the fsync policy. The text of the file (its layout and the tolerant
// reader) is trainpack/utils/stats_json.h.
#include "trainpack/callbacks/json_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <utility>

#include "trainpack/core/callback_state.h"
#include "trainpack/core/trainer.h"
#include "trainpack/utils/atomic_file.h"
#include "trainpack/utils/file_io.h"
#include "trainpack/utils/float_repr.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/output_dir.h"

namespace trainpack {

namespace fs = std::filesystem;

namespace {

// str() of a Python number, as tensorpack's log lines print it ("nan", "inf", "2.0", "2").
std::string python_str(const StatValue& v) {
  if (std::holds_alternative<int64_t>(v)) return std::to_string(std::get<int64_t>(v));
  return python_float_repr(std::get<double>(v));
}

// ---------------------------------------------------------------------------------------------
// Files

std::string timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%m%d-%H%M%S", &tm);
  return buf;
}

// `<dir>/stats.json.<label><MMDD-HHMMSS>`, with `-1`, `-2`, ... added if that name is taken.
std::string backup_path(const std::string& path, const std::string& label) {
  const std::string base = path + "." + label + timestamp();
  std::string candidate = base;
  std::error_code ec;
  for (int k = 1; fs::exists(fs::symlink_status(candidate, ec)); ++k) {
    candidate = base + "-" + std::to_string(k);
  }
  return candidate;
}

// Writes `data` (a file as found) to the new file `to` as a backup: completely, to a temporary
// file that is fsynced and only then given the name `to`, which is not replaced if it was taken
// meanwhile. A failure (a full disk) leaves no backup, not an empty or partial one, and throws
// "cannot back up <from> to <to>: <reason>"; the caller then leaves `from` as it is.
void write_backup(const std::string& from, const std::string& data, const std::string& to,
                  const std::string& dir) {
  // A second name for the file as found: nothing is copied, so the backup is exactly the file
  // (a sparse one stays sparse) and costs no space; link() never replaces a name that is taken.
  // Where the file system has no hard links, the bytes read are copied.
  if (::link(from.c_str(), to.c_str()) == 0) {
    fsync_directory(dir);
    return;
  }
  try {
    AtomicFileWriter file(to);
    file.write(data);
    file.commit_as_new();
    fsync_directory(dir);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("cannot back up {} to {}: {}", from, to, e.what()));
  }
}

// How stats.json is read: a regular file (a FIFO never blocks, a symlink is not followed: it is
// moved aside like any file that is not a stats file), of at most 1 GiB.
ReadFileOptions stats_read_options() {
  ReadFileOptions options;
  options.max_bytes = uint64_t{1} << 30;
  options.kind = "stats file";
  options.follow_symlinks = false;
  return options;
}

// stats.json as found, without the NUL bytes at its end, and the file's size. A power loss can
// leave a file extended by NUL bytes (or by a hole, on a file system that makes one), and a
// tool can pad one: the text is read only up to its last byte that is not NUL, found from the
// end (holes are skipped with SEEK_DATA/SEEK_HOLE without reading them), so a file padded with
// gigabytes of NULs is neither refused as too large nor read whole. The 1 GiB limit applies to
// the text.
std::string read_stats_text(const std::string& path, uint64_t* file_size) {
  const ReadFileOptions options = stats_read_options();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW);
  if (fd < 0) {
    const int err = errno;
    struct stat lst {};
    if (err == ELOOP && ::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) {
      throw FileRefusedError(EINVAL, path, "is not a regular file (a symbolic link)");
    }
    throw_file_error("open", path, err);
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw_file_error("stat", path, errno);
  if (!S_ISREG(st.st_mode)) {
    throw FileRefusedError(EINVAL, path,
                           "is not a regular file (" + file_type_name(st.st_mode) + ")");
  }
  *file_size = static_cast<uint64_t>(st.st_size);
  // The end of the last data region (the file's size where SEEK_DATA is not supported).
  off_t end = st.st_size;
  {
    off_t at = 0, data_end = 0;
    bool supported = true;
    while (at < st.st_size) {
      const off_t data = ::lseek(fd, at, SEEK_DATA);
      if (data < 0) {
        supported = errno == ENXIO;  // no data after `at`
        break;
      }
      const off_t hole = ::lseek(fd, data, SEEK_HOLE);
      if (hole < 0) {
        supported = false;
        break;
      }
      data_end = hole;
      at = hole;
    }
    if (supported) end = std::min<off_t>(end, data_end);
  }
  // Back over NUL bytes written as data, a chunk at a time.
  constexpr off_t kChunk = 64 * 1024;
  std::string chunk;
  while (end > 0) {
    const off_t from = std::max<off_t>(0, end - kChunk);
    chunk.resize(static_cast<size_t>(end - from));
    size_t got = 0;
    while (got < chunk.size()) {
      const ssize_t n =
          ::pread(fd, chunk.data() + got, chunk.size() - got, from + static_cast<off_t>(got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw_file_error("read", path, errno);
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    chunk.resize(got);
    const size_t last = chunk.find_last_not_of('\0');
    if (last != std::string::npos) {
      end = from + static_cast<off_t>(last) + 1;
      break;
    }
    end = from;
  }
  if (static_cast<uint64_t>(end) > options.max_bytes) {
    throw FileRefusedError(EFBIG, path,
                           fmt::format("holds {} bytes of text, more than the {}-byte limit for a "
                                       "stats file",
                                       static_cast<long long>(end), options.max_bytes));
  }
  std::string text(static_cast<size_t>(end), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::pread(fd, text.data() + got, text.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_file_error("read", path, errno);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  return text;
}

void move_file(const std::string& from, const std::string& to, const std::string& dir) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw_file_error("rename " + from + " to", to, errno);
  fsync_directory(dir);
}

std::string join(const std::string& dir, const char* name) {
  return (fs::path(dir) / name).string();
}

void warn_truncated(const std::string& path, const ParsedStats& p) {
  TP_LOG_WARN(
      "{} is truncated (an append was cut short): kept its {} complete entries, ignored the last "
      "{} bytes.",
      path, p.entries.size(), p.bytes_ignored);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The writer's thread

namespace {

using SteadyClock = std::chrono::steady_clock;

// How long the writer's thread lets entries gather before it writes them (unless an epoch end,
// a flush or the end of training calls it sooner): one write then carries many entries, and the
// training thread wakes the writer at most once per gathering.
constexpr auto kGather = std::chrono::milliseconds(10);
// Items in the queue that wake the writer before the gathering time is over (it formats them;
// it writes when the gathering time is over).
constexpr size_t kGatherItems = 4096;
// Items in the queue beyond which the training thread waits for the writer (memory bound when
// the disk does not keep up): about 130,000 entries of one scalar.
constexpr size_t kMaxQueuedItems = size_t{1} << 18;
// Every write replaces the whole file, so its cost grows with the file. After a write that took
// d, the next one comes no sooner than kRestFactor * d later (an epoch end included; flush() and
// the end of training excepted): the writer's thread spends at most a tenth of its time, and of
// the disk's, on writing stats.json, however long the run.
constexpr int kRestFactor = 9;

// The second name of the last version of stats.json that was synced to the disk, kept while
// versions that were not synced replace stats.json (see Background::publish).
std::string synced_copy_path(const std::string& dir) {
  return (fs::path(dir) / ".stats.json.synced").string();
}

}  // namespace

struct JSONWriter::Background {
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

  Background(std::string path, std::string dir, std::function<void(const char*)> hook)
      : path(std::move(path)),
        dir(std::move(dir)),
        synced_path(synced_copy_path(this->dir)),
        io_hook(std::move(hook)) {
    // Room for a gathering's items in both buffers (they are swapped): no allocation per entry.
    queue.reserve(2 * kGatherItems);
    batch.reserve(2 * kGatherItems);
  }

  const std::string path;
  const std::string dir;
  const std::string synced_path;
  const std::function<void(const char*)> io_hook;

  // ---- guarded by mu ----
  std::mutex mu;
  std::condition_variable work_cv;   // the writer waits here
  std::condition_variable idle_cv;   // flush() waits here for its pass of the writer
  std::condition_variable space_cv;  // the training thread waits here when the queue is full
  std::vector<Item> queue;
  std::vector<std::string> new_keys;  // JSON text of the names added since the writer's last pass
  bool sleeping = false;              // waiting with nothing to write: the next item wakes it
  bool sync_queued = false;
  bool stop = false;
  bool producer_waiting = false;
  uint64_t flush_requests = 0;        // flush() calls so far
  uint64_t flush_served = 0;          // those the writer has written for
  std::vector<std::string> failures;  // write errors not yet reported to the trainer
  std::thread thread;

  // ---- the writer thread's own while it runs; the training thread's otherwise ----
  std::vector<Item> batch;
  std::vector<std::string> keys;  // JSON text of each name, by id
  std::string text = "[]";        // the file as it is to be
  size_t num_entries = 0;         // entries in text
  bool tail_open = false;         // text's closing `]` is removed: entries are being added
  bool entry_open = false;        // an entry's `{` is in text
  bool first_in_entry = true;
  bool unpublished = false;      // text holds entries that stats.json lacks
  bool sync_requested = false;   // an epoch end (or the end) asked for a sync
  bool unsynced = false;         // stats.json was replaced by a version not synced to the disk
  bool last_failed = false;      // the last write failed: stats.json may lack entries
  bool has_synced_copy = false;  // synced_path names the last version synced to the disk
  SteadyClock::time_point pending_since;  // when text got its first entry that stats.json lacks
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
  // Formats the batch into text; a kSync asks for a sync.
  void process();
  void begin_entry();
  // Writes text out when a write is owed and due (`force`: owed is enough).
  void publish_if_due(bool force);
  // Replaces stats.json with text (see the header: a new file renamed over it; synced first when
  // `durable`). A failure is logged and kept for the trainer; the next write puts every entry in
  // the file again.
  void publish(bool durable);
  // After a synced version was renamed in: gives it the second name synced_path.
  void keep_synced_copy();
  // Removes the second name once stats.json itself is synced (the end of a training).
  void drop_synced_copy();
  // Back to an empty text and no owed write (a new training).
  void reset();
  void failed(const std::string& error) {
    TP_LOG_ERROR("Exception in JSONWriter._write_stat()! {}", error);
    batch_failures.push_back(error);
  }
};

void JSONWriter::Background::run() {
  std::unique_lock<std::mutex> lk(mu);
  for (;;) {
    wait_for_work(lk);
    const bool stopping = stop;
    const uint64_t serving = flush_requests;
    const bool flush_asked = serving > flush_served;
    batch.swap(queue);
    for (std::string& k : new_keys) keys.push_back(std::move(k));
    new_keys.clear();
    sync_queued = false;  // the kSync items are in the batch
    if (producer_waiting) space_cv.notify_all();
    lk.unlock();

    process();
    publish_if_due(stopping || flush_asked);

    lk.lock();
    for (std::string& f : batch_failures) failures.push_back(std::move(f));
    batch_failures.clear();
    flush_served = serving;
    idle_cv.notify_all();
    if (stopping && queue.empty()) break;
  }
}

void JSONWriter::Background::wait_for_work(std::unique_lock<std::mutex>& lk) {
  if (wake_now()) return;
  if (has_pending()) {
    // New entries gather in the queue meanwhile; the training thread does not wake the writer.
    work_cv.wait_until(lk, due(), [&] { return wake_now(); });
    return;
  }
  if (!queue.empty()) return;  // a first entry: formatted now, written once it is due
  sleeping = true;
  work_cv.wait(lk, [&] { return !queue.empty() || wake_now(); });
  sleeping = false;
}

void JSONWriter::Background::process() {
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

void JSONWriter::Background::begin_entry() {
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

void JSONWriter::Background::publish_if_due(bool force) {
  if (!has_pending()) {
    sync_requested = false;  // stats.json is synced as it is
    return;
  }
  if (!force && SteadyClock::now() < due()) return;
  // A version that is not synced replaces stats.json only while the last synced one keeps a
  // second name: a power loss may then lose it, never the synced one.
  publish(sync_requested || !has_synced_copy);
}

void JSONWriter::Background::publish(bool durable) {
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
    failed(e.what());
    last_failed = true;
  }
  unpublished = false;
  sync_requested = false;
  last_end = SteadyClock::now();
  last_cost = last_end - start;
}

void JSONWriter::Background::keep_synced_copy() {
  // Renamed in first, then linked: at every moment one of the two names holds a synced version.
  if (::unlink(synced_path.c_str()) != 0 && errno != ENOENT) {
    has_synced_copy = false;
    return;
  }
  // A filesystem without hard links: every version is then synced before it is renamed in.
  has_synced_copy = ::link(path.c_str(), synced_path.c_str()) == 0;
}

void JSONWriter::Background::drop_synced_copy() {
  if (!has_synced_copy || unsynced || unpublished || last_failed) return;
  if (::unlink(synced_path.c_str()) == 0) {
    try {
      fsync_directory(dir);
    } catch (const std::exception&) {  // the copy is only a safeguard; the next start removes it
    }
  }
  has_synced_copy = false;
}

void JSONWriter::Background::reset() {
  text = "[]";
  num_entries = 0;
  unpublished = false;
  sync_requested = false;
  unsynced = false;
  last_failed = false;
  last_cost = SteadyClock::duration{0};
}

// ---------------------------------------------------------------------------------------------
// JSONWriter

JSONWriter::JSONWriter(JSONWriterOptions options) : options_(std::move(options)) {
  dir_ = resolve_output_dir(std::nullopt, "JSONWriter", "");
  path_ = join(dir_, FILENAME);
  bg_ = std::make_unique<Background>(path_, dir_, options_.io_hook());
  // The counters' names come first: a scalar put under one of them is overwritten by them.
  intern("epoch_num");
  intern("global_step");
}

JSONWriter::~JSONWriter() {
  try {
    stop_background();
  } catch (...) {  // a destructor does not throw (thread errors would be std::system_error)
  }
}

MonitorPtr JSONWriter::create() {
  if (!logger::get_logger_dir()) {
    TP_LOG_WARN("logger directory was not set. Ignore JSONWriter.");
    return std::make_shared<NoOpMonitor>("JSONWriter");
  }
  return std::make_shared<JSONWriter>();
}

std::optional<std::vector<StatsEntry>> JSONWriter::load_existing_json(
    std::optional<std::string> dir) {
  const std::string path =
      join(resolve_output_dir(dir, "JSONWriter::load_existing_json", "its dir argument"), FILENAME);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return std::nullopt;
  std::string text;
  try {
    uint64_t file_size = 0;
    text = read_stats_text(path, &file_size);
  } catch (const std::system_error& e) {
    throw std::runtime_error(fmt::format("JSONWriter: {}", e.what()));
  }
  ParsedStats p = parse_stats_file(text);
  if (p.status == ParsedStats::Status::kMalformed) {
    throw std::runtime_error(
        fmt::format("JSONWriter: {} is not a valid stats file: {}", path, p.message));
  }
  if (p.status == ParsedStats::Status::kTruncated) warn_truncated(path, p);
  return std::move(p.entries);
}

std::optional<int64_t> JSONWriter::load_existing_epoch_number(std::optional<std::string> dir) {
  try {
    auto stats = load_existing_json(std::move(dir));
    if (!stats || stats->empty()) return std::nullopt;
    const StatValue* v = stats->back().find("epoch_num");
    if (v == nullptr) return std::nullopt;
    if (std::holds_alternative<int64_t>(*v)) return std::get<int64_t>(*v);
    const double d = std::get<double>(*v);  // Python's int(): truncation toward zero
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return std::nullopt;
    return static_cast<int64_t>(d);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

uint32_t JSONWriter::intern(const std::string& name) {
  const auto it = ids_.find(name);
  if (it != ids_.end()) return it->second;
  const auto id = static_cast<uint32_t>(names_.size());
  names_.push_back(name);
  ids_.emplace(name, id);
  std::string key = format_stats_key(name);
  std::lock_guard<std::mutex> lk(bg_->mu);
  bg_->new_keys.push_back(std::move(key));
  return id;
}

void JSONWriter::process_scalar(const std::string& name, double value) {
  // Puts usually repeat the previous entry's names in the same order: one string comparison
  // finds the id, the hash lookup is the fallback.
  const size_t k = puts_.size();
  const uint32_t id = k < previous_puts_.size() && names_[previous_puts_[k]] == name
                          ? previous_puts_[k]
                          : intern(name);
  // Bounded: a writer whose entries are never triggered still allocates nothing per put.
  if (k < 1024) puts_.push_back(id);
  put_since_entry_ = true;
  if (id < 2) return;  // `epoch_num` / `global_step`: the counters overwrite them
  for (Slot& s : current_) {
    if (s.id == id) {  // the last value wins; the name keeps the position of its first put
      s.value = value;
      return;
    }
  }
  current_.push_back(Slot{id, value});
}

void JSONWriter::flush() {
  Background& b = *bg_;
  if (!b.thread.joinable()) return;
  std::unique_lock<std::mutex> lk(b.mu);
  const uint64_t ticket = ++b.flush_requests;
  b.work_cv.notify_one();
  b.idle_cv.wait(lk, [&] { return b.flush_served >= ticket; });
}

std::vector<StatsEntry> JSONWriter::stats() const {
  const_cast<JSONWriter*>(this)->flush();
  // The writer's thread is idle (or not running) and the training thread makes no entry now.
  std::lock_guard<std::mutex> lk(bg_->mu);
  return parse_stats_file(bg_->text).entries;
}

void JSONWriter::_setup_graph() {
  stop_background();
  {
    std::lock_guard<std::mutex> lk(bg_->mu);
    bg_->queue.clear();
    bg_->failures.clear();
  }
  bg_->reset();
  current_.clear();
  puts_.clear();
  put_since_entry_ = false;
  disabled_ = false;
}

CallbackState JSONWriter::state() const {
  // Only at an epoch end (the next step starts an epoch), before this writer made the entry.
  if (!is_set_up() || !at_epoch_end_ || !put_since_entry_ || current_.empty()) return {};
  if (trainer().resume_point().step_in_epoch != 0 || epoch_num() < 1) return {};
  std::string names;
  std::vector<double> values;
  for (const Slot& slot : current_) {
    if (!names.empty() || !values.empty()) names.push_back('\0');
    names += names_[slot.id];
    values.push_back(slot.value);
  }
  return {{"record_epoch", state_scalar(epoch_num())},
          {"record_step", state_scalar(global_step())},
          {"record_names", state_string(names)},
          {"record_values", state_vector(values)}};
}

void JSONWriter::load_state(const CallbackState& state) {
  check_state_keys(name(), state, {"record_epoch", "record_step", "record_names", "record_values"});
  Record r;
  r.epoch = state_int(name(), state, "record_epoch");
  r.step = state_int(name(), state, "record_step");
  const std::string names = state_string(name(), state, "record_names");
  const std::vector<double> values = state_doubles(name(), state, "record_values");
  std::vector<std::string> split;
  size_t start = 0;
  for (size_t i = 0; i <= names.size(); ++i) {
    if (i == names.size() || names[i] == '\0') {
      split.push_back(names.substr(start, i - start));
      start = i + 1;
    }
  }
  if (split.size() != values.size()) {
    throw std::invalid_argument(fmt::format("{}: the recorded entry has {} names but {} values",
                                            name(), split.size(), values.size()));
  }
  for (size_t i = 0; i < values.size(); ++i) r.values.emplace_back(split[i], values[i]);
  record_ = std::move(r);
}

void JSONWriter::fill_from_record() {
  const auto& resumed = trainer().restored_resume_point();
  if (!resumed || resumed->step_in_epoch != 0) return;
  const int64_t ended = resumed->epoch - 1;  // the epoch the checkpoint ended
  const double last = last_kept_epoch_.value_or(0);
  if (last >= static_cast<double>(ended)) return;  // no hole
  const bool usable = record_ && record_->epoch == ended && record_->step == resumed->global_step;
  const int64_t first_missing = static_cast<int64_t>(last) + 1;
  const int64_t last_lost = usable ? ended - 1 : ended;
  if (first_missing <= last_lost && last_kept_epoch_) {
    TP_LOG_WARN(
        "{} has no entry for epoch{} {}, which the checkpoint this run resumes from does not "
        "record{}: {} missing.",
        path_, first_missing == last_lost ? "" : "s",
        first_missing == last_lost ? fmt::format("{}", first_missing)
                                   : fmt::format("{} to {}", first_missing, last_lost),
        usable ? fmt::format(" (it records epoch {} only)", ended) : std::string(),
        first_missing == last_lost ? "it stays" : "they stay");
  }
  if (!usable) return;
  for (const auto& [stat, value] : record_->values) process_scalar(stat, value);
  // The entry of the epoch the checkpoint ended, with its counters (not the current ones).
  put_since_entry_ = false;
  previous_puts_.swap(puts_);
  puts_.clear();
  Background& b = *bg_;
  {
    std::lock_guard<std::mutex> lk(b.mu);
    for (const Slot& slot : current_) {
      b.queue.push_back(Background::Item{Background::Kind::kValue, slot.id, slot.value, 0, 0});
    }
    b.queue.push_back(
        Background::Item{Background::Kind::kEntryEnd, 0, 0.0, record_->epoch, record_->step});
  }
  current_.clear();
  TP_LOG_INFO(
      "{} had no entry for epoch {} (global_step {}); added it from the checkpoint's record.",
      path_, record_->epoch, record_->step);
}

void JSONWriter::_before_train() {
  last_kept_epoch_.reset();
  at_epoch_end_ = false;
  adopt_existing_file();
  if (disabled_) {
    // The ERROR line is logged; the run ends with an error saying stats.json was not written.
    trainer().report_write_failure(name(), path_,
                                   "the stats.json found at start could not be adopted safely; "
                                   "nothing was written to it in this training");
    return;
  }
  Background* b = bg_.get();
  b->stop = false;
  b->thread = std::thread([b] { b->run(); });
  // What earlier callbacks put in before_train waits for the recorded entry, which comes first.
  std::vector<Slot> put_before;
  put_before.swap(current_);
  const bool had_puts = put_since_entry_;
  fill_from_record();
  record_.reset();
  current_.swap(put_before);
  put_since_entry_ = had_puts;
  _trigger();
  request_sync();
}

bool JSONWriter::follows_starting_epoch(const std::vector<StatsEntry>& entries) const {
  // tensorpack: `epoch = stats[-1]['epoch_num'] + 1`, None on any error.
  const StatValue* last = entries.empty() ? nullptr : entries.back().find("epoch_num");
  if (last == nullptr) return true;
  const int64_t starting_epoch = trainer().starting_epoch();
  const bool follows = std::holds_alternative<int64_t>(*last)
                           ? std::get<int64_t>(*last) + 1 == starting_epoch
                           : std::get<double>(*last) + 1 == static_cast<double>(starting_epoch);
  if (!follows) {
    TP_LOG_WARN(
        "History epoch={} from JSON is not the predecessor of the current starting_epoch={}",
        python_str(*last), starting_epoch);
    TP_LOG_WARN(
        "If you want to resume old training, either use `AutoResumeTrainConfig` or correctly "
        "set the new starting_epoch yourself to avoid inconsistency. ");
  }
  return follows;
}

namespace {

// An entry's integer field `key`, or nullopt when absent or not a number.
std::optional<double> entry_number(const StatsEntry& entry, const char* key) {
  const StatValue* v = entry.find(key);
  if (v == nullptr) return std::nullopt;
  if (std::holds_alternative<int64_t>(*v)) return static_cast<double>(std::get<int64_t>(*v));
  if (std::holds_alternative<double>(*v)) return std::get<double>(*v);
  return std::nullopt;
}

}  // namespace

bool JSONWriter::keep_entries_up_to(std::vector<StatsEntry>& entries,
                                    const ResumePoint& resumed) const {
  // The steps after the checkpoint's global_step run again: their entries (written before the
  // crash or stop) would otherwise appear twice, with different values.
  const auto first_after = std::find_if(entries.begin(), entries.end(), [&](const StatsEntry& e) {
    const auto gs = entry_number(e, "global_step");
    return gs && *gs > static_cast<double>(resumed.global_step);
  });
  const size_t dropped = static_cast<size_t>(entries.end() - first_after);
  if (dropped > 0) {
    TP_LOG_WARN(
        "{} holds {} entries after global_step={}, the step of the checkpoint this run resumes "
        "from (from global_step={} on); they are dropped, since those steps run again.",
        path_, dropped, resumed.global_step, python_str(*first_after->find("global_step")));
    entries.erase(first_after, entries.end());
  }
  // The last entry kept is of the epoch the checkpoint ends (an epoch entry, or a step entry
  // written during the epoch the run resumes in).
  if (!entries.empty()) {
    if (const auto last_epoch = entry_number(entries.back(), "epoch_num")) {
      const double e = static_cast<double>(resumed.epoch);
      if (*last_epoch != e && *last_epoch != e - 1) {
        TP_LOG_WARN(
            "The last entry of {} is of epoch {}, but the checkpoint resumes at epoch {} "
            "(global_step={}); the checkpoint's counters are used.",
            path_, python_str(*entries.back().find("epoch_num")), resumed.epoch,
            resumed.global_step);
      }
    }
  }
  return dropped > 0;
}

namespace {

// The complete entries of the stats file at `path`, or -1 when it is unreadable or malformed;
// `why` says which (for a log line).
int64_t count_entries(const std::string& path, std::string* why) {
  try {
    uint64_t file_size = 0;
    const ParsedStats p = parse_stats_file(read_stats_text(path, &file_size));
    if (p.status == ParsedStats::Status::kMalformed) {
      *why = fmt::format("not a valid stats file ({})", p.message);
      return -1;
    }
    *why = fmt::format("holds {} complete entries", p.entries.size());
    return static_cast<int64_t>(p.entries.size());
  } catch (const std::exception& e) {
    *why = fmt::format("not readable ({})", e.what());
    return -1;
  }
}

// Syncs the file at `path` to the disk (not following a symlink); false if it cannot.
bool sync_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return false;
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

void JSONWriter::recover_synced_copy() {
  // A run that did not end (a crash, a kill, a power loss) leaves the second name of its last
  // synced version. After a power loss stats.json can be older than that version, or empty. A
  // power loss does not remove stats.json: when it is missing, someone removed it, and the copy
  // goes with it.
  const std::string synced = synced_copy_path(dir_);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(synced, ec))) return;
  const bool found = fs::exists(fs::symlink_status(path_, ec));
  std::string synced_why, found_why;
  const int64_t in_synced = found ? count_entries(synced, &synced_why) : -1;
  const int64_t in_found = found ? count_entries(path_, &found_why) : -1;
  if (in_synced > in_found) {
    const std::string kept = backup_path(path_, "incomplete-");
    move_file(path_, kept, dir_);
    move_file(synced, path_, dir_);
    TP_LOG_WARN(
        "{} {} after the run that wrote it was cut off; restored the copy synced at its last "
        "epoch end, which holds {} entries (the file as found is kept as {}).",
        path_, in_found < 0 ? "is " + found_why : found_why, in_synced, kept);
    return;
  }
  // stats.json holds every entry of the copy: once it is on the disk, the copy is not needed.
  if (in_found >= 0 && !sync_file(path_)) return;
  if (::unlink(synced.c_str()) == 0) fsync_directory(dir_);
}

void JSONWriter::adopt_existing_file() {
  try {
    recover_synced_copy();
  } catch (const std::exception& e) {
    give_up_on_file(e.what());
    return;
  }
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path_, ec))) return;
  std::string text;
  uint64_t file_size = 0;
  ParsedStats p;
  try {
    text = read_stats_text(path_, &file_size);
    p = parse_stats_file(text);
  } catch (const std::system_error& e) {
    p.status = ParsedStats::Status::kMalformed;
    p.message = e.what();
  }
  try {
    if (p.status == ParsedStats::Status::kMalformed) {
      const std::string backup = backup_path(path_, "malformed-");
      move_file(path_, backup, dir_);
      TP_LOG_WARN("{} is not a valid stats file ({}); moved it to {} and starting a new {}.", path_,
                  p.message, backup, FILENAME);
      return;
    }
    if (p.status == ParsedStats::Status::kTruncated) warn_truncated(path_, p);

    bool drop_entries = false;
    if (const auto& resumed = trainer().restored_resume_point()) {
      // Resumed from a checkpoint: its counters are the truth
      // (docs/tensorpack-differences.md #7).
      drop_entries = keep_entries_up_to(p.entries, *resumed);
    } else if (!follows_starting_epoch(p.entries)) {
      const std::string backup = backup_path(path_, "");
      TP_LOG_WARN("Now, we will train with starting_epoch={} and backup old json to {}",
                  trainer().starting_epoch(), backup);
      move_file(path_, backup, dir_);
      return;
    }

    TP_LOG_INFO("Found existing JSON inside {}, will append to it.", dir_);
    last_kept_epoch_ =
        p.entries.empty() ? std::nullopt : entry_number(p.entries.back(), "epoch_num");
    Background& b = *bg_;
    b.num_entries = p.entries.size();
    if (p.status == ParsedStats::Status::kValid && !text.empty() && text.back() == ']' &&
        !drop_entries && file_size == text.size()) {
      // Appended to as it is: the next write keeps its bytes as they are, up to the closing `]`.
      b.text = std::move(text);
      return;
    }
    // Truncated, followed by white space or NUL bytes, or with entries dropped on resume: keep a
    // copy of the file as found, then rewrite it once (temporary file and rename) with the entries
    // kept. The copy is complete before the file is rewritten; when it cannot be made, nothing is
    // changed.
    const char* label = p.status == ParsedStats::Status::kTruncated ? "truncated-"
                        : drop_entries                              ? "before-resume-"
                                                                    : "orig-";
    const std::string backup = backup_path(path_, label);
    write_backup(path_, text, backup, dir_);
    b.text = format_stats_file(p.entries);
    write_file_atomically(path_, b.text);
    TP_LOG_WARN("Rewrote {} with its {} complete entries; the file as found is kept as {}.", path_,
                b.num_entries, backup);
  } catch (const std::exception& e) {
    give_up_on_file(e.what());
  }
}

void JSONWriter::give_up_on_file(const char* reason) {
  // The file could not be set aside, copied or restored: leave it as it is, and write nothing
  // this run rather than risk replacing it.
  bg_->reset();
  disabled_ = true;
  TP_LOG_ERROR(
      "Exception in JSONWriter._write_stat()! {}; {} is left as it is and nothing is "
      "written to it in this training.",
      reason, path_);
}

void JSONWriter::_trigger_step() {
  // The last step of an epoch is written together with the epoch's entry.
  if (trainer().local_step() != trainer().steps_per_epoch() - 1) _trigger();
}

void JSONWriter::_trigger_epoch() {
  at_epoch_end_ = false;
  _trigger();
  // The fdatasync runs on the writer's thread; a failure of it (or of any write) is reported at
  // the next epoch end or at after_train.
  request_sync();
  report_failures();
}

void JSONWriter::_trigger() {
  if (!put_since_entry_) return;
  put_since_entry_ = false;
  previous_puts_.swap(puts_);
  puts_.clear();
  if (disabled_) {
    current_.clear();
    return;
  }
  Background& b = *bg_;
  bool wake = false;
  {
    std::unique_lock<std::mutex> lk(b.mu);
    if (b.queue.size() >= kMaxQueuedItems && b.thread.joinable()) {
      // The disk does not keep up: wait rather than grow memory without bound.
      b.producer_waiting = true;
      b.work_cv.notify_one();
      b.space_cv.wait(lk, [&] { return b.queue.size() < kMaxQueuedItems; });
      b.producer_waiting = false;
    }
    const size_t before = b.queue.size();
    for (const Slot& s : current_) {
      b.queue.push_back(Background::Item{Background::Kind::kValue, s.id, s.value, 0, 0});
    }
    b.queue.push_back(
        Background::Item{Background::Kind::kEntryEnd, 0, 0.0, epoch_num(), global_step()});
    // Wake the writer when it waits for a first item, or when the queue grows large; otherwise
    // it is gathering and writes when its time is up.
    if (b.sleeping || (before < kGatherItems && b.queue.size() >= kGatherItems)) {
      b.sleeping = false;
      wake = true;
    }
  }
  current_.clear();
  if (wake) b.work_cv.notify_one();
  if (!b.thread.joinable()) drain_inline();
}

void JSONWriter::drain_inline() {
  // No writer thread (an entry made outside before_train .. after_train): write it here.
  Background& b = *bg_;
  {
    std::lock_guard<std::mutex> lk(b.mu);
    b.batch.swap(b.queue);
    for (std::string& k : b.new_keys) b.keys.push_back(std::move(k));
    b.new_keys.clear();
    b.sync_queued = false;
  }
  b.process();
  b.publish_if_due(/*force=*/true);
  b.drop_synced_copy();
  {
    std::lock_guard<std::mutex> lk(b.mu);
    for (std::string& f : b.batch_failures) b.failures.push_back(std::move(f));
    b.batch_failures.clear();
  }
}

void JSONWriter::request_sync() {
  Background& b = *bg_;
  if (!b.thread.joinable()) return;
  {
    std::lock_guard<std::mutex> lk(b.mu);
    b.queue.push_back(Background::Item{Background::Kind::kSync, 0, 0.0, 0, 0});
    b.sync_queued = true;
    b.sleeping = false;
  }
  b.work_cv.notify_one();
}

void JSONWriter::_after_train() {
  // Nothing is written here (tensorpack's behaviour); what was written reaches the disk before
  // train() returns.
  stop_background();
  report_failures();
}

void JSONWriter::stop_background() {
  Background& b = *bg_;
  if (!b.thread.joinable()) return;
  {
    std::lock_guard<std::mutex> lk(b.mu);
    b.queue.push_back(Background::Item{Background::Kind::kSync, 0, 0.0, 0, 0});
    b.stop = true;
  }
  b.work_cv.notify_one();
  b.thread.join();
  b.stop = false;
  // stats.json is synced now (unless its last write failed): its second name is not needed.
  b.drop_synced_copy();
}

void JSONWriter::report_failures() {
  std::vector<std::string> failures;
  {
    std::lock_guard<std::mutex> lk(bg_->mu);
    failures.swap(bg_->failures);
  }
  if (!is_set_up()) return;
  for (const std::string& error : failures) {
    trainer().report_write_failure(name(), path_, error);
  }
}

}  // namespace trainpack
