// CometMLMonitor against a fake Comet REST API v2 (tests/support/fake_comet.h) that checks every
// request: a real short training whose metrics arrive as stats.json holds them, images, the
// hyper-parameters, tags, the end, the experiment's link in the log, a resumed run continuing the
// same experiment, a refused key, 429 / 500 retried, a hanging and a down server, the key kept
// out of log.log, and where the options come from.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "support/fake_comet.h"
#include "support/files.h"
#include "support/linear_regression.h"
#include "support/temp_dir.h"
#include "trainpack/callbacks/comet_ml_monitor.h"
#include "trainpack/callbacks/json_writer.h"
#include "trainpack/callbacks/param.h"
#include "trainpack/callbacks/saver.h"
#include "trainpack/core/callback_state.h"
#include "trainpack/input/dataflow.h"
#include "trainpack/testing.h"
#include "trainpack/train/config.h"
#include "trainpack/train/single_cost.h"
#include "trainpack/utils/logger.h"

namespace trainpack {
namespace comet_ml_monitor_test {

namespace fs = std::filesystem;
using testing::CometExperiment;
using testing::CometFault;
using testing::FakeComet;
using ::testing::HasSubstr;
using testing::LogCapture;
using ::testing::Not;

using namespace std::chrono_literals;

// The tests' small regression (3 steps per epoch).
using LinearModel = testing::LinearRegressionModel;
DataFlowPtr batches() { return testing::linear_regression_batches(); }

// Puts `loss` after every step (a value with all the bits of a double), `val-error` at every
// epoch end, and at the end of epoch 1 a batch of two images and a single one.
class Putter : public Callback {
 protected:
  void _trigger_step() override {
    trainer().monitors().put_scalar("loss", 1.0 / 3.0 + 0.1 * static_cast<double>(global_step()));
  }
  void _trigger_epoch() override {
    trainer().monitors().put_scalar("val-error", 0.5 / static_cast<double>(epoch_num()));
    if (epoch_num() == 1) {
      trainer().monitors().put_image(
          "samples", torch::arange(2 * 4 * 5 * 3, torch::kUInt8).reshape({2, 4, 5, 3}));
      trainer().monitors().put_image("single", torch::full({6, 7, 1}, 200, torch::kUInt8));
    }
  }
};

const char* const kEnvVars[] = {"COMET_API_KEY", "COMET_WORKSPACE", "COMET_PROJECT_NAME",
                                "COMET_URL_OVERRIDE"};

class CometMLMonitorTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    testing::TempDirTest::SetUp();
    for (const char* name : kEnvVars) {
      const char* v = std::getenv(name);
      if (v != nullptr) saved_env_[name] = v;
      ::unsetenv(name);
    }
    logger::set_logger_dir(dir().string(), 'k');
  }
  void TearDown() override {
    for (const char* name : kEnvVars) ::unsetenv(name);
    for (const auto& kv : saved_env_) ::setenv(kv.first.c_str(), kv.second.c_str(), 1);
    testing::TempDirTest::TearDown();
  }

  // Short waits: the tests do not wait for a back-off or a slow server.
  static TrackingOptions fast() {
    return TrackingOptions().initial_backoff(5ms).max_backoff(20ms).flush_timeout(10s).http(
        HttpClientOptions().connect_timeout(2s).timeout(5s));
  }

  CometMLMonitorOptions options(const FakeComet& comet) const {
    return CometMLMonitorOptions()
        .api_key(FakeComet::kApiKey)
        .url(comet.url())
        .workspace("team")
        .project_name("linear")
        .experiment_name("baseline")
        .tags({"lr0.05", "test"})
        .tracking(fast());
  }

