// MLflowMonitor: sends the run to an MLflow tracking server over its REST API 2.0 (the server of
// `mlflow server`, a self-hosted one behind a proxy, or a managed one that speaks the same API):
// the scalars put to the monitors as metrics, the hyper-parameters as params, and how the run
// ended. A monitor of its own, next to JSONWriter and TFEventWriter; never in the way of training
// (trainpack/callbacks/tracking_monitor.h: a bounded queue, a background thread, retries).
//
//   // MLFLOW_TRACKING_URI=http://127.0.0.1:5000 in the environment:
//   monitors.push_back(std::make_shared<trainpack::MLflowMonitor>());
//   // or everything given:
//   monitors.push_back(std::make_shared<trainpack::MLflowMonitor>(
//       trainpack::MLflowMonitorOptions().tracking_uri("http://mlflow.lan:5000")
//           .experiment_name("fashion-mnist").tags({{"team", "vision"}})));
//
// What is sent, and when (all from the background thread; <base> = <uri>/api/2.0/mlflow):
//   opening   GET <base>/experiments/get-by-name?experiment_name=<name>; when the answer is
//             RESOURCE_DOES_NOT_EXIST, POST experiments/create {name} (RESOURCE_ALREADY_EXISTS,
//             another process creating it at the same moment, is followed by a second lookup).
//             Then POST runs/create {experiment_id, start_time, run_name, tags: mlflow.runName,
//             mlflow.source.name (this program's path), mlflow.source.type LOCAL, mlflow.user
//             ($USER) and the options' tags}. A resumed run (its run id restored from the
//             checkpoint, see below) or a given run_id is reopened instead: POST runs/update
//             {run_id, status: RUNNING}. The run's id and its page are logged at INFO:
//             `MLflowMonitor: run <id> in experiment '<name>': <uri>/#/experiments/<e>/runs/<id>`.
//   delivery  POST runs/log-batch {run_id, metrics: [{key, value, timestamp, step}], params:
//             [{key, value}], tags}, at every epoch end, every TrackingOptions::batch_size
//             records and every send_interval; split so that no request holds more than 1000
//             metrics, 100 params, 100 tags, 1000 entries in all or 1,000,000 bytes (MLflow's
//             limits). A metric's step is the global_step when it was put, its timestamp the wall
//             time then (ms); NaN and the infinities are sent as "NaN", "Infinity", "-Infinity"
//             (protobuf's JSON form, what MLflow's own client sends).
//   the end   POST runs/update {run_id, status: FINISHED | FAILED | KILLED, end_time} in
//             after_train (TrackingStatus: KILLED when SIGINT/SIGTERM stopped training, FAILED
//             when an exception ended it).
// Params: the hyper-parameters that HyperParamSetters hold as training starts, by their readable
// name (`learning_rate`). MLflow refuses to change a param once logged, so they are sent only by
// the run that created the MLflow run: a resumed run (or a given run_id) sends none; a key given
// twice with another value keeps its first (one INFO line says so).
// Names: MLflow accepts letters, digits, `_ - . /` and spaces in a metric/param/tag name; every
// other character (and each multi-byte UTF-8 character) becomes `_`, empty and `.` path parts are
// removed, a `..` part becomes `__`, and names are cut at 250 bytes (mlflow_name() below):
// `Throughput (samples/sec)` -> `Throughput _samples/sec_`.
// Images are not sent: MLflow's REST API 2.0 has no image endpoint (its clients upload image files
// as artifacts to the artifact store, which this monitor does not reach).
//
// Resumed runs: state() holds the run's id and its experiment's id (as text,
// core/callback_state.h's state_string), so that ModelSaver's checkpoint carries them and a run
// resumed from it (AutoResumeTrainConfig, SaverRestore) logs into the same MLflow run, its steps
// continuing. A checkpoint saved before the run was created on the server (the server was
// unreachable until then) holds no id: the resumed run then creates a new MLflow run; so does a run
// whose MLflow run was deleted on the server (with a warning).
//
// Configuration (each option, else its environment variable, as MLflow's own client reads them):
//   tracking_uri     MLFLOW_TRACKING_URI; http:// or https:// only
//   experiment_name  MLFLOW_EXPERIMENT_NAME, else "Default"
//   run_name         the logger directory's name, else none (the server picks one)
//   run_id           MLFLOW_RUN_ID, else none (a new run is created)
//   authentication   MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (both set): HTTP Basic;
//                    else MLFLOW_TRACKING_TOKEN: `Authorization: Bearer <token>`; else the user and
//                    password of the URI (`http://user:pass@host`, percent-encoded; the URI is
//                    kept, sent to and logged without them); else none. The password and the
//                    token never appear in a log line, an error or a file
//                    (TrackingMonitor::set_secret; an error quotes a refused URI with everything
//                    up to its last '@' replaced by `***@`, utils/http_client.h url_for_display).
//                    An answer of 401/403 is one warning naming these variables
//                    (credentials_hint), and nothing more is sent.
// When: before_train queues the params and starts the background thread; every process_scalar
// queues a metric; after_train ends the run and waits at most TrackingOptions::flush_timeout.
// Puts: nothing. Writes: nothing (a checkpoint holds its state).
// chief_only: true (one MLflow run per training, sent by the chief).
// Errors (std::invalid_argument at construction, naming MLflowMonitor and the option): no
// tracking URI (neither the option nor MLFLOW_TRACKING_URI); a URI that is not http(s) (a file:
// URI or a path: MLflow's local file store is not a server; start one with `mlflow server`;
// host:port without a scheme); a URI with an '@' after its host part (a password holding '/',
// '?' or '#' unencoded: percent-encode them) or without a host; an
// experiment name longer than MLflow's 500 bytes; a tag name MLflow refuses or one of MLflow's own
// (`mlflow.*`); a TrackingOptions value out of range. Nothing the server does is an exception:
// failures are warnings (TrackingMonitor); a deleted experiment is one too (restore it or use
// another name), and nothing is sent. RESOURCE_DOES_NOT_EXIST from the lookup and
// RESOURCE_ALREADY_EXISTS from the create are answers, not failures (neither warned nor counted).
//
// Differences from tensorpack: an addition (tensorpack has no MLflow monitor);
// docs/experiment-tracking.md has the set-up.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <torch/arg.h>

