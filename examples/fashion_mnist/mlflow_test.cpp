// The main job with MLFLOW_TRACKING_URI set, against the tests' fake MLflow tracking server
// (tests/support/fake_mlflow.h): run by ctest as
//   fashion_mnist_mlflow_test --gtest_filter=...   (the program's path is compiled in)
//
// - A short run (2 epochs of 4 steps) says in its log that it sends the run to MLflow, and ends
//   with one MLflow run FINISHED, whose metrics are exactly the scalars of its stats.json (at their
//   global steps) and whose params hold the learning rate.
// - SIGTERM during training (sent once the first epoch's metrics arrived): the job exits with 143
//   and the MLflow run is KILLED with what stats.json holds; the same command again resumes from
//   the checkpoint of the stop step and logs into the SAME MLflow run (RUNNING, then FINISHED),
//   sending no param again; at the end the run's metrics are stats.json's, each step once.
// - MLFLOW_TRACKING_URI=file:... stops the job before training with the monitor's message.
// Every run uses a few hundred images and 1 thread, and takes seconds. Nothing here measures time.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <variant>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "support/fake_comet.h"
#include "support/fake_mlflow.h"
#include "support/files.h"
#include "support/temp_dir.h"
#include "trainpack/callbacks/json_writer.h"
#include "trainpack/callbacks/mlflow_monitor.h"

namespace trainpack {
namespace {

namespace fs = std::filesystem;
using testing::FakeMLflow;
using testing::stats_json_points;
using Json = nlohmann::json;

// A child process running the main job with `args`, MLFLOW_TRACKING_URI=`uri` and
// MLFLOW_EXPERIMENT_NAME=fmnist (plus `extra_env`), its output in `output`. The parent's MLFLOW_*
// and COMET_* variables are not passed on.
class Job {
 public:
  Job(const std::vector<std::string>& args, const std::string& uri, const fs::path& output,
      const std::vector<std::string>& extra_env = {}) {
    // Everything is built before fork: the child of a process with threads (the fake server's)
    // only calls what is async-signal-safe.
    std::vector<std::string> env{"MLFLOW_TRACKING_URI=" + uri, "MLFLOW_EXPERIMENT_NAME=fmnist",
                                 "OMP_WAIT_POLICY=PASSIVE"};  // no re-execution at start
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string var(*e);
      if (var.rfind("MLFLOW_", 0) != 0 && var.rfind("COMET_", 0) != 0 &&
          var.rfind("OMP_WAIT_POLICY=", 0) != 0) {
        env.push_back(var);
      }
    }
    std::vector<char*> envp;
    for (auto& v : env) envp.push_back(v.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_text{FASHION_MNIST};
    argv_text.insert(argv_text.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_text) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string out = output.string();
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
  }
  pid_t pid() const { return pid_; }
  // The exit status (128 + N for a signal N).
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
};

class MainJobMLflow : public testing::TempDirTest {
 protected:
  std::vector<std::string> args(int max_epoch) const {
    return {"--train-limit",
            "256",
            "--val-limit",
            "64",
            "--batch-size",
            "32",
            "--val-batch-size",
            "64",
            "--steps-per-epoch",
            "4",
            "--lr",
            "0.05",
            "--threads",
            "1",
            "--max-val-error",
            "1",
            "--max-epoch",
            std::to_string(max_epoch),
            "--logdir",
            logdir().string()};
  }
  fs::path logdir() const { return dir() / "log"; }
  fs::path output() const { return dir() / "output.txt"; }

