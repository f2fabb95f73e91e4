// Trainer::hooked_run: RunArgs from before_run, the step's published tensors, RunArgs ops, and
// after_run with the values from that same step.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "support/step_trainer.h"
#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"

namespace trainpack {
namespace hooked_run_test {

using ::testing::HasSubstr;
using testing::Trace;
using testing::TwoRunTrainer;

// Publishes "step" (the global step before the increment, as a tensor) and "twice" each step.
class PublishingTrainer : public Trainer {
 public:
  int64_t steps_computed = 0;
  std::shared_ptr<Trace> trace;
  void run_step() override {
    hooked_run([this](StepContext& ctx) {
      ++steps_computed;
      if (trace) trace->push_back("step");
      ctx.publish("step", at::full({}, static_cast<double>(global_step())));
      ctx.publish("twice", at::full({}, 2.0 * global_step()));
    });
  }
};

// Asks for `names` every step and records what it gets.
class Fetcher : public Callback {
 public:
  explicit Fetcher(std::vector<std::string> names, std::shared_ptr<Trace> trace)
      : args_(std::move(names)), trace_(std::move(trace)) {}
  std::vector<std::pair<int64_t, std::vector<double>>> seen;

 protected:
  RunArgs _before_run(const StepContext&) override {
    if (trace_) trace_->push_back("before_run");
    return RunArgs::ref(args_);
  }
  void _after_run(const StepContext&, const RunValues& values) override {
    if (trace_) trace_->push_back("after_run");
    std::vector<double> got;
    for (size_t i = 0; i < values.size(); ++i) got.push_back(values[i].item<double>());
    seen.emplace_back(global_step(), got);
  }
  RunArgs args_;
  std::shared_ptr<Trace> trace_;
};

TEST(HookedRun, AfterRunGetsTheTensorsOfThatSameStep) {
  PublishingTrainer trainer;
  trainer.set_handle_signals(false);
  auto fetcher = std::make_shared<Fetcher>(std::vector<std::string>{"twice", "step"}, nullptr);
  trainer.train({fetcher}, {}, 3, 1, 1);
  using Seen = std::vector<std::pair<int64_t, std::vector<double>>>;
  // after_run runs after the step counter (registered first): gs is already incremented.
  EXPECT_EQ(fetcher->seen, (Seen{{1, {0, 0}}, {2, {2, 1}}, {3, {4, 2}}}));
}

TEST(HookedRun, ValuesCanBeReadByName) {
  PublishingTrainer trainer;
  trainer.set_handle_signals(false);
  double last = -1;
  class ByName : public Callback {
   public:
    explicit ByName(double* out) : out_(out) {}

   protected:
    RunArgs _before_run(const StepContext&) override { return RunArgs({"twice"}); }
    void _after_run(const StepContext&, const RunValues& v) override {
      *out_ = v["twice"].item<double>();
      EXPECT_THROW(v["step"], std::out_of_range);  // not requested by this callback's step
    }
    double* out_;
  };
  trainer.train({std::make_shared<ByName>(&last)}, {}, 2, 1, 1);
  EXPECT_EQ(last, 2.0);
}

TEST(HookedRun, OrderIsBeforeRunsThenStepThenOpsThenAfterRuns) {
  auto trace = std::make_shared<Trace>();
  PublishingTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.trace = trace;
  class WithOp : public Callback {
   public:
    explicit WithOp(std::shared_ptr<Trace> t) : trace_(std::move(t)) {}

   protected:
    RunArgs _before_run(const StepContext&) override {
      trace_->push_back("before_run(op)");
      return RunArgs().add_op([t = trace_] { t->push_back("op"); });
    }
    void _after_run(const StepContext&, const RunValues& v) override {
      trace_->push_back("after_run(op) values=" + std::to_string(v.size()));
    }
    std::shared_ptr<Trace> trace_;
  };
  trainer.train({std::make_shared<Fetcher>(std::vector<std::string>{"step"}, trace),
                 std::make_shared<WithOp>(trace)},
                {}, 1, 1, 1);
  EXPECT_EQ(*trace, (Trace{"before_run", "before_run(op)", "step", "op", "after_run",
                           "after_run(op) values=0"}));
}

TEST(HookedRun, AnUnpublishedNameIsAnErrorNamingTheCallbackAndListingWhatExists) {
  PublishingTrainer trainer;
  trainer.set_handle_signals(false);
  try {
    trainer.train({std::make_shared<Fetcher>(std::vector<std::string>{"cost"}, nullptr)}, {}, 2, 1,
                  1);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("Callback Fetcher asked for the tensor 'cost'"));
    EXPECT_THAT(e.what(), HasSubstr("'step', 'twice'"));
  }
  EXPECT_EQ(trainer.steps_computed, 1);  // caught at the first step
}

TEST(HookedRun, NoOpTrainerPublishesNothingSoAnyFetchFails) {
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  try {
    trainer.train({std::make_shared<Fetcher>(std::vector<std::string>{"x"}, nullptr)}, {}, 1, 1, 1);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr("Names the step publishes: (none)"));
  }
}

TEST(HookedRun, CallbacksRegisteredBeforeTheStepCounterSeeTheOldStepInAfterRun) {
  class EarlyTrainer : public NoOpTrainer {
   public:
    explicit EarlyTrainer(CallbackPtr early) { register_callback(std::move(early)); }
  };
  auto early_trace = std::make_shared<Trace>();
  auto late_trace = std::make_shared<Trace>();
  EarlyTrainer trainer(std::make_shared<testing::TraceCallback>(early_trace, "early"));
  trainer.set_handle_signals(false);
  trainer.train({std::make_shared<testing::TraceCallback>(late_trace, "late")}, {}, 1, 1, 1);
  EXPECT_THAT(*early_trace, ::testing::Contains("early:after_run ep=1 ls=0 gs=0"));
  EXPECT_THAT(*late_trace, ::testing::Contains("late:after_run ep=1 ls=0 gs=1"));
  EXPECT_THAT(*early_trace, ::testing::Contains("early:trigger_step ep=1 ls=0 gs=1"));
}

TEST(HookedRun, TwoHookedRunsPerStepAdvanceTheGlobalStepTwice) {
  TwoRunTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train({}, {}, 3, 1, 2);
  EXPECT_EQ(trainer.global_step(), 12);
  EXPECT_EQ(trainer.local_step(), 2);
}

TEST(HookedRun, AHookedRunAfterAStopRequestIsAnError) {
  class Careless : public Trainer {
    void run_step() override {
      hooked_run([](StepContext& ctx) { ctx.request_stop(); });
      hooked_run([](StepContext&) {});
    }
  };
  Careless trainer;
  trainer.set_handle_signals(false);
  try {
    trainer.train({}, {}, 3, 1, 1);
    FAIL() << "expected an error";
  } catch (const std::logic_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("hooked_run called even after a stop was requested"));
  }
}

TEST(HookedRun, APlainCallOfTheOpRunsNoHooks) {
  class Plain : public Trainer {
    void run_step() override {
      auto op = [](StepContext&) {};
      StepContext ctx(*this);
      op(ctx);  // no hooked_run: no before_run, no after_run, no step increment
    }
  };
  auto trace = std::make_shared<Trace>();
  Plain trainer;
  trainer.set_handle_signals(false);
  trainer.train({std::make_shared<testing::TraceCallback>(trace)}, {}, 2, 1, 1);
  EXPECT_EQ(trainer.global_step(), 0);
  for (const auto& line : *trace) EXPECT_THAT(line, ::testing::Not(HasSubstr("_run")));
}

}  // namespace hooked_run_test
}  // namespace trainpack