#include "trainpack/callbacks/tracking_monitor.h"

namespace trainpack {

// A run's tags: name -> value.
using MLflowTags = std::map<std::string, std::string>;

struct MLflowMonitorOptions {
  // "http(s)://host:port[/prefix]", the scheme in any case (a user and password in it,
  // "http://user:pass@host", are sent as HTTP Basic credentials; '/', '?', '#' and '@' in them
  // percent-encoded). Empty: MLFLOW_TRACKING_URI.
  TORCH_ARG(std::string, tracking_uri);
  // Empty: MLFLOW_EXPERIMENT_NAME, else "Default". Created on the server when missing.
  TORCH_ARG(std::string, experiment_name);
  // Empty: the logger directory's name (when one is set at construction).
  TORCH_ARG(std::string, run_name);
  // Tags of a new run, besides MLflow's own (mlflow.runName, mlflow.source.*, mlflow.user).
  TORCH_ARG(MLflowTags, tags);
  // Log into this existing run instead of creating one. Empty: MLFLOW_RUN_ID, else a new run.
  TORCH_ARG(std::string, run_id);
  // Queue, batches, retries, timeouts (trainpack/callbacks/tracking_monitor.h).
  TORCH_ARG(TrackingOptions, tracking) = TrackingOptions();
};

class MLflowMonitor : public TrackingMonitor {
 public:
  // MLflow's limits per log-batch request (mlflow/utils/validation.py).
  static constexpr int kMaxMetricsPerBatch = 1000;
  static constexpr int kMaxParamsPerBatch = 100;
  static constexpr int kMaxTagsPerBatch = 100;
  static constexpr int kMaxEntriesPerBatch = 1000;
  static constexpr int kMaxBatchBytes = 1000000;

  explicit MLflowMonitor(MLflowMonitorOptions options = {});
  ~MLflowMonitor() override;

  std::string name() const override { return "MLflowMonitor"; }

  // The resolved configuration (the URI without a trailing '/' or credentials, its scheme in
  // lower case).
  const std::string& tracking_uri() const { return uri_; }
  const std::string& experiment_name() const { return experiment_name_; }
  const std::string& run_name() const { return run_name_; }
  // "" until the run is created or reopened (any thread).
  std::string run_id() const;
  std::string experiment_id() const;
  // "<uri>/#/experiments/<experiment id>/runs/<run id>", "" until then.
  std::string run_url() const;

  // {"run_id", "experiment_id"} as text once the run exists; empty before.
  CallbackState state() const override;
  void load_state(const CallbackState& state) override;

 protected:
  bool open() override;
  void deliver(std::vector<TrackingRecord>& batch) override;
  void finish(TrackingStatus status) override;
  std::string credentials_hint() const override;

 private:
  HttpRequest make_request(const std::string& method, const std::string& endpoint,
                           std::string body) const;
  // The experiment's id by name, created when missing; "" when that failed.
  std::string find_or_create_experiment();
  bool create_run();
  bool reopen_run(const std::string& run_id, bool restored);
  void post_batch(const std::vector<std::string>& metrics, const std::vector<std::string>& params,
                  const std::vector<std::string>& tags);
  void set_run(std::string run_id, std::string experiment_id);

  std::string uri_;  // without a trailing '/'
  std::string experiment_name_;
  std::string run_name_;
  std::map<std::string, std::string> tags_;
  std::string given_run_id_;
  std::string auth_header_;  // "" or "Basic ..." / "Bearer ..."
  std::string auth_source_;  // which variables it came from, for the 401 hint

  mutable std::mutex run_mutex_;
  std::string run_id_;
  std::string experiment_id_;
  std::string restored_run_id_;
  std::string restored_experiment_id_;

  // Background thread only.
  bool send_params_ = false;
  std::map<std::string, std::string> params_sent_;
};

namespace detail {
// A metric/param/tag name as MLflow accepts it: characters other than ASCII letters, digits,
// `_ - . /` and space become `_` (a multi-byte UTF-8 character one `_`); empty, `.` and `..`
// path parts are removed (`a//b` -> `a/b`, `./x` -> `x`, `../x` -> `__/x`); at most 250 bytes;
// an empty result is `_`.
std::string mlflow_name(const std::string& name);
// Why MLflow refuses `name` as a metric, param or tag name, or "" when it accepts it.
std::string mlflow_name_problem(const std::string& name);
}  // namespace detail

}  // namespace trainpack
