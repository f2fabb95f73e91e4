// GraphProfiler: which steps it writes, what the files and the summary hold (through LibTorch's
// real profiler on a tiny linear model), and that it never leaves the profiler running.
#include "trainpack/callbacks/graph_profiler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/files.h"
#include "support/temp_dir.h"
#include "support/trace_event_format.h"
#include "trainpack/callbacks/trigger.h"
#include "trainpack/core/monitor_base.h"
#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"

namespace trainpack {
namespace graph_profiler_test {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::LogCapture;
using testing::read_text;
using testing::trace_event_format_problems;

// Each step is a linear layer's forward and backward on a 2x4 batch: aten::addmm forward,
// aten::mm in AddmmBackward0. `fail_at_step` (1-based) makes that step's computation throw.
class LinearTrainer : public Trainer {
 public:
  explicit LinearTrainer(int64_t fail_at_step = 0) : fail_at_step_(fail_at_step) {
    set_handle_signals(false);
  }
  void run_step() override {
    hooked_run([this](StepContext&) {
      if (global_step() + 1 == fail_at_step_) throw std::runtime_error("step failed");
      torch::nn::functional::linear(x_, w_, b_).sum().backward();
    });
  }

 private:
  int64_t fail_at_step_;
  torch::Tensor x_ = torch::ones({2, 4});
  torch::Tensor w_ = torch::ones({3, 4}, torch::requires_grad());
  torch::Tensor b_ = torch::zeros({3}, torch::requires_grad());
};

// Records the text values of every summary it receives: (tag, text).
class TextRecorder : public MonitorBase {
 public:
  std::vector<std::pair<std::string, std::string>> texts;
  void process_summary(const Summary& summary) override {
    for (const auto& v : summary.values) {
      if (v.kind == SummaryValue::Kind::kText) texts.emplace_back(v.tag, v.text);
    }
  }
};

class GraphProfilerTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    testing::TempDirTest::SetUp();
    logger::set_logger_dir(dir().string());
  }
  void TearDown() override {
    // A test that fails must not leave the profiler on for the next one in this process.
    namespace prof = torch::autograd::profiler;
    if (prof::profilerEnabled()) {
      if (torch::profiler::impl::profilerType() ==
          torch::profiler::impl::ActiveProfilerType::LEGACY) {
        prof::disableProfilerLegacy();
      } else {
        prof::disableProfiler();
      }
    }
    testing::TempDirTest::TearDown();
  }

  // The names of the files in dir() that start with `prefix`, sorted.
  std::vector<std::string> files(const std::string& prefix) const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir())) {
      const std::string name = e.path().filename().string();
      if (name.rfind(prefix, 0) == 0) out.push_back(name);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  static void train(const std::vector<CallbackPtr>& callbacks, int64_t spe, int64_t epochs,
                    const std::vector<MonitorPtr>& monitors = {}) {
    LinearTrainer trainer;
    trainer.train(callbacks, monitors, spe, 1, epochs);
  }
};

// The names of a trace's complete events.
std::vector<std::string> event_names(const std::string& json_text) {
  std::vector<std::string> names;
  const nlohmann::json doc = nlohmann::json::parse(json_text);
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "X") names.push_back(e["name"]);
  }
  return names;
}

TEST_F(GraphProfilerTest, IsChiefOnly) { EXPECT_TRUE(GraphProfiler().chief_only()); }

TEST_F(GraphProfilerTest, WritesATraceOfEveryHookedRunNamedAfterItsGlobalStep) {
  auto profiler = std::make_shared<GraphProfiler>();
  train({profiler}, 3, 1);
  EXPECT_THAT(files("chrome-trace-"),
              ElementsAre("chrome-trace-1.json", "chrome-trace-2.json", "chrome-trace-3.json"));
  EXPECT_THAT(files("op-table-"), ElementsAre());
  EXPECT_FALSE(profiler->profiling());
}

