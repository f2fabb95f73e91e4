#include "support/fake_mlflow.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <limits>
#include <set>
#include <utility>
#include <variant>

#include <nlohmann/json.hpp>

#include "trainpack/callbacks/json_writer.h"
#include "trainpack/callbacks/mlflow_monitor.h"

namespace trainpack {
namespace testing {

namespace {

using Json = nlohmann::json;

const char* const kPrefix = "/api/2.0/mlflow/";

// Base64 by bits (an implementation independent of the monitor's, to check it).
std::string encode_base64(const std::string& in) {
  const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bits;
  for (unsigned char c : in) {
    for (int b = 7; b >= 0; --b) bits += ((c >> b) & 1) ? '1' : '0';
  }
  while (bits.size() % 6 != 0) bits += '0';
  std::string out;
  for (size_t i = 0; i < bits.size(); i += 6)
    out += alphabet[std::stoi(bits.substr(i, 6), nullptr, 2)];
  while (out.size() % 4 != 0) out += '=';
  return out;
}

FakeResponse error(int status, const std::string& code, const std::string& message) {
  return FakeResponse{status, Json{{"error_code", code}, {"message", message}}.dump(), {}, false};
}

// MLflow's name rule (validation.py) as a server on Linux applies it: letters, digits, '_', '-',
// '.', ' ', ':', '/' (non-ASCII letters pass too, as Python's \w does), and a path that normalises
// to itself. (A server on Windows also refuses ':'; MLflowMonitor sends none.)
std::string name_problem(const std::string& kind, const std::string& name) {
  if (name.empty()) return kind + " name is empty";
  for (unsigned char c : name) {
    const bool ok = std::isalnum(c) || c == '_' || c == '-' || c == '.' || c == ' ' || c == ':' ||
                    c == '/' || c >= 0x80;
    if (!ok) {
      return fmt::format(
          "Invalid {} name: '{}'. Names may only contain alphanumerics, underscores (_), dashes "
          "(-), periods (.), spaces ( ), colon(:) and slashes (/).",
          kind, name);
    }
  }
  if (name.size() > 250) return fmt::format("{} name '{}' exceeds 250", kind, name.substr(0, 50));
  // posixpath.normpath(name) != name, or "." / ".." / "/" starts.
  bool bad = name.front() == '/' || name.back() == '/' || name.find("//") != std::string::npos;
  size_t start = 0;
  while (start <= name.size()) {
    size_t slash = name.find('/', start);
    if (slash == std::string::npos) slash = name.size();
    const std::string part = name.substr(start, slash - start);
    if (part == "." || part == "..") bad = true;
    start = slash + 1;
  }
  if (bad) {
    return fmt::format(
        "Invalid {} name: '{}'. Names may be treated as files in certain cases, and must not "
        "resolve to other names when treated as such.",
        kind, name);
  }
  return "";
}

bool is_int(const Json& j) { return j.is_number_integer(); }

// Fields of `body` that are not in `allowed`.
std::string unknown_fields(const Json& body, std::initializer_list<const char*> allowed) {
  std::string out;
  for (const auto& item : body.items()) {
    bool known = false;
    for (const char* a : allowed) known = known || item.key() == a;
    if (!known) out += (out.empty() ? "" : ", ") + item.key();
  }
  return out;
}

Json run_info_json(const FakeMLflow::Run& run) {
  Json info{
      {"run_id", run.run_id},
      {"run_uuid", run.run_id},
      {"run_name", run.run_name},
      {"experiment_id", run.experiment_id},
      {"user_id", ""},
      {"status", run.status},
      {"start_time", run.start_time},
      {"artifact_uri", "mlflow-artifacts:/" + run.experiment_id + "/" + run.run_id + "/artifacts"},
      {"lifecycle_stage", "active"}};
  if (run.end_time) info["end_time"] = *run.end_time;
  return info;
}

}  // namespace

FakeMLflow::FakeMLflow() {
  experiments_.push_back({"0", "Default"});
  server_ = std::make_unique<FakeHttpServer>(
      [this](const RecordedRequest& request) { return handle(request); });
}

FakeMLflow::~FakeMLflow() { server_.reset(); }

std::string FakeMLflow::url() const { return server_->url(); }

void FakeMLflow::require_basic_auth(const std::string& user, const std::string& password) {
  std::lock_guard<std::mutex> lock(mutex_);
  expected_auth_ = "Basic " + encode_base64(user + ":" + password);
}

void FakeMLflow::require_token(const std::string& token) {
  std::lock_guard<std::mutex> lock(mutex_);
  expected_auth_ = "Bearer " + token;
}

void FakeMLflow::add_fault(Fault fault) {
  std::lock_guard<std::mutex> lock(mutex_);
  faults_.push_back(std::move(fault));
}

void FakeMLflow::fail_next(int n, int status, std::optional<std::string> retry_after) {
  add_fault(Fault{"", status, std::move(retry_after), false, n});
}

void FakeMLflow::hang_next(int n) { add_fault(Fault{"", 0, std::nullopt, true, n}); }

std::string FakeMLflow::create_experiment(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string id = std::to_string(next_experiment_++);
  experiments_.push_back({id, name});
  return id;
}

std::vector<FakeMLflow::Experiment> FakeMLflow::experiments() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return experiments_;
}

std::vector<FakeMLflow::Run> FakeMLflow::runs() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return runs_;
}

