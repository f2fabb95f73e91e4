// CometMLMonitor (tensorpack's CometMLMonitor): sends the run to Comet (comet.com, or a
// self-hosted server) over Comet's REST API v2 instead of the comet_ml SDK. See
// docs/experiment-tracking.md, "Comet" (the requests, resumed runs, the differences).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/arg.h>

#include "trainpack/callbacks/tracking_monitor.h"

namespace trainpack {

struct CometMLMonitorOptions {
  // Comet's API key. Empty: COMET_API_KEY.
  TORCH_ARG(std::string, api_key);
  // Empty: COMET_WORKSPACE.
  TORCH_ARG(std::string, workspace);
  // Empty: COMET_PROJECT_NAME.
  TORCH_ARG(std::string, project_name);
  // The new experiment's name; empty: Comet names it.
  TORCH_ARG(std::string, experiment_name);
  // Added to the new experiment (not to a continued one).
  TORCH_ARG(std::vector<std::string>, tags);
  // The REST API's base, `https://host/api/rest/v2`. Empty: from COMET_URL_OVERRIDE (see
  // rest_url_from_override), else https://www.comet.com/api/rest/v2.
  TORCH_ARG(std::string, url);
  // Continue this existing experiment instead of creating one (tensorpack's `experiment=`).
  TORCH_ARG(std::string, experiment_key);
  // The queue, retries, back-off and flush timeout.
  TORCH_ARG(TrackingOptions, tracking) = TrackingOptions();
};

// Sends scalars as metrics, images, the hyper-parameters, tags and the end of the run from
// TrackingMonitor's background thread (queue, retries, back-off, bounded flush): the training
// thread never waits for Comet. Options first, then Comet's environment variables: api_key /
// COMET_API_KEY, workspace / COMET_WORKSPACE, project_name / COMET_PROJECT_NAME, url /
// COMET_URL_OVERRIDE. Every request carries `Authorization: <API key>`.
// When: before_train starts the thread, which creates the experiment (POST
// /write/experiment/create, then the tags and log-other "Created from"), or continues the one the
// checkpoint or experiment_key names (nothing created, no tags), and keeps it alive (set-status,
// again each isAliveBeatDurationMillis); the hyper-parameters go as parameters.
// process_scalar: one POST /write/experiment/metric per value (step: global_step; epoch: the
// epochs finished when put). process_image: one PNG upload-asset per image,
// `<name>_step<global_step>[_<i>]`. after_epoch: the parameter `curr_epoch` (the SDK's
// log_epoch_end). after_train: the queue is flushed, then log-other `status` FINISHED | FAILED |
// KILLED and set-start-end-time.
// State: `experiment_key` (state_string), so a resumed run continues its experiment; the
// experiment_key option wins over it (with a warning). chief_only: true.
// Errors: std::invalid_argument naming the option and its environment variable for a missing API
// key, a missing workspace or project without experiment_key, a url that is not http(s)://, and
// TrackingOptions out of range; the key never appears in a message. A refused key (401/403) is
// one warning naming COMET_API_KEY, after which nothing is sent; other failures are
// TrackingMonitor's warnings. Training goes on.
class CometMLMonitor : public TrackingMonitor {
 public:
  explicit CometMLMonitor(CometMLMonitorOptions options = {});
  ~CometMLMonitor() override;

  std::string name() const override { return "CometMLMonitor"; }

  void process_image(const std::string& name, const at::Tensor& nhwc_uint8) override;

  // {"experiment_key": the key} once the experiment is known; empty before.
  CallbackState state() const override;
  void load_state(const CallbackState& state) override;

  // What the options and the environment resolved to (never the key).
  const std::string& rest_url() const { return url_; }
  const std::string& workspace() const { return workspace_; }
  const std::string& project_name() const { return project_; }
  // The experiment's key and link once known (any thread); "" before.
  std::string experiment_key() const;
  std::string experiment_link() const;

  // The REST base for a COMET_URL_OVERRIDE value: `https://h/clientlib/` -> `https://h/api/rest/v2`
  // (a value without `/clientlib` gets `/api/rest/v2` appended).
  static std::string rest_url_from_override(const std::string& value);

 protected:
  void _before_train() override;
  void _after_epoch() override;

  // "COMET_API_KEY or CometMLMonitorOptions::api_key", for the refused-key warning.
  std::string credentials_hint() const override;

  bool open() override;
  void deliver(std::vector<TrackingRecord>& batch) override;
  void finish(TrackingStatus status) override;

 private:
  HttpRequest post_json(const std::string& path, const std::string& body) const;
  void keep_alive(bool force);
  void send_metric(const TrackingRecord& r);
  void send_param(const TrackingRecord& r);
  void send_other(const std::string& key, const std::string& value, int64_t timestamp_ms);
  void send_image(const TrackingRecord& r);

  CometMLMonitorOptions options_;
  std::string api_key_, url_, workspace_, project_;

  mutable std::mutex key_mutex_;
  std::string experiment_key_;   // the key in use (background thread writes, any thread reads)
  std::string experiment_link_;  // its link
  std::string restored_key_;     // from load_state

  // Background thread only.
  int64_t curr_epoch_ = 0;   // epochs finished, as the records are sent
  int64_t beat_ms_ = 10000;  // Comet's isAliveBeatDurationMillis
  int64_t last_beat_ms_ = 0;
  bool image_warned_ = false;
  bool create_warned_ = false;
};

}  // namespace trainpack