  FakeMLflow mlflow;
};

TEST_F(MainJobMLflow, AShortRunEndsFinishedWithTheMetricsOfStatsJson) {
  Job job(args(2), mlflow.url(), output());
  ASSERT_EQ(job.wait(), 0) << testing::read_text(output());
  const std::string out = testing::read_text(output());
  EXPECT_NE(out.find("fashion_mnist: MLFLOW_TRACKING_URI is set: sending the run to MLflow at " +
                     mlflow.url() + ", experiment fmnist"),
            std::string::npos)
      << out;
  ASSERT_EQ(mlflow.runs().size(), 1u) << out;
  const FakeMLflow::Run run = mlflow.only_run();
  EXPECT_EQ(run.status, "FINISHED");
  EXPECT_TRUE(run.end_time.has_value());
  EXPECT_EQ(run.run_name, "log");
  EXPECT_EQ(mlflow.experiments().back().name, "fmnist");
  const auto expected = stats_json_points(logdir());
  EXPECT_FALSE(expected.empty());
  EXPECT_EQ(run_points(run), expected);
  ASSERT_EQ(run.params.count("learning_rate"), 1u);
  EXPECT_EQ(std::stod(run.params.at("learning_rate")), 0.05);
  EXPECT_NE(out.find("MLflowMonitor: run " + run.run_id), std::string::npos);
  EXPECT_TRUE(mlflow.violations().empty()) << ::testing::PrintToString(mlflow.violations());
  // Requests: a lookup, a create, the run, at most one log-batch per epoch (two deliveries merge
  // when the second epoch ends while the first one's is being sent), the end.
  std::printf(
      "requests: get-by-name %d, experiments/create %d, runs/create %d, log-batch %d (2 "
      "epochs, %zu metrics), runs/update %d\n",
      mlflow.count("experiments/get-by-name"), mlflow.count("experiments/create"),
      mlflow.count("runs/create"), mlflow.count("runs/log-batch"), run.metrics.size(),
      mlflow.count("runs/update"));
  EXPECT_GE(mlflow.count("runs/log-batch"), 1);
  EXPECT_LE(mlflow.count("runs/log-batch"), 2);
  EXPECT_EQ(mlflow.count("runs/update"), 1);
}

TEST_F(MainJobMLflow, SigtermEndsTheRunKilledAndTheResumedJobContinuesTheSameRun) {
  Job job(args(20), mlflow.url(), output());
  // The first epoch's metrics arrived: training is under way.
  for (int i = 0; i < 6000 && mlflow.count("runs/log-batch") == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GT(mlflow.count("runs/log-batch"), 0) << testing::read_text(output());
  ::kill(job.pid(), SIGTERM);
  ASSERT_EQ(job.wait(), 143) << testing::read_text(output());
  ASSERT_EQ(mlflow.runs().size(), 1u);
  FakeMLflow::Run run = mlflow.only_run();
  EXPECT_EQ(run.status, "KILLED");
  EXPECT_TRUE(run.end_time.has_value());
  EXPECT_EQ(run_points(run), stats_json_points(logdir()));
  const size_t requests_before = mlflow.server().requests().size();

  // The same command again: resumes from the checkpoint of the stop step, into the same run.
  Job again(args(20), mlflow.url(), output());
  ASSERT_EQ(again.wait(), 0) << testing::read_text(output());
  ASSERT_EQ(mlflow.runs().size(), 1u) << testing::read_text(output());
  run = mlflow.only_run();
  EXPECT_EQ(run.status_history, (std::vector<std::string>{"KILLED", "RUNNING", "FINISHED"}));
  EXPECT_TRUE(run.end_time.has_value());
  EXPECT_EQ(run_points(run), stats_json_points(logdir()));
  std::set<int64_t> steps;
  for (const auto& m : run.metrics) steps.insert(m.step);
  EXPECT_EQ(*steps.rbegin(), 80);  // 20 epochs of 4 steps
  const auto requests = mlflow.server().requests();
  for (size_t i = requests_before; i < requests.size(); ++i) {
    if (requests[i].path != "/api/2.0/mlflow/runs/log-batch") continue;
    EXPECT_TRUE(Json::parse(requests[i].body)["params"].empty()) << requests[i].body;
  }
  EXPECT_NE(testing::read_text(output()).find("MLflowMonitor: continuing run " + run.run_id),
            std::string::npos);
  EXPECT_TRUE(mlflow.violations().empty()) << ::testing::PrintToString(mlflow.violations());
}

}  // namespace
}  // namespace trainpack

namespace trainpack {
namespace {

TEST_F(MainJobMLflow, AUriThatIsNotAServerStopsTheJobBeforeTraining) {
  Job job(args(2), "file:///tmp/mlruns", output());
  EXPECT_EQ(job.wait(), 1);
  const std::string out = testing::read_text(output());
  EXPECT_NE(out.find("MLflowMonitor needs a tracking server"), std::string::npos) << out;
  EXPECT_NE(out.find("mlflow server"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(logdir() / "stats.json"));
  EXPECT_EQ(mlflow.server().requests().size(), 0u);
}

}  // namespace
}  // namespace trainpack

namespace trainpack {
namespace {

using testing::FakeComet;

// stats.json's scalars as (name, value text, global_step): what Comet should hold.
std::multiset<std::tuple<std::string, std::string, int64_t>> stats_json_comet_points(
    const fs::path& dir) {
  std::multiset<std::tuple<std::string, std::string, int64_t>> out;
  for (const auto& [name, value, step] : testing::stats_json_scalars(dir)) {
    out.emplace(name, fmt::format("{}", value), step);
  }
  return out;
}

TEST_F(MainJobMLflow, WithCometsVariablesTooTheRunGoesToCometAndToMLflow) {
  FakeComet comet;
  Job job(args(2), mlflow.url(), output(),
          {std::string("COMET_API_KEY=") + FakeComet::kApiKey, "COMET_WORKSPACE=ws",
           "COMET_PROJECT_NAME=fm", "COMET_URL_OVERRIDE=" + comet.server_url() + "/clientlib/"});
  ASSERT_EQ(job.wait(), 0) << testing::read_text(output());
  const std::string out = testing::read_text(output());
  EXPECT_NE(out.find("fashion_mnist: COMET_API_KEY is set: sending the run to Comet (workspace ws, "
                     "project fm, at " +
                     comet.url()),
            std::string::npos)
      << out;
  ASSERT_EQ(comet.experiments().size(), 1u) << out;
  const testing::CometExperiment experiment = comet.experiments()[0];
  std::multiset<std::tuple<std::string, std::string, int64_t>> received;
  for (const auto& m : experiment.metrics) {
    received.emplace(m.name, fmt::format("{}", m.value), m.step.value_or(-1));
  }
  EXPECT_EQ(received, stats_json_comet_points(logdir()));
  EXPECT_FALSE(received.empty());
  bool finished = false;
  for (const auto& [key, value] : experiment.others)
    finished |= key == "status" && value == "FINISHED";
  EXPECT_TRUE(finished);
  EXPECT_EQ(mlflow.only_run().status, "FINISHED");  // both at once
  EXPECT_TRUE(comet.violations().empty()) << ::testing::PrintToString(comet.violations());
  // The key is in neither the output nor log.log.
  EXPECT_EQ(out.find(FakeComet::kApiKey), std::string::npos);
  EXPECT_EQ(testing::read_text(logdir() / "log.log").find(FakeComet::kApiKey), std::string::npos);
}

TEST_F(MainJobMLflow, CometsKeyWithoutAWorkspaceStopsTheJobBeforeTraining) {
  FakeComet comet;
  Job job(args(2), mlflow.url(), output(),
          {std::string("COMET_API_KEY=") + FakeComet::kApiKey, "COMET_PROJECT_NAME=fm",
           "COMET_URL_OVERRIDE=" + comet.server_url() + "/clientlib/"});
  EXPECT_EQ(job.wait(), 1);
  const std::string out = testing::read_text(output());
  EXPECT_NE(out.find("COMET_WORKSPACE"), std::string::npos) << out;
  EXPECT_EQ(out.find(FakeComet::kApiKey), std::string::npos);
  EXPECT_EQ(comet.requests(), 0);
  EXPECT_TRUE(mlflow.runs().empty());  // nothing trained, nothing sent
}

}  // namespace
}  // namespace trainpack