FakeMLflow::Run FakeMLflow::only_run() const {
  std::lock_guard<std::mutex> lock(mutex_);
  EXPECT_EQ(runs_.size(), 1u) << "FakeMLflow: expected exactly one run";
  return runs_.size() == 1 ? runs_[0] : Run{};
}

int FakeMLflow::count(const std::string& endpoint) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = counts_.find(endpoint);
  return it == counts_.end() ? 0 : it->second;
}

std::vector<std::string> FakeMLflow::violations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return violations_;
}

FakeResponse FakeMLflow::violation(const std::string& endpoint, const std::string& what, int status,
                                   const std::string& code) {
  violations_.push_back(endpoint + ": " + what);
  return error(status, code, what);
}

FakeResponse FakeMLflow::handle(const RecordedRequest& request) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string path = request.path;
  const std::string endpoint =
      path.rfind(kPrefix, 0) == 0 ? path.substr(std::string(kPrefix).size()) : path;
  ++counts_[endpoint];
  for (Fault& f : faults_) {
    if (f.count == 0) continue;
    if (!f.endpoint.empty() && endpoint != f.endpoint) continue;
    if (f.count > 0) --f.count;
    if (f.hang) return FakeResponse{200, "", {}, true};
    FakeResponse r = f.status == 401   ? error(401, "UNAUTHENTICATED", "Unauthorized")
                     : f.status == 429 ? error(429, "REQUEST_LIMIT_EXCEEDED", "Too many requests")
                                       : error(f.status, "INTERNAL_ERROR", "Internal error");
    if (f.retry_after) r.headers.emplace_back("Retry-After", *f.retry_after);
    return r;
  }
  if (!expected_auth_.empty()) {
    auto it = request.headers.find("authorization");
    if (it == request.headers.end() || it->second != expected_auth_) {
      FakeResponse r{401,
                     "You are not authenticated. Please see "
                     "https://www.mlflow.org/docs/latest/auth/index.html#authenticating-to-mlflow "
                     "on how to authenticate.",
                     {{"WWW-Authenticate", "Basic realm=\"mlflow\""}},
                     false};
      return r;
    }
  }
  if (path.rfind(kPrefix, 0) != 0) {
    return violation(path, "not an MLflow REST API 2.0 path", 404, "ENDPOINT_NOT_FOUND");
  }
  return route(request, endpoint);
}

