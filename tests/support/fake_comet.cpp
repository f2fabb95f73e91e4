#include "support/fake_comet.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace trainpack {
namespace testing {
namespace {

using json = nlohmann::json;

constexpr const char* kBase = "/api/rest/v2/";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The media type of a Content-Type value, lower case, without parameters.
std::string media_type(const std::string& content_type) {
  std::string t = content_type.substr(0, content_type.find(';'));
  while (!t.empty() && t.back() == ' ') t.pop_back();
  return lower(t);
}

enum class Type { kString, kInteger, kNumberOrString, kScalar, kStringArray };

const char* type_name(Type t) {
  switch (t) {
    case Type::kString:
      return "a string";
    case Type::kInteger:
      return "an integer";
    case Type::kNumberOrString:
      return "a number or a string";
    case Type::kScalar:
      return "a string, a number or a boolean";
    case Type::kStringArray:
      return "an array of strings";
  }
  return "?";
}

bool has_type(const json& v, Type t) {
  switch (t) {
    case Type::kString:
      return v.is_string();
    case Type::kInteger:
      return v.is_number_integer();
    case Type::kNumberOrString:
      return v.is_number() || v.is_string();
    case Type::kScalar:
      return v.is_number() || v.is_string() || v.is_boolean();
    case Type::kStringArray:
      if (!v.is_array()) return false;
      for (const auto& e : v) {
        if (!e.is_string()) return false;
      }
      return true;
  }
  return false;
}

struct Field {
  const char* name;
  Type type;
  bool required;
};

// The JSON endpoints and their fields (Comet's REST API v2 write endpoints).
const std::map<std::string, std::vector<Field>>& json_endpoints() {
  static const std::map<std::string, std::vector<Field>> endpoints = {
      {"write/experiment/create",
       {{"workspaceName", Type::kString, true},
        {"projectName", Type::kString, true},
        {"experimentName", Type::kString, false}}},
      {"write/experiment/metric",
       {{"experimentKey", Type::kString, true},
        {"metricName", Type::kString, true},
        {"metricValue", Type::kNumberOrString, true},
        {"step", Type::kInteger, false},
        {"epoch", Type::kInteger, false},
        {"timestamp", Type::kInteger, false},
        {"context", Type::kString, false}}},
      {"write/experiment/parameter",
       {{"experimentKey", Type::kString, true},
        {"parameterName", Type::kString, true},
        {"parameterValue", Type::kScalar, true},
        {"step", Type::kInteger, false},
        {"timestamp", Type::kInteger, false},
        {"context", Type::kString, false}}},
      {"write/experiment/log-other",
       {{"experimentKey", Type::kString, true},
        {"key", Type::kString, true},
        {"value", Type::kScalar, true},
        {"timestamp", Type::kInteger, false}}},
      {"write/experiment/tags",
       {{"experimentKey", Type::kString, true}, {"addedTags", Type::kStringArray, true}}},
      {"write/experiment/set-start-end-time",
       {{"experimentKey", Type::kString, true},
        {"startTimeMillis", Type::kInteger, false},
        {"endTimeMillis", Type::kInteger, false}}},
  };
  return endpoints;
}

std::optional<int64_t> query_int(const std::map<std::string, std::string>& q, const char* name,
                                 std::string* error) {
  auto it = q.find(name);
  if (it == q.end()) return std::nullopt;
  char* end = nullptr;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end != '\0') {
    *error = fmt::format("query parameter {}='{}' is not an integer", name, it->second);
    return std::nullopt;
  }
  return v;
}

uint32_t be32(const std::string& s, size_t at) {
  return (static_cast<uint32_t>(static_cast<unsigned char>(s[at])) << 24) |
         (static_cast<uint32_t>(static_cast<unsigned char>(s[at + 1])) << 16) |
         (static_cast<uint32_t>(static_cast<unsigned char>(s[at + 2])) << 8) |
         static_cast<uint32_t>(static_cast<unsigned char>(s[at + 3]));
}

}  // namespace

FakeComet::FakeComet(std::string api_key) : api_key_(std::move(api_key)) {
  auto server =
      std::make_unique<FakeHttpServer>([this](const RecordedRequest& r) { return handle(r); });
  // The server's threads start inside make_unique: what handle() reads is published under the
  // mutex it takes (a socket between the client and the server is no ordering ThreadSanitizer
  // sees).
  std::lock_guard<std::mutex> lock(mutex_);
  server_url_ = server->url();
  server_ = std::move(server);
}

