// StepHook, HookToCallback, CallbackToHook, TensorWatchHook and LocalDebugHook.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <streambuf>
#include <string>
#include <utility>
#include <vector>

#include "support/command.h"
#include "support/errors.h"
#include "support/files.h"
#include "support/step_trainer.h"
#include "support/temp_dir.h"
#include "trainpack/callbacks/hooks.h"
#include "trainpack/core/graph.h"
#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"
#include "trainpack/utils/logger.h"

namespace trainpack {
namespace hooks_test {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::message_of;
using testing::StepTrainer;
using testing::Trace;
using testing::trace_line;

// Records every StepHook call as "hook ep=E ls=L gs=G". begin() has no argument: the trainer is
// given to the hook beforehand.
class TraceHook : public StepHook {
 public:
  TraceHook(std::shared_ptr<Trace> trace, const Trainer* trainer, RunArgs args = RunArgs())
      : trace_(std::move(trace)), trainer_(trainer), args_(std::move(args)) {}
  void begin() override { record("begin", *trainer_); }
  void after_create_session(Trainer& t) override { record("after_create_session", t); }
  RunArgs before_run(const StepContext& ctx) override {
    record("before_run", ctx.trainer());
    return RunArgs::ref(args_);
  }
  void after_run(const StepContext& ctx, const RunValues& values) override {
    std::string got;
    for (size_t i = 0; i < values.size(); ++i) {
      got += fmt::format(" {}={}", values.name(i), values[i].item<double>());
    }
    trace_->push_back(trace_line("", "after_run", ctx.trainer()) + got);
  }
  void end(Trainer& t) override { record("end", t); }

 private:
  void record(const char* what, const Trainer& t) { trace_->push_back(trace_line("", what, t)); }
  std::shared_ptr<Trace> trace_;
  const Trainer* trainer_;
  RunArgs args_;
};

// A hook with only after_run, and one with nothing.
class AfterRunOnly : public StepHook {
 public:
  int calls = 0;
  void after_run(const StepContext&, const RunValues&) override { ++calls; }
};
class EmptyHook : public StepHook {};

// ---------------------------------------------------------------------------------------------
// HookToCallback

TEST(HookToCallback, ForwardsEveryMethodAtTheCallbackHooksTimes) {
  auto trace = std::make_shared<Trace>();
  StepTrainer trainer;
  trainer.step = [](StepContext& ctx, int64_t gs) {
    ctx.publish("x", at::full({}, 10.0 * gs, at::kDouble));
  };
  auto adapter = std::make_shared<HookToCallback>(
      std::make_shared<TraceHook>(trace, &trainer, RunArgs({"x"})));
  EXPECT_FALSE(adapter->chief_only());
  EXPECT_EQ(adapter->name(), "HookToCallback-TraceHook");
  trainer.train({adapter}, {}, /*steps_per_epoch=*/2, /*starting_epoch=*/1, /*max_epoch=*/2);
  EXPECT_THAT(*trace, ElementsAre("begin ep=0 ls=-1 gs=0", "after_create_session ep=0 ls=-1 gs=0",
                                  "before_run ep=1 ls=0 gs=0", "after_run ep=1 ls=0 gs=1 x=0",
                                  "before_run ep=1 ls=1 gs=1", "after_run ep=1 ls=1 gs=2 x=10",
                                  "before_run ep=2 ls=0 gs=2", "after_run ep=2 ls=0 gs=3 x=20",
                                  "before_run ep=2 ls=1 gs=3", "after_run ep=2 ls=1 gs=4 x=30",
                                  "end ep=2 ls=1 gs=4"));
}

TEST(HookToCallback, EndRunsAfterAnError) {
  auto trace = std::make_shared<Trace>();
  StepTrainer trainer;
  trainer.step = [](StepContext&, int64_t gs) {
    if (gs == 1) throw std::runtime_error("boom");
  };
  auto adapter = std::make_shared<HookToCallback>(std::make_shared<TraceHook>(trace, &trainer));
  EXPECT_THROW(trainer.train({adapter}, {}, 3, 1, 1), std::runtime_error);
  EXPECT_THAT(*trace, ElementsAre("begin ep=0 ls=-1 gs=0", "after_create_session ep=0 ls=-1 gs=0",
                                  "before_run ep=1 ls=0 gs=0", "after_run ep=1 ls=0 gs=1",
                                  "before_run ep=1 ls=1 gs=1", "end ep=1 ls=1 gs=1"));
}

// What begin() adds to the graph keeps its own name; a callback's setup_graph is in its scope.
class ScopeHook : public StepHook {
 public:
  explicit ScopeHook(Trainer* trainer) : trainer_(trainer) {}
  std::string scope_in_begin = "<not called>";
  void begin() override {
    scope_in_begin = trainer_->graph().current_scope();
    trainer_->graph().add_op("hook_op", [] {});
  }