  // Trains to `max_epoch` (auto-resuming from dir()) with a checkpoint every epoch, a JSONWriter
  // and `monitor`; a ScheduledHyperParamSetter sets `momentum_factor` (0.5, then 0.9 from epoch
  // 2).
  //
  // `before_save`: called at every epoch end before the checkpoint is saved.
  void train(std::shared_ptr<CometMLMonitor> monitor, int64_t max_epoch,
             std::function<void()> before_save = nullptr) {
    auto before = std::make_shared<testing::ActionCallback>();
    before->trigger_epoch_fn = [before_save](testing::ActionCallback&) {
      if (before_save) before_save();
    };
    auto param = std::make_shared<ObjAttrParam>([this] { return momentum_factor_; },
                                                [this](double v) { momentum_factor_ = v; },
                                                "momentum_factor");
    std::vector<CallbackPtr> callbacks{
        std::make_shared<Putter>(), before,
        std::make_shared<ModelSaver>(ModelSaverOptions().fsync(false)),
        std::make_shared<ScheduledHyperParamSetter>(
            param, ScheduledHyperParamSetter::Schedule{{0, 0.5}, {2, 0.9}})};
    AutoResumeTrainConfig config(
        TrainConfig()
            .model(std::make_shared<LinearModel>())
            .dataflow(batches())
            .callbacks(callbacks)
            .extra_callbacks(std::vector<CallbackPtr>{})
            .monitors(std::vector<MonitorPtr>{JSONWriter::create(), monitor})
            .max_epoch(max_epoch));
    SimpleTrainer trainer;
    trainer.set_handle_signals(false);
    launch_train_with_config(config, trainer);
  }

  // (name, value, global_step) of every scalar in stats.json, in file order.
  std::vector<std::tuple<std::string, double, int64_t>> stats_scalars() const {
    std::vector<std::tuple<std::string, double, int64_t>> out;
    const auto stats = JSONWriter::load_existing_json(dir().string());
    if (!stats) return out;
    for (const auto& e : *stats) {
      const int64_t gs = std::get<int64_t>(*e.find("global_step"));
      for (const auto& [name, value] : e.items) {
        if (name == "global_step" || name == "epoch_num") continue;
        out.emplace_back(name, std::get<double>(value), gs);
      }
    }
    return out;
  }

  static std::vector<std::tuple<std::string, double, int64_t>> received(const CometExperiment& e) {
    std::vector<std::tuple<std::string, double, int64_t>> out;
    for (const auto& m : e.metrics) out.emplace_back(m.name, m.value, m.step.value_or(-1));
    return out;
  }

  static std::string other(const CometExperiment& e, const std::string& key) {
    std::string value;
    for (const auto& kv : e.others) {
      if (kv.first == key) value = kv.second;
    }
    return value;
  }

  std::string log_file() const { return testing::read_text(dir() / "log.log"); }

  double momentum_factor_ = 0;
  std::map<std::string, std::string> saved_env_;
};

TEST_F(CometMLMonitorTest, MetricsArriveAsStatsJsonHoldsThem) {
  FakeComet comet;
  LogCapture log;
  auto monitor = std::make_shared<CometMLMonitor>(options(comet));
  train(monitor, 2);

  EXPECT_EQ(comet.violations(), std::vector<std::string>{});
  const auto experiments = comet.experiments();
  ASSERT_EQ(experiments.size(), 1u);
  const CometExperiment& e = experiments[0];
  EXPECT_EQ(e.workspace, "team");
  EXPECT_EQ(e.project, "linear");
  EXPECT_EQ(e.name, "baseline");
  EXPECT_EQ(monitor->experiment_key(), e.key);

  // Names, values (every bit) and global steps: what stats.json holds, in the same order.
  const auto expected = stats_scalars();
  ASSERT_EQ(expected.size(), 8u);  // 6 x loss, 2 x val-error
  EXPECT_EQ(received(e), expected);
  // The epoch each metric carries: the epochs finished when it was put (Comet's log_epoch_end).
  std::vector<std::pair<std::string, int64_t>> epochs;
  for (const auto& m : e.metrics) epochs.emplace_back(m.name, m.epoch.value_or(-1));
  EXPECT_EQ(epochs, (std::vector<std::pair<std::string, int64_t>>{{"loss", 0},
                                                                  {"loss", 0},
                                                                  {"loss", 0},
                                                                  {"val-error", 1},
                                                                  {"loss", 1},
                                                                  {"loss", 1},
                                                                  {"loss", 1},
                                                                  {"val-error", 2}}));
  for (const auto& m : e.metrics) EXPECT_TRUE(m.timestamp.has_value()) << m.name;

  EXPECT_EQ(e.tags, (std::vector<std::string>{"lr0.05", "test"}));
  EXPECT_EQ(other(e, "Created from"), "trainpack");
  EXPECT_EQ(other(e, "status"), "FINISHED");
  EXPECT_TRUE(e.end_time_ms.has_value());
  EXPECT_GE(e.keep_alives, 1);
  EXPECT_TRUE(log.contains("CometMLMonitor: experiment at " + e.link));
  EXPECT_THAT(log_file(), HasSubstr("CometMLMonitor: experiment at " + e.link));
}