FakeResponse FakeMLflow::route(const RecordedRequest& request, const std::string& endpoint) {
  // ---- GET experiments/get-by-name ----
  if (endpoint == "experiments/get-by-name") {
    if (request.method != "GET")
      return violation(endpoint, "method " + request.method, 405, "BAD_REQUEST");
    if (!request.body.empty()) return violation(endpoint, "a GET with a body");
    auto it = request.query.find("experiment_name");
    if (it == request.query.end() || it->second.empty() || request.query.size() != 1) {
      return violation(endpoint, "query must be exactly experiment_name=<non-empty>");
    }
    for (const Experiment& e : experiments_) {
      if (e.name == it->second) {
        return FakeResponse{200,
                            Json{{"experiment",
                                  {{"experiment_id", e.experiment_id},
                                   {"name", e.name},
                                   {"artifact_location", "mlflow-artifacts:/" + e.experiment_id},
                                   {"lifecycle_stage", "active"},
                                   {"last_update_time", 1700000000000},
                                   {"creation_time", 1700000000000}}}}
                                .dump(),
                            {},
                            false};
      }
    }
    return error(404, "RESOURCE_DOES_NOT_EXIST",
                 fmt::format("Could not find experiment with name '{}'", it->second));
  }

  // Every other endpoint is a POST of a JSON object.
  if (request.method != "POST") {
    return violation(endpoint, "method " + request.method + " (expected POST)", 405, "BAD_REQUEST");
  }
  auto ct = request.headers.find("content-type");
  if (ct == request.headers.end() || ct->second.rfind("application/json", 0) != 0) {
    return violation(endpoint, "Content-Type is not application/json");
  }
  const Json body = Json::parse(request.body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object())
    return violation(endpoint, "the body is not a JSON object", 400, "BAD_REQUEST");

  // ---- POST experiments/create ----
  if (endpoint == "experiments/create") {
    if (auto u = unknown_fields(body, {"name", "artifact_location", "tags"}); !u.empty()) {
      return violation(endpoint, "unknown fields: " + u);
    }
    if (!body.contains("name") || !body["name"].is_string() ||
        body["name"].get<std::string>().empty()) {
      return violation(endpoint, "name must be a non-empty string");
    }
    const std::string name = body["name"];
    for (const Experiment& e : experiments_) {
      if (e.name == name) {
        return error(400, "RESOURCE_ALREADY_EXISTS",
                     fmt::format("Experiment(name={}) already exists. Error: (UNIQUE constraint "
                                 "failed: experiments.name)",
                                 name));
      }
    }
    const std::string id = std::to_string(next_experiment_++);
    experiments_.push_back({id, name});
    return FakeResponse{200, Json{{"experiment_id", id}}.dump(), {}, false};
  }

  // ---- POST runs/create ----
  if (endpoint == "runs/create") {
    if (auto u =
            unknown_fields(body, {"experiment_id", "user_id", "start_time", "tags", "run_name"});
        !u.empty()) {
      return violation(endpoint, "unknown fields: " + u);
    }
    if (!body.contains("experiment_id") || !body["experiment_id"].is_string()) {
      return violation(endpoint, "experiment_id must be a string");
    }
    if (!body.contains("start_time") || !is_int(body["start_time"]) ||
        body["start_time"].get<int64_t>() < 0) {
      return violation(endpoint, "start_time must be a non-negative integer (ms)");
    }
    if (body.contains("run_name") && !body["run_name"].is_string()) {
      return violation(endpoint, "run_name must be a string");
    }
    Run run;
    if (body.contains("tags")) {
      if (!body["tags"].is_array()) return violation(endpoint, "tags must be an array");
      for (const Json& t : body["tags"]) {
        if (!t.is_object() || !t.contains("key") || !t["key"].is_string() || !t.contains("value") ||
            !t["value"].is_string() || t.size() != 2) {
          return violation(endpoint, "a tag must be {key: string, value: string}: " + t.dump());
        }
        if (auto p = name_problem("tag", t["key"]); !p.empty()) return violation(endpoint, p);
        if (t["value"].get<std::string>().size() > 8000)  // MAX_TAG_VAL_LENGTH of MLflow 3
          return violation(endpoint, "tag value > 8000");
        run.tags[t["key"]] = t["value"];
      }
    }
    const std::string experiment = body["experiment_id"];
    bool found = false;
    for (const Experiment& e : experiments_) found = found || e.experiment_id == experiment;
    if (!found) {
      return error(404, "RESOURCE_DOES_NOT_EXIST",
                   fmt::format("No Experiment with id={} exists", experiment));
    }
    run.run_name = body.value("run_name", std::string());
    auto name_tag = run.tags.find("mlflow.runName");
    if (name_tag != run.tags.end() && !run.run_name.empty() && name_tag->second != run.run_name) {
      return violation(endpoint, "run_name and the mlflow.runName tag differ");
    }
    if (run.run_name.empty()) {
      run.run_name = name_tag != run.tags.end() ? name_tag->second
                                                : "generated-name-" + std::to_string(next_run_);
    }
    run.tags["mlflow.runName"] = run.run_name;
    run.run_id = fmt::format("{:032x}", 0xabc000 + next_run_++);
    run.experiment_id = experiment;
    run.status = "RUNNING";
    run.start_time = body["start_time"];
    runs_.push_back(run);
    Json tags = Json::array();
    for (const auto& [k, v] : run.tags) tags.push_back({{"key", k}, {"value", v}});
    return FakeResponse{200,
                        Json{{"run",
                              {{"info", run_info_json(run)},
                               {"data", {{"tags", tags}}},
                               {"inputs", Json::object()}}}}
                            .dump(),
                        {},
                        false};
  }

  // runs/log-batch and runs/update name a run.
  if (endpoint != "runs/log-batch" && endpoint != "runs/update") {
    return violation(endpoint, "an endpoint MLflowMonitor has no business calling", 404,
                     "ENDPOINT_NOT_FOUND");
  }
  if (!body.contains("run_id") || !body["run_id"].is_string() ||
      body["run_id"].get<std::string>().empty()) {
    return violation(endpoint, "run_id must be a non-empty string");
  }
  const std::string run_id = body["run_id"];
  Run* run = nullptr;
  for (Run& r : runs_) run = r.run_id == run_id ? &r : run;
  if (run == nullptr) {
    return error(404, "RESOURCE_DOES_NOT_EXIST", fmt::format("Run '{}' not found", run_id));
  }

  // ---- POST runs/update ----
  if (endpoint == "runs/update") {
    if (auto u = unknown_fields(body, {"run_id", "run_uuid", "status", "end_time", "run_name"});
        !u.empty()) {
      return violation(endpoint, "unknown fields: " + u);
    }
    static const std::set<std::string> kStatuses{"RUNNING", "SCHEDULED", "FINISHED", "FAILED",
                                                 "KILLED"};
    if (body.contains("status") &&
        (!body["status"].is_string() || kStatuses.count(body["status"].get<std::string>()) == 0)) {
      return violation(endpoint,
                       "status must be one of RUNNING, SCHEDULED, FINISHED, FAILED, KILLED: " +
                           body["status"].dump());
    }
    if (body.contains("end_time") &&
        (!is_int(body["end_time"]) || body["end_time"].get<int64_t>() < 0)) {
      return violation(endpoint, "end_time must be a non-negative integer (ms)");
    }
    if (body.contains("status")) {
      run->status = body["status"];
      run->status_history.push_back(run->status);
    }
    // As MLflow's SQL store: end_time is set to what is given, cleared when none is.
    run->end_time.reset();
    if (body.contains("end_time")) run->end_time = body["end_time"].get<int64_t>();
    return FakeResponse{200, Json{{"run_info", run_info_json(*run)}}.dump(), {}, false};
  }

  // ---- POST runs/log-batch ----
  if (auto u = unknown_fields(body, {"run_id", "metrics", "params", "tags"}); !u.empty()) {
    return violation(endpoint, "unknown fields: " + u);
  }
  if (request.body.size() > 1000000) {
    return violation(endpoint, fmt::format("Batched logging API requests must be at most 1000000 "
                                           "bytes, got a request of size {}.",
                                           request.body.size()));
  }
  static const Json kEmpty = Json::array();
  const Json& metrics = body.contains("metrics") ? body["metrics"] : kEmpty;
  const Json& params = body.contains("params") ? body["params"] : kEmpty;
  const Json& tags = body.contains("tags") ? body["tags"] : kEmpty;
  if (!metrics.is_array() || !params.is_array() || !tags.is_array()) {
    return violation(endpoint, "metrics, params and tags must be arrays");
  }
  auto limit = [&](const char* what, size_t n, size_t max) -> std::optional<FakeResponse> {
    if (n <= max) return std::nullopt;
    return violation(endpoint, fmt::format("A batch logging request can contain at most {} {}. Got "
                                           "{} {}. Please split up {} across multiple requests "
                                           "and try again.",
                                           max, what, n, what, what));
  };
  if (auto r = limit("metrics", metrics.size(), 1000)) return *r;
  if (auto r = limit("params", params.size(), 100)) return *r;
  if (auto r = limit("tags", tags.size(), 100)) return *r;
  if (auto r =
          limit("metrics, params, and tags", metrics.size() + params.size() + tags.size(), 1000))
    return *r;
  if (metrics.empty() && params.empty() && tags.empty()) {
    return violation(endpoint, "an empty batch (nothing to log)");
  }
  std::vector<Metric> new_metrics;
  for (const Json& m : metrics) {
    if (!m.is_object() || m.size() != 4 || !m.contains("key") || !m["key"].is_string() ||
        !m.contains("value") || !m.contains("timestamp") || !m.contains("step")) {
      return violation(endpoint, "a metric must be {key, value, timestamp, step}: " + m.dump());
    }
    if (auto p = name_problem("metric", m["key"]); !p.empty()) return violation(endpoint, p);
    double value = 0;
    if (m["value"].is_number()) {
      value = m["value"].get<double>();
    } else if (m["value"] == "NaN") {
      value = std::numeric_limits<double>::quiet_NaN();
    } else if (m["value"] == "Infinity") {
      value = std::numeric_limits<double>::infinity();
    } else if (m["value"] == "-Infinity") {
      value = -std::numeric_limits<double>::infinity();
    } else {
      return violation(endpoint,
                       "a metric value must be a number, \"NaN\", \"Infinity\" or "
                       "\"-Infinity\": " +
                           m["value"].dump());
    }
    if (!is_int(m["timestamp"]) || m["timestamp"].get<int64_t>() < 0) {
      return violation(endpoint, "timestamp must be a non-negative integer: " + m.dump());
    }
    if (!is_int(m["step"])) return violation(endpoint, "step must be an integer: " + m.dump());
    new_metrics.push_back({m["key"], value, m["timestamp"], m["step"]});
  }
  std::map<std::string, std::string> new_params;
  for (const Json& p : params) {
    if (!p.is_object() || p.size() != 2 || !p.contains("key") || !p["key"].is_string() ||
        !p.contains("value") || !p["value"].is_string()) {
      return violation(endpoint, "a param must be {key: string, value: string}: " + p.dump());
    }
    if (auto problem = name_problem("parameter", p["key"]); !problem.empty())
      return violation(endpoint, problem);
    // As a server started with MLFLOW_TRUNCATE_LONG_VALUES=false, or one older than MLflow 3,
    // answers; MLflow 3 by default cuts the value to 6000 characters and accepts the request.
    if (p["value"].get<std::string>().size() > 6000)
      return violation(endpoint, "param value > 6000");
    const std::string key = p["key"];
    if (new_params.count(key) != 0) {
      return violation(endpoint,
                       fmt::format("Duplicate parameter keys have been submitted: ['{}']. "
                                   "Please ensure the request contains only one param "
                                   "value per param key.",
                                   key));
    }
    new_params[key] = p["value"];
    auto old = run->params.find(key);
    if (old != run->params.end() && old->second != new_params[key]) {
      // MLflow's answer, and a violation: the monitor must never rewrite a param.
      return violation(endpoint, fmt::format("Changing param values is not allowed. Param with "
                                             "key='{}' was already logged with value='{}' for run "
                                             "ID='{}'. Attempted logging new value '{}'.",
                                             key, old->second, run_id, new_params[key]));
    }
  }
  std::map<std::string, std::string> new_tags;
  for (const Json& t : tags) {
    if (!t.is_object() || t.size() != 2 || !t.contains("key") || !t["key"].is_string() ||
        !t.contains("value") || !t["value"].is_string()) {
      return violation(endpoint, "a tag must be {key: string, value: string}: " + t.dump());
    }
    if (auto p = name_problem("tag", t["key"]); !p.empty()) return violation(endpoint, p);
    new_tags[t["key"]] = t["value"];
  }
  // All checked: store (MLflow's log-batch is all or nothing for these checks).
  run->metrics.insert(run->metrics.end(), new_metrics.begin(), new_metrics.end());
  for (auto& [k, v] : new_params) run->params[k] = v;
  for (auto& [k, v] : new_tags) run->tags[k] = v;
  return FakeResponse{200, "{}", {}, false};
}