 private:
  Trainer* trainer_;
};
class ScopeCallback : public Callback {
 protected:
  void _setup_graph() override {
    graph().add_op("cb_op", [] {});
  }
};

TEST(HookToCallback, BeginRunsOutsideTheCallbackNameScope) {
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  auto hook = std::make_shared<ScopeHook>(&trainer);
  trainer.train({std::make_shared<ScopeCallback>(), std::make_shared<HookToCallback>(hook)}, {}, 1,
                1, 1);
  EXPECT_EQ(hook->scope_in_begin, "");
  EXPECT_THAT(trainer.graph().op_names(), ElementsAre("ScopeCallback/cb_op", "hook_op"));
}

TEST(HookToCallback, IsDispatchedOnlyTheHooksTheHookOverrides) {
  auto only_after = std::make_shared<HookToCallback>(std::make_shared<AfterRunOnly>());
  auto empty = std::make_shared<HookToCallback>(std::make_shared<EmptyHook>());
  auto trace = std::make_shared<HookToCallback>(
      std::make_shared<TraceHook>(std::make_shared<Trace>(), nullptr));
  for (int h = 0; h < kNumHooks; ++h) {
    const Hook hook = static_cast<Hook>(h);
    SCOPED_TRACE(hook_name(hook));
    EXPECT_EQ(only_after->overrides(hook), hook == Hook::kAfterRun);
    EXPECT_FALSE(empty->overrides(hook));
    EXPECT_EQ(trace->overrides(hook), hook == Hook::kSetupGraph || hook == Hook::kBeforeTrain ||
                                          hook == Hook::kBeforeRun || hook == Hook::kAfterRun ||
                                          hook == Hook::kAfterTrain);
  }
  // A subclass that adds a callback hook is dispatched it.
  LocalDebugHook debug(LocalDebugHookOptions().dir("/nonexistent-dir-never-created"));
  EXPECT_TRUE(debug.overrides(Hook::kTriggerStep));
  EXPECT_FALSE(debug.overrides(Hook::kTriggerEpoch));
  EXPECT_FALSE(debug.overrides(Hook::kBeforeEpoch));

  // In a run: the after_run-only hook is called after every run; nothing else breaks.
  auto hook = std::make_shared<AfterRunOnly>();
  testing::run_noop({std::make_shared<HookToCallback>(hook)}, 3, 1, 2);
  EXPECT_EQ(hook->calls, 6);
}

TEST(HookToCallback, RejectsANullHook) {
  EXPECT_EQ(message_of<std::invalid_argument>([] { HookToCallback(nullptr); }),
            "HookToCallback: hook is null; pass a StepHook (std::make_shared<MyHook>())");
}

// ---------------------------------------------------------------------------------------------
// CallbackToHook

TEST(CallbackToHook, ForwardsOnlyBeforeRunAndAfterRun) {
  Trace trace;
  auto cb = std::make_shared<testing::ActionCallback>();
  auto record = [&](const char* what) {
    return [&trace, what](testing::ActionCallback& self) {
      trace.push_back(trace_line("", what, self.ctx ? self.ctx->trainer() : self.trainer()));
    };
  };
  cb->setup_graph_fn = record("setup_graph");
  cb->before_train_fn = record("before_train");
  cb->before_run_fn = record("before_run");
  cb->after_run_fn = [&](testing::ActionCallback& self) {
    trace.push_back(trace_line("", "after_run", self.ctx->trainer()) +
                    fmt::format(" x={}", (*self.values)["x"].item<double>()));
  };
  cb->trigger_step_fn = record("trigger_step");
  cb->after_train_fn = record("after_train");
  cb->run_args = RunArgs({"x"});
  auto hook = std::make_shared<CallbackToHook>(cb);
  EXPECT_EQ(hook->name(), "CallbackToHook-ActionCallback");
  EXPECT_TRUE(hook->overrides(StepHook::Method::kBeforeRun));
  EXPECT_TRUE(hook->overrides(StepHook::Method::kAfterRun));
  EXPECT_FALSE(hook->overrides(StepHook::Method::kBegin));
  EXPECT_FALSE(hook->overrides(StepHook::Method::kAfterCreateSession));
  EXPECT_FALSE(hook->overrides(StepHook::Method::kEnd));

  StepTrainer trainer;
  trainer.step = [](StepContext& ctx, int64_t gs) { ctx.publish("x", at::full({}, gs + 0.5)); };
  trainer.train({std::make_shared<HookToCallback>(hook)}, {}, 2, 1, 1);
  EXPECT_THAT(trace, ElementsAre("before_run ep=1 ls=0 gs=0", "after_run ep=1 ls=0 gs=1 x=0.5",
                                 "before_run ep=1 ls=1 gs=1", "after_run ep=1 ls=1 gs=2 x=1.5"));
}

TEST(CallbackToHook, RoundTripThroughHookToCallbackKeepsOnlyTheStepMethods) {
  auto trace = std::make_shared<Trace>();
  StepTrainer trainer;
  trainer.step = [](StepContext& ctx, int64_t gs) { ctx.publish("x", at::full({}, 2.0 * gs)); };
  auto inner = std::make_shared<TraceHook>(trace, &trainer, RunArgs({"x"}));
  // hook -> callback -> hook: begin, after_create_session and end are lost on the way back.
  auto round_trip = std::make_shared<CallbackToHook>(std::make_shared<HookToCallback>(inner));
  EXPECT_TRUE(round_trip->overrides(StepHook::Method::kBeforeRun));
  EXPECT_TRUE(round_trip->overrides(StepHook::Method::kAfterRun));
  EXPECT_FALSE(round_trip->overrides(StepHook::Method::kBegin));
  EXPECT_FALSE(round_trip->overrides(StepHook::Method::kEnd));
  auto after_only = std::make_shared<CallbackToHook>(
      std::make_shared<HookToCallback>(std::make_shared<AfterRunOnly>()));
  EXPECT_FALSE(after_only->overrides(StepHook::Method::kBeforeRun));
  EXPECT_TRUE(after_only->overrides(StepHook::Method::kAfterRun));

  trainer.train({std::make_shared<HookToCallback>(round_trip)}, {}, 2, 1, 1);
  EXPECT_THAT(*trace, ElementsAre("before_run ep=1 ls=0 gs=0", "after_run ep=1 ls=0 gs=1 x=0",
                                  "before_run ep=1 ls=1 gs=1", "after_run ep=1 ls=1 gs=2 x=2"));
}

TEST(CallbackToHook, RejectsANullCallback) {
  EXPECT_EQ(message_of<std::invalid_argument>([] { CallbackToHook(nullptr); }),
            "CallbackToHook: callback is null; pass a callback (std::make_shared<MyCallback>())");
}

// ---------------------------------------------------------------------------------------------
// has_inf_or_nan

TEST(HasInfOrNan, FiresOnNonFiniteFloatingValuesOnly) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(has_inf_or_nan("a", at::tensor({1.0, -2.0}, at::kFloat)));
  EXPECT_TRUE(has_inf_or_nan("a", at::tensor({1.0, nan}, at::kFloat)));
  EXPECT_TRUE(has_inf_or_nan("a", at::tensor({-inf, 0.0}, at::kDouble)));
  EXPECT_TRUE(has_inf_or_nan("a", at::full({}, inf, at::kHalf)));
  EXPECT_FALSE(has_inf_or_nan("a", at::arange(4, at::kLong)));
  EXPECT_FALSE(has_inf_or_nan("a", at::ones({2}, at::kBool)));
  EXPECT_FALSE(has_inf_or_nan("a", at::empty({0}, at::kFloat)));
}

// ---------------------------------------------------------------------------------------------
// TensorWatchHook / LocalDebugHook

// True if /usr/bin/python3 can import numpy.
bool python_has_numpy() {
  return fs::exists("/usr/bin/python3") &&
         std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1 </dev/null") == 0;
}

class LocalDebugHookTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    testing::TempDirTest::SetUp();
    logger::set_logger_dir(log_dir().string());
  }
  fs::path log_dir() const { return path("log"); }

  // The names of the npz files in the logger directory, sorted.
  std::vector<std::string> npz_files() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(log_dir())) {
      if (e.path().extension() == ".npz") out.push_back(e.path().filename().string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  // Every array of the npz file as "key dtype shape values", by numpy.
  std::string numpy_load(const fs::path& file) {
    const fs::path script = path("load.py");
    std::ofstream(script) << "import sys, numpy as np\n"
                             "d = np.load(sys.argv[1])\n"
                             "for k in d.files:\n"
                             "    a = d[k]\n"
                             "    print(k, a.dtype.str, a.shape, a.tolist())\n";
    const auto [out, rc] = testing::run_command("/usr/bin/python3 " + script.string() + " " +
                                                file.string() + " 2>&1 </dev/null");
    EXPECT_EQ(rc, 0) << out;
    return out;
  }

  // The WRN/ERR lines and the lines of the loop's stop, from `log`.
  static std::vector<std::string> debug_lines(const testing::LogCapture& log) {
    std::vector<std::string> out;
    for (const auto& l : log.lines()) {
      if (l.find("TensorWatchHook") != std::string::npos ||
          l.find("Training was stopped") != std::string::npos ||
          l.find("Training has finished") != std::string::npos) {
        out.push_back(l);
      }
    }
    return out;
  }
};

// The step of the debugger tests: "w" = [[gs, -gs], [0.5, 2]] (float32), "n" = gs (int64) and
// "cost" = gs / 2 (float32), which is NaN at the global step `nan_at` (before the increment).
void watched_step(StepContext& ctx, int64_t gs, int64_t nan_at) {
  const float g = static_cast<float>(gs);
  ctx.publish("w", at::tensor({g, -g, 0.5f, 2.0f}, at::kFloat).reshape({2, 2}));
  ctx.publish("n", at::full({}, gs, at::kLong));
  ctx.publish("cost", at::full({}, gs == nan_at ? std::nanf("") : g / 2, at::kFloat));
}

TEST_F(LocalDebugHookTest, StopsAtTheStepWhoseTensorBecomesNanWithTheTensorsInAnNpz) {
  StepTrainer trainer;
  trainer.step = [](StepContext& ctx, int64_t gs) { watched_step(ctx, gs, 4); };
  auto debug = std::make_shared<LocalDebugHook>(LocalDebugHookOptions().action(DebugAction::kStop));
  EXPECT_TRUE(debug->chief_only());
  EXPECT_EQ(debug->name(), "LocalDebugHook");
  auto trace = std::make_shared<Trace>();
  testing::LogCapture log;
  trainer.train({debug, std::make_shared<testing::TraceCallback>(trace)}, {}, 3, 1, 3);

  // The fifth step (global_step 4 -> 5, epoch 2, local step 1) is the last one, and every
  // callback completed it.
  EXPECT_EQ(trainer.global_step(), 5);
  EXPECT_EQ(trainer.epoch_num(), 2);
  EXPECT_THAT(std::vector<std::string>(trace->end() - 4, trace->end()),
              ElementsAre("before_run ep=2 ls=1 gs=4", "after_run ep=2 ls=1 gs=5",
                          "trigger_step ep=2 ls=1 gs=5", "after_train ep=2 ls=1 gs=5"));
  const std::string file = (log_dir() / "debug-step-5.npz").string();
  const std::string reason =
      "Tensor 'cost' failed has_inf_or_nan at global_step=5 (epoch 2, local step 1); the step's "
      "tensors are in " +
      file;
  EXPECT_THAT(
      debug_lines(log),
      ElementsAre("TensorWatchHook: watching the 3 tensors published by the step: cost, n, w "
                  "(from the next step on)",
                  "WRN TensorWatchHook: tensor 'cost' failed has_inf_or_nan at global_step=5 "
                  "(epoch 2, local step 1): shape [], dtype float32, 1 values: 1 NaN, 0 Inf; "
                  "finite: none",
                  "ERR TensorWatchHook: " + reason + ". Stopping training."));
  EXPECT_THAT(npz_files(), ElementsAre("debug-step-5.npz"));
  EXPECT_THAT(debug->watch().dumps(), ElementsAre(file));
  EXPECT_TRUE(testing::temporary_files(log_dir()).empty());
  if (!python_has_numpy()) GTEST_SKIP() << "/usr/bin/python3 with numpy is not installed";
  EXPECT_EQ(numpy_load(file),
            "cost <f4 () nan\n"
            "n <i8 () 4\n"
            "w <f4 (2, 2) [[4.0, -4.0], [0.5, 2.0]]\n");
}

TEST_F(LocalDebugHookTest, NamedTensorsAreWatchedFromTheFirstStepWithTheirStatistics) {
  const double inf = std::numeric_limits<double>::infinity();
  StepTrainer trainer;
  trainer.step = [&](StepContext& ctx, int64_t gs) {
    ctx.publish("a", gs == 0 ? at::tensor({1.0, std::nan(""), inf, -2.0}, at::kFloat)
                             : at::zeros({4}, at::kFloat));
    ctx.publish("b", at::full({2}, gs, at::kInt));
    ctx.publish("other", at::zeros({}));
  };
  auto debug = std::make_shared<LocalDebugHook>(
      LocalDebugHookOptions().names({"b", "a"}).action(DebugAction::kStop));
  testing::LogCapture log;
  trainer.train({debug}, {}, 5, 1, 1);
  EXPECT_EQ(trainer.global_step(), 1);
  EXPECT_THAT(debug_lines(log)[0],
              "WRN TensorWatchHook: tensor 'a' failed has_inf_or_nan at global_step=1 (epoch 1, "
              "local step 0): shape [4], dtype float32, 4 values: 1 NaN, 1 Inf; finite: min -2, "
              "max 1, mean -0.5");
  EXPECT_THAT(npz_files(), ElementsAre("debug-step-1.npz"));
  if (!python_has_numpy()) GTEST_SKIP() << "/usr/bin/python3 with numpy is not installed";
  EXPECT_EQ(numpy_load(log_dir() / "debug-step-1.npz"),
            "b <i4 (2,) [0, 0]\n"
            "a <f4 (4,) [1.0, nan, inf, -2.0]\n");
}

TEST_F(LocalDebugHookTest, AUserFilterFiresAndLogAndContinueKeepsTraining) {
  StepTrainer trainer;
  trainer.step = [](StepContext& ctx, int64_t gs) { watched_step(ctx, gs, -1); };
  auto debug = std::make_shared<LocalDebugHook>(
      LocalDebugHookOptions().names({"w", "n"}).action(DebugAction::kLogAndContinue).max_dumps(2));
  std::vector<std::string> seen;
  debug->add_tensor_filter("too_large", [&](const std::string& name, const at::Tensor& t) {
    seen.push_back(name);
    return t.abs().max().item<double>() >= 3;
  });
  testing::LogCapture log;
  trainer.train({debug}, {}, 3, 1, 2);
  EXPECT_EQ(trainer.global_step(), 6);  // training went on to the end
  // The filter sees every watched tensor of every run, in the order of `names`; both fire from
  // the run that starts at global step 3 (|w| and n reach 3 there), whose after_run sees 4.
  EXPECT_EQ(seen.size(), 12u);
  EXPECT_EQ(seen[0], "w");
  EXPECT_EQ(seen[1], "n");
  EXPECT_THAT(
      debug_lines(log),
      ElementsAre("WRN TensorWatchHook: tensor 'w' failed too_large at global_step=4 (epoch 2, "
                  "local step 0): shape [2, 2], dtype float32, 4 values: 0 NaN, 0 Inf; finite: "
                  "min -3, max 3, mean 0.625",
                  "WRN TensorWatchHook: tensor 'n' failed too_large at global_step=4 (epoch 2, "
                  "local step 0): shape [], dtype int64, 1 values; finite: min 3, max 3, mean 3",
                  "WRN TensorWatchHook: tensor 'w' failed too_large at global_step=5 (epoch 2, "
                  "local step 1): shape [2, 2], dtype float32, 4 values: 0 NaN, 0 Inf; finite: "
                  "min -4, max 4, mean 0.625",
                  "WRN TensorWatchHook: tensor 'n' failed too_large at global_step=5 (epoch 2, "
                  "local step 1): shape [], dtype int64, 1 values; finite: min 4, max 4, mean 4",
                  "WRN TensorWatchHook: tensor 'w' failed too_large at global_step=6 (epoch 2, "
                  "local step 2): shape [2, 2], dtype float32, 4 values: 0 NaN, 0 Inf; finite: "
                  "min -5, max 5, mean 0.625",
                  "WRN TensorWatchHook: tensor 'n' failed too_large at global_step=6 (epoch 2, "
                  "local step 2): shape [], dtype int64, 1 values; finite: min 5, max 5, mean 5",
                  "WRN TensorWatchHook: 2 npz files were written (max_dumps); later hits are "
                  "only logged",
                  "Training has finished!"));
  EXPECT_THAT(npz_files(), ElementsAre("debug-step-4.npz", "debug-step-5.npz"));
  if (!python_has_numpy()) GTEST_SKIP() << "/usr/bin/python3 with numpy is not installed";
  EXPECT_EQ(numpy_load(log_dir() / "debug-step-5.npz"),
            "w <f4 (2, 2) [[4.0, -4.0], [0.5, 2.0]]\n"
            "n <i8 () 4\n");
}

TEST_F(LocalDebugHookTest, NoHitWritesNothingAndLogsNothing) {
  StepTrainer trainer;
  trainer.step = [](StepContext& ctx, int64_t gs) { watched_step(ctx, gs, -1); };
  auto debug = std::make_shared<LocalDebugHook>();
  testing::LogCapture log;
  trainer.train({debug}, {}, 3, 1, 2);
  EXPECT_EQ(trainer.global_step(), 6);
  EXPECT_THAT(debug_lines(log),
              ElementsAre("TensorWatchHook: watching the 3 tensors published by the step: cost, "
                          "n, w (from the next step on)",
                          "Training has finished!"));
  EXPECT_TRUE(npz_files().empty());
  EXPECT_FALSE(debug->watch().action_pending());
}

TEST_F(LocalDebugHookTest, ConsoleIfTerminalWithoutATerminalStops) {
  StepTrainer trainer;
  trainer.step = [](StepContext& ctx, int64_t gs) { watched_step(ctx, gs, 1); };
  auto debug =
      std::make_shared<LocalDebugHook>(LocalDebugHookOptions().names({"cost"}).terminal(false));
  testing::LogCapture log;
  trainer.train({debug}, {}, 3, 1, 3);
  EXPECT_EQ(trainer.global_step(), 2);
  EXPECT_THAT(npz_files(), ElementsAre("debug-step-2.npz"));
  EXPECT_TRUE(
      log.contains("ERR TensorWatchHook: Tensor 'cost' failed has_inf_or_nan at "
                   "global_step=2 (epoch 1, local step 1); the step's tensors are in " +
                   (log_dir() / "debug-step-2.npz").string() + ". Stopping training."));
}

// An output stream that records "console" in a trace when the console first writes to it.
class MarkingBuf : public std::stringbuf {
 public:
  explicit MarkingBuf(Trace* trace) : trace_(trace) {}

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    mark();
    return std::stringbuf::xsputn(s, n);
  }
  int_type overflow(int_type c) override {
    mark();
    return std::stringbuf::overflow(c);
  }

 private:
  void mark() {
    if (!marked_) trace_->push_back("console");
    marked_ = true;
  }
  Trace* trace_;
  bool marked_ = false;
};