TEST_F(CometMLMonitorTest, SendsTheHyperParametersAndTheEpochEnds) {
  FakeComet comet;
  train(std::make_shared<CometMLMonitor>(options(comet)), 2);
  const auto experiments = comet.experiments();
  ASSERT_EQ(experiments.size(), 1u);
  std::vector<std::pair<std::string, int64_t>> params;  // (name, step)
  std::optional<double> momentum;
  std::vector<std::string> epochs;
  for (const auto& p : experiments[0].params) {
    params.emplace_back(p.name, p.step.value_or(-1));
    if (p.name == "momentum_factor") momentum = std::stod(p.value);
    if (p.name == "curr_epoch") epochs.push_back(p.value);
  }
  // The hyper-parameter as training starts, then log_epoch_end at every epoch end.
  EXPECT_EQ(params, (std::vector<std::pair<std::string, int64_t>>{
                        {"momentum_factor", 0}, {"curr_epoch", 3}, {"curr_epoch", 6}}));
  ASSERT_TRUE(momentum.has_value());
  EXPECT_EQ(*momentum, 0.5);
  EXPECT_EQ(epochs, (std::vector<std::string>{"1", "2"}));
}

TEST_F(CometMLMonitorTest, UploadsEachImageAsAPngNamedAsTensorpackDoes) {
  FakeComet comet;
  train(std::make_shared<CometMLMonitor>(options(comet)), 1);
  EXPECT_EQ(comet.violations(), std::vector<std::string>{});
  const auto experiments = comet.experiments();
  ASSERT_EQ(experiments.size(), 1u);
  std::vector<std::tuple<std::string, std::string, int64_t, int64_t, int64_t, int64_t>> images;
  for (const auto& i : experiments[0].images) {
    images.emplace_back(i.file_name, i.type, i.step.value_or(-1), i.epoch.value_or(-1), i.width,
                        i.height);
  }
  // A batch of two: `<name>_step<gs>_<i>`; a single image: `<name>_step<gs>`.
  EXPECT_EQ(images,
            (std::vector<std::tuple<std::string, std::string, int64_t, int64_t, int64_t, int64_t>>{
                {"samples_step3_0", "image", 3, 1, 5, 4},
                {"samples_step3_1", "image", 3, 1, 5, 4},
                {"single_step3", "image", 3, 1, 7, 6}}));
}

TEST_F(CometMLMonitorTest, AResumedRunContinuesTheSameExperiment) {
  FakeComet comet;
  auto first = std::make_shared<CometMLMonitor>(options(comet));
  // The checkpoint holds the key once the experiment exists; these epochs take microseconds, so
  // the test lets the background thread create it before the checkpoint is saved (a checkpoint
  // saved earlier holds no key: its resumed run creates a new experiment).
  train(first, 1, [&] {
    for (int i = 0; i < 1000 && first->experiment_key().empty(); ++i) {
      std::this_thread::sleep_for(10ms);
    }
  });
  ASSERT_EQ(comet.experiments().size(), 1u);
  const std::string key = comet.experiments()[0].key;
  // The key is in the monitor's state, hence in the checkpoint.
  EXPECT_EQ(state_string("CometMLMonitor", first->state(), "experiment_key"), key);

  LogCapture log;
  auto second = std::make_shared<CometMLMonitor>(options(comet));
  train(second, 2);  // resumes from the checkpoint of epoch 1
  EXPECT_EQ(comet.violations(), std::vector<std::string>{});
  const auto experiments = comet.experiments();
  ASSERT_EQ(experiments.size(), 1u) << "the resumed run created another experiment";
  EXPECT_EQ(second->experiment_key(), key);
  const CometExperiment& e = experiments[0];
  std::vector<int64_t> steps;
  for (const auto& m : e.metrics) steps.push_back(m.step.value_or(-1));
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 3, 4, 5, 6, 6}));
  std::vector<int64_t> epochs;  // the resumed run counts the epoch of the first as finished
  for (const auto& m : e.metrics) epochs.push_back(m.epoch.value_or(-1));
  EXPECT_EQ(epochs, (std::vector<int64_t>{0, 0, 0, 1, 1, 1, 1, 2}));
  EXPECT_EQ(received(e), stats_scalars());
  EXPECT_EQ(e.tags, (std::vector<std::string>{"lr0.05", "test"}));  // not sent twice
  EXPECT_TRUE(log.contains("CometMLMonitor: continuing experiment " + key));
  EXPECT_EQ(other(e, "status"), "FINISHED");
}

