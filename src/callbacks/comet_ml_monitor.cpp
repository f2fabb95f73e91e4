#include "trainpack/callbacks/comet_ml_monitor.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainpack/core/callback_state.h"
#include "trainpack/utils/logger.h"
#include "trainpack/utils/png.h"

namespace trainpack {
namespace {

using json = nlohmann::json;

constexpr const char* kDefaultRestUrl = "https://www.comet.com/api/rest/v2";
constexpr const char* kStateKey = "experiment_key";

int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string strip_trailing_slashes(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

// "http://..." or "https://..." (the scheme in any case) with something after "://".
bool is_http_url(const std::string& s) {
  const UrlParts parts = split_url(s);
  return (parts.scheme == "http" || parts.scheme == "https") && !parts.rest.empty();
}

// `url` with its scheme in lower case. Throws std::invalid_argument naming `what` when the URL
// holds an '@' (user information, or a password holding '/', '?' or '#'): Comet takes the API key
// alone, and the message quotes the URL without anything up to its last '@' (url_for_display).
std::string checked_http_url(const std::string& url, const std::string& what,
                             const std::string& api_key) {
  const UrlParts parts = split_url(url);
  if (parts.has_userinfo || parts.at_after_host) {
    throw std::invalid_argument(fmt::format(
        "CometMLMonitor: {} ('{}') holds an '@' (a user name and password before the host, "
        "perhaps one holding '/', '?' or '#'); Comet authenticates with the API key alone "
        "(CometMLMonitorOptions::api_key or COMET_API_KEY): remove them from the URL (an '@' of "
        "its path is written %40)",
        what, redact(url_for_display(url), api_key)));
  }
  return parts.scheme + "://" + parts.rest;
}

// The web address of the server whose REST base is `rest_url` (`https://h/api/rest/v2` ->
// `https://h`), for links to continued experiments.
std::string frontend_of(const std::string& rest_url) {
  const std::string suffix = "/api/rest/v2";
  return ends_with(rest_url, suffix) ? rest_url.substr(0, rest_url.size() - suffix.size())
                                     : rest_url;
}

// A metric value as JSON: a number, or the string Comet's SDKs send for what JSON cannot hold.
json metric_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return v;
}

// A multipart/form-data boundary that the PNG bytes will not contain (a fresh one per request).
std::string make_boundary() {
  static std::atomic<uint64_t> counter{0};
  const uint64_t n = counter.fetch_add(1);
  return fmt::format("----trainpack-comet-{:016x}{:08x}",
                     static_cast<uint64_t>(detail::unix_time_ms()) ^ 0x5a17, n);
}

}  // namespace

std::string CometMLMonitor::rest_url_from_override(const std::string& value) {
  std::string base = strip_trailing_slashes(value);
  if (ends_with(base, "/clientlib"))
    base = strip_trailing_slashes(base.substr(0, base.size() - 10));
  if (ends_with(base, "/api/rest/v2")) return base;
  return base + "/api/rest/v2";
}

CometMLMonitor::CometMLMonitor(CometMLMonitorOptions options)
    : TrackingMonitor("Comet", options.tracking()), options_(std::move(options)) {
  set_chief_only(true);
  api_key_ = options_.api_key().empty() ? detail::environment_variable("COMET_API_KEY")
                                        : options_.api_key();
  if (api_key_.empty()) {
    throw std::invalid_argument(
        "CometMLMonitor: no API key: set CometMLMonitorOptions::api_key or the environment "
        "variable COMET_API_KEY (Comet's account settings show the key)");
  }
  set_secret(api_key_);
  workspace_ = options_.workspace().empty() ? detail::environment_variable("COMET_WORKSPACE")
                                            : options_.workspace();
  project_ = options_.project_name().empty() ? detail::environment_variable("COMET_PROJECT_NAME")
                                             : options_.project_name();
  if (options_.experiment_key().empty()) {
    if (workspace_.empty()) {
      throw std::invalid_argument(
          "CometMLMonitor: no workspace: set CometMLMonitorOptions::workspace or the environment "
          "variable COMET_WORKSPACE (or experiment_key, to continue an existing experiment)");
    }
    if (project_.empty()) {
      throw std::invalid_argument(
          "CometMLMonitor: no project: set CometMLMonitorOptions::project_name or the environment "
          "variable COMET_PROJECT_NAME (or experiment_key, to continue an existing experiment)");
    }
  }
  if (!options_.url().empty()) {
    url_ = strip_trailing_slashes(options_.url());
    if (!is_http_url(url_)) {
      throw std::invalid_argument(fmt::format(
          "CometMLMonitor: url '{}' is not an http:// or https:// address; give the REST API's "
          "base, e.g. https://www.comet.com/api/rest/v2",
          redact(url_for_display(options_.url()), api_key_)));
    }
    url_ = strip_trailing_slashes(checked_http_url(options_.url(), "url", api_key_));
  } else if (const std::string override_url = detail::environment_variable("COMET_URL_OVERRIDE");
             !override_url.empty()) {
    url_ = rest_url_from_override(override_url);
    if (!is_http_url(url_)) {
      throw std::invalid_argument(fmt::format(
          "CometMLMonitor: the environment variable COMET_URL_OVERRIDE ('{}') is not an http:// "
          "or https:// address; Comet's form for a self-hosted server is "
          "https://comet.example.com/clientlib/ (or set CometMLMonitorOptions::url)",
          redact(url_for_display(override_url), api_key_)));
    }
    url_ = rest_url_from_override(
        checked_http_url(override_url, "the environment variable COMET_URL_OVERRIDE", api_key_));
  } else {
    url_ = kDefaultRestUrl;
  }
}

// The background thread calls open / deliver / finish of this class: it must end before the
// members they use are destroyed.
CometMLMonitor::~CometMLMonitor() { stop(); }

std::string CometMLMonitor::credentials_hint() const {
  return "COMET_API_KEY or CometMLMonitorOptions::api_key";
}

std::string CometMLMonitor::experiment_key() const {
  std::lock_guard<std::mutex> lock(key_mutex_);
  return experiment_key_;
}

std::string CometMLMonitor::experiment_link() const {
  std::lock_guard<std::mutex> lock(key_mutex_);
  return experiment_link_;
}

CallbackState CometMLMonitor::state() const {
  std::lock_guard<std::mutex> lock(key_mutex_);
  const std::string& key = experiment_key_.empty() ? restored_key_ : experiment_key_;
  if (key.empty()) return {};
  return {{kStateKey, state_string(key)}};
}

void CometMLMonitor::load_state(const CallbackState& state) {
  check_state_keys(name(), state, {kStateKey});
  if (find_state(state, kStateKey) == nullptr) return;  // saved before the experiment existed
  std::string key = state_string(name(), state, kStateKey);
  std::lock_guard<std::mutex> lock(key_mutex_);
  restored_key_ = std::move(key);
}

void CometMLMonitor::_before_train() {
  // Set before the background thread starts (TrackingMonitor::_before_train), which reads them;
  // a thread left by an earlier run without after_train is stopped first.
  stop();
  curr_epoch_ = epoch_num();
  last_beat_ms_ = 0;
  image_warned_ = create_warned_ = false;
  if (!options_.experiment_key().empty() && !restored_key_.empty() &&
      options_.experiment_key() != restored_key_) {
    TP_LOG_WARN(
        "CometMLMonitor: the checkpoint's experiment is {}, but experiment_key is {}: sending to "
        "{}",
        restored_key_, options_.experiment_key(), options_.experiment_key());
  }
  TrackingMonitor::_before_train();
}

void CometMLMonitor::_after_epoch() {
  // log_epoch_end: Comet's SDK logs the parameter curr_epoch; the marker also sets the epoch that
  // the later metrics carry (deliver).
  TrackingRecord r;
  r.kind = TrackingRecord::Kind::kParam;
  r.key = "curr_epoch";
  r.text = std::to_string(epoch_num());
  r.step = global_step();
  r.epoch = epoch_num();
  r.timestamp_ms = detail::unix_time_ms();
  enqueue(std::move(r));
}

void CometMLMonitor::process_image(const std::string& name, const at::Tensor& nhwc_uint8) {
  if (!is_set_up() || !nhwc_uint8.defined() || nhwc_uint8.dim() != 4) return;
  const int64_t n = nhwc_uint8.size(0);
  const int64_t gs = global_step();
  const int64_t ts = detail::unix_time_ms();
  for (int64_t i = 0; i < n; ++i) {
    TrackingRecord r;
    r.kind = TrackingRecord::Kind::kImage;
    r.key = n > 1 ? fmt::format("{}_step{}_{}", name, gs, i) : fmt::format("{}_step{}", name, gs);
    // A copy: the record outlives this call and the caller's tensor.
    r.image = nhwc_uint8.select(0, i).clone();
    r.step = gs;
    r.epoch = epoch_num();
    r.timestamp_ms = ts;
    enqueue(std::move(r));
  }
}

HttpRequest CometMLMonitor::post_json(const std::string& path, const std::string& body) const {
  return HttpRequest{"POST",
                     url_ + path,
                     {{"Authorization", api_key_}, {"Content-Type", "application/json"}},
                     body};
}

bool CometMLMonitor::open() {
  std::string key = options_.experiment_key();
  if (key.empty()) {
    std::lock_guard<std::mutex> lock(key_mutex_);
    key = restored_key_;
  }
  if (!key.empty()) {
    std::string link;
    if (!workspace_.empty() && !project_.empty()) {
      link = fmt::format("{}/{}/{}/{}", frontend_of(url_), workspace_, project_, key);
    }
    {
      std::lock_guard<std::mutex> lock(key_mutex_);
      experiment_key_ = key;
      experiment_link_ = link;
    }
    TP_LOG_INFO("CometMLMonitor: continuing experiment {}{}", key,
                link.empty() ? std::string() : " at " + link);
    keep_alive(/*force=*/true);
    return true;
  }

  json body = {{"workspaceName", workspace_}, {"projectName", project_}};
  if (!options_.experiment_name().empty()) body["experimentName"] = options_.experiment_name();
  const HttpResponse r = request(post_json("/write/experiment/create", body.dump()), "create");
  if (!r.ok()) return false;
  const json answer = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (answer.is_discarded() || !answer.is_object() || !answer.contains("experimentKey") ||
      !answer["experimentKey"].is_string() || answer["experimentKey"].get<std::string>().empty()) {
    if (!create_warned_) {  // once: open() is tried again with back-off
      create_warned_ = true;
      TP_LOG_WARN("{}", redact(fmt::format("CometMLMonitor: Comet's answer to create has no "
                                           "experimentKey ({}); trying again with back-off; "
                                           "training goes on",
                                           r.describe()),
                               api_key_));
    }
    return false;
  }
  key = answer["experimentKey"].get<std::string>();
  std::string link;
  if (answer.contains("link") && answer["link"].is_string())
    link = answer["link"].get<std::string>();
  if (link.empty()) link = fmt::format("{}/{}/{}/{}", frontend_of(url_), workspace_, project_, key);
  {
    std::lock_guard<std::mutex> lock(key_mutex_);
    experiment_key_ = key;
    experiment_link_ = link;
  }
  TP_LOG_INFO("CometMLMonitor: experiment at {}", redact(link, api_key_));
  if (!options_.tags().empty() && !gave_up()) {
    json tags = {{"experimentKey", key}, {"addedTags", options_.tags()}};
    request(post_json("/write/experiment/tags", tags.dump()), "tags");
  }
  if (!gave_up()) send_other("Created from", "trainpack", detail::unix_time_ms());
  if (!gave_up()) keep_alive(/*force=*/true);
  return true;
}

void CometMLMonitor::keep_alive(bool force) {
  if (gave_up()) return;
  const int64_t now = steady_ms();
  if (!force && now - last_beat_ms_ < beat_ms_) return;
  last_beat_ms_ = now;
  HttpRequest req{
      "GET",
      url_ + "/write/experiment/set-status?experimentKey=" + url_encode(experiment_key()),
      {{"Authorization", api_key_}},
      ""};
  const HttpResponse r = request(req, "set-status");
  if (!r.ok()) return;
  const json answer = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (!answer.is_discarded() && answer.is_object() &&
      answer.contains("isAliveBeatDurationMillis") &&
      answer["isAliveBeatDurationMillis"].is_number_integer()) {
    const int64_t beat = answer["isAliveBeatDurationMillis"].get<int64_t>();
    if (beat > 0) beat_ms_ = beat;
  }
}

void CometMLMonitor::send_metric(const TrackingRecord& r) {
  const json body = {{"experimentKey", experiment_key()},
                     {"metricName", r.key},
                     {"metricValue", metric_value(r.value)},
                     {"step", r.step},
                     {"epoch", curr_epoch_},
                     {"timestamp", r.timestamp_ms}};
  request(post_json("/write/experiment/metric", body.dump()), "metric");
}

void CometMLMonitor::send_param(const TrackingRecord& r) {
  const json body = {{"experimentKey", experiment_key()},
                     {"parameterName", r.key},
                     {"parameterValue", r.text},
                     {"step", r.step},
                     {"timestamp", r.timestamp_ms}};
  request(post_json("/write/experiment/parameter", body.dump()), "parameter");
}

void CometMLMonitor::send_other(const std::string& key, const std::string& value,
                                int64_t timestamp_ms) {
  const json body = {{"experimentKey", experiment_key()},
                     {"key", key},
                     {"value", value},
                     {"timestamp", timestamp_ms}};
  request(post_json("/write/experiment/log-other", body.dump()), "log-other");
}

void CometMLMonitor::send_image(const TrackingRecord& r) {
  std::string png;
  try {
    const at::Tensor img = r.image.contiguous();
    if (img.dim() != 3) throw std::invalid_argument("not an HWC image");
    png = encode_png(img.data_ptr<uint8_t>(), img.size(0), img.size(1), img.size(2));
  } catch (const std::exception& e) {
    if (!image_warned_) {
      image_warned_ = true;
      TP_LOG_WARN("CometMLMonitor: image '{}' cannot be encoded as a PNG ({}); it is not sent",
                  r.key, e.what());
    }
    return;
  }
  std::string file_name = r.key + ".png";  // for the part's header: no quote, no line break
  for (char& c : file_name) {
    if (c == '"' || c == '\r' || c == '\n') c = '_';
  }
  const std::string boundary = make_boundary();
  std::string body;
  body.reserve(png.size() + 256);
  body += "--" + boundary + "\r\n";
  body += "Content-Disposition: form-data; name=\"file\"; filename=\"" + file_name + "\"\r\n";
  body += "Content-Type: image/png\r\n\r\n";
  body += png;
  body += "\r\n--" + boundary + "--\r\n";
  const std::string url = fmt::format(
      "{}/write/experiment/upload-asset?experimentKey={}&fileName={}&type=image"
      "&extension=png&step={}&epoch={}",
      url_, url_encode(experiment_key()), url_encode(r.key), r.step, curr_epoch_);
  request(HttpRequest{"POST",
                      url,
                      {{"Authorization", api_key_},
                       {"Content-Type", "multipart/form-data; boundary=" + boundary}},
                      std::move(body)},
          "upload-asset");
}

void CometMLMonitor::deliver(std::vector<TrackingRecord>& batch) {
  for (const TrackingRecord& r : batch) {
    if (gave_up()) return;
    switch (r.kind) {
      case TrackingRecord::Kind::kMetric:
        send_metric(r);
        break;
      case TrackingRecord::Kind::kParam:
        if (r.key == "curr_epoch") curr_epoch_ = r.epoch;
        send_param(r);
        break;
      case TrackingRecord::Kind::kImage:
        send_image(r);
        break;
      case TrackingRecord::Kind::kOther:
        send_other(r.key, r.text, r.timestamp_ms);
        break;
    }
  }
  keep_alive(/*force=*/false);
}

void CometMLMonitor::finish(TrackingStatus status) {
  if (gave_up() || experiment_key().empty()) return;
  const int64_t end = detail::unix_time_ms();
  send_other("status", tracking_status_name(status), end);
  if (gave_up()) return;
  const json body = {{"experimentKey", experiment_key()}, {"endTimeMillis", end}};
  request(post_json("/write/experiment/set-start-end-time", body.dump()), "set-start-end-time");
}

}  // namespace trainpack
