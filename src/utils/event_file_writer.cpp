// EventFileWriter (see the header). Encoding: the protobuf library (Debian's libprotobuf 3.21,
// the one Debian's LibTorch links too) with a .proto of our own holding only the fields we write
// (src/proto/trainpack_tfevent.proto). Chosen over a hand encoder because it is the well-kept
// library for the format and linking it beside LibTorch gave no trouble; the generated header
// stays private to this file and the tests' reader.
// One module: scalar_tags_at_step, the reader a resumed TFEventWriter asks, decodes the framing and
// the messages this writer encodes, with the same generated code, private to this file.
#include "trainpack/utils/event_file_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "trainpack/utils/crc32c.h"
#include "trainpack/utils/file_io.h"
#include "trainpack/utils/logger.h"
#include "trainpack_tfevent.pb.h"

namespace trainpack {
namespace {

namespace pb = ::trainpack::tfevent;

// The producer waits for the writer beyond this many pending events (memory bound).
constexpr size_t kMaxPending = 65536;
// The writer's buffer is written out at the latest when it holds this many bytes.
constexpr size_t kCoalesceBytes = size_t{1} << 18;
// After a write, max_queue pending events alone do not bring the writer back before this long
// (flush requests, close and a waiting producer do): a producer putting an event every
// microsecond would otherwise wake it (a futex system call on the training thread, a context
// switch on the writer's) every max_queue events. The events reach the file at most this much
// later than max_queue alone would write them.
constexpr auto kRest = std::chrono::milliseconds(5);

// Files opened by this process (the `.n` suffix of the file names).
std::atomic<uint64_t> g_files_opened{0};

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  std::string h(buf);
  for (char& c : h) {
    if (c == '/') c = '_';
  }
  return h;
}

void put_le64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void put_le32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

void fill_value(const SummaryValue& in, pb::Summary::Value* out) {
  out->set_tag(in.tag);
  switch (in.kind) {
    case SummaryValue::Kind::kScalar:
      out->set_simple_value(static_cast<float>(in.scalar));
      break;
    case SummaryValue::Kind::kImage: {
      pb::Summary::Image* img = out->mutable_image();
      img->set_height(static_cast<int32_t>(in.image.height));
      img->set_width(static_cast<int32_t>(in.image.width));
      img->set_colorspace(static_cast<int32_t>(in.image.colorspace));
      img->set_encoded_image_string(in.image.encoded_png);
      break;
    }
    case SummaryValue::Kind::kHistogram: {
      const SummaryHistogram& h = in.histogram;
      pb::HistogramProto* p = out->mutable_histo();
      p->set_min(h.min);
      p->set_max(h.max);
      p->set_num(h.num);
      p->set_sum(h.sum);
      p->set_sum_squares(h.sum_squares);
      p->mutable_bucket_limit()->Add(h.bucket_limit.begin(), h.bucket_limit.end());
      p->mutable_bucket()->Add(h.bucket.begin(), h.bucket.end());
      break;
    }
    case SummaryValue::Kind::kText: {
      // TensorBoard's text plugin: a DT_STRING tensor (a scalar: a shape with no dims) and
      // plugin_data.plugin_name "text".
      pb::TensorProto* t = out->mutable_tensor();
      t->set_dtype(pb::DT_STRING);
      t->mutable_tensor_shape();
      t->add_string_val(in.text);
      out->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
      break;
    }
  }
}

void fill_event(const Event& in, pb::Event* out) {
  out->set_wall_time(in.wall_time);
  out->set_step(in.step);
  if (in.summary) {
    pb::Summary* s = out->mutable_summary();
    for (const SummaryValue& v : in.summary->values) fill_value(v, s->add_value());
  } else if (!in.file_version.empty()) {
    out->set_file_version(in.file_version);
  }
}

}  // namespace

// ---- the shared state and the writer's thread ----

// One queued event. A summary of a single scalar is held inline: no heap allocation beyond a
// long tag's, on the producer's thread or when the writer frees it. Anything else is a copy of
// the Event. A flush request is an item of the queue too (a marker with its ticket), so that
// the writer flushes exactly what was queued before the request, however far the producer has
// gone since: with a split, the events after the request go to the next file.
struct EventFileWriter::Pending {
  double wall_time = 0;
  int64_t step = 0;
  std::string tag;
  double scalar = 0;
  std::unique_ptr<Event> event;  // null: the inline scalar (or a marker)
  uint64_t ticket = 0;           // > 0: a flush marker, no event
  bool split = false;            // the marker closes the file after the fsync
};

