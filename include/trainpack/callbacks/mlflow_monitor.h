// MLflowMonitor: sends the run to an MLflow tracking server over its REST API 2.0 (an addition:
// tensorpack has no MLflow monitor). See docs/experiment-tracking.md, "MLflow" (set-up, the
// requests, names, resumed runs).
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
// A run's params: name -> value.
using MLflowParams = std::map<std::string, std::string>;

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
  // Params of a new run besides the hyper-parameters that HyperParamSetters set (Lightning's
  // log_hyperparams: the batch size, the model's name, ...). Names as detail::mlflow_name makes
  // them; a value over MLflow's 6000 bytes is cut to its first 6000 (whole UTF-8 characters),
  // with a warning naming the param (MLflow refuses the whole request with it otherwise).
  TORCH_ARG(MLflowParams, params);
  // Log into this existing run instead of creating one. Empty: MLFLOW_RUN_ID, else a new run.
  TORCH_ARG(std::string, run_id);
  // Queue, batches, retries, timeouts (trainpack/callbacks/tracking_monitor.h).
  TORCH_ARG(TrackingOptions, tracking) = TrackingOptions();
};

// Sends the scalars put to the monitors as metrics, the hyper-parameters as params, and how the
// run ended, from TrackingMonitor's background thread (queue, retries, bounded flush). Options
// first, then MLflow's client's variables: MLFLOW_TRACKING_URI (http(s) only),
// MLFLOW_EXPERIMENT_NAME (else "Default"), MLFLOW_RUN_ID; run_name: the logger directory's name.
// Authentication: MLFLOW_TRACKING_USERNAME + MLFLOW_TRACKING_PASSWORD (HTTP Basic), else
// MLFLOW_TRACKING_TOKEN (Bearer), else the URI's user:pass; secrets never reach a log or error.
// TLS, as MLflow's client: MLFLOW_TRACKING_SERVER_CERT_PATH is the CA file to trust (unless
// HttpClientOptions::ca_file is given); MLFLOW_TRACKING_INSECURE_TLS=true skips the check (a
// warning says so).
// When: before_train queues the params (options' params, then the hyper-parameters) and starts
// the thread, which finds or creates the
// experiment and creates the run (or reopens the restored run or run_id: runs/update RUNNING) and
// logs its page at INFO; deliveries are runs/log-batch (metric step: global_step when put),
// split by MLflow's limits, at every epoch end, every batch_size records and every send_interval
// (records whose request found no server are sent again with the next delivery; those MLflow
// refuses with a 4xx are dropped, counted and named in a warning);
// after_train sends runs/update FINISHED | FAILED | KILLED with the end time, waiting at most
// TrackingOptions::flush_timeout. Params are sent only by the run that created the MLflow run.
// Names are made MLflow's (detail::mlflow_name). Images are not sent. chief_only: true.
// State: `run_id` and `experiment_id` (state_string), so a resumed run logs into the same run.
// Errors (std::invalid_argument at construction, naming the option): no tracking URI; a URI that
// is not http(s), has an '@' after its host or no host; an experiment name over 500 bytes; a tag
// name MLflow refuses or of its own (`mlflow.*`); TrackingOptions out of range. Nothing the
// server does is an exception: failures are TrackingMonitor's warnings; a 401/403 is one warning
// naming the variables, after which nothing is sent.
class MLflowMonitor : public TrackingMonitor {
 public:
  // MLflow's limits per log-batch request (mlflow/utils/validation.py).
  static constexpr int kMaxMetricsPerBatch = 1000;
  static constexpr int kMaxParamsPerBatch = 100;
  static constexpr int kMaxTagsPerBatch = 100;
  static constexpr int kMaxEntriesPerBatch = 1000;
  static constexpr int kMaxBatchBytes = 1000000;
  // The longest param and tag values sent, in bytes: MLflow's MAX_PARAM_VAL_LENGTH, and the
  // MAX_TAG_VAL_LENGTH of older servers (MLflow 3 takes tags of 8000).
  static constexpr size_t kMaxParamValueBytes = 6000;
  static constexpr size_t kMaxTagValueBytes = 5000;

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
  void _before_train() override;
  bool open() override;
  void deliver(std::vector<TrackingRecord>& batch) override;
  void finish(TrackingStatus status) override;
  std::string credentials_hint() const override;
  std::string certificate_hint() const override;

 private:
  HttpRequest make_request(const std::string& method, const std::string& endpoint,
                           std::string body) const;
  // The experiment's id by name, created when missing; "" when that failed.
  std::string find_or_create_experiment();
  bool create_run();
  bool reopen_run(const std::string& run_id, bool restored);
  HttpResponse post_batch(const std::vector<std::string>& metrics,
                          const std::vector<std::string>& params,
                          const std::vector<std::string>& tags);
  void set_run(std::string run_id, std::string experiment_id);

  std::string uri_;  // without a trailing '/'
  std::string experiment_name_;
  std::string run_name_;
  std::map<std::string, std::string> tags_;
  MLflowParams params_;  // options' params, values cut to kMaxParamValueBytes
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
// Why `name` is not a metric, param or tag name that every MLflow server takes, or "" when it is
// (a server on Linux also takes ':' and non-ASCII letters; one on Windows refuses ':').
std::string mlflow_name_problem(const std::string& name);
}  // namespace detail

}  // namespace trainpack
