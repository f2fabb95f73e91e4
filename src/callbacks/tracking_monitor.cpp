#include "trainpack/callbacks/tracking_monitor.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "trainpack/callbacks/param.h"
#include "trainpack/core/trainer.h"
#include "trainpack/detail/signals.h"
#include "trainpack/utils/float_repr.h"
#include "trainpack/utils/logger.h"

namespace trainpack {

namespace {

using SteadyClock = std::chrono::steady_clock;

// The URL as messages show it: no query (where a service may put a key or a run's id).
std::string url_without_query(const std::string& url) { return url.substr(0, url.find('?')); }

const TrackingOptions& checked(const std::string& service, const TrackingOptions& o) {
  auto fail = [&](const char* option, const std::string& got, const char* range,
                  const char* example) {
    throw std::invalid_argument(fmt::format(
        "TrackingMonitor ({}): TrackingOptions::{} must be {}, got {}; e.g. TrackingOptions().{}",
        service, option, range, got, example));
  };
  if (o.queue_capacity() <= 0) {
    fail("queue_capacity", std::to_string(o.queue_capacity()), "> 0", "queue_capacity(100000)");
  }
  if (o.batch_size() <= 0) {
    fail("batch_size", std::to_string(o.batch_size()), "> 0", "batch_size(1000)");
  }
  if (o.send_interval().count() <= 0) {
    fail("send_interval", std::to_string(o.send_interval().count()) + " ms", "> 0",
         "send_interval(std::chrono::seconds(30))");
  }
  if (o.max_attempts() < 1) {
    fail("max_attempts", std::to_string(o.max_attempts()), ">= 1", "max_attempts(5)");
  }
  if (o.initial_backoff().count() < 0) {
    fail("initial_backoff", std::to_string(o.initial_backoff().count()) + " ms", ">= 0",
         "initial_backoff(std::chrono::seconds(1))");
  }
  if (o.max_backoff().count() < 0) {
    fail("max_backoff", std::to_string(o.max_backoff().count()) + " ms", ">= 0",
         "max_backoff(std::chrono::seconds(30))");
  }
  if (o.flush_timeout().count() < 0) {
    fail("flush_timeout", std::to_string(o.flush_timeout().count()) + " ms", ">= 0",
         "flush_timeout(std::chrono::seconds(30))");
  }
  if (o.flush_timeout_after_signal().count() < 0) {
    fail("flush_timeout_after_signal",
         std::to_string(o.flush_timeout_after_signal().count()) + " ms", ">= 0",
         "flush_timeout_after_signal(std::chrono::seconds(3))");
  }
  return o;
}

}  // namespace

const char* tracking_status_name(TrackingStatus status) {
  switch (status) {
    case TrackingStatus::kFinished:
      return "FINISHED";
    case TrackingStatus::kFailed:
      return "FAILED";
    case TrackingStatus::kKilled:
      return "KILLED";
  }
  return "FINISHED";
}

TrackingMonitor::TrackingMonitor(std::string service, TrackingOptions options)
    : service_(std::move(service)), options_(checked(service_, options)), http_(options_.http()) {}

TrackingMonitor::~TrackingMonitor() { stop(); }

void TrackingMonitor::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  http_.abort();
  wake_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void TrackingMonitor::set_secret(std::string secret) {
  if (!secret.empty()) secrets_.push_back(std::move(secret));
}

std::string TrackingMonitor::redact_secrets(std::string text) const {
  for (const std::string& secret : secrets_) text = redact(std::move(text), secret);
  return text;
}

std::string TrackingMonitor::credentials_hint() const { return "the API key given to the monitor"; }

std::string TrackingMonitor::certificate_hint() const {
  return "if the server's certificate is right, add the CA that signed it to this machine's store "
         "(Debian: copy it to /usr/local/share/ca-certificates/ and run update-ca-certificates) "
         "or give it as TrackingOptions().http(HttpClientOptions().ca_file(...))";
}

// ---- the training thread ----

void TrackingMonitor::enqueue(TrackingRecord record) {
  bool warn_full = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++put_;
    if (gave_up_ || closed_) {
      ++dropped_;
      return;
    }
    if (static_cast<int64_t>(queue_.size()) >= options_.queue_capacity()) {
      ++dropped_;
      warn_full = !warned_full_;
      warned_full_ = true;
    } else {
      queue_.push_back(std::move(record));
      ++queued_;
      if (static_cast<int64_t>(queue_.size()) == options_.batch_size()) {
        deliver_now_ = true;
        wake_.notify_one();
      }
    }
  }
  if (warn_full) {  // once per run
    TP_LOG_WARN(
        "{}: the queue of records to send is full ({} records; TrackingOptions::queue_capacity): "
        "new records are dropped until it drains; training goes on (the count is logged when "
        "training ends)",
        service_, options_.queue_capacity());
  }
}