struct EventFileWriter::Impl {
  enum class State { kIdle, kRunning, kClosed };

  Impl(std::string dir, size_t max_queue, double flush_secs, std::string name,
       std::function<void(const char*)> io_hook)
      : logdir(std::move(dir)),
        max_queue(max_queue),
        flush_interval(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(flush_secs))),
        name(std::move(name)),
        host(hostname()),
        io_hook(std::move(io_hook)) {
    queue.reserve(max_queue);
    scalar_msg.mutable_summary()->add_value();
  }

  const std::string logdir;
  const size_t max_queue;
  const std::chrono::steady_clock::duration flush_interval;
  const std::string name;
  const std::string host;
  const std::function<void(const char*)> io_hook;

  // ---- guarded by mu ----
  mutable std::mutex mu;
  std::condition_variable work_cv;   // the writer waits here
  std::condition_variable done_cv;   // flush() waits here for its ticket
  std::condition_variable space_cv;  // a producer waits here when kMaxPending are pending
  State state = State::kIdle;
  std::vector<Pending> queue;
  uint64_t requested = 0;        // flush tickets handed out (their markers queued)
  uint64_t done = 0;             // flush tickets completed
  bool unreported_loss = false;  // a completed ticket found a loss not yet returned by a flush
  bool stop_requested = false;
  bool producer_waiting = false;
  bool resting = false;  // the writer is in its rest after a write: max_queue does not wake it
  std::vector<std::string> files;
  std::thread thread;

  // ---- the writer thread's own ----
  int fd = -1;
  std::string path;
  bool open_blocked = false;  // an open or write failed; retried at the next flush request
  bool lost = false;          // something failed since the last completed flush ticket
  std::string buf;
  pb::Event msg;
  // The message of the inline scalars, kept from event to event with its summary and value:
  // every field it holds is set anew for each scalar, so it needs no Clear() (which would free
  // the summary of the `what` oneof and allocate it again for every event).
  pb::Event scalar_msg;

  // Call with mu held and state != kRunning.
  void start_locked() {
    state = State::kRunning;
    stop_requested = false;
    open_blocked = false;
    thread = std::thread([this] { run(); });
  }

  void run();
  // Writes, fsyncs (and with `split` closes) the file for the marker `ticket`, then completes it.
  void finish_ticket(uint64_t ticket, bool split);
  void open_file();
  void close_file();
  void append_record(const pb::Event& m);
  void write_out();
  void sync();
};

void EventFileWriter::Impl::open_file() {
  const uint64_t n = g_files_opened.fetch_add(1);
  std::string p =
      logdir + "/" + file_name(static_cast<int64_t>(std::time(nullptr)), host, getpid(), n);
  // A new file: an existing name (a file or a symlink someone put there) is never reused.
  const int f = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (f < 0) {
    TP_LOG_ERROR("{}: cannot create the event file {}: {}; events are dropped", name, p,
                 std::strerror(errno));
    open_blocked = true;
    lost = true;
    return;
  }
  fd = f;
  path = std::move(p);
  {
    std::lock_guard<std::mutex> lk(mu);
    files.push_back(path);
  }
  pb::Event first;
  first.set_wall_time(now_seconds());
  first.set_step(0);
  first.set_file_version("brain.Event:2");
  append_record(first);
}

void EventFileWriter::Impl::append_record(const pb::Event& m) {
  const size_t size = m.ByteSizeLong();
  const size_t at = buf.size();
  buf.resize(at + 12 + size + 4);
  char* p = buf.data() + at;
  put_le64(p, size);
  put_le32(p + 8, crc32c::mask(crc32c::value(p, 8)));
  m.SerializeWithCachedSizesToArray(reinterpret_cast<uint8_t*>(p + 12));
  put_le32(p + 12 + size, crc32c::mask(crc32c::value(p + 12, size)));
}

void EventFileWriter::Impl::write_out() {
  if (buf.empty() || fd < 0) {
    buf.clear();
    return;
  }
  if (io_hook) io_hook("write");
  int err = 0;
  const size_t written = write_all_or_errno(fd, buf, &err);
  if (err != 0) {
    TP_LOG_ERROR("{}: cannot write to the event file {}: {}; {} bytes lost, the file is closed",
                 name, path, std::strerror(err), buf.size() - written);
    ::close(fd);
    fd = -1;
    open_blocked = true;
    lost = true;
  }
  buf.clear();
}