FakeComet::~FakeComet() { server_.reset(); }

std::string FakeComet::url() const { return server_->url() + "/api/rest/v2"; }
std::string FakeComet::server_url() const { return server_->url(); }

void FakeComet::fail_next(int n, CometFault fault, const std::string& path,
                          int retry_after_seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  rules_.push_back(Rule{n, fault, path, retry_after_seconds});
}

void FakeComet::set_echo_key(bool echo) {
  std::lock_guard<std::mutex> lock(mutex_);
  echo_key_ = echo;
}

std::string FakeComet::add_experiment(const std::string& workspace, const std::string& project) {
  std::lock_guard<std::mutex> lock(mutex_);
  CometExperiment e;
  e.key = fmt::format("{:032x}", 0xc0ffee00u + experiments_.size());
  e.workspace = workspace;
  e.project = project;
  e.link = fmt::format("{}/{}/{}/{}", server_url_, workspace, project, e.key);
  experiments_.push_back(e);
  return e.key;
}

std::vector<CometExperiment> FakeComet::experiments() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return experiments_;
}

std::optional<CometExperiment> FakeComet::experiment(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& e : experiments_) {
    if (e.key == key) return e;
  }
  return std::nullopt;
}

std::vector<std::string> FakeComet::violations() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return violations_;
}

int FakeComet::faulted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return faulted_;
}

int FakeComet::requests() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return requests_;
}

CometExperiment* FakeComet::find(const std::string& key) {
  for (auto& e : experiments_) {
    if (e.key == key) return &e;
  }
  return nullptr;
}

FakeResponse FakeComet::violation(const std::string& reason) {
  violations_.push_back(reason);
  ADD_FAILURE() << "fake Comet: the request violates the API: " << reason;
  return FakeResponse{400, json{{"msg", reason}, {"code", 400}}.dump()};
}