TEST_F(LocalDebugHookTest, OnATerminalTheConsoleOpensAtTriggerStepAndItsStopEndsTraining) {
  StepTrainer trainer;
  trainer.step = [](StepContext& ctx, int64_t gs) { watched_step(ctx, gs, 1); };
  auto trace = std::make_shared<Trace>();
  MarkingBuf buf(trace.get());
  std::ostream out(&buf);
  std::istringstream in("stop\n");
  auto debug = std::make_shared<LocalDebugHook>(
      LocalDebugHookOptions().names({"cost"}).terminal(true).console(
          ConsoleOptions().input(&in).output(&out).prompt("> ")));
  auto before = std::make_shared<testing::TraceCallback>(trace, "before");
  auto after = std::make_shared<testing::TraceCallback>(trace, "after");
  testing::LogCapture log;
  trainer.train({before, debug, after}, {}, 3, 1, 3);
  EXPECT_EQ(trainer.global_step(), 2);
  // The console opens between the trigger_step of the callbacks before and after the hook.
  EXPECT_THAT(std::vector<std::string>(trace->end() - 7, trace->end()),
              ElementsAre("before:after_run ep=1 ls=1 gs=2", "after:after_run ep=1 ls=1 gs=2",
                          "before:trigger_step ep=1 ls=1 gs=2", "console",
                          "after:trigger_step ep=1 ls=1 gs=2", "before:after_train ep=1 ls=1 gs=2",
                          "after:after_train ep=1 ls=1 gs=2"));
  const std::string reason =
      "Tensor 'cost' failed has_inf_or_nan at global_step=2 (epoch 1, local step 1); the step's "
      "tensors are in " +
      (log_dir() / "debug-step-2.npz").string();
  EXPECT_THAT(buf.str(),
              ::testing::StartsWith(reason + ".\nTraining is paused at global_step=2 (epoch 1). "
                                             "Type 'help' for the commands, 'continue' to "
                                             "resume.\n> "));
  EXPECT_TRUE(
      log.contains("ERR TensorWatchHook: " + reason + ". Stopping training (from the console)."));
  EXPECT_THAT(npz_files(), ElementsAre("debug-step-2.npz"));
}

