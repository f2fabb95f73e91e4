// CometMLMonitor: sends the run to Comet (comet.com, or a self-hosted Comet server) over Comet's
// REST API v2, as tensorpack's CometMLMonitor does with the comet_ml SDK: scalars as metrics,
// images, the hyper-parameters, tags, and the end of the run. Requests go from a background
// thread (TrackingMonitor, callbacks/tracking_monitor.h: bounded queue, retries, back-off,
// warnings, the bounded flush at the end); the training thread never waits for Comet.
//
//   // COMET_API_KEY, COMET_WORKSPACE and COMET_PROJECT_NAME set in the environment:
//   monitors.push_back(std::make_shared<trainpack::CometMLMonitor>());
//   // or everything given:
//   monitors.push_back(std::make_shared<trainpack::CometMLMonitor>(
//       trainpack::CometMLMonitorOptions().api_key(key).workspace("team").project_name("mnist")
//           .experiment_name("baseline").tags({"lr0.1"})));
//
// Configuration (options first, then Comet's own environment variables, as Comet's SDKs read
// them): api_key / COMET_API_KEY, workspace / COMET_WORKSPACE, project_name / COMET_PROJECT_NAME,
// url / COMET_URL_OVERRIDE. COMET_URL_OVERRIDE holds what Comet's SDKs take for a self-hosted
// server, `https://comet.example.com/clientlib/`: the REST base is that address without
// `/clientlib/`, followed by `/api/rest/v2` (`https://comet.example.com/api/rest/v2`). The `url`
// option is the REST base itself. Unset: `https://www.comet.com/api/rest/v2`.
//
// When, and what it sends (every request carries `Authorization: <API key>`, the bare key, as
// Comet's REST API wants; JSON bodies unless said otherwise):
//   before_train  starts the background thread, which first
//                 - creates the experiment: POST /write/experiment/create {workspaceName,
//                   projectName[, experimentName]} -> {experimentKey, link}, logs INFO
//                   `CometMLMonitor: experiment at <link>`, then POST /write/experiment/tags
//                   {experimentKey, addedTags} when tags were given and POST
//                   /write/experiment/log-other {key: "Created from", value: "trainpack"};
//                 - or, for a resumed run (the experiment key saved in the checkpoint) or the
//                   experiment_key option, continues that experiment: nothing is created, tags
//                   are not sent again, INFO `CometMLMonitor: continuing experiment <key>`;
//                 - then GET /write/experiment/set-status?experimentKey=<key> (Comet's
//                   keep-alive: the experiment shows as running). It is sent again after a
//                   delivery once Comet's answer `isAliveBeatDurationMillis` has passed: during
//                   long runs at epoch ends and every TrackingOptions::send_interval in which
//                   records were put. An answer to create without an experimentKey is one
//                   warning; create is tried again with back-off.
//                 The hyper-parameters (TrackingMonitor: every HyperParamSetter's param as
//                 training starts) go to POST /write/experiment/parameter {parameterName,
//                 parameterValue (text), step, timestamp}.
//   process_scalar  POST /write/experiment/metric {experimentKey, metricName, metricValue, step
//                 (global_step when put), epoch, timestamp (ms)}; metricValue is a JSON number,
//                 or the string "NaN", "Infinity" or "-Infinity" (which JSON cannot hold).
//                 `epoch` is what Comet's SDK sends after log_epoch_end: the number of epochs
//                 finished when the value was put (a value put in the steps of epoch N carries
//                 N-1; one put at its end, e.g. a validation error, carries N).
//   process_image  one image per item of the batch, named `<name>_step<global_step>`, with
//                 `_<i>` added when the batch has more than one image (i from 0), PNG-encoded
//                 on the background thread and uploaded as Comet's SDK uploads images: POST
//                 /write/experiment/upload-asset?experimentKey=&fileName=<name>&type=image
//                 &extension=png&step=&epoch=, a multipart/form-data body with one part `file`.
//   after_epoch   log_epoch_end: POST /write/experiment/parameter {parameterName: "curr_epoch",
//                 parameterValue: epoch_num} (what the SDK's log_epoch_end sends); the epoch
//                 also travels with every later metric (above). The epoch's records are sent.
//   after_train   what is queued is sent (within TrackingOptions::flush_timeout), then the end:
//                 POST /write/experiment/log-other {key: "status", value: FINISHED | FAILED |
//                 KILLED} (TrackingStatus) and POST /write/experiment/set-start-end-time
//                 {experimentKey, endTimeMillis}. Comet's REST API has no "end" call; the SDK's
//                 end() only stops its heartbeat, which the end time replaces here.
// Requests per epoch: one per metric, one per image, one curr_epoch parameter and at most one
// set-status per isAliveBeatDurationMillis (Comet's REST API takes one metric per request).
//
// Resumed runs: the experiment key is this monitor's state() (entry `experiment_key`, the key's
// bytes as a 1-d int64 tensor, core/callback_state.h's state_string), so a run resumed from a
// checkpoint (AutoResumeTrainConfig, SaverRestore) continues the same experiment. A checkpoint
// saved before the experiment was created holds no key; its run creates a new experiment. An
// experiment_key option wins over the checkpoint's (a warning names both).
//
// chief_only: true (one experiment per run, sent by the chief).
// Errors: std::invalid_argument naming CometMLMonitor, the option and its environment variable
// when the API key is missing (`api_key` / COMET_API_KEY), when the workspace or the project is
// missing and no experiment_key is given (`workspace` / COMET_WORKSPACE, `project_name` /
// COMET_PROJECT_NAME), when url / COMET_URL_OVERRIDE is not an http:// or https:// address, and
// for TrackingOptions out of range (TrackingMonitor). The API key never appears in a message.
// Comet refusing the key (401/403) is one warning naming COMET_API_KEY; training goes on and
// nothing more is sent. Other failures: TrackingMonitor's warnings (once, then a count).
//
// Differences from tensorpack:
// - REST instead of the comet_ml SDK: no source code, graph, git metadata, installed packages,
//   system details, console output or GPU/CPU metrics are uploaded (tensorpack's defaults:
//   log_code, the graph in before_train, the `tensorpack` dependency).
// - Images are PNG (tensorpack: JPEG, as comet_ml's log_image(image_format="jpeg")).
// - The end of the run is the log-other `status` and the end time (the SDK's end()).
// - The experiment key is saved in checkpoints: a resumed run continues its experiment
//   (tensorpack creates a new one unless `experiment=` is passed).
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
  // The REST API's base, `https://host/api/rest/v2`. Empty: from COMET_URL_OVERRIDE (see the top
  // of this file), else https://www.comet.com/api/rest/v2.
  TORCH_ARG(std::string, url);
  // Continue this existing experiment instead of creating one (tensorpack's `experiment=`).
  TORCH_ARG(std::string, experiment_key);
  // The queue, retries, back-off and flush timeout.
  TORCH_ARG(TrackingOptions, tracking) = TrackingOptions();
};

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