FakeResponse FakeComet::handle(const RecordedRequest& r) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_;
  const std::string where = r.method + " " + r.path;
  if (!starts_with(r.path, kBase)) return violation(where + ": not under " + kBase);
  const std::string endpoint = r.path.substr(std::string(kBase).size());
  const bool is_json = json_endpoints().count(endpoint) > 0;
  const bool is_status = endpoint == "write/experiment/set-status";
  const bool is_upload = endpoint == "write/experiment/upload-asset";
  if (!is_json && !is_status && !is_upload) return violation(where + ": no such endpoint");
  const std::string method = is_status ? "GET" : "POST";
  if (r.method != method) return violation(where + ": the endpoint takes " + method);

  // The key: the bare API key in Authorization.
  auto auth = r.headers.find("authorization");
  if (auth == r.headers.end()) return violation(where + ": no Authorization header");
  const std::string& key = auth->second;
  if (starts_with(lower(key), "bearer ") || starts_with(lower(key), "basic ")) {
    return violation(where + ": Authorization must be the bare API key, not '" +
                     key.substr(0, key.find(' ')) + " ...'");
  }
  const std::string echo = echo_key_ ? " (Authorization: " + key + ")" : "";
  if (key != api_key_) {
    return FakeResponse{401, json{{"msg", "Invalid API key" + echo}, {"code", 401}}.dump()};
  }

  // The request's form, before any fault: a faulted request must be right too.
  json body;
  if (is_json) {
    auto ct = r.headers.find("content-type");
    if (ct == r.headers.end() || media_type(ct->second) != "application/json") {
      return violation(where + ": Content-Type must be application/json");
    }
    if (!r.query.empty()) return violation(where + ": a JSON endpoint takes no query");
    body = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded() || !body.is_object()) {
      return violation(where + ": the body is not a JSON object: " + r.body.substr(0, 200));
    }
    const auto& fields = json_endpoints().at(endpoint);
    for (auto it = body.begin(); it != body.end(); ++it) {
      bool known = false;
      for (const Field& f : fields) {
        if (it.key() != f.name) continue;
        known = true;
        if (!has_type(it.value(), f.type)) {
          return violation(fmt::format("{}: field {} must be {}, got {}", where, f.name,
                                       type_name(f.type), it.value().dump()));
        }
      }
      if (!known) return violation(where + ": unknown field " + it.key());
    }
    for (const Field& f : fields) {
      if (f.required && !body.contains(f.name)) {
        return violation(where + ": missing field " + f.name);
      }
    }
    if (body.contains("experimentKey") &&
        find(body["experimentKey"].get<std::string>()) == nullptr) {
      return violation(where + ": unknown experimentKey " + body["experimentKey"].dump());
    }
    if (body.contains("metricValue") && body["metricValue"].is_string()) {
      const std::string v = body["metricValue"].get<std::string>();
      char* end = nullptr;
      std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0') {
        return violation(where + ": metricValue '" + v + "' is not a number");
      }
    }
    if (endpoint == "write/experiment/set-start-end-time" && !body.contains("startTimeMillis") &&
        !body.contains("endTimeMillis")) {
      return violation(where + ": neither startTimeMillis nor endTimeMillis");
    }
  } else if (is_status) {
    if (!r.body.empty()) return violation(where + ": a GET has no body");
    for (const auto& kv : r.query) {
      if (kv.first != "experimentKey") return violation(where + ": unknown query " + kv.first);
    }
    auto k = r.query.find("experimentKey");
    if (k == r.query.end()) return violation(where + ": no experimentKey");
    if (find(k->second) == nullptr)
      return violation(where + ": unknown experimentKey " + k->second);
  }
  CometImage image;
  std::string upload_key;
  if (is_upload) {
    static const std::set<std::string> known = {
        "experimentKey", "fileName", "type", "extension", "step", "epoch", "overwrite", "context"};
    for (const auto& kv : r.query) {
      if (known.count(kv.first) == 0) return violation(where + ": unknown query " + kv.first);
    }
    for (const char* required : {"experimentKey", "fileName"}) {
      if (r.query.count(required) == 0) return violation(where + ": no " + required);
    }
    upload_key = r.query.at("experimentKey");
    if (find(upload_key) == nullptr)
      return violation(where + ": unknown experimentKey " + upload_key);
    std::string error;
    image.step = query_int(r.query, "step", &error);
    image.epoch = query_int(r.query, "epoch", &error);
    if (!error.empty()) return violation(where + ": " + error);
    if (r.query.count("overwrite") && r.query.at("overwrite") != "true" &&
        r.query.at("overwrite") != "false") {
      return violation(where + ": overwrite must be true or false");
    }
    image.file_name = r.query.at("fileName");
    image.type = r.query.count("type") ? r.query.at("type") : "asset";
    // multipart/form-data; boundary=...
    auto ct = r.headers.find("content-type");
    if (ct == r.headers.end() || media_type(ct->second) != "multipart/form-data") {
      return violation(where + ": Content-Type must be multipart/form-data");
    }
    const std::string& ctv = ct->second;
    const size_t b = ctv.find("boundary=");
    if (b == std::string::npos) return violation(where + ": no multipart boundary");
    std::string boundary = ctv.substr(b + 9);
    boundary = boundary.substr(0, boundary.find(';'));
    if (boundary.size() >= 2 && boundary.front() == '"' && boundary.back() == '"') {
      boundary = boundary.substr(1, boundary.size() - 2);
    }
    const std::string delim = "--" + boundary;
    const std::string& data = r.body;
    if (!starts_with(data, delim + "\r\n")) {
      return violation(where + ": the body does not start with the boundary");
    }
    const size_t part_start = delim.size() + 2;
    const size_t next = data.find("\r\n" + delim, part_start);
    if (next == std::string::npos) return violation(where + ": the part has no closing boundary");
    const std::string after = data.substr(next + 2 + delim.size());
    if (after != "--\r\n" && after != "--") {
      return violation(where + ": the body must hold exactly one part, then the final boundary");
    }
    const std::string part = data.substr(part_start, next - part_start);
    const size_t header_end = part.find("\r\n\r\n");
    if (header_end == std::string::npos) return violation(where + ": the part has no headers");
    const std::string headers = lower(part.substr(0, header_end));
    if (headers.find("content-disposition: form-data;") == std::string::npos ||
        headers.find("name=\"file\"") == std::string::npos ||
        headers.find("filename=\"") == std::string::npos) {
      return violation(where + ": the part must be form-data named \"file\" with a filename");
    }
    image.bytes = part.substr(header_end + 4);
    if (image.type == "image") {
      static const std::string signature("\x89PNG\r\n\x1a\n", 8);
      if (!starts_with(image.bytes, signature) || image.bytes.size() < 24 ||
          image.bytes.compare(12, 4, "IHDR") != 0) {
        return violation(where + ": the image is not a PNG");
      }
      image.width = be32(image.bytes, 16);
      image.height = be32(image.bytes, 20);
    }
  }

  // Faults.
  for (Rule& rule : rules_) {
    if (rule.remaining <= 0 || !ends_with(r.path, rule.path)) continue;
    --rule.remaining;
    ++faulted_;
    switch (rule.fault) {
      case CometFault::kUnauthorized:
        return FakeResponse{401, json{{"msg", "Invalid API key" + echo}, {"code", 401}}.dump()};
      case CometFault::kTooManyRequests:
        return FakeResponse{429,
                            json{{"msg", "Too many requests" + echo}, {"code", 429}}.dump(),
                            {{"Retry-After", std::to_string(rule.retry_after)}}};
      case CometFault::kServerError:
        return FakeResponse{500, json{{"msg", "Internal error" + echo}, {"code", 500}}.dump()};
      case CometFault::kHang: {
        FakeResponse hang;
        hang.hang = true;
        return hang;
      }
    }
  }

  // Store, and answer as Comet does.
  if (endpoint == "write/experiment/create") {
    CometExperiment e;
    e.key = fmt::format("{:032x}", 0xe0000000u + experiments_.size());
    e.workspace = body["workspaceName"].get<std::string>();
    e.project = body["projectName"].get<std::string>();
    if (body.contains("experimentName")) e.name = body["experimentName"].get<std::string>();
    e.link = fmt::format("{}/{}/{}/{}", server_url_, e.workspace, e.project, e.key);
    experiments_.push_back(e);
    return FakeResponse{200, json{{"experimentKey", e.key},
                                  {"workspaceName", e.workspace},
                                  {"projectName", e.project},
                                  {"link", e.link}}
                                 .dump()};
  }
  if (is_status) {
    ++find(r.query.at("experimentKey"))->keep_alives;
    return FakeResponse{200, json{{"isAliveBeatDurationMillis", 10000},
                                  {"gpuMonitorIntervalMillis", 60000},
                                  {"cpuMonitorIntervalMillis", 68000}}
                                 .dump()};
  }
  if (is_upload) {
    CometExperiment* e = find(upload_key);
    e->images.push_back(image);
    return FakeResponse{200, json{{"assetId", fmt::format("{:032x}", e->images.size())},
                                  {"web", e->link},
                                  {"api", e->link}}
                                 .dump()};
  }
  CometExperiment* e = find(body["experimentKey"].get<std::string>());
  auto opt_int = [&](const char* name) -> std::optional<int64_t> {
    if (!body.contains(name)) return std::nullopt;
    return body[name].get<int64_t>();
  };
  auto text = [](const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); };
  if (endpoint == "write/experiment/metric") {
    CometMetric m;
    m.name = body["metricName"].get<std::string>();
    const json& v = body["metricValue"];
    m.value = v.is_string() ? std::strtod(v.get<std::string>().c_str(), nullptr) : v.get<double>();
    m.step = opt_int("step");
    m.epoch = opt_int("epoch");
    m.timestamp = opt_int("timestamp");
    e->metrics.push_back(m);
  } else if (endpoint == "write/experiment/parameter") {
    e->params.push_back(
        {body["parameterName"].get<std::string>(), text(body["parameterValue"]), opt_int("step")});
  } else if (endpoint == "write/experiment/log-other") {
    e->others.emplace_back(body["key"].get<std::string>(), text(body["value"]));
  } else if (endpoint == "write/experiment/tags") {
    for (const auto& t : body["addedTags"]) e->tags.push_back(t.get<std::string>());
  } else if (endpoint == "write/experiment/set-start-end-time") {
    if (body.contains("endTimeMillis")) e->end_time_ms = body["endTimeMillis"].get<int64_t>();
  }
  return FakeResponse{200, json{{"msg", "Saved"}}.dump()};
}

}  // namespace testing
}  // namespace trainpack