TEST_F(CometMLMonitorTest, TheExperimentKeyOptionContinuesAnExistingExperiment) {
  FakeComet comet;
  const std::string key = comet.add_experiment("team", "linear");
  train(std::make_shared<CometMLMonitor>(options(comet).experiment_key(key).tags({})), 1);
  EXPECT_EQ(comet.violations(), std::vector<std::string>{});
  const auto experiments = comet.experiments();
  ASSERT_EQ(experiments.size(), 1u);
  EXPECT_EQ(experiments[0].metrics.size(), 4u);
  EXPECT_GE(experiments[0].keep_alives, 1);
}

TEST_F(CometMLMonitorTest, ARefusedKeyIsOneWarningNamingItsVariableAndTrainingCompletes) {
  FakeComet comet;
  LogCapture log;
  auto monitor = std::make_shared<CometMLMonitor>(options(comet).api_key("not-the-right-key"));
  train(monitor, 2);
  EXPECT_TRUE(fs::exists(dir() / "model-6.data")) << "training did not complete";
  EXPECT_TRUE(comet.experiments().empty());
  int warnings = 0;
  for (const auto& line : log.lines()) {
    if (line.rfind("WRN ", 0) == 0 && line.find("COMET_API_KEY") != std::string::npos) ++warnings;
  }
  EXPECT_EQ(warnings, 1);
  EXPECT_EQ(comet.requests(), 1);  // the create; nothing after the refusal
}

TEST_F(CometMLMonitorTest, AKeyRefusedMidRunStopsSendingWithOneWarning) {
  FakeComet comet;
  comet.fail_next(1, CometFault::kUnauthorized, "/write/experiment/metric");
  LogCapture log;
  train(std::make_shared<CometMLMonitor>(options(comet)), 2);
  EXPECT_TRUE(fs::exists(dir() / "model-6.data"));
  ASSERT_EQ(comet.experiments().size(), 1u);
  EXPECT_TRUE(comet.experiments()[0].metrics.empty());
  int warnings = 0;
  for (const auto& line : log.lines()) {
    if (line.find("COMET_API_KEY") != std::string::npos) ++warnings;
  }
  EXPECT_EQ(warnings, 1);
}

TEST_F(CometMLMonitorTest, TooManyRequestsAndServerErrorsAreRetriedAndEverythingArrives) {
  FakeComet comet;
  comet.fail_next(2, CometFault::kTooManyRequests, "/write/experiment/create", 1);
  comet.fail_next(2, CometFault::kServerError, "/write/experiment/metric");
  comet.fail_next(1, CometFault::kTooManyRequests, "/write/experiment/upload-asset", 1);
  comet.fail_next(1, CometFault::kServerError, "/write/experiment/set-start-end-time");
  train(std::make_shared<CometMLMonitor>(options(comet)), 2);
  EXPECT_EQ(comet.violations(), std::vector<std::string>{});
  EXPECT_EQ(comet.faulted(), 6);
  const auto experiments = comet.experiments();
  ASSERT_EQ(experiments.size(), 1u);
  EXPECT_EQ(received(experiments[0]), stats_scalars());
  EXPECT_EQ(experiments[0].images.size(), 3u);
  EXPECT_EQ(other(experiments[0], "status"), "FINISHED");
  EXPECT_TRUE(experiments[0].end_time_ms.has_value());
}

TEST_F(CometMLMonitorTest, AHangingServerDoesNotHoldTrainingAndTheUnsentAreCounted) {
  FakeComet comet;
  comet.fail_next(1000, CometFault::kHang, "/write/experiment/metric");
  LogCapture log;
  auto monitor = std::make_shared<CometMLMonitor>(options(comet).tracking(
      fast().flush_timeout(300ms).http(HttpClientOptions().connect_timeout(1s).timeout(30s))));
  train(monitor, 2);
  EXPECT_TRUE(fs::exists(dir() / "model-6.data"));
  ASSERT_EQ(comet.experiments().size(), 1u);
  EXPECT_TRUE(comet.experiments()[0].metrics.empty());
  bool counted = false;
  for (const auto& line : log.lines()) {
    counted = counted || (line.rfind("WRN ", 0) == 0 && line.find("not sent") != std::string::npos);
  }
  EXPECT_TRUE(counted) << ::testing::PrintToString(log.lines());
}