void TrackingMonitor::process_scalar(const std::string& name, double value) {
  TrackingRecord r;
  r.kind = TrackingRecord::Kind::kMetric;
  r.key = name;
  r.value = value;
  if (is_set_up()) {
    r.step = global_step();
    r.epoch = epoch_num();
  }
  r.timestamp_ms = detail::unix_time_ms();
  enqueue(std::move(r));
}

void TrackingMonitor::_before_train() {
  stop();  // a thread left by an earlier run that had no after_train
  {
    std::lock_guard<std::mutex> lock(mutex_);
    deliver_now_ = ending_ = stop_ = closed_ = gave_up_ = warned_full_ = false;
    gave_up_because_.clear();
    worker_done_ = false;
    status_ = TrackingStatus::kFinished;
  }
  http_.reset_abort();
  warned_.clear();  // each run warns once of each failure
  // The hyper-parameters as training starts (the setters' before_train ran: they are registered
  // before the monitors). One record per param, the last setter's value when several set it.
  std::vector<std::pair<std::string, double>> params;
  for (const CallbackPtr& registered : trainer().registered_callbacks()) {
    // A setter inside wrappers (PeriodicTrigger(ScheduledHyperParamSetter(...)), ...) counts too.
    const Callback* cb = registered.get();
    while (const auto* proxy = dynamic_cast<const ProxyCallback*>(cb)) cb = proxy->inner().get();
    const auto* setter = dynamic_cast<const HyperParamSetter*>(cb);
    if (setter == nullptr) continue;
    const std::string key = setter->param().readable_name();
    const double value = setter->get_current_value();
    auto it =
        std::find_if(params.begin(), params.end(), [&](const auto& p) { return p.first == key; });
    if (it != params.end()) {
      it->second = value;
    } else {
      params.emplace_back(key, value);
    }
  }
  for (const auto& [key, value] : params) {
    TrackingRecord r;
    r.kind = TrackingRecord::Kind::kParam;
    r.key = key;
    r.value = value;
    r.text = python_float_repr(value);
    r.step = global_step();
    r.epoch = epoch_num();
    r.timestamp_ms = detail::unix_time_ms();
    enqueue(std::move(r));
  }
  worker_ = std::thread([this] { run(); });
}

void TrackingMonitor::_trigger_epoch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    deliver_now_ = true;
  }
  wake_.notify_one();
  MonitorBase::_trigger_epoch();
}

void TrackingMonitor::_after_train() {
  // after_train runs inside the trainer's catch block when an exception ended training (every
  // callback's, see Trainer::main_loop and Callbacks::after_train): the exception is current.
  TrackingStatus status = TrackingStatus::kFinished;
  if (std::current_exception()) {
    status = TrackingStatus::kFailed;
  } else if (trainer().received_signal() != 0 || detail::pending_signal() != 0) {
    status = TrackingStatus::kKilled;
  }
  const std::chrono::milliseconds timeout =
      status == TrackingStatus::kKilled
          ? std::min(options_.flush_timeout(), options_.flush_timeout_after_signal())
          : options_.flush_timeout();
  int64_t unsent = 0;
  bool timed_out = false;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    status_ = status;
    ending_ = true;
    wake_.notify_all();
    if (worker_.joinable() && !done_.wait_for(lock, timeout, [this] { return worker_done_; })) {
      timed_out = true;
      unsent = static_cast<int64_t>(queue_.size()) + in_flight_;
      stop_ = true;
    }
  }
  if (timed_out) {
    http_.abort();  // the request in progress ends at once, and every later one
    wake_.notify_all();
  }
  if (worker_.joinable()) worker_.join();
  int64_t sent, failed, dropped, put;
  bool refused;
  std::string because;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    if (!gave_up_) unsent = std::max<int64_t>(unsent, static_cast<int64_t>(queue_.size()));
    queue_.clear();
    sent = sent_;
    failed = failed_;
    dropped = dropped_;
    put = put_;
    refused = gave_up_;
    because = gave_up_because_;
  }
  if (failed == 0 && dropped == 0 && unsent == 0 && !timed_out) return;
  std::string line = fmt::format("{}: {} of {} requests failed", service_, failed, sent);
  line += fmt::format(", {} of {} records were dropped", dropped, put);
  if (refused) line += " (" + because + ")";
  if (timed_out) {
    line += fmt::format(
        ", {} records were not sent within the flush timeout ({} ms; "
        "TrackingOptions::{}) and the run's end ({}) was not sent",
        unsent, timeout.count(),
        status == TrackingStatus::kKilled ? "flush_timeout_after_signal" : "flush_timeout",
        tracking_status_name(status));
  } else if (unsent > 0) {
    line += fmt::format(", {} records were not sent", unsent);
  }
  line += "; training was not affected";
  TP_LOG_WARN("{}", redact_secrets(line));
}