void EventFileWriter::Impl::sync() {
  if (fd < 0) return;
  if (io_hook) io_hook("fsync");
  if (::fsync(fd) != 0) {
    TP_LOG_ERROR("{}: cannot fsync the event file {}: {}", name, path, std::strerror(errno));
    lost = true;
  }
}

void EventFileWriter::Impl::close_file() {
  if (fd < 0) return;
  if (::close(fd) != 0) {
    TP_LOG_ERROR("{}: cannot close the event file {}: {}", name, path, std::strerror(errno));
    lost = true;
  }
  fd = -1;
}

void EventFileWriter::Impl::finish_ticket(uint64_t ticket, bool split) {
  write_out();
  sync();
  if (split) close_file();
  std::lock_guard<std::mutex> lk(mu);
  done = ticket;
  if (lost) unreported_loss = true;
  lost = false;
  done_cv.notify_all();
}

void EventFileWriter::Impl::run() {
  open_file();
  write_out();
  std::vector<Pending> batch;
  batch.reserve(max_queue);
  auto last_write = std::chrono::steady_clock::now();
  bool rest = false;
  std::unique_lock<std::mutex> lk(mu);
  for (;;) {
    if (rest) {
      resting = true;
      work_cv.wait_until(lk, std::min(last_write + kRest, last_write + flush_interval),
                         [&] { return stop_requested || requested > done || producer_waiting; });
      resting = false;
    }
    work_cv.wait_until(lk, last_write + flush_interval, [&] {
      return stop_requested || queue.size() >= max_queue || requested > done || producer_waiting;
    });
    batch.swap(queue);
    const bool flush_req = requested > done;  // a marker is in the batch
    const bool stop = stop_requested;
    if (producer_waiting) space_cv.notify_all();
    lk.unlock();

    if (flush_req) open_blocked = false;  // retry a failed open at every flush request
    // Flush requests that came while the writer was busy (in an fsync, typically) share the
    // fsync of the next one in the batch, which covers their events too (and completes their
    // tickets); a request that starts a new file is always done where it is.
    size_t last_marker = batch.size();
    for (size_t i = batch.size(); i-- > 0;) {
      if (batch[i].ticket != 0) {
        last_marker = i;
        break;
      }
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      const Pending& p = batch[i];
      if (p.ticket != 0) {
        if (p.split || i == last_marker) finish_ticket(p.ticket, p.split);
        open_blocked = false;  // the events after the request retry too
        continue;
      }
      if (fd < 0 && !open_blocked) open_file();
      if (fd < 0) {  // dropped (the ERROR line was logged)
        lost = true;
        continue;
      }
      if (p.event) {
        msg.Clear();
        fill_event(*p.event, &msg);
        append_record(msg);
      } else {
        scalar_msg.set_wall_time(p.wall_time);
        scalar_msg.set_step(p.step);
        pb::Summary::Value* v = scalar_msg.mutable_summary()->mutable_value(0);
        v->set_tag(p.tag);
        v->set_simple_value(static_cast<float>(p.scalar));
        append_record(scalar_msg);
      }
    }
    batch.clear();
    // When max_queue more events are already waiting (the producer is ahead), keep encoding
    // into the buffer and write once the writer has caught up (or the buffer is large): the
    // events reach the file no later, in fewer and larger write calls.
    lk.lock();
    if (!stop && buf.size() < kCoalesceBytes && queue.size() >= max_queue) {
      rest = false;
      continue;
    }
    lk.unlock();
    write_out();
    if (stop) {
      sync();
      close_file();
    }
    last_write = std::chrono::steady_clock::now();
    rest = true;

    lk.lock();
    if (stop && queue.empty()) break;
  }
}

// ---- EventFileWriter ----

std::string EventFileWriter::file_name(int64_t seconds, const std::string& hostname, int pid,
                                       uint64_t n) {
  char head[40];
  std::snprintf(head, sizeof head, "events.out.tfevents.%010lld.", static_cast<long long>(seconds));
  char tail[32];
  std::snprintf(tail, sizeof tail, ".%d.%06llu", pid, static_cast<unsigned long long>(n));
  return head + hostname + tail;
}