TEST_F(CometMLMonitorTest, ADownServerDoesNotHoldTrainingAndTheUnsentAreCounted) {
  LogCapture log;
  auto monitor = std::make_shared<CometMLMonitor>(
      CometMLMonitorOptions()
          .api_key(FakeComet::kApiKey)
          .url(testing::FakeHttpServer::unused_url() + "/api/rest/v2")
          .workspace("team")
          .project_name("linear")
          .tracking(fast().flush_timeout(300ms)));
  train(monitor, 2);
  EXPECT_TRUE(fs::exists(dir() / "model-6.data"));
  EXPECT_EQ(monitor->experiment_key(), "");
  bool counted = false;
  for (const auto& line : log.lines()) {
    counted = counted || (line.rfind("WRN ", 0) == 0 && line.find("not sent") != std::string::npos);
  }
  EXPECT_TRUE(counted) << ::testing::PrintToString(log.lines());
}

TEST_F(CometMLMonitorTest, ACreateAnswerWithoutAKeyIsOneWarningAndTrainingCompletes) {
  testing::FakeHttpServer server(
      [](const testing::RecordedRequest&) { return testing::FakeResponse(200, "{}"); });
  LogCapture log;
  train(std::make_shared<CometMLMonitor>(CometMLMonitorOptions()
                                             .api_key(FakeComet::kApiKey)
                                             .url(server.url() + "/api/rest/v2")
                                             .workspace("team")
                                             .project_name("linear")
                                             .tracking(fast().flush_timeout(300ms))),
        2);
  EXPECT_TRUE(fs::exists(dir() / "model-6.data"));
  int warnings = 0;
  for (const auto& line : log.lines()) {
    if (line.find("has no experimentKey") != std::string::npos) ++warnings;
  }
  EXPECT_EQ(warnings, 1);
  for (const auto& r : server.requests()) EXPECT_EQ(r.path, "/api/rest/v2/write/experiment/create");
  EXPECT_GE(server.requests().size(), 2u);  // tried again
}

TEST_F(CometMLMonitorTest, TheKeyNeverReachesLogLogEvenWhenTheServerEchoesIt) {
  FakeComet comet;
  comet.set_echo_key(true);
  comet.fail_next(1, CometFault::kServerError, "/write/experiment/create");  // retried
  // With two attempts a request, the first metric fails for good: a warning quoting the answer.
  comet.fail_next(2, CometFault::kServerError, "/write/experiment/metric");
  comet.fail_next(1, CometFault::kUnauthorized, "/write/experiment/set-start-end-time");
  LogCapture log;
  train(std::make_shared<CometMLMonitor>(options(comet).tracking(fast().max_attempts(2))), 1);
  const std::string text = log_file();
  EXPECT_THAT(text, HasSubstr("CometMLMonitor"));
  EXPECT_THAT(text, HasSubstr("<redacted>")) << "the echoed key was not in any message";
  EXPECT_THAT(text, Not(HasSubstr(FakeComet::kApiKey)));
  for (const auto& line : log.lines()) EXPECT_THAT(line, Not(HasSubstr(FakeComet::kApiKey)));
}

// ---- configuration ----

TEST_F(CometMLMonitorTest, TakesWhatTheOptionsLeaveFromCometsEnvironmentVariables) {
  ::setenv("COMET_API_KEY", "env-key-123", 1);
  ::setenv("COMET_WORKSPACE", "env-ws", 1);
  ::setenv("COMET_PROJECT_NAME", "env-proj", 1);
  ::setenv("COMET_URL_OVERRIDE", "https://comet.example.com/clientlib/", 1);
  CometMLMonitor from_env;
  EXPECT_EQ(from_env.workspace(), "env-ws");
  EXPECT_EQ(from_env.project_name(), "env-proj");
  EXPECT_EQ(from_env.rest_url(), "https://comet.example.com/api/rest/v2");
  EXPECT_EQ(from_env.name(), "CometMLMonitor");
  EXPECT_TRUE(from_env.chief_only());

  CometMLMonitor from_options(
      CometMLMonitorOptions().api_key("k").workspace("ws").project_name("p").url(
          "http://localhost:8080/api/rest/v2/"));
  EXPECT_EQ(from_options.workspace(), "ws");
  EXPECT_EQ(from_options.project_name(), "p");
  EXPECT_EQ(from_options.rest_url(), "http://localhost:8080/api/rest/v2");

  ::unsetenv("COMET_URL_OVERRIDE");
  EXPECT_EQ(CometMLMonitor().rest_url(), "https://www.comet.com/api/rest/v2");
}