std::string describe(const FakeMLflow::Run& run) {
  return fmt::format(
      "run {} (experiment {}, name '{}'): {} metrics, {} params, {} tags, status {}, "
      "end_time {}",
      run.run_id, run.experiment_id, run.run_name, run.metrics.size(), run.params.size(),
      run.tags.size(), run.status, run.end_time ? std::to_string(*run.end_time) : "none");
}

namespace {
std::string point_text(double v) { return std::isnan(v) ? "nan" : fmt::format("{}", v); }
}  // namespace

std::vector<std::tuple<std::string, double, int64_t>> stats_json_scalars(
    const std::filesystem::path& dir) {
  std::vector<std::tuple<std::string, double, int64_t>> out;
  const auto stats = JSONWriter::load_existing_json(dir.string());
  if (!stats) return out;
  for (const auto& entry : *stats) {
    const int64_t step = std::get<int64_t>(*entry.find("global_step"));
    for (const auto& [name, value] : entry.items) {
      if (name == "global_step" || name == "epoch_num") continue;
      const double v = std::holds_alternative<double>(value)
                           ? std::get<double>(value)
                           : static_cast<double>(std::get<int64_t>(value));
      out.emplace_back(name, v, step);
    }
  }
  return out;
}

std::multiset<MetricPoint> stats_json_points(const std::filesystem::path& dir) {
  std::multiset<MetricPoint> out;
  for (const auto& [name, value, step] : stats_json_scalars(dir)) {
    out.emplace(detail::mlflow_name(name), point_text(value), step);
  }
  return out;
}

std::multiset<MetricPoint> run_points(const FakeMLflow::Run& run) {
  std::multiset<MetricPoint> out;
  for (const auto& m : run.metrics) out.emplace(m.key, point_text(m.value), m.step);
  return out;
}

}  // namespace testing
}  // namespace trainpack
