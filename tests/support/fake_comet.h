// A fake Comet REST API v2 for the tests of CometMLMonitor: a FakeHttpServer whose handler checks
// every request strictly against Comet's write endpoints and records what a real Comet would
// store (experiments with their metrics, parameters, others, tags, images, end time and
// keep-alive count).
//
//   trainpack::testing::FakeComet comet;  // accepts the API key FakeComet::kApiKey
//   auto monitor = std::make_shared<CometMLMonitor>(
//       CometMLMonitorOptions().api_key(FakeComet::kApiKey).url(comet.url())
//           .workspace("ws").project_name("proj"));
//   ... train ...
//   ASSERT_EQ(comet.experiments().size(), 1u);
//
// What is checked, for every request (a violation is ADD_FAILURE with the reason and the answer
// 400 {"msg": <reason>}; it is also kept in violations()):
// - the path is one of the endpoints below, under /api/rest/v2, with its method;
// - the Authorization header is present and is the bare key (not "Bearer ..."); another key is
//   answered 401 {"msg": "Invalid API key", "code": 401} (not a violation: that is the answer a
//   wrong key gets);
// - JSON endpoints: Content-Type application/json, a body that is a JSON object with exactly the
//   fields the endpoint takes, of the documented types; experimentKey names an experiment this
//   fake created (or add_experiment added);
// - GET endpoints: no body, the query's parameters only;
// - upload-asset: the query's parameters (experimentKey, fileName required; type, extension,
//   step, epoch, overwrite, context), Content-Type multipart/form-data with a boundary, a body of
//   exactly one part named `file` with a filename; for type=image the part is a PNG.
// Endpoints: POST write/experiment/create {workspaceName, projectName, experimentName?};
// POST write/experiment/metric {experimentKey, metricName, metricValue (number or string),
// step?, epoch?, timestamp?, context?}; POST write/experiment/parameter {experimentKey,
// parameterName, parameterValue (string, number or bool), step?, timestamp?, context?};
// POST write/experiment/log-other {experimentKey, key, value, timestamp?}; POST
// write/experiment/tags {experimentKey, addedTags: [string]}; POST
// write/experiment/set-start-end-time {experimentKey, startTimeMillis?, endTimeMillis?};
// GET write/experiment/set-status?experimentKey= -> {isAliveBeatDurationMillis, ...};
// POST write/experiment/upload-asset?... (multipart).
//
// Faults (fail_next): the next n requests (of one path, or any) are answered 401, 429 with
// Retry-After, 500, or never (hang); a faulted request is checked but not stored. echo_key: the
// answers of faults quote the Authorization header (to test that the monitor redacts it).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "support/fake_http_server.h"

namespace trainpack {
namespace testing {

struct CometMetric {
  std::string name;
  double value = 0;
  std::optional<int64_t> step, epoch, timestamp;
};

struct CometParam {
  std::string name;
  std::string value;  // as sent: a string, or a number's / bool's JSON text
  std::optional<int64_t> step;
};

struct CometImage {
  std::string file_name;  // the query's fileName
  std::string type;       // the query's type
  std::optional<int64_t> step, epoch;
  std::string bytes;              // the uploaded file
  int64_t width = 0, height = 0;  // from the PNG's IHDR
};

struct CometExperiment {
  std::string key, workspace, project, name, link;
  std::vector<CometMetric> metrics;
  std::vector<CometParam> params;
  std::vector<std::pair<std::string, std::string>> others;  // (key, value) in arrival order
  std::vector<std::string> tags;
  std::vector<CometImage> images;
  std::optional<int64_t> end_time_ms;
  int keep_alives = 0;  // set-status requests
};

enum class CometFault { kUnauthorized, kTooManyRequests, kServerError, kHang };

class FakeComet {
 public:
  static constexpr const char* kApiKey = "fake-comet-key-4f1c2a9d7e";

  explicit FakeComet(std::string api_key = kApiKey);
  ~FakeComet();
  FakeComet(const FakeComet&) = delete;
  FakeComet& operator=(const FakeComet&) = delete;

  // The REST base to give CometMLMonitorOptions::url: "http://127.0.0.1:<port>/api/rest/v2".
  std::string url() const;
  // The server's address, for COMET_URL_OVERRIDE: "http://127.0.0.1:<port>".
  std::string server_url() const;
  const FakeHttpServer& server() const { return *server_; }

  // The next `n` requests (whose path ends with `path`, or any when empty) get `fault`; a 429
  // carries `Retry-After: <retry_after_seconds>`.
  void fail_next(int n, CometFault fault, const std::string& path = "",
                 int retry_after_seconds = 1);
  // Fault answers quote the request's Authorization header in their body.
  void set_echo_key(bool echo);

  // An experiment that exists before the test (to continue it with experiment_key).
  std::string add_experiment(const std::string& workspace, const std::string& project);

  std::vector<CometExperiment> experiments() const;  // in creation order
  std::optional<CometExperiment> experiment(const std::string& key) const;
  std::vector<std::string> violations() const;
  // Requests answered with a fault, and all requests.
  int faulted() const;
  int requests() const;

 private:
  struct Rule {
    int remaining;
    CometFault fault;
    std::string path;
    int retry_after;
  };
  FakeResponse handle(const RecordedRequest& request);
  FakeResponse violation(const std::string& reason);
  CometExperiment* find(const std::string& key);

  const std::string api_key_;
  mutable std::mutex mutex_;
  std::vector<CometExperiment> experiments_;
  std::vector<std::string> violations_;
  std::vector<Rule> rules_;
  bool echo_key_ = false;
  int faulted_ = 0, requests_ = 0;
  std::string server_url_;  // the server's url(), for the links handle() answers with
  // Last: destroyed first, so that no handler runs on the members above once they are gone.
  std::unique_ptr<FakeHttpServer> server_;
};

}  // namespace testing
}  // namespace trainpack