TEST_F(CometMLMonitorTest, DerivesTheRestBaseFromCometUrlOverride) {
  EXPECT_EQ(CometMLMonitor::rest_url_from_override("https://comet.example.com/clientlib/"),
            "https://comet.example.com/api/rest/v2");
  EXPECT_EQ(CometMLMonitor::rest_url_from_override("https://comet.example.com/clientlib"),
            "https://comet.example.com/api/rest/v2");
  EXPECT_EQ(CometMLMonitor::rest_url_from_override("http://10.0.0.5:8080/"),
            "http://10.0.0.5:8080/api/rest/v2");
  EXPECT_EQ(CometMLMonitor::rest_url_from_override("https://c.example.com/api/rest/v2"),
            "https://c.example.com/api/rest/v2");
}

std::string construction_error(const CometMLMonitorOptions& options) {
  try {
    CometMLMonitor m(options);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

TEST_F(CometMLMonitorTest, AMissingSettingIsAnErrorNamingTheOptionAndTheVariable) {
  EXPECT_EQ(construction_error(CometMLMonitorOptions().workspace("w").project_name("p")),
            "CometMLMonitor: no API key: set CometMLMonitorOptions::api_key or the environment "
            "variable COMET_API_KEY (Comet's account settings show the key)");
  const std::string secret = "secret-key-987";
  const std::string no_ws = construction_error(CometMLMonitorOptions().api_key(secret));
  EXPECT_EQ(no_ws,
            "CometMLMonitor: no workspace: set CometMLMonitorOptions::workspace or the environment "
            "variable COMET_WORKSPACE (or experiment_key, to continue an existing experiment)");
  const std::string no_project =
      construction_error(CometMLMonitorOptions().api_key(secret).workspace("w"));
  EXPECT_EQ(no_project,
            "CometMLMonitor: no project: set CometMLMonitorOptions::project_name or the "
            "environment variable COMET_PROJECT_NAME (or experiment_key, to continue an existing "
            "experiment)");
  // An existing experiment needs neither.
  EXPECT_EQ(construction_error(CometMLMonitorOptions().api_key(secret).experiment_key("abc")),
            "(no error)");

  const std::string bad_url = construction_error(
      CometMLMonitorOptions().api_key(secret).workspace("w").project_name("p").url("comet.com"));
  EXPECT_THAT(bad_url, HasSubstr("CometMLMonitor: url 'comet.com' is not an http://"));
  ::setenv("COMET_URL_OVERRIDE", "ftp://x/clientlib/", 1);
  const std::string bad_override =
      construction_error(CometMLMonitorOptions().api_key(secret).workspace("w").project_name("p"));
  EXPECT_THAT(bad_override, HasSubstr("COMET_URL_OVERRIDE ('ftp://x/clientlib/')"));
  for (const std::string& m : {no_ws, no_project, bad_url, bad_override}) {
    EXPECT_THAT(m, Not(HasSubstr(secret)));
  }
}

TEST_F(CometMLMonitorTest, LoadStateRestoresTheKeyAndRefusesAnythingElse) {
  CometMLMonitor m(CometMLMonitorOptions().api_key("k").workspace("w").project_name("p"));
  EXPECT_TRUE(m.state().empty());
  m.load_state({{"experiment_key", state_string("0123abc")}});
  EXPECT_EQ(state_string("x", m.state(), "experiment_key"), "0123abc");
  m.load_state({});  // a checkpoint saved before the experiment existed
  EXPECT_THROW(m.load_state({{"run_id", state_string("x")}}), std::invalid_argument);
  EXPECT_THROW(m.load_state({{"experiment_key", state_vector(std::vector<int64_t>{300})}}),
               std::invalid_argument);
}

}  // namespace comet_ml_monitor_test
}  // namespace trainpack