TEST_F(GraphProfilerTest, TraceHoldsTheModelsOperatorsInTheTraceEventFormat) {
  train({std::make_shared<GraphProfiler>()}, 1, 1);
  const std::string text = read_text(dir() / "chrome-trace-1.json");
  EXPECT_THAT(trace_event_format_problems(text), ElementsAre());
  const auto names = event_names(text);
  EXPECT_THAT(names, ::testing::Contains("aten::addmm"));
  EXPECT_THAT(names, ::testing::Contains("aten::mm"));
  EXPECT_THAT(names, ::testing::Contains("autograd::engine::evaluate_function: AddmmBackward0"));
  const auto doc = nlohmann::json::parse(text);
  EXPECT_EQ(doc["otherData"]["global_step"], 1);
  EXPECT_EQ(doc["displayTimeUnit"], "ms");
  bool training_thread = false, shapes = false;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["args"]["name"] == "training thread") {
      training_thread = true;
      EXPECT_EQ(e["tid"], 1);
    }
    if (e["ph"] == "X" && e["name"] == "aten::addmm") {
      // bias [3], input [2, 4], the transposed weight [4, 3], beta, alpha
      EXPECT_EQ(e["args"]["Input Dims"].dump(), "[[3],[2,4],[4,3],[],[]]");
      shapes = true;
    }
  }
  EXPECT_TRUE(training_thread);
  EXPECT_TRUE(shapes);
}

// EnableCallbackIf's predicate sees the global step before the increment in before_run: steps
// 2..3 before it are the files 3 and 4.
TEST_F(GraphProfilerTest, UnderEnableCallbackIfOnlyTheWindowIsProfiled) {
  train({std::make_shared<EnableCallbackIf>(std::make_shared<GraphProfiler>(),
                                            [](const EnableCallbackIf& self) {
                                              return self.global_step() >= 2 &&
                                                     self.global_step() < 4;
                                            })},
        3, 2);
  EXPECT_THAT(files("chrome-trace-"), ElementsAre("chrome-trace-3.json", "chrome-trace-4.json"));
  EXPECT_FALSE(torch::autograd::profiler::profilerEnabled());
}

// PeriodicCallback(every_k_steps=2) enables the runs whose global step before the increment is
// 0, 2, 4: the steps 1, 3, 5.
TEST_F(GraphProfilerTest, UnderPeriodicCallbackEveryKStepsProfilesTheRunsItEnables) {
  train({std::make_shared<PeriodicCallback>(std::make_shared<GraphProfiler>(),
                                            PeriodicCallbackOptions().every_k_steps(2))},
        3, 2);
  EXPECT_THAT(files("chrome-trace-"),
              ElementsAre("chrome-trace-1.json", "chrome-trace-3.json", "chrome-trace-5.json"));
}

TEST_F(GraphProfilerTest, DumpEventPutsATextSummaryTaggedTraceWithTheOperatorTable) {
  auto recorder = std::make_shared<TextRecorder>();
  train({std::make_shared<GraphProfiler>(
            GraphProfilerOptions().dump_tracing(false).dump_event(true).event_rows(3))},
        2, 1, {recorder});
  EXPECT_THAT(files("chrome-trace-"), ElementsAre());
  ASSERT_EQ(recorder->texts.size(), 2u);
  EXPECT_EQ(recorder->texts[0].first, "trace-1");
  EXPECT_EQ(recorder->texts[1].first, "trace-2");
  const std::string& text = recorder->texts[1].second;
  const std::string head =
      "Operators of global_step 2, by self time:\n\n"
      "| Operator | Calls | Self (us) | Self % | Total (us) |\n"
      "|:--|--:|--:|--:|--:|\n";
  ASSERT_EQ(text.substr(0, head.size()), head);
  // Three rows, then the line for the rest.
  const std::string rows = text.substr(head.size());
  EXPECT_EQ(std::count(rows.begin(), rows.end(), '\n'), 5) << rows;
  EXPECT_THAT(rows, HasSubstr(" more operators: "));
}

TEST_F(GraphProfilerTest, DumpEventTableListsTheStepsOperatorsWithTheirCalls) {
  auto recorder = std::make_shared<TextRecorder>();
  train({std::make_shared<GraphProfiler>(
            GraphProfilerOptions().dump_tracing(false).dump_event(true).event_rows(1000))},
        1, 1, {recorder});
  ASSERT_EQ(recorder->texts.size(), 1u);
  EXPECT_THAT(recorder->texts[0].second, HasSubstr("\n| aten::addmm | 1 | "));
  EXPECT_THAT(recorder->texts[0].second, HasSubstr("\n| aten::mm | 1 | "));
  EXPECT_THAT(recorder->texts[0].second, ::testing::Not(HasSubstr("more operators")));
}

