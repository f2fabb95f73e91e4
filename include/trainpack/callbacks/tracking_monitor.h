// TrackingMonitor: the common part of the monitors that send a run to an experiment-tracking
// service over HTTP (CometMLMonitor, MLflowMonitor); an addition to tensorpack. See
// docs/experiment-tracking.md, "How the monitors send" and "Writing a monitor for another service".
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include "trainpack/core/monitor_base.h"
#include "trainpack/utils/http_client.h"

namespace trainpack {

// How a run ended, as MLflow names it: FINISHED (training ended, also by StopTraining), FAILED
// (an exception ended it: after_train runs inside the trainer's catch block, where
// std::current_exception() is set), KILLED (a signal stopped it: Trainer::received_signal()).
enum class TrackingStatus { kFinished, kFailed, kKilled };
const char* tracking_status_name(TrackingStatus status);  // "FINISHED", "FAILED", "KILLED"

struct TrackingRecord {
  enum class Kind { kMetric, kParam, kImage, kOther };
  Kind kind = Kind::kMetric;
  std::string key;
  double value = 0;          // kMetric
  std::string text;          // kParam, kOther: the value as text
  int64_t step = 0;          // global_step when it was put
  int64_t epoch = 0;         // epoch_num when it was put
  int64_t timestamp_ms = 0;  // wall time, ms since the Unix epoch
  at::Tensor image;          // kImage: HWC uint8 on the CPU
};

struct TrackingOptions {
  // Records held at most; more are dropped (counted, one warning). > 0.
  TORCH_ARG(int64_t, queue_capacity) = 100000;
  // The background thread delivers when this many records are queued. > 0.
  TORCH_ARG(int64_t, batch_size) = 1000;
  // ... and when this much time passed since its last delivery, within long epochs. > 0.
  TORCH_ARG(std::chrono::milliseconds, send_interval) = std::chrono::seconds(30);
  // Tries per request (the first included) when it gets 429, 5xx or no answer. >= 1.
  TORCH_ARG(int, max_attempts) = 5;
  // The wait before the first retry; doubled for each next one, up to max_backoff. >= 0.
  TORCH_ARG(std::chrono::milliseconds, initial_backoff) = std::chrono::seconds(1);
  TORCH_ARG(std::chrono::milliseconds, max_backoff) = std::chrono::seconds(30);
  // How long after_train waits for what is queued to be sent and the run ended. >= 0.
  TORCH_ARG(std::chrono::milliseconds, flush_timeout) = std::chrono::seconds(30);
  // The same when a stop signal (SIGINT, SIGTERM, ...) ended training, when a scheduler's grace
  // period is short: the smaller of the two is used. >= 0.
  TORCH_ARG(std::chrono::milliseconds, flush_timeout_after_signal) = std::chrono::seconds(3);
  // Connection and request timeouts of each request.
  TORCH_ARG(HttpClientOptions, http) = HttpClientOptions();
};

// The base of the tracking monitors. The training thread only appends records to a bounded queue
// under a mutex (process_scalar: a metric with global_step, epoch_num and wall time; before_train:
// every HyperParamSetter's param as training starts; subclasses: enqueue()), never waiting on the
// network. A background thread, started in before_train, calls open() (retried with back-off),
// then deliver() with everything queued whenever an epoch ends, batch_size records are queued or
// send_interval passed, and finish(status) at the end.
// request() retries 429, 5xx and no answer up to max_attempts with a doubling back-off
// (Retry-After wins, capped at max_backoff); a 401/403 or a refused TLS certificate is one warning,
// after which nothing more is sent; other failures are one warning per kind, then counted. Records
// whose delivery found no server are kept and sent again with the next delivery (keep_for_retry),
// and their arrival is logged. A full queue drops new records (counted). after_train waits at most
// flush_timeout (flush_timeout_after_signal after a stop signal), then aborts and logs the records
// not sent. Secrets given to set_secret() are redacted from every message. A subclass that
// overrides _before_train, _trigger_epoch or _after_train calls these too (they start, wake, flush
// and join the thread).
class TrackingMonitor : public MonitorBase {
 public:
  ~TrackingMonitor() override;  // stops and joins the background thread (no flush)

  void process_scalar(const std::string& name, double value) override;

  // Counters (any thread), for tests and the final log line.
  int64_t records_queued() const;   // accepted by the queue
  int64_t records_dropped() const;  // refused by a full queue, or dropped after gave_up()
  int64_t requests_sent() const;    // HTTP requests made, retries included
  int64_t requests_failed() const;  // requests that failed for good (after their retries)
  // The status after_train gave the run (kFinished before that).
  TrackingStatus status() const;

 protected:
  // `service` names the service in messages ("Comet", "MLflow"). Throws std::invalid_argument
  // naming name() and the option for an option out of its range.
  TrackingMonitor(std::string service, TrackingOptions options);

  // Adds a secret to keep out of every message (API key, token, password, the base64 of a Basic
  // credential): each call adds one, "" is ignored. Call in the constructor.
  void set_secret(std::string secret);
  // `text` with every secret replaced by "<redacted>": for a subclass's own messages.
  std::string redact_secrets(std::string text) const;