// ---- counters ----

int64_t TrackingMonitor::records_queued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queued_;
}
int64_t TrackingMonitor::records_dropped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return dropped_;
}
int64_t TrackingMonitor::requests_sent() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sent_;
}
int64_t TrackingMonitor::requests_failed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failed_;
}
TrackingStatus TrackingMonitor::status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return status_;
}
bool TrackingMonitor::gave_up() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return gave_up_;
}

// ---- the background thread ----

bool TrackingMonitor::stopping() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stop_;
}

bool TrackingMonitor::sleep_unless_stopped(std::chrono::milliseconds d) {
  std::unique_lock<std::mutex> lock(mutex_);
  return !wake_.wait_for(lock, d, [this] { return stop_; });
}

void TrackingMonitor::warn_once(const std::string& kind, const std::string& message) {
  if (std::find(warned_.begin(), warned_.end(), kind) != warned_.end()) return;
  warned_.push_back(kind);
  TP_LOG_WARN("{}", redact_secrets(message));
}

void TrackingMonitor::give_up(const std::string& because, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (gave_up_) return;
    gave_up_ = true;
    gave_up_because_ = because;
  }
  TP_LOG_WARN("{}", redact_secrets(fmt::format("{}. Nothing more is sent to {} in this run; "
                                               "training goes on",
                                               message, service_)));
}

void TrackingMonitor::drop_after_giving_up(int64_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  dropped_ += n + static_cast<int64_t>(queue_.size());
  queue_.clear();
}

void TrackingMonitor::keep_for_retry(std::vector<TrackingRecord> records) {
  kept_.insert(kept_.end(), std::make_move_iterator(records.begin()),
               std::make_move_iterator(records.end()));
}

void TrackingMonitor::drop_refused(int64_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  dropped_ += n;
}

void TrackingMonitor::run() {
  try {
    serve();
  } catch (const std::exception& e) {
    TP_LOG_WARN("{}", redact_secrets(fmt::format("{}: the monitor's thread stopped: {}; nothing "
                                                 "more is sent; training goes on",
                                                 service_, e.what())));
  } catch (...) {
    TP_LOG_WARN(
        "{}: the monitor's thread stopped on an unknown exception; nothing more is sent; "
        "training goes on",
        service_);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    worker_done_ = true;
    in_flight_ = 0;
  }
  done_.notify_all();
}