EventFileWriter::EventFileWriter(std::string logdir, EventFileWriterOptions options) {
  const std::string& name = options.name();
  if (options.max_queue() < 1) {
    throw std::invalid_argument(name + ": max_queue must be >= 1, got " +
                                std::to_string(options.max_queue()));
  }
  if (!(options.flush_secs() > 0) || !std::isfinite(options.flush_secs())) {
    throw std::invalid_argument(name + ": flush_secs must be a positive number of seconds");
  }
  if (logdir.find("://") == std::string::npos) {
    logdir = std::filesystem::path(logdir).lexically_normal().string();
    if (logdir.size() > 1 && logdir.back() == '/') logdir.pop_back();
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(logdir, ec)) {
    throw std::invalid_argument(name + ": logdir '" + logdir + "' is not a directory");
  }
  logdir_ = std::move(logdir);
  impl_ = std::make_unique<Impl>(logdir_, static_cast<size_t>(options.max_queue()),
                                 options.flush_secs(), name, options.io_hook());
}

EventFileWriter::~EventFileWriter() {
  try {
    close();
  } catch (...) {  // a destructor does not throw (thread errors would be std::system_error)
  }
}

void EventFileWriter::enqueue(Pending&& item) {
  Impl& s = *impl_;
  std::unique_lock<std::mutex> lk(s.mu);
  if (s.state == Impl::State::kClosed) return;
  s.queue.push_back(std::move(item));
  const size_t n = s.queue.size();
  if (n == s.max_queue && !s.resting) {
    s.work_cv.notify_one();
  } else if (n >= kMaxPending) {
    if (s.state == Impl::State::kIdle) s.start_locked();
    s.work_cv.notify_one();
    s.producer_waiting = true;
    s.space_cv.wait(lk, [&] { return s.queue.size() < kMaxPending; });
    s.producer_waiting = false;
  }
}

void EventFileWriter::add_scalar(double wall_time, int64_t step, std::string tag, double value) {
  Pending p;
  p.wall_time = wall_time;
  p.step = step;
  p.tag = std::move(tag);
  p.scalar = value;
  enqueue(std::move(p));
}

void EventFileWriter::add_summary(double wall_time, int64_t step, const Summary& summary) {
  Pending p;
  p.wall_time = wall_time;
  p.step = step;
  if (summary.values.size() == 1 && summary.values[0].kind == SummaryValue::Kind::kScalar) {
    p.tag = summary.values[0].tag;  // the inline scalar (what put_scalar gives)
    p.scalar = summary.values[0].scalar;
  } else {
    p.event = std::make_unique<Event>();
    p.event->wall_time = wall_time;
    p.event->step = step;
    p.event->summary = summary;
  }
  enqueue(std::move(p));
}

void EventFileWriter::add_event(const Event& event) {
  Pending p;
  p.event = std::make_unique<Event>(event);
  enqueue(std::move(p));
}

void EventFileWriter::start() {
  std::lock_guard<std::mutex> lk(impl_->mu);
  if (impl_->state != Impl::State::kRunning) impl_->start_locked();
}

bool EventFileWriter::flush() { return flush_ticket(false, true); }

bool EventFileWriter::start_new_file() { return flush_ticket(true, true); }

bool EventFileWriter::request_flush(bool new_file) { return flush_ticket(new_file, false); }

bool EventFileWriter::flush_ticket(bool split, bool wait) {
  Impl& s = *impl_;
  std::unique_lock<std::mutex> lk(s.mu);
  if (s.state == Impl::State::kClosed) return true;
  if (s.state == Impl::State::kIdle) s.start_locked();
  const uint64_t ticket = ++s.requested;
  Pending marker;
  marker.ticket = ticket;
  marker.split = split;
  s.queue.push_back(std::move(marker));
  s.work_cv.notify_one();
  if (wait) s.done_cv.wait(lk, [&] { return s.done >= ticket; });
  const bool ok = !s.unreported_loss;
  s.unreported_loss = false;
  return ok;
}

void EventFileWriter::close() {
  Impl& s = *impl_;
  std::unique_lock<std::mutex> lk(s.mu);
  if (s.state == Impl::State::kClosed) return;
  const bool running = s.state == Impl::State::kRunning || !s.queue.empty();
  if (s.state == Impl::State::kIdle && running) s.start_locked();  // events added before any start
  // Closed from here on: later events are dropped, so the writer's last pass is its final one.
  s.state = Impl::State::kClosed;
  if (!running) return;
  s.stop_requested = true;
  s.work_cv.notify_one();
  lk.unlock();
  s.thread.join();
}

std::vector<std::string> EventFileWriter::files() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->files;
}

// ---------------------------------------------------------------------------------------------
// Reading back: scalar_tags_at_step