TEST_F(LocalDebugHookTest, OnATerminalContinueInTheConsoleKeepsTraining) {
  StepTrainer trainer;
  trainer.step = [](StepContext& ctx, int64_t gs) { watched_step(ctx, gs, 1); };
  std::ostringstream out;
  std::istringstream in("continue\n");
  auto debug = std::make_shared<LocalDebugHook>(
      LocalDebugHookOptions().names({"cost"}).terminal(true).console(
          ConsoleOptions().input(&in).output(&out)));
  testing::LogCapture log;
  trainer.train({debug}, {}, 3, 1, 3);
  EXPECT_EQ(trainer.global_step(), 9);
  EXPECT_THAT(out.str(), HasSubstr("Training is paused at global_step=2 (epoch 1)."));
  EXPECT_FALSE(log.contains("Stopping training"));
  EXPECT_THAT(npz_files(), ElementsAre("debug-step-2.npz"));
}

// A step of two hooked runs that publish different names (a GAN's discriminator and generator
// runs): every-tensor mode learns the names of each run and never asks a run for the other's.
TEST_F(LocalDebugHookTest, EveryTensorModeLearnsTheNamesOfEachHookedRunOfAStep) {
  testing::TwoRunTrainer trainer;
  trainer.first = [](StepContext& ctx, int64_t gs) {
    ctx.publish("d_loss", at::full({}, static_cast<double>(gs)));
  };
  trainer.second = [](StepContext& ctx, int64_t step) {
    const double gs = static_cast<double>(step);
    ctx.publish("g_loss", at::full({}, gs == 5 ? std::nan("") : gs));
  };
  auto debug = std::make_shared<LocalDebugHook>(LocalDebugHookOptions().action(DebugAction::kStop));
  testing::LogCapture log;
  trainer.train({debug}, {}, 2, 1, 3);
  EXPECT_EQ(trainer.global_step(), 6);  // two global steps per step; the third step's second run
  EXPECT_THAT(debug_lines(log),
              ElementsAre("TensorWatchHook: watching the 1 tensor published by the step: d_loss "
                          "(from the next step on)",
                          "TensorWatchHook: watching the 1 tensor published by the step in its "
                          "hooked run 2: g_loss (from the next step on)",
                          "WRN TensorWatchHook: tensor 'g_loss' failed has_inf_or_nan at "
                          "global_step=6 (epoch 2, local step 0): shape [], dtype float32, 1 "
                          "values: 1 NaN, 0 Inf; finite: none",
                          "ERR TensorWatchHook: Tensor 'g_loss' failed has_inf_or_nan at "
                          "global_step=6 (epoch 2, local step 0); the step's tensors are in " +
                              (log_dir() / "debug-step-6.npz").string() + ". Stopping training."));
}