void TrackingMonitor::serve() {
  // 1. Open the run; when the service cannot be reached, records stay queued and open() is tried
  //    again with back-off (until the key is refused or the thread is told to stop).
  std::chrono::milliseconds backoff = options_.initial_backoff();
  while (!open()) {
    if (gave_up()) {
      drop_after_giving_up(0);
      return;
    }
    if (!sleep_unless_stopped(backoff)) return;
    backoff = std::min(backoff * 2, options_.max_backoff());
  }
  // 2. Deliver whenever woken; 3. at the end, finish.
  std::vector<TrackingRecord> batch;
  SteadyClock::time_point last = SteadyClock::now();
  std::chrono::milliseconds retry_backoff = options_.initial_backoff();
  while (true) {
    bool ending;
    TrackingStatus status;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait_until(lock, last + options_.send_interval(), [this] {
        return stop_ || ending_ || deliver_now_ ||
               static_cast<int64_t>(queue_.size()) >= options_.batch_size();
      });
      if (stop_) return;
      ending = ending_;
      status = status_;
      deliver_now_ = false;
      batch.swap(queue_);  // the queue gets the old batch's storage back: no allocation
      in_flight_ = static_cast<int64_t>(batch.size());
    }
    last = SteadyClock::now();
    const auto given = static_cast<int64_t>(batch.size());  // deliver() may move from it
    if (!batch.empty()) deliver(batch);
    const int64_t delivered = given - static_cast<int64_t>(kept_.size());
    batch.clear();
    const int64_t kept = static_cast<int64_t>(kept_.size());
    int64_t arrived = 0;
    bool newly_held = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      in_flight_ = 0;
      newly_held = kept > 0 && held_ == 0;
      if (kept > 0) {
        // Back to the head of the queue, before what was put meanwhile; the oldest go first
        // when that passes the capacity.
        queue_.insert(queue_.begin(), std::make_move_iterator(kept_.begin()),
                      std::make_move_iterator(kept_.end()));
        const int64_t excess = static_cast<int64_t>(queue_.size()) - options_.queue_capacity();
        if (excess > 0) {
          queue_.erase(queue_.begin(), queue_.begin() + excess);
          dropped_ += excess;
        }
        held_ = std::min<int64_t>(kept, static_cast<int64_t>(queue_.size()));
      } else if (held_ > 0) {
        arrived = held_;
        held_ = 0;
      }
    }
    kept_.clear();
    if (newly_held) {
      TP_LOG_WARN(
          "{}: {} not sent (the server did not answer); {} kept and sent again when it "
          "answers (at most TrackingOptions::queue_capacity records are held)",
          service_, kept == 1 ? "1 record was" : fmt::format("{} records were", kept),
          kept == 1 ? "it is" : "they are");
    }
    if (arrived > 0) {
      TP_LOG_INFO(
          "{}: the server answers again: the records held back since a delivery failed ({}) "
          "were sent",
          service_, arrived);
    }
    if (kept > 0) {
      // The server is away: wait before the next try (the end's flush tries until its timeout).
      if (!sleep_unless_stopped(retry_backoff)) return;
      retry_backoff = std::min(retry_backoff * 2, options_.max_backoff());
      std::lock_guard<std::mutex> lock(mutex_);
      deliver_now_ = true;
    } else {
      retry_backoff = options_.initial_backoff();
    }
    if (gave_up()) {
      drop_after_giving_up(delivered);
      return;
    }
    if (stopping()) return;
    if (ending) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!queue_.empty()) continue;  // put during the flush: one more delivery
      }
      finish(status);
      return;
    }
  }
}

HttpResponse TrackingMonitor::request(const HttpRequest& req, const std::string& what,
                                      const std::function<bool(const HttpResponse&)>& expected) {
  std::chrono::milliseconds backoff = options_.initial_backoff();
  HttpResponse r;
  for (int attempt = 1;; ++attempt) {
    if (gave_up() || stopping()) {
      r = HttpResponse();
      r.error = "aborted";
      return r;
    }
    r = http_.send(req);
    const bool aborted = r.status == 0 && r.error == "aborted";
    if (aborted) return r;  // stop() or the flush timeout: neither a failure nor a request
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++sent_;
    }
    if (r.ok()) return r;
    if (expected && expected(r)) return r;
    const std::string where =
        fmt::format("{} ({} {})", what, req.method, url_without_query(req.url));
    if (r.status == 401 || r.status == 403) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++failed_;
      }
      give_up("the server refused the API key",
              fmt::format("{}: the {} server refused the API key (HTTP {}); check {}. {} "
                          "answered: {}",
                          service_, service_, r.status, credentials_hint(), where, r.describe()));
      return r;
    }
    if (r.certificate_refused) {
      // Not retried, here or by a later delivery: the certificate will not change in this run.
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++failed_;
      }
      give_up("the server's TLS certificate was refused",
              fmt::format("{}: {} failed: {}; the server's TLS certificate was refused: {}",
                          service_, where, r.describe(), certificate_hint()));
      return r;
    }
    if (!r.retryable() || attempt >= options_.max_attempts()) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++failed_;
      }
      const std::string kind = r.status == 0 ? "no answer" : "HTTP " + std::to_string(r.status);
      warn_once(kind, fmt::format("{}: {} failed{}: {}; training goes on (later failures are "
                                  "counted and the count is logged when training ends)",
                                  service_, where,
                                  r.retryable() ? fmt::format(" after {} attempts", attempt) : "",
                                  r.describe()));
      return r;
    }
    std::chrono::milliseconds wait = backoff;
    if (r.retry_after_seconds) {
      wait = std::chrono::milliseconds(static_cast<int64_t>(*r.retry_after_seconds * 1000));
    }
    wait = std::min(wait, options_.max_backoff());
    if (!sleep_unless_stopped(wait)) {
      r = HttpResponse();
      r.error = "aborted";
      return r;
    }
    backoff = std::min(backoff * 2, options_.max_backoff());
  }
}

namespace detail {

std::string environment_variable(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

int64_t unix_time_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace detail

}  // namespace trainpack