TEST_F(GraphProfilerTest, DumpMetadataWritesTheOperatorTableAsCsv) {
  train({std::make_shared<GraphProfiler>(
            GraphProfilerOptions().dump_tracing(false).dump_metadata(true))},
        2, 1);
  EXPECT_THAT(files("chrome-trace-"), ElementsAre());
  EXPECT_THAT(files("op-table-"), ElementsAre("op-table-1.csv", "op-table-2.csv"));
  const std::string csv = read_text(dir() / "op-table-2.csv");
  EXPECT_EQ(csv.substr(0, csv.find('\n') + 1), "operator,calls,self_us,total_us\n");
  EXPECT_THAT(csv, HasSubstr("\naten::addmm,1,"));
  EXPECT_THAT(csv, HasSubstr("\naten::mm,1,"));
}

TEST_F(GraphProfilerTest, WithoutALoggerDirectorySetupFailsNamingTheFix) {
  logger::unset_logger_dir();
  LinearTrainer trainer;
  try {
    trainer.train({std::make_shared<GraphProfiler>()}, {}, 1, 1, 1);
    FAIL() << "no exception";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr("GraphProfiler: the logger directory is not set; call "
                                    "trainpack::logger::set_logger_dir(dir) first"));
  }
}

// The step that fails never reaches after_run: after_train stops the profiler.
TEST_F(GraphProfilerTest, AStepThatThrowsLeavesTheProfilerOff) {
  auto profiler = std::make_shared<GraphProfiler>();
  LinearTrainer trainer(/*fail_at_step=*/2);
  EXPECT_THROW(trainer.train({profiler}, {}, 3, 1, 1), std::exception);
  EXPECT_FALSE(profiler->profiling());
  EXPECT_FALSE(torch::autograd::profiler::profilerEnabled());
  EXPECT_THAT(files("chrome-trace-"), ElementsAre("chrome-trace-1.json"));
  // The thread can be profiled again.
  train({std::make_shared<GraphProfiler>()}, 1, 1);
  EXPECT_THAT(files("chrome-trace-"), ElementsAre("chrome-trace-1.json"));
  EXPECT_FALSE(torch::autograd::profiler::profilerEnabled());
}

TEST_F(GraphProfilerTest, AProfilerAlreadyRunningIsLeftAloneWithOneWarning) {
  const torch::autograd::profiler::ProfilerConfig config(
      torch::autograd::profiler::ProfilerState::KINETO);
  const std::set<torch::autograd::profiler::ActivityType> cpu{
      torch::autograd::profiler::ActivityType::CPU};
  torch::autograd::profiler::prepareProfiler(config, cpu);
  torch::autograd::profiler::enableProfiler(config, cpu);
  LogCapture log;
  train({std::make_shared<GraphProfiler>()}, 2, 1);
  EXPECT_THAT(files("chrome-trace-"), ElementsAre());
  int warnings = 0;
  for (const auto& line : log.lines()) {
    if (line.find("WRN [GraphProfiler] LibTorch's profiler is already running") == 0) ++warnings;
  }
  EXPECT_EQ(warnings, 1);
  ASSERT_TRUE(torch::autograd::profiler::profilerEnabled());  // still the other code's
  torch::autograd::profiler::disableProfiler();
}

TEST(GraphProfilerOptionsTest, NothingToWriteIsRefused) {
  try {
    GraphProfiler profiler(GraphProfilerOptions().dump_tracing(false));
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("GraphProfiler: dump_metadata, dump_tracing and dump_event are "
                                    "all false"));
  }
  try {
    GraphProfiler profiler(GraphProfilerOptions().dump_event(true).event_rows(0));
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("GraphProfiler: event_rows must be at least 1, got 0"));
  }
}

}  // namespace graph_profiler_test
}  // namespace trainpack