  // Appends `record` to the queue (training thread; never blocks on the network).
  void enqueue(TrackingRecord record);

  // ---- the service: called on the background thread ----
  // Creates (or, resumed, reopens) the run. false when it failed for good (already logged through
  // request()); it is tried again after a back-off unless the monitor gave up (gave_up()).
  virtual bool open() = 0;
  // Sends `batch` (records in put order). Records the service could not be reached for go to
  // keep_for_retry(); records it refused (a 4xx other than 401/403/429) go to drop_refused().
  virtual void deliver(std::vector<TrackingRecord>& batch) = 0;
  // Ends the run with `status`.
  virtual void finish(TrackingStatus status) = 0;

  // Sends with retries and back-off (see the class comment), logging failures with `what` (e.g.
  // "log-batch"). Returns the last response. An answer for which `expected` is true (MLflow's 404
  // for a lookup) is returned as it is: not retried, warned about or counted as failed.
  HttpResponse request(const HttpRequest& request, const std::string& what,
                       const std::function<bool(const HttpResponse&)>& expected = {});
  // True once the monitor gave up on the server for this run (give_up()): it refused the key (401,
  // 403), this machine refused its TLS certificate, or the service's answers are not its own (a
  // proxy's login page). Nothing more is sent; what is put is dropped and counted.
  bool gave_up() const;
  // Gives up on the server for this run, for what trying again will not change: logs `message`
  // (redacted), followed by "Nothing more is sent to <service> in this run; training goes on", as
  // a warning; `because` is said in the final line ("the server refused the API key"). The
  // first call counts; later ones do nothing. open() and deliver() return soon after it.
  void give_up(const std::string& because, const std::string& message);
  // Logs `message` (redacted) as a warning the first time a failure of `kind` happens (a kind is
  // any short name: "HTTP 500", "deleted experiment").
  void warn_once(const std::string& kind, const std::string& message);
  // From deliver(): records not sent because the service could not be reached (no answer, 429
  // or 5xx after request()'s retries, or the flush timeout's abort). They go back to the head of
  // the queue, in order, and are sent with the next delivery, after a back-off (so a server that
  // was stopped and started again gets them, each once). While held they count against
  // queue_capacity: beyond it the oldest are dropped (counted). Background thread only.
  void keep_for_retry(std::vector<TrackingRecord> records);
  // From deliver(): `n` records the service refused (request() warned, naming the answer); they
  // are counted as dropped. Background thread only.
  void drop_refused(int64_t n);

  // What to check when the server refuses the key, for the warning "the <service> server refused
  // the API key (HTTP 401); check <credentials_hint()>", e.g. "COMET_API_KEY or
  // CometMLMonitorOptions::api_key". The default: "the API key given to the monitor".
  virtual std::string credentials_hint() const;
  // What to do when the server's TLS certificate is refused, for the warning that says so. The
  // default: add the CA to the system's store, or give it as HttpClientOptions::ca_file.
  virtual std::string certificate_hint() const;

  // Stops and joins the background thread without flushing (what the destructor does). A
  // subclass calls it first in its own destructor, so that the thread never calls open / deliver /
  // finish on a half-destroyed object (no after_train: training never started, or was cut short).
  void stop();

  void _before_train() override;
  void _trigger_epoch() override;
  void _after_train() override;

 private:
  void run();    // the background thread
  void serve();  // run()'s work: open, deliver, finish
  // Sleeps `d` unless stop() / a flush timeout asks the thread to end first (then false).
  bool sleep_unless_stopped(std::chrono::milliseconds d);
  bool stopping() const;
  // Drops `n` records that will never be sent (gave_up()): counted, not logged.
  void drop_after_giving_up(int64_t n);

  std::string service_;
  TrackingOptions options_;
  std::vector<std::string> secrets_;
  HttpClient http_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;  // the background thread waits on it
  std::condition_variable done_;  // after_train waits on it for the thread's end
  std::vector<TrackingRecord> queue_;
  bool deliver_now_ = false;
  bool ending_ = false;       // after_train asked for the final flush and the end
  bool stop_ = false;         // end now (destructor, stop(), flush timeout)
  bool worker_done_ = true;   // the background thread has nothing more to do
  bool closed_ = false;       // after_train is over: later records are dropped
  bool warned_full_ = false;  // the full queue was logged
  TrackingStatus status_ = TrackingStatus::kFinished;
  int64_t put_ = 0;  // records given to enqueue()
  int64_t queued_ = 0, dropped_ = 0, sent_ = 0, failed_ = 0;
  int64_t in_flight_ = 0;  // records of the batch deliver() is sending
  bool gave_up_ = false;
  std::string gave_up_because_;       // for the final line: "the server refused the API key", ...
  std::vector<std::string> warned_;   // kinds of failure already logged (background thread)
  std::vector<TrackingRecord> kept_;  // deliver()'s records for the next delivery (background)
  int64_t held_ = 0;                  // records kept since the last delivery that got through
  std::thread worker_;
};

namespace detail {
// What the tracking monitors share: the value of the environment variable `name` ("" when unset),
// and the wall time in milliseconds since the Unix epoch (the records' timestamps).
std::string environment_variable(const char* name);
int64_t unix_time_ms();
}  // namespace detail

}  // namespace trainpack
