// MLflowMonitor against FakeMLflow (tests/support/fake_mlflow.h), a strict stand-in for MLflow's
// tracking server: real short trainings with JSONWriter in the same run, whose stats.json is what
// the server must have received; the run's status at the end (finished, failed, SIGTERM); a
// resumed run logging into the same MLflow run without sending its params again; batches split
// at MLflow's limits; authentication; retries, a server that hangs and one that is down; the
// configuration from options and environment variables. Then the fake itself (FakeMLflowTest): it
// refuses what MLflow refuses (a rewritten param, the batch limits, wrong types and names), with
// MLflow's error codes, and its faults answer as scripted.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gmock/gmock.h>
#include <nlohmann/json.hpp>

#include "support/fake_mlflow.h"
#include "support/files.h"
#include "support/linear_regression.h"
#include "support/temp_dir.h"
#include "trainpack/callbacks/json_writer.h"
#include "trainpack/callbacks/mlflow_monitor.h"
#include "trainpack/callbacks/param.h"
#include "trainpack/callbacks/saver.h"
#include "trainpack/core/callback_state.h"
#include "trainpack/input/dataflow.h"
#include "trainpack/testing.h"
#include "trainpack/train/config.h"
#include "trainpack/train/single_cost.h"
#include "trainpack/utils/logger.h"