namespace {

namespace fs = std::filesystem;

// The little-endian unsigned integer of `bytes` bytes at `p`.
uint64_t get_le(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// A file read forward in 1 MiB chunks; skip() moves past data without reading it.
class ForwardReader {
 public:
  ForwardReader(int fd, uint64_t size) : fd_(fd), size_(size) {}
  uint64_t left() const { return size_ - at_; }
  void skip(uint64_t n) { at_ += n; }
  // The next `n` bytes into `out`; false when the file ends first or cannot be read.
  bool read(char* out, size_t n) {
    if (n > left()) return false;
    if (at_ < buf_at_ || at_ + n > buf_at_ + buf_.size()) {
      buf_.resize(std::max<size_t>(n, size_t{1} << 20));
      const ssize_t got = ::pread(fd_, buf_.data(), buf_.size(), static_cast<off_t>(at_));
      if (got < 0) return false;
      buf_.resize(static_cast<size_t>(got));
      buf_at_ = at_;
      if (buf_.size() < n) return false;
    }
    std::memcpy(out, buf_.data() + (at_ - buf_at_), n);
    at_ += n;
    return true;
  }

 private:
  int fd_;
  uint64_t size_;
  uint64_t at_ = 0;
  uint64_t buf_at_ = 0;
  std::vector<char> buf_;
};

// A varint at `p[*i]`, advancing *i; false when it runs past `n`.
bool read_varint(const char* p, size_t n, size_t* i, uint64_t* v) {
  *v = 0;
  for (int shift = 0; *i < n && shift < 64; shift += 7) {
    const auto b = static_cast<unsigned char>(p[(*i)++]);
    *v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

// The step of an Event from the first bytes of its encoding, which hold `wall_time` (field 1,
// 8 bytes) and `step` (field 2, a varint) first when they are set; nullopt when those bytes do
// not say (a step of 0 is not encoded, and another writer may order the fields otherwise).
std::optional<int64_t> step_from_prefix(const char* p, size_t n) {
  size_t i = 0;
  uint64_t tag = 0;
  if (!read_varint(p, n, &i, &tag)) return std::nullopt;
  if (tag == ((1 << 3) | 1)) {  // wall_time, fixed64
    i += 8;
    if (!read_varint(p, n, &i, &tag)) return std::nullopt;
  }
  uint64_t step = 0;
  if (tag != ((2 << 3) | 0) || !read_varint(p, n, &i, &step)) return std::nullopt;
  return static_cast<int64_t>(step);
}

// Adds to `tags` the scalar tags of the events at `step` in the event file `path`, up to its
// first damaged record (a run killed while writing can leave one at the end).
void scan_event_file(const std::string& path, int64_t step, std::set<std::string>* tags) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return;
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return;
  ForwardReader in(fd, static_cast<uint64_t>(st.st_size));
  constexpr size_t kPrefix = 24;
  char header[12];
  std::string record;
  pb::Event event;
  while (in.read(header, sizeof header)) {
    const uint64_t len = get_le(header, 8);
    if (crc32c::mask(crc32c::value(header, 8)) != get_le(header + 8, 4) || len + 4 > in.left()) {
      return;
    }
    char prefix[kPrefix];
    const size_t head = static_cast<size_t>(std::min<uint64_t>(len, kPrefix));
    if (!in.read(prefix, head)) return;
    const std::optional<int64_t> at = step_from_prefix(prefix, head);
    if (at && *at != step) {
      in.skip(len - head + 4);
      continue;
    }
    record.assign(prefix, head);
    record.resize(static_cast<size_t>(len) + 4);
    if (!in.read(record.data() + head, record.size() - head)) return;
    const uint64_t data_crc = get_le(record.data() + len, 4);
    if (crc32c::mask(crc32c::value(record.data(), static_cast<size_t>(len))) != data_crc) return;
    if (!event.ParseFromArray(record.data(), static_cast<int>(len))) return;
    if (event.step() != step || !event.has_summary()) continue;
    for (const pb::Summary::Value& v : event.summary().value()) {
      if (v.value_case() == pb::Summary::Value::kSimpleValue) tags->insert(v.tag());
    }
  }
}

}  // namespace

std::set<std::string> scalar_tags_at_step(const std::string& dir, int64_t step,
                                          const std::vector<std::string>& skip) {
  std::set<std::string> tags;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind("events.out.tfevents.", 0) != 0) continue;
    if (std::find(skip.begin(), skip.end(), name) != skip.end()) continue;
    scan_event_file(it->path().string(), step, &tags);
  }
  return tags;
}

}  // namespace trainpack