TEST_F(LocalDebugHookTest, RejectsBadArguments) {
  using O = LocalDebugHookOptions;
  EXPECT_EQ(message_of<std::invalid_argument>([] {
              LocalDebugHook(O().names({"a", ""}));
            }),
            "TensorWatchHook: TensorWatchHookOptions().names has an empty name; give the names "
            "the step publishes, or no names to watch every one");
  EXPECT_EQ(message_of<std::invalid_argument>([] {
              LocalDebugHook(O().names({"a", "b", "a"}));
            }),
            "TensorWatchHook: TensorWatchHookOptions().names has 'a' twice; give each name once");
  EXPECT_EQ(message_of<std::invalid_argument>([] { LocalDebugHook(O().max_dumps(0)); }),
            "TensorWatchHook: TensorWatchHookOptions().max_dumps must be >= 1, got 0");
  EXPECT_EQ(message_of<std::invalid_argument>([] { LocalDebugHook(O().dir("")); }),
            "TensorWatchHook: TensorWatchHookOptions().dir is empty; leave it unset for the "
            "logger directory");
  logger::unset_logger_dir();
  EXPECT_THAT(message_of<std::invalid_argument>([] { LocalDebugHook(); }),
              HasSubstr("TensorWatchHook: no directory was given and the logger directory is "
                        "not set"));

  LocalDebugHook debug(O().dir(path("d").string()));
  const TensorFilter yes = [](const std::string&, const at::Tensor&) { return true; };
  EXPECT_EQ(message_of<std::invalid_argument>([&] { debug.add_tensor_filter("", yes); }),
            "TensorWatchHook::add_tensor_filter: filter_name is empty");
  EXPECT_EQ(message_of<std::invalid_argument>([&] { debug.add_tensor_filter("f", nullptr); }),
            "TensorWatchHook::add_tensor_filter: the filter 'f' is an empty function");
  EXPECT_EQ(
      message_of<std::invalid_argument>([&] { debug.add_tensor_filter("has_inf_or_nan", yes); }),
      "TensorWatchHook::add_tensor_filter: a filter named 'has_inf_or_nan' was already added; "
      "give each filter its own name");
  debug.add_tensor_filter("f", yes);
  EXPECT_THROW(debug.add_tensor_filter("f", yes), std::invalid_argument);
  // Without the built-in filter, its name is free.
  LocalDebugHook plain(O().dir(path("d").string()).inf_or_nan_filter(false));
  EXPECT_NO_THROW(plain.add_tensor_filter("has_inf_or_nan", yes));
}