namespace trainpack {
namespace mlflow_monitor_test {

namespace fs = std::filesystem;
using testing::ActionCallback;
using testing::FakeMLflow;
using ::testing::HasSubstr;
using testing::LogCapture;
using testing::stats_json_points;
using Json = nlohmann::json;

// The tests' small regression (3 steps per epoch).
using LinearModel = testing::LinearRegressionModel;
DataFlowPtr batches() { return testing::linear_regression_batches(); }

// The MLFLOW_* variables are cleared for each test and put back after it.
class ScopedEnv {
 public:
  ScopedEnv() {
    for (const char* name : kNames) {
      const char* v = std::getenv(name);
      if (v != nullptr) saved_[name] = v;
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    for (const char* name : kNames) ::unsetenv(name);
    for (const auto& [k, v] : saved_) ::setenv(k.c_str(), v.c_str(), 1);
  }
  static void set(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }

 private:
  static constexpr const char* kNames[] = {
      "MLFLOW_TRACKING_URI",      "MLFLOW_EXPERIMENT_NAME",   "MLFLOW_RUN_ID",
      "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"};
  std::map<std::string, std::string> saved_;
};

// Fast retries for the tests (the waits are not asserted).
TrackingOptions fast() {
  return TrackingOptions()
      .initial_backoff(std::chrono::milliseconds(5))
      .max_backoff(std::chrono::milliseconds(20))
      .flush_timeout(std::chrono::seconds(20));
}

// The JSON bodies of the requests to `endpoint`.
std::vector<Json> bodies(FakeMLflow& mlflow, const std::string& endpoint) {
  std::vector<Json> out;
  for (const auto& r : mlflow.server().requests()) {
    if (r.path == "/api/2.0/mlflow/" + endpoint) out.push_back(Json::parse(r.body));
  }
  return out;
}

// Puts "loss" (a made-up value: 10 / global_step) after every step, NaN at step 2 and +inf at step
// 4, so that the special values travel too.
std::shared_ptr<ActionCallback> putter() {
  auto cb = std::make_shared<ActionCallback>();
  cb->trigger_step_fn = [](ActionCallback& self) {
    const int64_t gs = self.global_step();
    const double v = gs == 2   ? std::numeric_limits<double>::quiet_NaN()
                     : gs == 4 ? std::numeric_limits<double>::infinity()
                               : 10.0 / static_cast<double>(gs);
    self.trainer().monitors().put_scalar("loss", v);
    self.trainer().monitors().put_scalar("Throughput (steps/sec)", 100.0 + gs);
  };
  return cb;
}

// Waits (at most 20 s) in before_epoch until the monitor has its run, so that the checkpoint of
// the first epoch holds the run's id (a test's steps take microseconds; a real step does not).
std::shared_ptr<ActionCallback> wait_for_run(std::shared_ptr<MLflowMonitor> monitor) {
  auto cb = std::make_shared<ActionCallback>();
  cb->before_epoch_fn = [monitor](ActionCallback&) {
    for (int i = 0; i < 2000 && monitor->run_id().empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  return cb;
}

class MLflowMonitorTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    testing::TempDirTest::SetUp();
    logger::set_logger_dir(dir().string(), 'k');
  }

  MLflowMonitorOptions options() const {
    return MLflowMonitorOptions()
        .tracking_uri(mlflow.url())
        .experiment_name("fashion")
        .tracking(fast());
  }

  // Trains the linear model for `max_epoch` epochs (3 steps each) with JSONWriter and `monitor`,
  // a learning-rate setter (the run's param), a ModelSaver every epoch, resuming from the logger
  // directory when `resume`; `more` are extra callbacks. Unless `wait` is false, the first epoch
  // waits until the monitor has its run. Returns the trainer's signal.
  int train(std::shared_ptr<MLflowMonitor> monitor, int64_t max_epoch, bool resume = false,
            std::vector<CallbackPtr> more = {}, bool handle_signals = false, bool wait = true) {
    std::vector<CallbackPtr> callbacks{
        wait ? wait_for_run(monitor) : std::make_shared<ActionCallback>(), putter(),
        std::make_shared<ScheduledHyperParamSetter>(
            "learning_rate", ScheduledHyperParamSetter::Schedule{{1, 0.05}, {3, 0.01}}),
        std::make_shared<ModelSaver>(ModelSaverOptions().fsync(false))};
    for (auto& cb : more) callbacks.push_back(cb);
    TrainConfig config = TrainConfig()
                             .model(std::make_shared<LinearModel>())
                             .dataflow(batches())
                             .callbacks(callbacks)
                             .extra_callbacks(std::vector<CallbackPtr>{})
                             .monitors(std::vector<MonitorPtr>{JSONWriter::create(), monitor})
                             .max_epoch(max_epoch);
    SimpleTrainer trainer;
    trainer.set_handle_signals(handle_signals);
    if (resume) {
      launch_train_with_config(AutoResumeTrainConfig(config), trainer);
    } else {
      launch_train_with_config(config, trainer);
    }
    return trainer.received_signal();
  }

  // Trains the linear model for `max_epoch` epochs with only the putter, JSONWriter and `monitor`,
  // without waiting for the monitor's run (for servers that never give one).
  void train_plain(std::shared_ptr<MLflowMonitor> monitor, int64_t max_epoch) {
    TrainConfig config = TrainConfig()
                             .model(std::make_shared<LinearModel>())
                             .dataflow(batches())
                             .callbacks(std::vector<CallbackPtr>{putter()})
                             .extra_callbacks(std::vector<CallbackPtr>{})
                             .monitors(std::vector<MonitorPtr>{JSONWriter::create(), monitor})
                             .max_epoch(max_epoch);
    SimpleTrainer trainer;
    trainer.set_handle_signals(false);
    launch_train_with_config(config, trainer);
  }

  ScopedEnv env;
  FakeMLflow mlflow;
};

TEST_F(MLflowMonitorTest, SendsWhatStatsJsonHoldsTheParamsAndEndsFinished) {
  auto monitor = std::make_shared<MLflowMonitor>(options().tags({{"team", "vision"}}));
  LogCapture log;
  train(monitor, 2);

  ASSERT_EQ(mlflow.runs().size(), 1u);
  const FakeMLflow::Run run = mlflow.only_run();
  EXPECT_TRUE(mlflow.violations().empty()) << ::testing::PrintToString(mlflow.violations());
  // The experiment was created by name.
  ASSERT_EQ(mlflow.experiments().size(), 2u);
  EXPECT_EQ(mlflow.experiments()[1].name, "fashion");
  EXPECT_EQ(run.experiment_id, mlflow.experiments()[1].experiment_id);
  // Every scalar of stats.json, at its global step; NaN and +inf included; the names MLflow takes.
  const auto expected = stats_json_points(dir());
  EXPECT_EQ(expected.size(), 12u);  // 6 steps x 2 names
  EXPECT_EQ(run_points(run), expected);
  EXPECT_EQ(expected.count({"loss", "nan", 2}), 1u);
  EXPECT_EQ(expected.count({"loss", "inf", 4}), 1u);
  EXPECT_EQ(expected.count({"Throughput _steps/sec_", "101", 1}), 1u);
  for (const auto& m : run.metrics) EXPECT_GE(m.timestamp, run.start_time);
  // The learning rate as training started: the setter's value, once.
  ASSERT_EQ(run.params.size(), 1u);
  EXPECT_EQ(std::stod(run.params.at("learning_rate")), 0.05);
  // Tags: MLflow's own and the options'.
  EXPECT_EQ(run.run_name, dir().filename().string());
  EXPECT_EQ(run.tags.at("mlflow.runName"), dir().filename().string());
  EXPECT_EQ(run.tags.at("mlflow.source.name"), fs::read_symlink("/proc/self/exe").string());
  EXPECT_EQ(run.tags.at("mlflow.source.type"), "LOCAL");
  if (const char* user = std::getenv("USER")) {
    EXPECT_EQ(run.tags.at("mlflow.user"), user);
  }
  EXPECT_EQ(run.tags.at("team"), "vision");
  // The end.
  EXPECT_EQ(run.status, "FINISHED");
  EXPECT_EQ(run.status_history, std::vector<std::string>{"FINISHED"});
  ASSERT_TRUE(run.end_time.has_value());
  EXPECT_GE(*run.end_time, run.start_time);
  // One experiment lookup and create, one run, the end once.
  EXPECT_EQ(mlflow.count("experiments/get-by-name"), 1);
  EXPECT_EQ(mlflow.count("experiments/create"), 1);
  EXPECT_EQ(mlflow.count("runs/create"), 1);
  EXPECT_EQ(mlflow.count("runs/update"), 1);
  // The lookup's RESOURCE_DOES_NOT_EXIST is an answer, not a failure.
  EXPECT_EQ(monitor->requests_failed(), 0);
  // No warning but the schedule's: its point 3 is after max_epoch in this run of 2 epochs.
  for (const auto& line : log.lines()) {
    if (line.rfind("WRN ", 0) == 0) {
      EXPECT_NE(line.find("the schedule's point 3 is after max_epoch=2"), std::string::npos)
          << line;
    }
  }
  // The run's page, in the log.
  EXPECT_EQ(monitor->run_id(), run.run_id);
  EXPECT_EQ(monitor->run_url(),
            mlflow.url() + "/#/experiments/" + run.experiment_id + "/runs/" + run.run_id);
  EXPECT_TRUE(log.contains("MLflowMonitor: run " + run.run_id +
                           " in experiment 'fashion': " + monitor->run_url()));
  EXPECT_EQ(monitor->status(), TrackingStatus::kFinished);
}

TEST_F(MLflowMonitorTest, AnExistingExperimentIsUsedAsItIs) {
  const std::string id = mlflow.create_experiment("fashion");
  train(std::make_shared<MLflowMonitor>(options()), 1);
  EXPECT_EQ(mlflow.only_run().experiment_id, id);
  EXPECT_EQ(mlflow.count("experiments/create"), 0);
  EXPECT_EQ(mlflow.experiments().size(), 2u);
}

TEST_F(MLflowMonitorTest, AnExperimentCreatedByAnotherClientMeanwhileIsLookedUpAgain) {
  // get-by-name says missing; before the create arrives, another client creates it.
  std::string other_id;
  mlflow.server().set_handler([this, &other_id](const testing::RecordedRequest& r) {
    if (r.path == "/api/2.0/mlflow/experiments/create" && other_id.empty()) {
      other_id = mlflow.create_experiment("fashion");
    }
    return mlflow.handle(r);
  });
  auto monitor = std::make_shared<MLflowMonitor>(options());
  train(monitor, 1);
  EXPECT_EQ(monitor->requests_failed(), 0);  // RESOURCE_ALREADY_EXISTS is an answer too
  EXPECT_EQ(mlflow.count("experiments/get-by-name"), 2);
  EXPECT_EQ(mlflow.count("experiments/create"), 1);
  EXPECT_EQ(mlflow.only_run().experiment_id, other_id);
  EXPECT_TRUE(mlflow.violations().empty()) << ::testing::PrintToString(mlflow.violations());
}

TEST_F(MLflowMonitorTest, AStepThatThrowsEndsTheRunFailed) {
  auto thrower = std::make_shared<ActionCallback>();
  thrower->trigger_step_fn = [](ActionCallback& self) {
    if (self.global_step() == 4) throw std::runtime_error("boom");
  };
  auto monitor = std::make_shared<MLflowMonitor>(options());
  EXPECT_THROW(train(monitor, 3, false, {thrower}), std::runtime_error);
  const FakeMLflow::Run run = mlflow.only_run();
  EXPECT_EQ(run.status, "FAILED");
  EXPECT_TRUE(run.end_time.has_value());
  // What was put before the failure arrived (steps 1..4: the throwing callback runs after the
  // putter).
  std::set<int64_t> steps;
  for (const auto& m : run.metrics) steps.insert(m.step);
  EXPECT_EQ(steps, (std::set<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(monitor->status(), TrackingStatus::kFailed);
}

TEST_F(MLflowMonitorTest, SigtermDuringTrainingEndsTheRunKilled) {
  auto raiser = std::make_shared<ActionCallback>();
  raiser->trigger_step_fn = [](ActionCallback& self) {
    if (self.global_step() == 4) std::raise(SIGTERM);
  };
  auto monitor = std::make_shared<MLflowMonitor>(options());
  EXPECT_EQ(train(monitor, 3, false, {raiser}, /*handle_signals=*/true), SIGTERM);
  const FakeMLflow::Run run = mlflow.only_run();
  EXPECT_EQ(run.status, "KILLED");
  EXPECT_TRUE(run.end_time.has_value());
  EXPECT_EQ(run_points(run), stats_json_points(dir()));
  EXPECT_EQ(monitor->status(), TrackingStatus::kKilled);
}

TEST_F(MLflowMonitorTest, AResumedRunLogsIntoTheSameRunWithoutSendingItsParamsAgain) {
  auto first = std::make_shared<MLflowMonitor>(options());
  train(first, 1);
  const std::string run_id = first->run_id();
  ASSERT_FALSE(run_id.empty());
  // The checkpoint holds the run's id.
  EXPECT_EQ(state_string("test", first->state(), "run_id"), run_id);
  EXPECT_EQ(mlflow.only_run().status, "FINISHED");
  const size_t requests_before = mlflow.server().requests().size();

  auto second = std::make_shared<MLflowMonitor>(options());
  LogCapture log;
  train(second, 3, /*resume=*/true);  // epochs 2 and 3; the schedule sets 0.01 at epoch 3
  EXPECT_EQ(second->run_id(), run_id);
  ASSERT_EQ(mlflow.runs().size(), 1u);
  const FakeMLflow::Run run = mlflow.only_run();
  EXPECT_EQ(run.status_history, (std::vector<std::string>{"FINISHED", "RUNNING", "FINISHED"}));
  EXPECT_TRUE(run.end_time.has_value());
  // Steps 1..9 once each, as stats.json (appended to by the resumed run) holds them.
  EXPECT_EQ(run_points(run), stats_json_points(dir()));
  EXPECT_EQ(run_points(run).size(), 18u);
  // No param in any request of the resumed run; the first value stays.
  const auto requests = mlflow.server().requests();
  for (size_t i = requests_before; i < requests.size(); ++i) {
    if (requests[i].path != "/api/2.0/mlflow/runs/log-batch") continue;
    EXPECT_TRUE(Json::parse(requests[i].body)["params"].empty()) << requests[i].body;
  }
  EXPECT_EQ(std::stod(run.params.at("learning_rate")), 0.05);
  EXPECT_EQ(mlflow.count("runs/create"), 1);
  EXPECT_TRUE(log.contains("MLflowMonitor: continuing run " + run_id));
  EXPECT_TRUE(mlflow.violations().empty()) << ::testing::PrintToString(mlflow.violations());
}

TEST_F(MLflowMonitorTest, AGivenRunIdIsLoggedIntoWithoutParams) {
  auto creator = std::make_shared<MLflowMonitor>(options());
  train(creator, 1);
  const std::string run_id = creator->run_id();
  // A new directory: no checkpoint to resume from; the run is named by the option.
  logger::set_logger_dir((dir() / "other").string(), 'k');
  auto monitor = std::make_shared<MLflowMonitor>(options().run_id(run_id));
  train(monitor, 1);
  const FakeMLflow::Run run = mlflow.only_run();
  EXPECT_EQ(run.status_history, (std::vector<std::string>{"FINISHED", "RUNNING", "FINISHED"}));
  EXPECT_EQ(run.metrics.size(), 12u);  // 3 steps x 2 names, twice
  EXPECT_EQ(run.params.size(), 1u);
}

TEST_F(MLflowMonitorTest, MlflowRunIdFromTheEnvironmentIsARunToLogInto) {
  auto creator = std::make_shared<MLflowMonitor>(options());
  train(creator, 1);
  logger::set_logger_dir((dir() / "other").string(), 'k');
  ScopedEnv::set("MLFLOW_RUN_ID", creator->run_id());
  train(std::make_shared<MLflowMonitor>(options()), 1);
  EXPECT_EQ(mlflow.runs().size(), 1u);
  EXPECT_EQ(mlflow.only_run().status_history,
            (std::vector<std::string>{"FINISHED", "RUNNING", "FINISHED"}));
}

TEST_F(MLflowMonitorTest, BatchesAreSplitAtMlflowsMetricLimit) {
  // 2500 scalars in the one step of one epoch, delivered together at the epoch end: 1000 + 1000
  // + 500.
  auto many = std::make_shared<ActionCallback>();
  many->trigger_step_fn = [](ActionCallback& self) {
    for (int i = 0; i < 2500; ++i) self.trainer().monitors().put_scalar("m", i);
  };
  auto monitor = std::make_shared<MLflowMonitor>(
      options().tracking(fast().batch_size(100000).send_interval(std::chrono::hours(1))));
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train({wait_for_run(monitor), many}, {monitor}, 1, 1, 1);
  std::vector<size_t> sizes;
  for (const Json& b : bodies(mlflow, "runs/log-batch")) sizes.push_back(b["metrics"].size());
  EXPECT_EQ(sizes, (std::vector<size_t>{1000, 1000, 500}));
  const FakeMLflow::Run run = mlflow.only_run();
  ASSERT_EQ(run.metrics.size(), 2500u);
  for (int i = 0; i < 2500; ++i) EXPECT_EQ(run.metrics[static_cast<size_t>(i)].value, i);
  EXPECT_TRUE(mlflow.violations().empty()) << ::testing::PrintToString(mlflow.violations());
}

// Puts params and tags of its own (what a subclass may add with enqueue).
class TaggingMonitor : public MLflowMonitor {
 public:
  using MLflowMonitor::MLflowMonitor;
  void add(TrackingRecord::Kind kind, const std::string& key, const std::string& text) {
    TrackingRecord r;
    r.kind = kind;
    r.key = key;
    r.text = text;
    enqueue(std::move(r));
  }
};

TEST_F(MLflowMonitorTest, BatchesAreSplitAtMlflowsParamTagAndByteLimits) {
  // 150 params of 6000 bytes and 150 tags of 5000 bytes: at most 100 of each, and 1 MB, a
  // request.
  auto monitor = std::make_shared<TaggingMonitor>(
      options().tracking(fast().batch_size(100000).send_interval(std::chrono::hours(1))));
  auto adder = std::make_shared<ActionCallback>();
  adder->trigger_step_fn = [monitor](ActionCallback&) {
    for (int i = 0; i < 150; ++i) {
      monitor->add(TrackingRecord::Kind::kParam, fmt::format("p{}", i), std::string(6000, 'a'));
      monitor->add(TrackingRecord::Kind::kOther, fmt::format("t{}", i), std::string(5000, 'b'));
    }
  };
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train({wait_for_run(monitor), adder}, {monitor}, 1, 1, 1);
  size_t params = 0, tags = 0;
  for (const auto& r : mlflow.server().requests()) {
    if (r.path != "/api/2.0/mlflow/runs/log-batch") continue;
    EXPECT_LE(r.body.size(), 1000000u);
    const Json b = Json::parse(r.body);
    EXPECT_LE(b["params"].size(), 100u);
    EXPECT_LE(b["tags"].size(), 100u);
    params += b["params"].size();
    tags += b["tags"].size();
  }
  EXPECT_EQ(params, 150u);
  EXPECT_EQ(tags, 150u);
  // 150 x 6 KB + 150 x 5 KB = 1.65 MB: at least two requests by size alone.
  EXPECT_GE(mlflow.count("runs/log-batch"), 2);
  const FakeMLflow::Run run = mlflow.only_run();
  EXPECT_EQ(run.params.size(), 150u);
  EXPECT_EQ(run.tags.count("t149"), 1u);
  EXPECT_TRUE(mlflow.violations().empty()) << ::testing::PrintToString(mlflow.violations());
}

TEST_F(MLflowMonitorTest, AParamGivenTwiceKeepsItsFirstValue) {
  auto monitor = std::make_shared<TaggingMonitor>(options());
  auto adder = std::make_shared<ActionCallback>();
  adder->trigger_step_fn = [monitor](ActionCallback& self) {
    monitor->add(TrackingRecord::Kind::kParam, "depth", std::to_string(self.global_step()));
  };
  LogCapture log;
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train({wait_for_run(monitor), adder}, {monitor}, 1, 1, 3);
  EXPECT_EQ(mlflow.only_run().params, (std::map<std::string, std::string>{{"depth", "1"}}));
  EXPECT_TRUE(log.contains("MLflowMonitor: param 'depth' keeps its first value '1'"));
  EXPECT_TRUE(mlflow.violations().empty()) << ::testing::PrintToString(mlflow.violations());
}

TEST_F(MLflowMonitorTest, BasicAuthFromTheEnvironmentAndThePasswordNeverInTheLog) {
  mlflow.require_basic_auth("alice", "pw-S3cr3t-zz");
  ScopedEnv::set("MLFLOW_TRACKING_USERNAME", "alice");
  ScopedEnv::set("MLFLOW_TRACKING_PASSWORD", "pw-S3cr3t-zz");
  train(std::make_shared<MLflowMonitor>(options()), 1);
  EXPECT_EQ(mlflow.only_run().status, "FINISHED");
  for (const auto& r : mlflow.server().requests()) {
    EXPECT_EQ(r.headers.at("authorization"), "Basic YWxpY2U6cHctUzNjcjN0LXp6");
  }
  const std::string log = testing::read_text(dir() / "log.log");
  EXPECT_THAT(log, HasSubstr("MLflowMonitor: run "));
  EXPECT_EQ(log.find("pw-S3cr3t-zz"), std::string::npos);
  EXPECT_EQ(log.find("YWxpY2U6cHctUzNjcjN0LXp6"), std::string::npos);
}

TEST_F(MLflowMonitorTest, CredentialsInTheUriAreBasicAuthAndLeaveTheUri) {
  mlflow.require_basic_auth("bob", "p@ss:w0rd-Q");
  const std::string uri = "http://bob:p%40ss%3Aw0rd-Q@" + mlflow.url().substr(7);
  auto monitor = std::make_shared<MLflowMonitor>(options().tracking_uri(uri));
  EXPECT_EQ(monitor->tracking_uri(), mlflow.url());
  train(monitor, 1);
  EXPECT_EQ(mlflow.only_run().status, "FINISHED");
  EXPECT_EQ(testing::read_text(dir() / "log.log").find("w0rd-Q"), std::string::npos);
}

// Every form a tracking URI with credentials comes in: those accepted send to the URI without
// them (a server that is down: every request fails with a warning that quotes its URL), those
// refused throw; no error, log line or log.log holds any part of the credentials ("cret-" and
// "tok3n" are in every secret and nowhere else).
TEST_F(MLflowMonitorTest, NoFormOfTheUriPutsItsCredentialsInAMessage) {
  const std::string down = testing::FakeHttpServer::unused_url().substr(7);  // 127.0.0.1:<port>
  struct Case {
    std::string uri;
    std::string tracking_uri;  // what the monitor keeps, "" when the URI is refused
    std::string error;         // a part of the refusal's message
  };
  const std::vector<Case> cases = {
      {"http://alice:S3cret-a1@" + down, "http://" + down, ""},
      {"HTTP://alice:S3cret-a2@" + down, "http://" + down, ""},
      {"hTTpS://alice:S3cret-a3@" + down + "/prefix/", "https://" + down + "/prefix", ""},
      {"http://alice:S3%2Fcret-a4@" + down, "http://" + down, ""},  // '/' percent-encoded
      {"http://tok3n-a5@" + down, "http://" + down, ""},            // a user alone
      {"alice:S3cret-r1@" + down, "", "'***@" + down + "' is not an http:// or https:// URI"},
      {"http://alice:S3/cret-r2@" + down, "", "'http://***@" + down + "' has an '@' after"},
      {"http://alice:S3?cret-r3@" + down, "", "percent-encode"},
      {"http://alice:S3#cret-r4@" + down + "/x", "", "percent-encode"},
      {"ftp://alice:S3cret-r5@" + down, "", "is not an http:// or https:// URI"},
      {"file://alice:S3cret-r6@" + down + "/mlruns", "", "is not an http:// or https:// URI"},
      {"HTTPS://alice:S3cret-r7@/api", "", "has no host"},
  };
  LogCapture log;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.uri);
    std::string error;
    try {
      auto monitor = std::make_shared<MLflowMonitor>(options().tracking_uri(c.uri).tracking(
          fast().max_attempts(2).flush_timeout(std::chrono::milliseconds(300))));
      EXPECT_EQ(monitor->tracking_uri(), c.tracking_uri);
      train_plain(monitor, 1);
    } catch (const std::invalid_argument& e) {
      error = e.what();
    }
    if (c.tracking_uri.empty()) {
      EXPECT_THAT(error, HasSubstr(c.error));
      EXPECT_THAT(error, HasSubstr("tracking_uri (or MLFLOW_TRACKING_URI)"));
    } else {
      EXPECT_EQ(error, "");
    }
    EXPECT_EQ(error.find("cret-"), std::string::npos) << error;
    EXPECT_EQ(error.find("tok3n"), std::string::npos) << error;
  }
  // The same refusal for a URI from the environment.
  ScopedEnv::set("MLFLOW_TRACKING_URI", "alice:S3cret-e1@" + down);
  try {
    MLflowMonitor monitor;
    ADD_FAILURE() << "a URI without a scheme was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).find("cret-"), std::string::npos) << e.what();
  }
  // The accepted ones made requests, which failed with warnings quoting their URLs.
  bool warned = false;
  for (const auto& line : log.lines()) {
    warned = warned || (line.rfind("WRN MLflow: ", 0) == 0 && line.find(down) != std::string::npos);
    EXPECT_EQ(line.find("cret-"), std::string::npos) << line;
    EXPECT_EQ(line.find("tok3n"), std::string::npos) << line;
  }
  EXPECT_TRUE(warned);
  const std::string text = testing::read_text(dir() / "log.log");
  EXPECT_EQ(text.find("cret-"), std::string::npos);
  EXPECT_EQ(text.find("tok3n"), std::string::npos);
}

TEST_F(MLflowMonitorTest, AnUpperCaseSchemeIsHttpAndItsCredentialsAreBasicAuth) {
  mlflow.require_basic_auth("bob", "pw/Upper-9");
  const std::string uri = "HTTP://bob:pw%2FUpper-9@" + mlflow.url().substr(7) + "/";
  auto monitor = std::make_shared<MLflowMonitor>(options().tracking_uri(uri));
  EXPECT_EQ(monitor->tracking_uri(), mlflow.url());
  LogCapture log;
  train(monitor, 1);
  EXPECT_EQ(mlflow.only_run().status, "FINISHED");
  EXPECT_TRUE(log.contains("MLflowMonitor: run " + monitor->run_id() +
                           " in experiment 'fashion': " + mlflow.url() + "/#/experiments/"));
  EXPECT_EQ(testing::read_text(dir() / "log.log").find("Upper-9"), std::string::npos);
}

TEST_F(MLflowMonitorTest, ATokenFromTheEnvironmentIsABearerToken) {
  mlflow.require_token("tok-abc-123");
  ScopedEnv::set("MLFLOW_TRACKING_TOKEN", "tok-abc-123");
  train(std::make_shared<MLflowMonitor>(options()), 1);
  EXPECT_EQ(mlflow.only_run().status, "FINISHED");
  EXPECT_EQ(mlflow.server().requests().front().headers.at("authorization"), "Bearer tok-abc-123");
}

TEST_F(MLflowMonitorTest, ARefusedTokenIsAWarningNamingTheVariablesAndTrainingCompletes) {
  mlflow.require_token("the-right-one");
  ScopedEnv::set("MLFLOW_TRACKING_TOKEN", "wrong-Tok3n-value");
  auto monitor = std::make_shared<MLflowMonitor>(options());
  LogCapture log;
  train(monitor, 2, false, {}, false, /*wait=*/false);
  EXPECT_TRUE(mlflow.runs().empty());
  EXPECT_TRUE(log.contains(
      "WRN MLflow: the MLflow server refused the API key (HTTP 401); check "
      "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (HTTP Basic) or "
      "MLFLOW_TRACKING_TOKEN (a Bearer token), as MLflow's own client reads them; this process "
      "sent MLFLOW_TRACKING_TOKEN (Bearer)"));
  // One refused request, then nothing more.
  EXPECT_EQ(mlflow.server().requests().size(), 1u);
  EXPECT_EQ(stats_json_points(dir()).size(), 12u);  // training went on to the end
  const std::string text = testing::read_text(dir() / "log.log");
  EXPECT_EQ(text.find("wrong-Tok3n-value"), std::string::npos);
}

TEST_F(MLflowMonitorTest, Answers429And500AreRetriedAndNothingIsLost) {
  mlflow.create_experiment("fashion");
  mlflow.fail_next(2, 429, "1");  // Retry-After: 1 s, capped by max_backoff
  mlflow.add_fault(FakeMLflow::Fault{"runs/log-batch", 500, std::nullopt, false, 2});
  mlflow.add_fault(FakeMLflow::Fault{"runs/update", 503, std::nullopt, false, 1});
  auto monitor = std::make_shared<MLflowMonitor>(options());
  train(monitor, 2);
  const FakeMLflow::Run run = mlflow.only_run();
  EXPECT_EQ(run_points(run), stats_json_points(dir()));
  EXPECT_EQ(run.status, "FINISHED");
  EXPECT_EQ(mlflow.count("experiments/get-by-name"), 3);  // two 429s, then the answer
  // Two 500s, then one delivery per epoch (or one for both, when the second epoch ended while
  // the first one's retries waited).
  EXPECT_GE(mlflow.count("runs/log-batch"), 3);
  EXPECT_LE(mlflow.count("runs/log-batch"), 4);
  EXPECT_EQ(mlflow.count("runs/update"), 2);
  // Every request the monitor made reached the server; none failed for good.
  EXPECT_EQ(monitor->requests_sent(), static_cast<int64_t>(mlflow.server().requests().size()));
  EXPECT_EQ(monitor->requests_failed(), 0);
  EXPECT_TRUE(mlflow.violations().empty()) << ::testing::PrintToString(mlflow.violations());
}

TEST_F(MLflowMonitorTest, ADeliveryThatFindsNoServerIsKeptAndSentOnceItAnswers) {
  mlflow.create_experiment("fashion");
  // The first delivery's 5 attempts fail (it is kept), then the next try's first 2.
  mlflow.add_fault(FakeMLflow::Fault{"runs/log-batch", 503, std::nullopt, false, 7});
  auto monitor = std::make_shared<MLflowMonitor>(options());
  LogCapture log;
  train(monitor, 2);
  const FakeMLflow::Run run = mlflow.only_run();
  EXPECT_EQ(run_points(run), stats_json_points(dir()));  // every point, none twice
  EXPECT_EQ(run.params.size(), 1u);
  EXPECT_EQ(run.status, "FINISHED");
  EXPECT_EQ(monitor->records_dropped(), 0);
  EXPECT_EQ(monitor->requests_failed(), 1);  // the first delivery's request, after its retries
  bool kept = false, arrived = false;
  for (const auto& line : log.lines()) {
    kept = kept || line.find("kept and sent again when it answers") != std::string::npos;
    arrived = arrived || line.find(
                             "MLflow: the server answers again: the records held back "
                             "since a delivery failed (") != std::string::npos;
  }
  EXPECT_TRUE(kept);
  EXPECT_TRUE(arrived);
  EXPECT_TRUE(mlflow.violations().empty()) << ::testing::PrintToString(mlflow.violations());
}

TEST_F(MLflowMonitorTest, ARequestTheServerRefusesIsDroppedAndCounted) {
  mlflow.create_experiment("fashion");
  mlflow.add_fault(FakeMLflow::Fault{"runs/log-batch", 400, std::nullopt, false, 1});
  auto monitor = std::make_shared<MLflowMonitor>(options());
  // The second epoch starts once the first epoch's delivery was answered (refused), so that the
  // second epoch's records go in a delivery of their own.
  auto after_first_delivery = std::make_shared<ActionCallback>();
  after_first_delivery->before_epoch_fn = [this](ActionCallback& self) {
    if (self.epoch_num() != 2) return;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (mlflow.count("runs/log-batch") < 1 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  };
  LogCapture log;
  train(monitor, 2, false, {after_first_delivery});
  const FakeMLflow::Run run = mlflow.only_run();
  EXPECT_EQ(run.status, "FINISHED");
  // The first epoch's delivery (its param and metrics) was refused; the second's arrived.
  const auto all = stats_json_points(dir());
  const auto got = run_points(run);
  EXPECT_LT(got.size(), all.size());
  EXPECT_GT(got.size(), 0u);
  EXPECT_EQ(monitor->records_dropped(), static_cast<int64_t>(all.size() - got.size()) + 1);
  EXPECT_EQ(monitor->requests_failed(), 1);  // a 400 is not sent again
  EXPECT_GE(mlflow.count("runs/log-batch"), 2);
  bool counted = false;
  for (const auto& line : log.lines()) {
    counted = counted ||
              (line.find("records were dropped") != std::string::npos &&
               line.find(fmt::format("{} of", monitor->records_dropped())) != std::string::npos);
  }
  EXPECT_TRUE(counted);
}

TEST_F(MLflowMonitorTest, TheOptionsParamsAreSentOnceAndALongValueIsCut) {
  mlflow.create_experiment("fashion");
  const std::string long_value(7000, 'v');
  LogCapture log;
  auto monitor = std::make_shared<MLflowMonitor>(
      options().params({{"batch_size", "8"}, {"layers", long_value}, {"a:b", "x"}}));
  train(monitor, 2);
  const FakeMLflow::Run run = mlflow.only_run();
  EXPECT_EQ(run.params.at("batch_size"), "8");
  EXPECT_EQ(run.params.at("layers"), long_value.substr(0, 6000));
  EXPECT_EQ(run.params.at("a_b"), "x");
  EXPECT_EQ(run.params.count("learning_rate"), 1u);
  bool warned = false;
  for (const auto& line : log.lines()) {
    warned = warned || line.find(
                           "WRN MLflowMonitor: params: the value of 'layers' is 7000 bytes "
                           "long; MLflow keeps at most 6000") != std::string::npos;
  }
  EXPECT_TRUE(warned);
  EXPECT_TRUE(mlflow.violations().empty()) << ::testing::PrintToString(mlflow.violations());
  EXPECT_THROW(MLflowMonitor(options().params({{"a:b", "1"}, {"a_b", "2"}})),
               std::invalid_argument);
}

TEST_F(MLflowMonitorTest, AServerThatNeverAnswersCostsAtMostTheFlushTimeout) {
  mlflow.hang_next(1000);
  auto monitor = std::make_shared<MLflowMonitor>(
      options().tracking(fast().flush_timeout(std::chrono::milliseconds(300))));
  LogCapture log;
  // No wait for the run (it never comes).
  train_plain(monitor, 2);
  EXPECT_TRUE(mlflow.runs().empty());
  EXPECT_EQ(stats_json_points(dir()).size(), 12u);
  EXPECT_GE(monitor->records_queued(), 12);
  EXPECT_TRUE(monitor->run_id().empty());
}

TEST_F(MLflowMonitorTest, AServerThatIsDownIsAWarningAndTrainingGoesOn) {
  auto monitor = std::make_shared<MLflowMonitor>(
      options()
          .tracking_uri(testing::FakeHttpServer::unused_url())
          .tracking(fast().flush_timeout(std::chrono::milliseconds(300))));
  LogCapture log;
  train_plain(monitor, 2);
  EXPECT_EQ(stats_json_points(dir()).size(), 12u);
  EXPECT_TRUE(monitor->run_id().empty());
  bool warned = false;
  for (const auto& line : log.lines()) warned = warned || line.rfind("WRN ", 0) == 0;
  EXPECT_TRUE(warned);
}

TEST_F(MLflowMonitorTest, AnHtmlPageForAnAnswerIsOneWarningAfterWhichNothingIsSent) {
  // A proxy's login page, answered 200 to every request: trying again changes nothing.
  testing::FakeHttpServer proxy([](const testing::RecordedRequest&) {
    return testing::FakeResponse{200, "<html><body><h1>Sign in</h1></body></html>"};
  });
  auto monitor = std::make_shared<MLflowMonitor>(options().tracking_uri(proxy.url()));
  LogCapture log;
  train_plain(monitor, 2);
  EXPECT_EQ(stats_json_points(dir()).size(), 12u);  // training went on to the end
  EXPECT_EQ(proxy.requests().size(), 1u);           // the lookup, never again
  int page_warnings = 0;
  for (const auto& line : log.lines()) {
    page_warnings += line.find("an HTML page, not MLflow's JSON") != std::string::npos;
  }
  EXPECT_EQ(page_warnings, 1);
  EXPECT_TRUE(log.contains("Nothing more is sent to MLflow in this run; training goes on"));
  // Every record put was dropped, and the final line says why; nothing waited for the flush.
  EXPECT_GT(monitor->records_dropped(), 0);
  EXPECT_TRUE(
      log.contains(fmt::format("{} of {} records were dropped (the server's answers are "
                               "not MLflow's); training was not affected",
                               monitor->records_dropped(), monitor->records_dropped())));
  EXPECT_FALSE(log.contains("within the flush timeout"));
}

TEST_F(MLflowMonitorTest, ADeletedExperimentIsTriedAgainAndWarnedAboutOnce) {
  testing::FakeHttpServer server([](const testing::RecordedRequest&) {
    return testing::FakeResponse{
        200, R"({"experiment": {"experiment_id": "7", "lifecycle_stage": "deleted"}})"};
  });
  auto monitor = std::make_shared<MLflowMonitor>(
      options()
          .tracking_uri(server.url())
          .tracking(fast().flush_timeout(std::chrono::milliseconds(300))));
  LogCapture log;
  train_plain(monitor, 2);
  EXPECT_EQ(stats_json_points(dir()).size(), 12u);
  EXPECT_GE(server.requests().size(), 2u);  // looked up again: it may be restored meanwhile
  int warnings = 0;
  for (const auto& line : log.lines()) {
    warnings += line.find("experiment 'fashion' (7) is deleted on the server: restore it") !=
                std::string::npos;
  }
  EXPECT_EQ(warnings, 1);
  EXPECT_FALSE(log.contains("Nothing more is sent"));
}

// ---- configuration ----

TEST_F(MLflowMonitorTest, TheEnvironmentGivesTheUriAndTheExperiment) {
  ScopedEnv::set("MLFLOW_TRACKING_URI", mlflow.url() + "/");
  ScopedEnv::set("MLFLOW_EXPERIMENT_NAME", "from-env");
  auto monitor = std::make_shared<MLflowMonitor>(MLflowMonitorOptions().tracking(fast()));
  EXPECT_EQ(monitor->tracking_uri(), mlflow.url());
  EXPECT_EQ(monitor->experiment_name(), "from-env");
  EXPECT_EQ(monitor->run_name(), dir().filename().string());
  train(monitor, 1);
  EXPECT_EQ(mlflow.experiments().back().name, "from-env");
  EXPECT_EQ(mlflow.only_run().experiment_id, mlflow.experiments().back().experiment_id);
}

TEST_F(MLflowMonitorTest, OptionsWinOverTheEnvironmentAndTheDefaultExperimentIsDefault) {
  ScopedEnv::set("MLFLOW_TRACKING_URI", "http://elsewhere:5000");
  ScopedEnv::set("MLFLOW_EXPERIMENT_NAME", "from-env");
  MLflowMonitor given(MLflowMonitorOptions()
                          .tracking_uri("https://mine:443")
                          .experiment_name("mine")
                          .run_name("r1"));
  EXPECT_EQ(given.tracking_uri(), "https://mine:443");
  EXPECT_EQ(given.experiment_name(), "mine");
  EXPECT_EQ(given.run_name(), "r1");
  ::unsetenv("MLFLOW_EXPERIMENT_NAME");
  MLflowMonitor defaults;
  EXPECT_EQ(defaults.tracking_uri(), "http://elsewhere:5000");
  EXPECT_EQ(defaults.experiment_name(), "Default");
}

TEST_F(MLflowMonitorTest, TheDefaultExperimentNeedsNoCreate) {
  train(std::make_shared<MLflowMonitor>(options().experiment_name("")), 1);
  EXPECT_EQ(mlflow.only_run().experiment_id, "0");
  EXPECT_EQ(mlflow.count("experiments/create"), 0);
}

TEST_F(MLflowMonitorTest, ArgumentErrorsNameTheOptionAndTheFix) {
  auto message = [](const MLflowMonitorOptions& o) {
    try {
      MLflowMonitor m(o);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string none = message(MLflowMonitorOptions());
  EXPECT_THAT(none, HasSubstr("MLflowMonitor"));
  EXPECT_THAT(none, HasSubstr("tracking_uri"));
  EXPECT_THAT(none, HasSubstr("MLFLOW_TRACKING_URI"));
  for (const char* uri : {"file:///tmp/mlruns", "/tmp/mlruns", "mlruns", "databricks"}) {
    const std::string m = message(MLflowMonitorOptions().tracking_uri(uri));
    EXPECT_THAT(m, HasSubstr("needs a tracking server")) << uri;
    EXPECT_THAT(m, HasSubstr("mlflow server")) << uri;
  }
  ScopedEnv::set("MLFLOW_TRACKING_URI", "file:///tmp/mlruns");
  EXPECT_THAT(message(MLflowMonitorOptions()), HasSubstr("MLFLOW_TRACKING_URI"));
  const MLflowMonitorOptions ok = MLflowMonitorOptions().tracking_uri("http://h:1");
  EXPECT_THAT(message(MLflowMonitorOptions(ok).tags({{"a:b", "x"}})),
              HasSubstr("tags: MLflow refuses the tag name 'a:b'"));
  EXPECT_THAT(message(MLflowMonitorOptions(ok).tags({{"mlflow.note", "x"}})),
              HasSubstr("MLflow's own"));
  EXPECT_THAT(message(MLflowMonitorOptions(ok).experiment_name(std::string(501, 'e'))),
              HasSubstr("experiment_name"));
  EXPECT_THAT(message(MLflowMonitorOptions(ok).tracking(TrackingOptions().max_attempts(0))),
              HasSubstr("max_attempts"));
}

TEST(MLflowName, KeepsWhatMlflowTakesAndReplacesTheRest) {
  EXPECT_EQ(detail::mlflow_name("val-error-top1"), "val-error-top1");
  EXPECT_EQ(detail::mlflow_name("QueueInput/queue_size"), "QueueInput/queue_size");
  EXPECT_EQ(detail::mlflow_name("Throughput (samples/sec)"), "Throughput _samples/sec_");
  EXPECT_EQ(detail::mlflow_name("GPUUtil:0"), "GPUUtil_0");
  EXPECT_EQ(detail::mlflow_name("précision"), "pr_cision");
  EXPECT_EQ(detail::mlflow_name("/a//b/./c/"), "a/b/c");
  EXPECT_EQ(detail::mlflow_name("../x"), "__/x");
  EXPECT_EQ(detail::mlflow_name(""), "_");
  EXPECT_EQ(detail::mlflow_name(std::string(300, 'k')).size(), 250u);
  for (const char* n : {"Throughput (samples/sec)", "/a//b", "..", "a:b"}) {
    EXPECT_EQ(detail::mlflow_name_problem(detail::mlflow_name(n)), "") << n;
    EXPECT_NE(detail::mlflow_name_problem(n), "") << n;
  }
}

TEST_F(MLflowMonitorTest, TheStateIsTheRunsIdAsText) {
  MLflowMonitor monitor(options());
  EXPECT_TRUE(monitor.state().empty());  // no run yet
  monitor.load_state({{"run_id", state_string("abc123")}, {"experiment_id", state_string("7")}});
  const CallbackState s = monitor.state();
  EXPECT_EQ(state_string("t", s, "run_id"), "abc123");
  EXPECT_EQ(state_string("t", s, "experiment_id"), "7");
  EXPECT_THROW(monitor.load_state({{"run", state_string("x")}}), std::invalid_argument);
}

}  // namespace mlflow_monitor_test
}  // namespace trainpack

namespace trainpack {
namespace mlflow_monitor_test {

// ---- the fake server itself: it answers as MLflow does, and refuses what MLflow refuses ----

class FakeMLflowTest : public ::testing::Test {
 protected:
  HttpResponse post(const std::string& endpoint, const std::string& body) {
    return http.send({"POST",
                      mlflow.url() + "/api/2.0/mlflow/" + endpoint,
                      {{"Content-Type", "application/json"}},
                      body});
  }
  HttpResponse get(const std::string& endpoint) {
    return http.send({"GET", mlflow.url() + "/api/2.0/mlflow/" + endpoint, {}, ""});
  }
  std::string new_run() {
    const HttpResponse r =
        post("runs/create", R"({"experiment_id": "0", "start_time": 1700000000000})");
    EXPECT_EQ(r.status, 200) << r.body;
    return Json::parse(r.body)["run"]["info"]["run_id"];
  }
  static std::string code(const HttpResponse& r) {
    return Json::parse(r.body).value("error_code", std::string());
  }

  FakeMLflow mlflow;
  HttpClient http;
};

TEST_F(FakeMLflowTest, ARewrittenParamIsInvalidParameterValueAndNothingOfTheBatchIsKept) {
  const std::string run = new_run();
  ASSERT_EQ(post("runs/log-batch",
                 R"({"run_id": ")" + run + R"(", "params": [{"key": "lr", "value": "0.1"}]})")
                .status,
            200);
  // The same value again is fine, as in MLflow.
  EXPECT_EQ(post("runs/log-batch",
                 R"({"run_id": ")" + run + R"(", "params": [{"key": "lr", "value": "0.1"}]})")
                .status,
            200);
  const HttpResponse r = post(
      "runs/log-batch",
      R"({"run_id": ")" + run +
          R"(", "metrics": [{"key": "m", "value": 1, "timestamp": 5, "step": 1}], "params": [{"key": "lr", "value": "0.2"}]})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(code(r), "INVALID_PARAMETER_VALUE");
  EXPECT_THAT(r.body, HasSubstr("Changing param values is not allowed. Param with key='lr' was "
                                "already logged with value='0.1'"));
  EXPECT_TRUE(mlflow.only_run().metrics.empty());
  EXPECT_EQ(mlflow.only_run().params.at("lr"), "0.1");
  EXPECT_EQ(mlflow.violations().size(), 1u);
}

TEST_F(FakeMLflowTest, TheBatchLimitsAreMlflows) {
  const std::string run = new_run();
  Json metrics = Json::array();
  for (int i = 0; i < 1001; ++i) {
    metrics.push_back({{"key", "m"}, {"value", i}, {"timestamp", 1}, {"step", i}});
  }
  HttpResponse r = post("runs/log-batch", Json{{"run_id", run}, {"metrics", metrics}}.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("A batch logging request can contain at most 1000 metrics. Got "
                                "1001 metrics."));
  Json params = Json::array();
  for (int i = 0; i < 101; ++i) params.push_back({{"key", fmt::format("p{}", i)}, {"value", "1"}});
  r = post("runs/log-batch", Json{{"run_id", run}, {"params", params}}.dump());
  EXPECT_THAT(r.body, HasSubstr("at most 100 params"));
  params = Json::array();
  for (int i = 0; i < 100; ++i) {
    params.push_back({{"key", fmt::format("p{}", i)}, {"value", std::string(5000, 'v')}});
  }
  Json tags = Json::array();
  for (int i = 0; i < 100; ++i) {
    tags.push_back({{"key", fmt::format("t{}", i)}, {"value", std::string(5000, 'v')}});
  }
  r = post("runs/log-batch", Json{{"run_id", run}, {"params", params}, {"tags", tags}}.dump());
  EXPECT_THAT(r.body, HasSubstr("must be at most 1000000 bytes"));
  EXPECT_EQ(mlflow.violations().size(), 3u);
}

TEST_F(FakeMLflowTest, TypesNamesAndUnknownThingsAreChecked) {
  const std::string run = new_run();
  auto batch = [&](const std::string& metric) {
    return post("runs/log-batch", R"({"run_id": ")" + run + R"(", "metrics": [)" + metric + "]}");
  };
  EXPECT_EQ(batch(R"({"key": "m", "value": "NaN", "timestamp": 1, "step": 2})").status, 200);
  EXPECT_TRUE(std::isnan(mlflow.only_run().metrics.at(0).value));
  EXPECT_EQ(batch(R"({"key": "m", "value": 1, "timestamp": 1, "step": 2.5})").status, 400);
  EXPECT_EQ(batch(R"({"key": "m", "value": "1", "timestamp": 1, "step": 2})").status, 400);
  EXPECT_EQ(batch(R"({"key": "m", "value": 1, "timestamp": 1})").status, 400);
  EXPECT_EQ(batch(R"j({"key": "a(b)", "value": 1, "timestamp": 1, "step": 2})j").status, 400);
  EXPECT_EQ(batch(R"({"key": "a//b", "value": 1, "timestamp": 1, "step": 2})").status, 400);
  EXPECT_EQ(mlflow.violations().size(), 5u);
  // Unknown run: MLflow's 404.
  const HttpResponse r = post("runs/update", R"({"run_id": "nope", "status": "FINISHED"})");
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(code(r), "RESOURCE_DOES_NOT_EXIST");
  EXPECT_EQ(post("runs/update", R"({"run_id": ")" + run + R"(", "status": "DONE"})").status, 400);
  EXPECT_EQ(get("runs/log-batch").status, 405);
  EXPECT_EQ(http.send({"POST", mlflow.url() + "/api/2.0/mlflow/runs/update", {}, "{}"}).status,
            400);  // no Content-Type
  EXPECT_EQ(mlflow.violations().size(), 8u);
  // An experiment that is missing, then one that exists.
  HttpResponse g = get("experiments/get-by-name?experiment_name=x");
  EXPECT_EQ(g.status, 404);
  EXPECT_EQ(code(g), "RESOURCE_DOES_NOT_EXIST");
  ASSERT_EQ(post("experiments/create", R"({"name": "x"})").status, 200);
  EXPECT_EQ(code(post("experiments/create", R"({"name": "x"})")), "RESOURCE_ALREADY_EXISTS");
  g = get("experiments/get-by-name?experiment_name=x");
  EXPECT_EQ(Json::parse(g.body)["experiment"]["name"], "x");
  EXPECT_EQ(mlflow.violations().size(), 8u);  // state errors are not violations
}

TEST_F(FakeMLflowTest, FaultsAnswerTheNextRequestsOrThoseOfAnEndpoint) {
  mlflow.fail_next(1, 429, "3");
  mlflow.add_fault(FakeMLflow::Fault{"runs/update", 500, std::nullopt, false, -1});
  HttpResponse r = post("runs/create", R"({"experiment_id": "0", "start_time": 1})");
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.retry_after_seconds, 3.0);
  const std::string run = new_run();
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(post("runs/update", R"({"run_id": ")" + run + R"(", "status": "FINISHED"})").status,
              500);
  }
  EXPECT_EQ(mlflow.only_run().status, "RUNNING");
  mlflow.require_token("t");
  EXPECT_EQ(post("runs/create", R"({"experiment_id": "0", "start_time": 1})").status, 401);
}

}  // namespace mlflow_monitor_test
}  // namespace trainpack
