// One module: all of it is MLflow's REST API (its name rules, size limits and requests), which
// MLflowMonitor alone uses; what it shares with the other tracking monitors is TrackingMonitor's.
#include "trainpack/callbacks/mlflow_monitor.h"

#include <fmt/format.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

#include "trainpack/core/callback_state.h"
#include "trainpack/utils/logger.h"

namespace trainpack {

namespace {

using Json = nlohmann::json;

constexpr size_t kMaxNameBytes = 250;  // MAX_ENTITY_KEY_LENGTH
constexpr size_t kMaxExperimentNameBytes = 500;

bool name_char_ok(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == '.' || c == '/' || c == ' ';
}

// RFC 4648 base64, for the Basic credentials (a dozen lines; libcurl has no public encoder and
// OpenSSL is not worth a dependency for this).
std::string base64(const std::string& in) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = (static_cast<unsigned char>(in[i]) << 16) |
                       (static_cast<unsigned char>(in[i + 1]) << 8) |
                       static_cast<unsigned char>(in[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i + 1 == in.size()) {
    const uint32_t v = static_cast<unsigned char>(in[i]) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == in.size()) {
    const uint32_t v =
        (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

std::string program_path() {
  std::error_code ec;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : path.string();
}

std::string user_name() {
  std::string user = detail::environment_variable("USER");
  if (!user.empty()) return user;
  if (const passwd* pw = ::getpwuid(::getuid()); pw != nullptr && pw->pw_name != nullptr) {
    return pw->pw_name;
  }
  return "";
}

// Cut at `limit` bytes, never inside a UTF-8 character.
std::string cut_utf8(std::string text, size_t limit) {
  if (text.size() <= limit) return text;
  size_t n = limit;
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  text.resize(n);
  return text;
}

// The MLflow error code of an answer ("" when its body has none).
std::string error_code(const HttpResponse& r) {
  const Json body = Json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_object() && body.contains("error_code") && body["error_code"].is_string()) {
    return body["error_code"].get<std::string>();
  }
  return "";
}

Json parse_object(const std::string& text) {
  Json body = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  return body.is_object() ? body : Json::object();
}

std::string string_at(const Json& j, std::initializer_list<const char*> path) {
  const Json* at = &j;
  for (const char* key : path) {
    if (!at->is_object() || !at->contains(key)) return "";
    at = &(*at)[key];
  }
  return at->is_string() ? at->get<std::string>() : "";
}

// Why the monitor gave up when a server answered 200 with something else than MLflow's JSON.
constexpr const char* kNotMlflowsAnswers = "the server's answers are not MLflow's";

// A successful answer that is not MLflow's JSON, for a warning: an HTML page is said to be one (a
// proxy's login page, or another web server at the URI), else its first 200 characters.
std::string unexpected_answer(const std::string& body, const std::string& uri) {
  const size_t first = body.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && body[first] == '<') {
    return fmt::format(
        "an HTML page, not MLflow's JSON (a proxy's login page, or another web server than "
        "MLflow's at {}? check MLFLOW_TRACKING_URI): {}",
        uri, body.substr(first, 120));
  }
  return body.substr(0, 200);
}

std::string metric_json(const TrackingRecord& r) {
  Json value;
  if (std::isnan(r.value)) {
    value = "NaN";
  } else if (std::isinf(r.value)) {
    value = r.value > 0 ? "Infinity" : "-Infinity";
  } else {
    value = r.value;
  }
  return Json{{"key", detail::mlflow_name(r.key)},
              {"value", value},
              {"timestamp", r.timestamp_ms},
              {"step", r.step}}
      .dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string key_value_json(const std::string& key, const std::string& value) {
  return Json{{"key", key}, {"value", value}}.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

namespace detail {

std::string mlflow_name(const std::string& name) {
  std::string clean;
  for (size_t i = 0; i < name.size();) {
    const auto c = static_cast<unsigned char>(name[i]);
    size_t len = 1;
    if (c >= 0xC0) {  // a multi-byte UTF-8 character: one '_'
      while (i + len < name.size() && (static_cast<unsigned char>(name[i + len]) & 0xC0) == 0x80) {
        ++len;
      }
    }
    clean += name_char_ok(static_cast<char>(c)) ? static_cast<char>(c) : '_';
    i += len;
  }
  // Path parts: MLflow refuses a name that normalises to another one.
  std::string out;
  size_t start = 0;
  while (start <= clean.size()) {
    size_t slash = clean.find('/', start);
    if (slash == std::string::npos) slash = clean.size();
    std::string part = clean.substr(start, slash - start);
    start = slash + 1;
    if (part.empty() || part == ".") continue;
    if (part == "..") part = "__";
    if (!out.empty()) out += '/';
    out += part;
  }
  if (out.size() > kMaxNameBytes) out.resize(kMaxNameBytes);
  while (!out.empty() && out.back() == '/') out.pop_back();
  return out.empty() ? "_" : out;
}

std::string mlflow_name_problem(const std::string& name) {
  if (name.empty()) return "an empty name";
  for (const char c : name) {
    if (!name_char_ok(c)) {
      return fmt::format(
          "'{}' holds '{}': names may only hold letters, digits, '_', '-', '.', ' ' and '/'", name,
          c);
    }
  }
  if (name.size() > kMaxNameBytes) {
    return fmt::format("'{}...' is longer than {} bytes", name.substr(0, 40), kMaxNameBytes);
  }
  if (mlflow_name(name) != name) {
    return fmt::format("'{}' is a path that normalises to another name ('{}')", name,
                       mlflow_name(name));
  }
  return "";
}

}  // namespace detail

namespace {

// `tracking` with MLflow's client's TLS variables applied where the options leave them unset.
TrackingOptions with_tls_environment(TrackingOptions tracking) {
  HttpClientOptions http = tracking.http();
  if (http.ca_file().empty()) {
    http.ca_file(detail::environment_variable("MLFLOW_TRACKING_SERVER_CERT_PATH"));
  }
  std::string insecure = detail::environment_variable("MLFLOW_TRACKING_INSECURE_TLS");
  std::transform(insecure.begin(), insecure.end(), insecure.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (insecure == "true") {
    http.verify_tls(false);
    TP_LOG_WARN(
        "MLflowMonitor: MLFLOW_TRACKING_INSECURE_TLS=true: the server's TLS certificate is not "
        "checked");
  }
  return tracking.http(http);
}

}  // namespace

MLflowMonitor::MLflowMonitor(MLflowMonitorOptions options)
    : TrackingMonitor("MLflow", with_tls_environment(options.tracking())) {
  set_chief_only(true);
  uri_ = options.tracking_uri().empty() ? detail::environment_variable("MLFLOW_TRACKING_URI")
                                        : options.tracking_uri();
  if (uri_.empty()) {
    throw std::invalid_argument(
        "MLflowMonitor: no tracking URI: pass MLflowMonitorOptions().tracking_uri(\"http://host:"
        "5000\") or set the environment variable MLFLOW_TRACKING_URI");
  }
  // Every message below quotes the URI as url_for_display gives it (no user information, in any
  // form); what the monitor keeps and sends to is "scheme://host[:port][/prefix]" without it.
  const UrlParts parts = split_url(uri_);
  if (parts.scheme != "http" && parts.scheme != "https") {
    throw std::invalid_argument(fmt::format(
        "MLflowMonitor: tracking_uri (or MLFLOW_TRACKING_URI) '{}' is not an http:// or https:// "
        "URI: MLflowMonitor needs a tracking server (a file: URI or a path is MLflow's local file "
        "store, which only MLflow's Python client writes; host:port needs http:// in front). Start "
        "one with `mlflow server --host 127.0.0.1 --port 5000` and use http://127.0.0.1:5000",
        url_for_display(uri_)));
  }
  if (parts.at_after_host) {
    throw std::invalid_argument(fmt::format(
        "MLflowMonitor: tracking_uri (or MLFLOW_TRACKING_URI) '{}' has an '@' after its host "
        "part, so where its host ends is ambiguous (a password holding '/', '?' or '#' would be "
        "taken for the host and sent in the path): percent-encode those characters in the user "
        "and password ('/' %2F, '?' %3F, '#' %23, '@' %40), and an '@' of the path as %40",
        url_for_display(uri_)));
  }
  if (parts.rest.empty() || parts.rest.find_first_of("/?#") == 0) {
    throw std::invalid_argument(
        fmt::format("MLflowMonitor: tracking_uri (or MLFLOW_TRACKING_URI) '{}' has no host; give "
                    "http(s)://host:port, e.g. http://127.0.0.1:5000",
                    url_for_display(uri_)));
  }
  uri_ = parts.scheme + "://" + parts.rest;
  while (!uri_.empty() && uri_.back() == '/') uri_.pop_back();

  experiment_name_ = !options.experiment_name().empty()
                         ? options.experiment_name()
                         : detail::environment_variable("MLFLOW_EXPERIMENT_NAME");
  if (experiment_name_.empty()) experiment_name_ = "Default";
  if (experiment_name_.size() > kMaxExperimentNameBytes) {
    throw std::invalid_argument(fmt::format(
        "MLflowMonitor: experiment_name (or MLFLOW_EXPERIMENT_NAME) is {} bytes long; MLflow "
        "takes at most {}",
        experiment_name_.size(), kMaxExperimentNameBytes));
  }

  run_name_ = options.run_name();
  if (run_name_.empty()) {
    if (const auto dir = logger::get_logger_dir()) {
      std::error_code ec;
      std::filesystem::path p = std::filesystem::absolute(*dir, ec).lexically_normal();
      if (!p.has_filename()) p = p.parent_path();
      run_name_ = p.filename().string();
    }
  }

  for (const auto& [key, value] : options.tags()) {
    const std::string problem = detail::mlflow_name_problem(key);
    if (!problem.empty()) {
      throw std::invalid_argument(
          fmt::format("MLflowMonitor: tags: MLflow refuses the tag name {}", problem));
    }
    if (key.rfind("mlflow.", 0) == 0) {
      throw std::invalid_argument(fmt::format(
          "MLflowMonitor: tags: '{}': names starting with 'mlflow.' are MLflow's own (this "
          "monitor sets mlflow.runName, mlflow.source.name, mlflow.source.type and mlflow.user); "
          "use run_name for the name",
          key));
    }
    if (value.size() > kMaxTagValueBytes) {
      throw std::invalid_argument(
          fmt::format("MLflowMonitor: tags: the value of '{}' is {} bytes long; MLflow takes at "
                      "most {}",
                      key, value.size(), kMaxTagValueBytes));
    }
  }
  tags_ = options.tags();
  for (const auto& [key, value] : options.params()) {
    const std::string name = detail::mlflow_name(key);
    if (params_.count(name) != 0) {
      throw std::invalid_argument(fmt::format(
          "MLflowMonitor: params: '{}' and another param are both sent as '{}' (MLflow's names "
          "allow letters, digits, '_', '-', '.', ' ' and '/'); rename one",
          key, name));
    }
    std::string sent = cut_utf8(value, kMaxParamValueBytes);
    if (sent.size() < value.size()) {
      TP_LOG_WARN(
          "MLflowMonitor: params: the value of '{}' is {} bytes long; MLflow keeps at most {}: its "
          "first {} bytes are sent",
          key, value.size(), kMaxParamValueBytes, sent.size());
    }
    params_.emplace(name, std::move(sent));
  }

  given_run_id_ =
      !options.run_id().empty() ? options.run_id() : detail::environment_variable("MLFLOW_RUN_ID");

  // "http://user:password@host": the credentials left the URI above (messages quote it) for the
  // Authorization header, as Python's requests does with them. The password is a secret even
  // when the environment's credentials win over it.
  const std::string uri_user = parts.user;
  const std::string uri_password = parts.password;
  set_secret(uri_password);
  std::string user = detail::environment_variable("MLFLOW_TRACKING_USERNAME");
  std::string password = detail::environment_variable("MLFLOW_TRACKING_PASSWORD");
  const std::string token = detail::environment_variable("MLFLOW_TRACKING_TOKEN");
  auth_source_ = "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (HTTP Basic)";
  if ((user.empty() || password.empty()) && token.empty() && !uri_user.empty()) {
    user = uri_user;
    password = uri_password;
    auth_source_ = "the user and password of the tracking URI (HTTP Basic)";
  }
  if (!user.empty() && !password.empty()) {
    auth_header_ = "Basic " + base64(user + ":" + password);
    // What a message could quote (a server echoing it): the password, and the header's base64
    // form; the header itself never reaches a message.
    set_secret(password);
    set_secret(base64(user + ":" + password));
  } else if (!token.empty()) {
    auth_header_ = "Bearer " + token;
    auth_source_ = "MLFLOW_TRACKING_TOKEN (Bearer)";
    set_secret(token);
  } else {
    auth_source_.clear();
  }
}

MLflowMonitor::~MLflowMonitor() { stop(); }

std::string MLflowMonitor::run_id() const {
  std::lock_guard<std::mutex> lock(run_mutex_);
  return run_id_;
}

std::string MLflowMonitor::experiment_id() const {
  std::lock_guard<std::mutex> lock(run_mutex_);
  return experiment_id_;
}

std::string MLflowMonitor::run_url() const {
  std::lock_guard<std::mutex> lock(run_mutex_);
  if (run_id_.empty()) return "";
  return fmt::format("{}/#/experiments/{}/runs/{}", uri_, experiment_id_, run_id_);
}

void MLflowMonitor::set_run(std::string run_id, std::string experiment_id) {
  std::lock_guard<std::mutex> lock(run_mutex_);
  run_id_ = std::move(run_id);
  experiment_id_ = std::move(experiment_id);
}

CallbackState MLflowMonitor::state() const {
  std::lock_guard<std::mutex> lock(run_mutex_);
  // Before the run exists, what was restored (a checkpoint saved again before the server
  // answered keeps the run it came from).
  const std::string& run = run_id_.empty() ? restored_run_id_ : run_id_;
  const std::string& experiment = run_id_.empty() ? restored_experiment_id_ : experiment_id_;
  if (run.empty()) return {};
  return {{"run_id", state_string(run)}, {"experiment_id", state_string(experiment)}};
}

void MLflowMonitor::load_state(const CallbackState& state) {
  check_state_keys(name(), state, {"run_id", "experiment_id"});
  std::string run = state_string(name(), state, "run_id");
  std::string experiment = state_string(name(), state, "experiment_id");
  std::lock_guard<std::mutex> lock(run_mutex_);
  restored_run_id_ = std::move(run);
  restored_experiment_id_ = std::move(experiment);
}

HttpRequest MLflowMonitor::make_request(const std::string& method, const std::string& endpoint,
                                        std::string body) const {
  HttpRequest r;
  r.method = method;
  r.url = uri_ + "/api/2.0/mlflow/" + endpoint;
  if (!auth_header_.empty()) r.headers.emplace_back("Authorization", auth_header_);
  if (method == "POST") r.headers.emplace_back("Content-Type", "application/json");
  r.body = std::move(body);
  return r;
}

std::string MLflowMonitor::credentials_hint() const {
  return fmt::format(
      "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (HTTP Basic) or MLFLOW_TRACKING_TOKEN "
      "(a Bearer token), as MLflow's own client reads them; this process {}",
      auth_source_.empty() ? "sends no credentials" : "sent " + auth_source_);
}

std::string MLflowMonitor::certificate_hint() const {
  return "if the server's certificate is right, set MLFLOW_TRACKING_SERVER_CERT_PATH to the "
         "certificate (PEM) of the CA that signed it, as MLflow's client reads it, or add that CA "
         "to this machine's store (Debian: /usr/local/share/ca-certificates/ and "
         "update-ca-certificates)";
}

std::string MLflowMonitor::find_or_create_experiment() {
  const HttpRequest lookup = make_request(
      "GET", "experiments/get-by-name?experiment_name=" + url_encode(experiment_name_), "");
  for (int attempt = 0; attempt < 2; ++attempt) {
    // Not there yet is an answer, not a failure: no warning, no count.
    HttpResponse r = request(lookup, "experiments/get-by-name", [](const HttpResponse& a) {
      return a.status == 404 && error_code(a) == "RESOURCE_DOES_NOT_EXIST";
    });
    if (r.ok()) {
      const Json body = parse_object(r.body);
      const std::string id = string_at(body, {"experiment", "experiment_id"});
      if (id.empty()) {
        give_up(kNotMlflowsAnswers,
                "MLflowMonitor: experiments/get-by-name answered without an experiment id: " +
                    unexpected_answer(r.body, uri_));
        return "";
      }
      if (string_at(body, {"experiment", "lifecycle_stage"}) == "deleted") {
        // Tried again with back-off (it may be restored meanwhile), warned about once.
        warn_once("deleted experiment",
                  fmt::format("MLflowMonitor: experiment '{}' ({}) is deleted on the server: "
                              "restore it (`mlflow experiments restore --experiment-id {}`) or "
                              "use another experiment name; nothing is sent to MLflow until then",
                              experiment_name_, id, id));
        return "";
      }
      return id;
    }
    if (r.status != 404 || error_code(r) != "RESOURCE_DOES_NOT_EXIST") return "";
    // Missing: create it. Another process may create it at the same moment (then the answer is
    // RESOURCE_ALREADY_EXISTS, and the lookup runs again).
    HttpResponse c =
        request(make_request("POST", "experiments/create", Json{{"name", experiment_name_}}.dump()),
                "experiments/create",
                [](const HttpResponse& a) { return error_code(a) == "RESOURCE_ALREADY_EXISTS"; });
    if (c.ok()) {
      const std::string id = string_at(parse_object(c.body), {"experiment_id"});
      if (!id.empty()) {
        TP_LOG_INFO("MLflowMonitor: created experiment '{}' ({})", experiment_name_, id);
      }
      return id;
    }
    if (error_code(c) != "RESOURCE_ALREADY_EXISTS") return "";
  }
  return "";
}

bool MLflowMonitor::create_run() {
  const std::string experiment = find_or_create_experiment();
  if (experiment.empty()) return false;
  Json tags = Json::array();
  auto tag = [&tags](const std::string& key, const std::string& value) {
    tags.push_back({{"key", key}, {"value", cut_utf8(value, kMaxTagValueBytes)}});
  };
  if (!run_name_.empty()) tag("mlflow.runName", run_name_);
  tag("mlflow.source.name", program_path());
  tag("mlflow.source.type", "LOCAL");
  const std::string user = user_name();
  if (!user.empty()) tag("mlflow.user", user);
  for (const auto& [key, value] : tags_) tag(key, value);
  Json body{{"experiment_id", experiment}, {"start_time", detail::unix_time_ms()}, {"tags", tags}};
  if (!run_name_.empty()) body["run_name"] = run_name_;
  HttpResponse r = request(make_request("POST", "runs/create",
                                        body.dump(-1, ' ', false, Json::error_handler_t::replace)),
                           "runs/create");
  if (!r.ok()) return false;
  const Json answer = parse_object(r.body);
  std::string id = string_at(answer, {"run", "info", "run_id"});
  if (id.empty()) id = string_at(answer, {"run", "info", "run_uuid"});
  if (id.empty()) {
    give_up(kNotMlflowsAnswers, "MLflowMonitor: runs/create answered without a run id: " +
                                    unexpected_answer(r.body, uri_));
    return false;
  }
  set_run(id, experiment);
  send_params_ = true;
  TP_LOG_INFO("MLflowMonitor: run {} in experiment '{}': {}", id, experiment_name_, run_url());
  return true;
}

bool MLflowMonitor::reopen_run(const std::string& run_id, bool restored) {
  HttpResponse r = request(
      make_request("POST", "runs/update", Json{{"run_id", run_id}, {"status", "RUNNING"}}.dump()),
      "runs/update");
  if (!r.ok()) {
    if (restored && r.status == 404 && error_code(r) == "RESOURCE_DOES_NOT_EXIST") {
      TP_LOG_WARN(
          "MLflowMonitor: the checkpoint's MLflow run {} no longer exists on the server; this "
          "run goes into a new MLflow run",
          run_id);
      return create_run();
    }
    return false;
  }
  std::string experiment = string_at(parse_object(r.body), {"run_info", "experiment_id"});
  if (experiment.empty()) {
    std::lock_guard<std::mutex> lock(run_mutex_);
    experiment = restored_experiment_id_;
  }
  set_run(run_id, experiment);
  send_params_ = false;
  TP_LOG_INFO("MLflowMonitor: continuing run {}{}: {} (params are not sent again)", run_id,
              restored ? " (from the checkpoint)" : "", run_url());
  return true;
}

bool MLflowMonitor::open() {
  if (!run_id().empty()) return true;
  std::string restored;
  {
    std::lock_guard<std::mutex> lock(run_mutex_);
    restored = restored_run_id_;
  }
  if (!given_run_id_.empty()) return reopen_run(given_run_id_, /*restored=*/false);
  if (!restored.empty()) return reopen_run(restored, /*restored=*/true);
  return create_run();
}

HttpResponse MLflowMonitor::post_batch(const std::vector<std::string>& metrics,
                                       const std::vector<std::string>& params,
                                       const std::vector<std::string>& tags) {
  std::string body = Json{{"run_id", run_id()}}.dump();
  body.pop_back();  // the closing '}'
  auto list = [&body](const char* name, const std::vector<std::string>& items) {
    body += fmt::format(", \"{}\": [", name);
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) body += ", ";
      body += items[i];
    }
    body += ']';
  };
  list("metrics", metrics);
  list("params", params);
  list("tags", tags);
  body += '}';
  return request(make_request("POST", "runs/log-batch", std::move(body)), "log-batch");
}

void MLflowMonitor::_before_train() {
  TrackingMonitor::_before_train();
  for (const auto& [key, value] : params_) {
    TrackingRecord r;
    r.kind = TrackingRecord::Kind::kParam;
    r.key = key;
    r.text = value;
    r.step = global_step();
    r.epoch = epoch_num();
    r.timestamp_ms = detail::unix_time_ms();
    enqueue(std::move(r));
  }
}

void MLflowMonitor::deliver(std::vector<TrackingRecord>& batch) {
  if (batch.empty() || gave_up()) return;
  // The request's size without its entries: {"run_id": "<id>", "metrics": [], "params": [],
  // "tags": []}, with room to spare.
  const size_t overhead = 64 + run_id().size();
  // The log-batch requests, split by MLflow's limits, with the records each one carries.
  struct Request {
    std::vector<std::string> metrics, params, tags;
    std::vector<size_t> records;          // indices into `batch`
    std::vector<std::string> param_keys;  // the params it sends (undone when it is kept)
    size_t bytes = 0;
  };
  std::vector<Request> requests(1);
  requests.back().bytes = overhead;
  auto add = [&](std::vector<std::string> Request::*list, int list_limit, std::string entry,
                 size_t index) {
    Request* q = &requests.back();
    const size_t entries = q->metrics.size() + q->params.size() + q->tags.size();
    if (static_cast<int>((q->*list).size()) >= list_limit ||
        static_cast<int>(entries) >= kMaxEntriesPerBatch ||
        q->bytes + entry.size() + 2 > static_cast<size_t>(kMaxBatchBytes)) {
      requests.emplace_back();
      q = &requests.back();
      q->bytes = overhead;
    }
    q->bytes += entry.size() + 2;
    (q->*list).push_back(std::move(entry));
    q->records.push_back(index);
    return q;
  };
  for (size_t i = 0; i < batch.size(); ++i) {
    const TrackingRecord& r = batch[i];
    switch (r.kind) {
      case TrackingRecord::Kind::kMetric:
        add(&Request::metrics, kMaxMetricsPerBatch, metric_json(r), i);
        break;
      case TrackingRecord::Kind::kParam: {
        if (!send_params_) break;
        const std::string key = detail::mlflow_name(r.key);
        const std::string value = cut_utf8(r.text, kMaxParamValueBytes);
        auto it = params_sent_.find(key);
        if (it != params_sent_.end()) {
          if (it->second != value) {
            TP_LOG_INFO(
                "MLflowMonitor: param '{}' keeps its first value '{}' (MLflow does not change a "
                "param once logged; '{}' is not sent)",
                key, it->second, value);
          }
          break;
        }
        params_sent_.emplace(key, value);
        add(&Request::params, kMaxParamsPerBatch, key_value_json(key, value), i)
            ->param_keys.push_back(key);
        break;
      }
      case TrackingRecord::Kind::kOther:
        add(&Request::tags, kMaxTagsPerBatch,
            key_value_json(detail::mlflow_name(r.key), cut_utf8(r.text, kMaxTagValueBytes)), i);
        break;
      case TrackingRecord::Kind::kImage:
        break;  // MLflow's REST API has no image endpoint (see the header)
    }
  }
  for (size_t k = 0; k < requests.size(); ++k) {
    const Request& q = requests[k];
    if (q.records.empty()) continue;
    const HttpResponse r = post_batch(q.metrics, q.params, q.tags);
    if (r.ok() || gave_up()) continue;  // a refused key drops everything (the base's count)
    if (!r.retryable()) {
      drop_refused(static_cast<int64_t>(q.records.size()));  // request() warned with the answer
      continue;
    }
    // No server (or the flush timeout's abort): this request's records and the rest's are kept,
    // in order, for the next delivery; their params count as not sent.
    std::vector<TrackingRecord> kept;
    for (size_t l = k; l < requests.size(); ++l) {
      for (size_t index : requests[l].records) kept.push_back(std::move(batch[index]));
      for (const std::string& key : requests[l].param_keys) params_sent_.erase(key);
    }
    keep_for_retry(std::move(kept));
    return;
  }
}

void MLflowMonitor::finish(TrackingStatus status) {
  const std::string id = run_id();
  if (id.empty()) return;
  HttpResponse r = request(make_request("POST", "runs/update",
                                        Json{{"run_id", id},
                                             {"status", tracking_status_name(status)},
                                             {"end_time", detail::unix_time_ms()}}
                                            .dump()),
                           "runs/update");
  if (r.ok()) {
    TP_LOG_INFO("MLflowMonitor: run {} ended {}: {}", id, tracking_status_name(status), run_url());
  }
}

}  // namespace trainpack
