// Callback base class, ProxyCallback, CallbackFactory, the Callbacks group and its dispatch
// lists, CallbackTimeLogger, RunOp and RunUpdateOps.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "trainpack/callbacks/graph.h"
#include "trainpack/core/callback_group.h"
#include "trainpack/core/graph.h"
#include "trainpack/testing.h"

namespace trainpack {
namespace base_test {

using ::testing::HasSubstr;
using testing::LogCapture;
using testing::run_noop;
using testing::Trace;
using testing::TraceCallback;

// ---- override detection: the per-hook dispatch lists ----

class OnlyTriggerStep : public Callback {
 protected:
  void _trigger_step() override {}
};
class OnlyTrigger : public Callback {
 protected:
  void _trigger() override {}
};
class CallsBase : public Callback {
 protected:
  void _before_epoch() override { Callback::_before_epoch(); }
};
class Grandchild : public OnlyTriggerStep {
 protected:
  void _after_train() override {}
};
class Idle : public Callback {};

TEST(CallbackOverrides, DetectsExactlyTheOverriddenHooks) {
  OnlyTriggerStep a;
  EXPECT_TRUE(a.overrides(Hook::kTriggerStep));
  for (Hook h : {Hook::kSetupGraph, Hook::kBeforeTrain, Hook::kBeforeEpoch, Hook::kBeforeRun,
                 Hook::kAfterRun, Hook::kAfterEpoch, Hook::kTriggerEpoch, Hook::kTrigger,
                 Hook::kAfterTrain}) {
    EXPECT_FALSE(a.overrides(h)) << hook_name(h);
  }
}

TEST(CallbackOverrides, AnOverriddenTriggerPutsTheCallbackInTheTriggerEpochList) {
  OnlyTrigger t;
  EXPECT_TRUE(t.overrides(Hook::kTrigger));
  EXPECT_TRUE(t.overrides(Hook::kTriggerEpoch));  // the default _trigger_epoch calls trigger()
}

TEST(CallbackOverrides, AnOverrideThatCallsTheBaseIsStillAnOverride) {
  EXPECT_TRUE(CallsBase().overrides(Hook::kBeforeEpoch));
}

TEST(CallbackOverrides, InheritedOverridesCount) {
  Grandchild g;
  EXPECT_TRUE(g.overrides(Hook::kTriggerStep));
  EXPECT_TRUE(g.overrides(Hook::kAfterTrain));
  EXPECT_FALSE(g.overrides(Hook::kBeforeRun));
}

TEST(CallbacksGroup, DispatchesEachHookOnlyToTheCallbacksThatOverrideIt) {
  NoOpTrainer trainer;
  auto idle = std::make_shared<Idle>();
  auto step = std::make_shared<OnlyTriggerStep>();
  auto trig = std::make_shared<OnlyTrigger>();
  Callbacks group({idle, step, trig});
  group.setup_graph(trainer);
  EXPECT_EQ(group.dispatch_list(Hook::kTriggerStep), (std::vector<Callback*>{step.get()}));
  EXPECT_EQ(group.dispatch_list(Hook::kTriggerEpoch), (std::vector<Callback*>{trig.get()}));
  EXPECT_TRUE(group.dispatch_list(Hook::kBeforeRun).empty());
  EXPECT_TRUE(group.dispatch_list(Hook::kAfterRun).empty());
  EXPECT_TRUE(group.dispatch_list(Hook::kBeforeEpoch).empty());
}

TEST(CallbacksGroup, ANullCallbackIsAnError) {
  EXPECT_THROW(Callbacks({nullptr}), std::invalid_argument);
}

TEST(CallbacksGroup, ASetupGraphFailureNamesTheCallback) {
  class BadSetup : public Callback {
   protected:
    void _setup_graph() override { throw std::runtime_error("no such tensor"); }
  };
  try {
    run_noop({std::make_shared<BadSetup>()}, 1, 1, 1);
    FAIL();
  } catch (const CallbackError& e) {
    EXPECT_STREQ(e.what(), "Callback BadSetup failed in setup_graph: no such tensor");
  }
}

TEST(CallbackTimeLogger, SaysNothingUnderTwoSeconds) {
  CallbackTimeLogger t;
  t.add("A", 1.5);
  t.add("B", 0.4);
  EXPECT_EQ(t.message(), "");
}

TEST(CallbackTimeLogger, NamesCallbacksOverThirtyPercentAndOneSecond) {
  CallbackTimeLogger t;
  t.add("ModelSaver", 1.5);
  t.add("InferenceRunner", 2.25);
  t.add("Small", 0.9);
  t.add("Tiny", 0.1);
  EXPECT_EQ(t.total(), 4.75);
  EXPECT_EQ(t.message(),
            "Callbacks took 4.750 sec in total. ModelSaver: 1.5 seconds; InferenceRunner: 2.25 "
            "seconds");
}

TEST(CallbackTimeLogger, EndsWithInTotalWhenNoneQualifies) {
  CallbackTimeLogger t;
  for (int i = 0; i < 5; ++i) t.add("c" + std::to_string(i), 0.5);
  EXPECT_EQ(t.message(), "Callbacks took 2.500 sec in total. ");
}

// ---- Callback basics ----

TEST(Callback, NameIsTheClassName) {
  EXPECT_EQ(Idle().name(), "Idle");
  EXPECT_EQ(TraceCallback(nullptr).name(), "TraceCallback");
}

TEST(Callback, NameScopeDefaultsToTheClassNameWithoutUnderscores) {
  class My_Callback_ : public Callback {};
  My_Callback_ c;
  EXPECT_EQ(c.name_scope(), "MyCallback");
  c.set_name_scope("custom");
  EXPECT_EQ(c.name_scope(), "custom");
}

TEST(Callback, OpsRegisteredInSetupGraphGetTheNameScope) {
  class Registers : public Callback {
   protected:
    void _setup_graph() override {
      graph().add_op("sync", [] {});
    }
  };
  NoOpTrainer trainer;
  trainer.setup_callbacks({std::make_shared<Registers>()}, {});
  EXPECT_TRUE(trainer.graph().has_op("Registers/sync"));
}

TEST(Callback, TrainerBeforeSetupIsAnErrorNamingTheCallback) {
  Idle c;
  try {
    c.trainer();
    FAIL();
  } catch (const std::logic_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("Callback Idle: trainer() was used before setup_graph()"));
  }
}

TEST(ProxyCallback, ForwardsEveryHookToTheInnerCallback) {
  auto direct = std::make_shared<Trace>();
  auto proxied = std::make_shared<Trace>();
  run_noop({std::make_shared<TraceCallback>(direct)}, 2, 1, 2);
  run_noop({std::make_shared<ProxyCallback>(std::make_shared<TraceCallback>(proxied))}, 2, 1, 2);
  EXPECT_EQ(*proxied, *direct);
}

TEST(ProxyCallback, NameAndChiefOnlyComeFromTheInnerCallback) {
  auto inner = std::make_shared<Idle>();
  inner->set_chief_only(false);
  ProxyCallback p(inner);
  EXPECT_EQ(p.name(), "Proxy-Idle");
  EXPECT_FALSE(p.chief_only());
}

TEST(ProxyCallback, TheInnerCallbackKeepsItsOwnNameScope) {
  class Registers : public Callback {
   protected:
    void _setup_graph() override {
      graph().add_op("op", [] {});
    }
  };
  NoOpTrainer trainer;
  trainer.setup_callbacks({std::make_shared<ProxyCallback>(std::make_shared<Registers>())}, {});
  EXPECT_TRUE(trainer.graph().has_op("Registers/op"));
}

TEST(CallbackFactory, CallsEachGivenFunctionWithItself) {
  auto trace = std::make_shared<Trace>();
  auto record = [trace](const char* what) {
    return [trace, what](CallbackFactory& self) {
      trace->push_back(testing::trace_line("", what, self.trainer()));
    };
  };
  run_noop({std::make_shared<CallbackFactory>(CallbackFactoryOptions()
                                                  .setup_graph(record("setup_graph"))
                                                  .before_train(record("before_train"))
                                                  .trigger(record("trigger"))
                                                  .after_train(record("after_train")))},
           1, 1, 2);
  EXPECT_EQ(*trace, (Trace{"setup_graph ep=0 ls=-1 gs=0", "before_train ep=0 ls=-1 gs=0",
                           "trigger ep=1 ls=0 gs=1", "trigger ep=2 ls=0 gs=2",
                           "after_train ep=2 ls=0 gs=2"}));
}

TEST(CallbackFactory, NameListsTheGivenFunctionsAndItIsChiefOnly) {
  CallbackFactory f(
      CallbackFactoryOptions().before_train([](CallbackFactory&) {}).trigger([](CallbackFactory&) {
      }));
  EXPECT_EQ(f.name(), "CallbackFactory(before_train, trigger)");
  EXPECT_TRUE(f.chief_only());
}

// ---- RunOp / RunUpdateOps ----

TEST(RunOp, RunsBeforeTrainAndAtEveryTriggerByDefault) {
  auto trace = std::make_shared<Trace>();
  Trainer* current = nullptr;
  auto op =
      std::make_shared<RunOp>([&] { trace->push_back(testing::trace_line("", "op", *current)); });
  NoOpTrainer trainer;
  current = &trainer;
  trainer.set_handle_signals(false);
  trainer.train({op}, {}, 2, 1, 2);
  EXPECT_EQ(*trace, (Trace{"op ep=0 ls=-1 gs=0", "op ep=1 ls=1 gs=2", "op ep=2 ls=1 gs=4"}));
  EXPECT_FALSE(op->chief_only());
}

TEST(RunOp, RunStepRunsTheOpWithEveryHookedRun) {
  int runs = 0;
  run_noop(
      {std::make_shared<RunOp>(
          [&] { ++runs; }, RunOpOptions().run_before(false).run_as_trigger(false).run_step(true))},
      3, 1, 2);
  EXPECT_EQ(runs, 6);
}

TEST(RunOp, ResolvesANamedGraphOpAtSetupAndLogsWhenVerbose) {
  int runs = 0;
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.graph().add_op("reset", [&] { ++runs; });
  LogCapture log;
  trainer.train({std::make_shared<RunOp>("reset", RunOpOptions().verbose(true))}, {}, 1, 1, 2);
  EXPECT_EQ(runs, 3);  // before_train + 2 epochs
  EXPECT_TRUE(log.contains("Running Op reset ..."));
}

TEST(RunOp, AnUnknownOpNameListsTheOpsThatExist) {
  NoOpTrainer trainer;
  trainer.graph().add_op("reset", [] {});
  try {
    trainer.setup_callbacks({std::make_shared<RunOp>("rest")}, {});
    FAIL();
  } catch (const CallbackError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'rest' is not an op in the graph"));
    EXPECT_THAT(e.what(), HasSubstr("Ops that exist: 'reset'"));
  }
}

TEST(RunOp, AnEmptyOpIsAnError) {
  EXPECT_THROW(RunOp(RunOp::Op()), std::invalid_argument);
  EXPECT_THROW(RunOp(std::string()), std::invalid_argument);
}

TEST(RunUpdateOps, RunsTheUpdateOpsCollectionWithEveryStep) {
  int updates = 0;
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.graph().add_to_collection(Graph::kUpdateOps, [&] { ++updates; });
  trainer.graph().add_to_collection(Graph::kUpdateOps, [&] { updates += 10; });
  LogCapture log;
  trainer.train({std::make_shared<RunUpdateOps>()}, {}, 2, 1, 2);
  EXPECT_EQ(updates, 44);
  EXPECT_TRUE(log.contains("Applying collection UPDATE_OPS of 2 ops."));
}

TEST(RunUpdateOps, AnEmptyCollectionRunsNothingAndLogsNothing) {
  LogCapture log;
  run_noop({std::make_shared<RunUpdateOps>()}, 2, 1, 1);
  EXPECT_FALSE(log.contains("Applying collection"));
}

}  // namespace base_test
}  // namespace trainpack