TEST_F(LocalDebugHookTest, ADirectoryThatCannotBeCreatedFailsBeforeTraining) {
  std::ofstream(path("file")) << "x";
  StepTrainer trainer;
  auto debug = std::make_shared<LocalDebugHook>(
      LocalDebugHookOptions().dir((path("file") / "sub").string()));
  EXPECT_THAT(message_of<CallbackError>([&] { trainer.train({debug}, {}, 3, 1, 1); }),
              ::testing::StartsWith("Callback LocalDebugHook failed in before_train: "
                                    "TensorWatchHook: cannot create the directory '" +
                                    (path("file") / "sub").string() + "': "));
  EXPECT_EQ(trainer.global_step(), 0);
}

TEST_F(LocalDebugHookTest, AnNpzThatCannotBeWrittenIsReportedAndTrainingStillStops) {
  fs::create_directories(log_dir() / "debug-step-2.npz");  // a directory where the file goes
  StepTrainer trainer;
  trainer.step = [](StepContext& ctx, int64_t gs) { watched_step(ctx, gs, 1); };
  auto debug = std::make_shared<LocalDebugHook>(
      LocalDebugHookOptions().names({"cost"}).action(DebugAction::kStop));
  testing::LogCapture log;
  const std::string error =
      message_of<WriteFailedError>([&] { trainer.train({debug}, {}, 3, 1, 3); });
  EXPECT_EQ(trainer.global_step(), 2);
  const std::string file = (log_dir() / "debug-step-2.npz").string();
  EXPECT_THAT(error, HasSubstr(file + " (TensorWatchHook, 1 failure)"));
  EXPECT_TRUE(log.contains("ERR TensorWatchHook: cannot write " + file + ": "));
  EXPECT_TRUE(
      log.contains("ERR TensorWatchHook: Tensor 'cost' failed has_inf_or_nan at "
                   "global_step=2 (epoch 1, local step 1); the step's tensors were not "
                   "written: "));
  EXPECT_TRUE(debug->watch().dumps().empty());
}

TEST_F(LocalDebugHookTest, AWatchedNameTheStepDoesNotPublishStopsTraining) {
  StepTrainer trainer;
  trainer.step = [](StepContext& ctx, int64_t gs) { watched_step(ctx, gs, -1); };
  auto debug = std::make_shared<LocalDebugHook>(LocalDebugHookOptions().names({"nope"}));
  EXPECT_THAT(message_of<std::invalid_argument>([&] { trainer.train({debug}, {}, 3, 1, 1); }),
              HasSubstr("Callback LocalDebugHook asked for the tensor 'nope', but the step does "
                        "not publish it. Names the step publishes: 'cost', 'n', 'w'"));
}

}  // namespace hooks_test
}  // namespace trainpack
