// A fake MLflow tracking server for the tests of MLflowMonitor: a FakeHttpServer whose handler
// speaks MLflow's REST API 2.0 (the endpoints MLflowMonitor uses) and checks every request
// strictly: method, path, Content-Type, Authorization, the JSON body's fields and their types,
// metric/param/tag names as MLflow validates them, log-batch's limits (1000 metrics, 100 params,
// 100 tags, 1000 entries, 1,000,000 bytes), a param logged again with another value. A request
// that breaks a rule is answered as MLflow answers it (400 INVALID_PARAMETER_VALUE, 404
// RESOURCE_DOES_NOT_EXIST / ENDPOINT_NOT_FOUND, 401, ... with {"error_code", "message"}) and, when
// it is a request MLflow's API does not allow at all (as opposed to a state error such as an
// unknown experiment), recorded in violations(), which a test expects to be empty.
//
//   trainpack::testing::FakeMLflow mlflow;
//   auto monitor = std::make_shared<MLflowMonitor>(
//       MLflowMonitorOptions().tracking_uri(mlflow.url()).experiment_name("exp"));
//   ... train ...
//   auto run = mlflow.only_run();
//   EXPECT_EQ(run.status, "FINISHED");
//   EXPECT_TRUE(mlflow.violations().empty());
//
// It keeps experiments (the "Default" one, id "0", exists from the start), runs with their
// metrics, params, tags, status and end_time. Faults, scriptable: the next N requests (or those to
// one endpoint) answer 401 / 429 with Retry-After / 500, or hang (never answered).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "support/fake_http_server.h"

namespace trainpack {
namespace testing {

class FakeMLflow {
 public:
  struct Metric {
    std::string key;
    double value = 0;  // NaN / infinities as sent ("NaN", "Infinity", "-Infinity")
    int64_t timestamp = 0;
    int64_t step = 0;
  };
  struct Run {
    std::string run_id;
    std::string experiment_id;
    std::string run_name;
    std::string status;  // RUNNING, FINISHED, FAILED, KILLED
    int64_t start_time = 0;
    std::optional<int64_t> end_time;
    std::vector<Metric> metrics;  // in arrival order
    std::map<std::string, std::string> params;
    std::map<std::string, std::string> tags;
    std::vector<std::string> status_history;  // every status runs/update set, in order
  };
  struct Experiment {
    std::string experiment_id;
    std::string name;
  };
  // An answer forced on requests: `count` requests (negative: all) whose path ends with
  // `endpoint` ("" matches every request) get `status` (with Retry-After when `retry_after` is
  // set), or no answer at all when `hang`.
  struct Fault {
    std::string endpoint;
    int status = 500;
    std::optional<std::string> retry_after;
    bool hang = false;
    int count = 1;
  };

  // Starts the server (a FakeHttpServer on 127.0.0.1).
  FakeMLflow();
  ~FakeMLflow();
  FakeMLflow(const FakeMLflow&) = delete;
  FakeMLflow& operator=(const FakeMLflow&) = delete;

  std::string url() const;
  FakeHttpServer& server() { return *server_; }

  // Every request must carry `Authorization: Basic base64(user:password)` / `Bearer <token>`;
  // others get 401 as MLflow's basic-auth app answers. Default: no authentication.
  void require_basic_auth(const std::string& user, const std::string& password);
  void require_token(const std::string& token);

  void add_fault(Fault fault);
  // Shorthands: the next `n` requests answer `status` / hang.
  void fail_next(int n, int status, std::optional<std::string> retry_after = std::nullopt);
  void hang_next(int n);

  // The handler (what the server calls; public so that another server can use it).
  FakeResponse handle(const RecordedRequest& request);

  // ---- what arrived ----
  std::vector<Experiment> experiments() const;
  std::vector<Run> runs() const;
  // The one run (a test failure, and an empty Run, when there is not exactly one).
  Run only_run() const;
  // Requests received per endpoint ("runs/log-batch", ...), faults included.
  int count(const std::string& endpoint) const;
  // The requests that MLflow's API does not allow, each with the reason.
  std::vector<std::string> violations() const;
  // Creates an experiment as another client would.
  std::string create_experiment(const std::string& name);

 private:
  FakeResponse route(const RecordedRequest& request, const std::string& endpoint);
  FakeResponse violation(const std::string& endpoint, const std::string& what, int status = 400,
                         const std::string& code = "INVALID_PARAMETER_VALUE");

  mutable std::mutex mutex_;
  std::vector<Experiment> experiments_;
  std::vector<Run> runs_;
  std::vector<Fault> faults_;
  std::map<std::string, int> counts_;
  std::vector<std::string> violations_;
  std::string expected_auth_;  // "" or the whole Authorization value
  int next_experiment_ = 1;
  int next_run_ = 1;
  std::unique_ptr<FakeHttpServer> server_;
};

// A FakeMLflow::Run as one line, for failure messages.
std::string describe(const FakeMLflow::Run& run);

// (key, value, step) of a metric point; NaN compares equal to NaN through its text.
using MetricPoint = std::tuple<std::string, std::string, int64_t>;

// Every scalar of the stats.json in `dir` as (name, value, global_step), in file order
// (epoch_num and global_step themselves left out); empty when there is no file.
std::vector<std::tuple<std::string, double, int64_t>> stats_json_scalars(
    const std::filesystem::path& dir);

// The metric points MLflow should hold for the stats.json in `dir` (names as MLflowMonitor
// cleans them), and the ones `run` holds: a test compares the two.
std::multiset<MetricPoint> stats_json_points(const std::filesystem::path& dir);
std::multiset<MetricPoint> run_points(const FakeMLflow::Run& run);

}  // namespace testing
}  // namespace trainpack
