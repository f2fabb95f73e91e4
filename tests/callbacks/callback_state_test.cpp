// Resumable state of callbacks: for each callback with a state, a run split in two (the
// second half built from fresh callbacks given load_state() of what the first half's state()
// returned, and the first half's resume point) sets, logs and puts exactly what an uninterrupted
// run of the same length does; and a state that does not fit is refused with a message naming
// the callback and the entry.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "support/errors.h"
#include "support/temp_dir.h"
#include "support/tower_function_trainer.h"
#include "trainpack/callbacks/misc.h"
#include "trainpack/callbacks/param.h"
#include "trainpack/callbacks/summary.h"
#include "trainpack/core/callback_state.h"
#include "trainpack/core/monitor_base.h"
#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"
#include "trainpack/train/tower.h"
#include "trainpack/utils/logger.h"

namespace trainpack {
namespace callback_state_test {

using testing::ActionCallback;
using ::testing::HasSubstr;
using testing::message_of;
using testing::TowerFunctionTrainer;

// ---- harness ----

// The log lines (any level) that contain one of `parts`, with "WRN " before warnings.
class Lines {
 public:
  explicit Lines(std::vector<std::string> parts) : parts_(std::move(parts)) {
    id_ = logger::add_sink([this](logger::Level level, std::string_view msg) {
      for (const auto& p : parts_) {
        if (msg.find(p) != std::string_view::npos) {
          lines.push_back((level == logger::Level::kWarning ? "WRN " : "") + std::string(msg));
          return;
        }
      }
    });
  }
  ~Lines() { logger::remove_sink(id_); }
  Lines(const Lines&) = delete;
  Lines& operator=(const Lines&) = delete;
  std::vector<std::string> lines;

 private:
  std::vector<std::string> parts_;
  int id_;
};

// What a checkpoint holds for these tests: every callback's state and where to continue.
struct Saved {
  std::vector<CallbackState> states;
  ResumePoint point;
};

// Requests a stop after the step that ends at global step `gs`.
CallbackPtr stop_at(int64_t gs) {
  auto cb = std::make_shared<ActionCallback>();
  cb->trigger_step_fn = [gs](ActionCallback& self) {
    if (self.global_step() == gs) self.trainer().request_stop();
  };
  return cb;
}

// Trains `callbacks` on `trainer` up to `max_epoch` (from `from` when given: each callback gets
// load_state() of its saved state after setup_graph, and the trainer the resume point, as a
// restoring SessionInit does), and returns what a checkpoint taken at the end would hold.
Saved run(Trainer& trainer, const std::vector<CallbackPtr>& callbacks,
          const std::vector<MonitorPtr>& monitors, int64_t steps_per_epoch, int64_t max_epoch,
          const std::optional<Saved>& from = std::nullopt) {
  trainer.set_handle_signals(false);
  trainer.setup_callbacks(callbacks, monitors);
  if (from) {
    for (size_t i = 0; i < callbacks.size(); ++i) callbacks[i]->load_state(from->states[i]);
    trainer.set_resume_point(from->point);
  }
  trainer.initialize();
  trainer.main_loop(steps_per_epoch, 1, max_epoch);
  Saved saved;
  for (const auto& cb : callbacks) saved.states.push_back(cb->state());
  saved.point = trainer.resume_point();
  return saved;
}

void expect_same_state(const CallbackState& a, const CallbackState& b) {
  ASSERT_EQ(a.size(), b.size());
  for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib) {
    EXPECT_EQ(ia->first, ib->first);
    EXPECT_EQ(ia->second.scalar_type(), ib->second.scalar_type()) << ia->first;
    EXPECT_TRUE(ia->second.sizes().equals(ib->second.sizes())) << ia->first;
    EXPECT_TRUE(at::equal(ia->second, ib->second))
        << ia->first << ": " << ia->second << " vs " << ib->second;
  }
}

// A param in plain memory (an ObjAttrParam: in no checkpoint but its setter's state), and a
// callback that records its value after every step and epoch: (global_step, value).
struct Param {
  double value = 1.0;
  HyperParamPtr make() {
    return std::make_shared<ObjAttrParam>([this] { return value; }, [this](double v) { value = v; },
                                          "param");
  }
};
using Trajectory = std::vector<std::pair<int64_t, double>>;

CallbackPtr record_param(const Param& p, Trajectory* out) {
  auto cb = std::make_shared<ActionCallback>();
  cb->trigger_step_fn = [&p, out](ActionCallback& self) {
    out->emplace_back(self.global_step(), p.value);
  };
  cb->trigger_epoch_fn = cb->trigger_step_fn;
  return cb;
}

// Puts `values[epoch]` into the monitors under `name` at the end of each listed epoch.
CallbackPtr stat_producer(std::string name, std::map<int64_t, double> values) {
  auto cb = std::make_shared<ActionCallback>();
  cb->trigger_fn = [name, values](ActionCallback& self) {
    auto it = values.find(self.epoch_num());
    if (it != values.end()) self.trainer().monitors().put_scalar(name, it->second);
  };
  return cb;
}

// A setter experiment: `make(param)` builds the callbacks of a run (the setter and whatever it
// needs) around a fresh param; the trajectory recorder is appended.
struct SetterRuns {
  std::function<std::vector<CallbackPtr>(Param&)> make;
  std::vector<std::string> log_parts = {"[HyperParamSetter]", "According to scheduler",
                                        "[StatMonitorParamSetter]", "Setting '"};
  int64_t steps_per_epoch = 2;
  int64_t max_epoch = 6;
  size_t setter_index = 0;  // in what `make` returns

  struct Result {
    Trajectory trajectory;
    std::vector<std::string> lines;
    CallbackState final_state;  // of the setter
  };

  Result uninterrupted() {
    Param p;
    Result r;
    Lines lines(log_parts);
    auto cbs = make(p);
    cbs.push_back(record_param(p, &r.trajectory));
    NoOpTrainer trainer;
    r.final_state = run(trainer, cbs, {}, steps_per_epoch, max_epoch).states[setter_index];
    r.lines = lines.lines;
    return r;
  }

  // Stopped after epoch `split_epoch` (or, with stop_gs, after that global step), then resumed
  // in a new trainer with new callbacks and a new param (at its initial value), with the states
  // when `with_state`.
  Result split(int64_t split_epoch, std::optional<int64_t> stop_gs = std::nullopt,
               bool with_state = true) {
    Result r;
    Lines lines(log_parts);
    Saved saved;
    {
      Param p;
      auto cbs = make(p);
      cbs.push_back(record_param(p, &r.trajectory));
      cbs.push_back(stop_at(stop_gs ? *stop_gs : split_epoch * steps_per_epoch));
      NoOpTrainer trainer;
      saved = run(trainer, cbs, {}, steps_per_epoch, max_epoch);
      saved.states.pop_back();
    }
    if (!with_state) {
      for (auto& s : saved.states) s.clear();
    }
    Param p;
    auto cbs = make(p);
    cbs.push_back(record_param(p, &r.trajectory));
    NoOpTrainer trainer;
    trainer.setup_callbacks(cbs, {});
    for (size_t i = 0; i < cbs.size(); ++i) {
      if (!saved.states[i].empty()) cbs[i]->load_state(saved.states[i]);
    }
    trainer.set_handle_signals(false);
    trainer.set_resume_point(saved.point);
    trainer.initialize();
    trainer.main_loop(steps_per_epoch, 1, max_epoch);
    r.final_state = cbs[setter_index]->state();
    r.lines = lines.lines;
    return r;
  }
};

// ---- hyper-parameter setters ----

TEST(CallbackState, ScheduledHyperParamSetterResumedAtAnEpochEndSetsAndLogsAsAnUninterruptedRun) {
  SetterRuns runs;
  runs.make = [](Param& p) -> std::vector<CallbackPtr> {
    return {std::make_shared<ScheduledHyperParamSetter>(
        p.make(), ScheduledHyperParamSetter::Schedule{{0, 0.1}, {2, 0.01}, {3, 0.005}, {5, 1e-3}})};
  };
  const auto full = runs.uninterrupted();
  EXPECT_EQ(full.lines, (std::vector<std::string>{
                            "[HyperParamSetter] At global_step=0, param is set to 0.100000",
                            "[HyperParamSetter] At global_step=4, param changes from 0.100000 to "
                            "0.010000",
                            "[HyperParamSetter] At global_step=6, param changes from 0.010000 to "
                            "0.005000",
                            "[HyperParamSetter] At global_step=10, param changes from 0.005000 to "
                            "0.001000",
                        }));
  for (int64_t split : {1, 2, 3, 4}) {
    SCOPED_TRACE(split);
    const auto resumed = runs.split(split);
    EXPECT_EQ(resumed.lines, full.lines);
    EXPECT_EQ(resumed.trajectory, full.trajectory);
    expect_same_state(resumed.final_state, full.final_state);
  }
  // Without the state, the resumed run starts from the param's initial value (an ObjAttrParam is
  // in no checkpoint) and logs the value of the current point as new: the test can tell.
  const auto stateless = runs.split(3, std::nullopt, /*with_state=*/false);
  EXPECT_NE(stateless.lines, full.lines);
}

TEST(CallbackState, StepBasedScheduleResumedMidEpochSetsAndLogsAsAnUninterruptedRun) {
  SetterRuns runs;
  runs.steps_per_epoch = 4;
  runs.max_epoch = 4;
  runs.make = [](Param& p) -> std::vector<CallbackPtr> {
    return {std::make_shared<ScheduledHyperParamSetter>(
        p.make(), ScheduledHyperParamSetter::Schedule{{3, 1.0}, {9, 4.0}, {13, 2.0}},
        ScheduledHyperParamSetterOptions().step_based(true).interp("linear"))};
  };
  const auto full = runs.uninterrupted();
  ASSERT_EQ(full.lines.size(), 4u);  // at most once per epoch: gs 3, 5, 9, 13
  for (int64_t stop : {3, 5, 6, 9, 10}) {
    SCOPED_TRACE(stop);
    const auto resumed = runs.split(0, stop);
    EXPECT_EQ(resumed.lines, full.lines);
    EXPECT_EQ(resumed.trajectory, full.trajectory);
    expect_same_state(resumed.final_state, full.final_state);
  }
}

TEST(CallbackState, HumanHyperParamSetterDoesNotReportAValueItAlreadyApplied) {
  const testing::ScopedTempDir dir("callback_state");
  const std::string file = (dir.path() / "hyper.txt").string();
  std::ofstream(file) << "param: 0.25\n";
  SetterRuns runs;
  runs.make = [file](Param& p) -> std::vector<CallbackPtr> {
    return {std::make_shared<HumanHyperParamSetter>(p.make(), file)};
  };
  const auto full = runs.uninterrupted();
  EXPECT_EQ(
      full.lines,
      (std::vector<std::string>{"[HyperParamSetter] At global_step=0, param is set to 0.250000"}));
  const auto resumed = runs.split(2);
  EXPECT_EQ(resumed.lines, full.lines);  // no second "is set to 0.25" at the resume
  EXPECT_EQ(resumed.trajectory, full.trajectory);
  expect_same_state(resumed.final_state, full.final_state);
  EXPECT_EQ(resumed.final_state.at("last_value").item<double>(), 0.25);

  // A value changed while the run was down is reported as a change from the applied one.
  Lines lines({"[HyperParamSetter]"});
  Param p;
  auto setter = std::make_shared<HumanHyperParamSetter>(p.make(), file);
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.setup_callbacks({setter}, {});
  setter->load_state(resumed.final_state);
  std::ofstream(file) << "param: 0.5\n";
  trainer.initialize();
  trainer.main_loop(2, 7, 7);
  EXPECT_EQ(lines.lines, (std::vector<std::string>{"[HyperParamSetter] At global_step=0, param "
                                                   "changes from 0.250000 to 0.500000"}));
}

TEST(CallbackState, HyperParamSetterWithFuncContinuesFromTheSavedValue) {
  SetterRuns runs;
  runs.make = [](Param& p) -> std::vector<CallbackPtr> {
    return {std::make_shared<HyperParamSetterWithFunc>(
        p.make(), [](int64_t e, double x) { return e % 2 == 0 ? x * 0.5 : x; })};
  };
  const auto full = runs.uninterrupted();
  // At an epoch end (before_train of the resumed run does not apply func(2, x) a second time),
  // and mid-epoch (global steps 3 and 7: nor func(1, x), func(3, x)).
  for (auto [split, stop] : std::vector<std::pair<int64_t, std::optional<int64_t>>>{
           {1, std::nullopt}, {2, std::nullopt}, {5, std::nullopt}, {0, 3}, {0, 7}}) {
    SCOPED_TRACE(stop ? *stop : split * 100);
    const auto resumed = runs.split(split, stop);
    EXPECT_EQ(resumed.trajectory, full.trajectory);
    EXPECT_EQ(resumed.lines, full.lines);
    expect_same_state(resumed.final_state, full.final_state);
  }
  // Without the state, the function decays the initial value again.
  EXPECT_NE(runs.split(2, std::nullopt, /*with_state=*/false).trajectory, full.trajectory);
}

TEST(CallbackState, StatMonitorParamSetterKeepsItsHistoryAcrossAResume) {
  SetterRuns runs;
  runs.max_epoch = 9;
  runs.setter_index = 1;  // after the producer: it sees the value of the same epoch
  runs.make = [](Param& p) -> std::vector<CallbackPtr> {
    return {stat_producer("val-error", {{1, 1.0},
                                        {2, 0.9},
                                        {3, 0.95},
                                        {4, 0.92},
                                        {5, 0.97},
                                        {6, 0.99},
                                        {7, 0.5},
                                        {8, 0.6},
                                        {9, 0.7}}),
            std::make_shared<StatMonitorParamSetter>(
                p.make(), "val-error", [](double x) { return x * 0.5; }, 0.0, 3)};
  };
  const auto full = runs.uninterrupted();
  // Triggered after epochs 4 (0.9, 0.95, 0.92) and 9 (0.5, 0.6, 0.7).
  ASSERT_EQ(full.lines.size(), 4u);
  EXPECT_EQ(full.lines[0],
            "[StatMonitorParamSetter] Triggered, history of val-error: 0.9,0.95,0.92");
  for (int64_t split : {1, 2, 4, 5, 7}) {
    SCOPED_TRACE(split);
    const auto resumed = runs.split(split);
    EXPECT_EQ(resumed.lines, full.lines);
    EXPECT_EQ(resumed.trajectory, full.trajectory);
    expect_same_state(resumed.final_state, full.final_state);
  }
  EXPECT_NE(runs.split(2, std::nullopt, /*with_state=*/false).lines, full.lines);
}

TEST(CallbackState, HyperParamSetterStateRoundTripsThroughLoadState) {
  Param p;
  auto a = std::make_shared<StatMonitorParamSetter>(
      p.make(), "e", [](double x) { return x; }, 0.0, 2);
  // Before training: only the counters and the value (no last value).
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.setup_callbacks({a}, {});
  const CallbackState s = a->state();
  EXPECT_EQ(s.count("last_value"), 0u);
  EXPECT_EQ(s.at("last_epoch_set").item<int64_t>(), -1);
  EXPECT_EQ(s.at("value").item<double>(), 1.0);
  EXPECT_EQ(s.at("history_steps").numel(), 0);

  CallbackState t = s;
  t["history_steps"] = at::tensor(std::vector<int64_t>{3, 6, 9}, at::kLong);
  t["history_values"] = at::tensor(std::vector<double>{0.5, 0.4, 0.3}, at::kDouble);
  t["last_value"] = at::scalar_tensor(2.0, at::kDouble);
  t["value"] = at::scalar_tensor(3.0, at::kDouble);
  Param q;
  auto b = std::make_shared<StatMonitorParamSetter>(
      q.make(), "e", [](double x) { return x; }, 0.0, 2);
  NoOpTrainer trainer2;
  trainer2.setup_callbacks({b}, {});
  b->load_state(t);
  EXPECT_EQ(q.value, 3.0);  // an ObjAttrParam takes the saved value
  const CallbackState u = b->state();
  // A history longer than last_k keeps its last last_k observations.
  EXPECT_TRUE(at::equal(u.at("history_steps"), at::tensor(std::vector<int64_t>{6, 9}, at::kLong)));
  EXPECT_TRUE(
      at::equal(u.at("history_values"), at::tensor(std::vector<double>{0.4, 0.3}, at::kDouble)));
  EXPECT_EQ(u.at("last_value").item<double>(), 2.0);
}

TEST(CallbackState, GraphVariableParamIsLeftToTheCheckpoint) {
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  double lr = 0.1;
  auto setter = std::make_shared<ScheduledHyperParamSetter>(
      "lr", ScheduledHyperParamSetter::Schedule{{0, 0.1}});
  trainer.graph().add_variable(
      "lr", [&lr] { return lr; }, [&lr](double v) { lr = v; });
  trainer.setup_callbacks({setter}, {});
  CallbackState s = setter->state();
  s["value"] = at::scalar_tensor(0.7, at::kDouble);
  setter->load_state(s);
  EXPECT_EQ(lr, 0.1);  // restored with the Graph variables, not by the setter
}

TEST(CallbackState, SetterStateThatDoesNotFitNamesTheCallbackAndTheEntry) {
  Param p;
  auto setter = std::make_shared<ScheduledHyperParamSetter>(
      p.make(), ScheduledHyperParamSetter::Schedule{{0, 0.1}});
  NoOpTrainer trainer;
  trainer.setup_callbacks({setter}, {});
  const CallbackState good = setter->state();
  const std::string who = "ScheduledHyperParamSetter(schedule=[(0, 0.1)])";

  CallbackState missing = good;
  missing.erase("last_epoch_set");
  EXPECT_EQ(message_of<std::invalid_argument>([&] { setter->load_state(missing); }),
            who +
                ": the saved state has no entry 'last_epoch_set'; it was not saved by this "
                "callback (a different callback of the same name, or another version)");

  CallbackState wrong_type = good;
  wrong_type["last_epoch_set"] = at::scalar_tensor(1.5, at::kDouble);
  EXPECT_EQ(message_of<std::invalid_argument>([&] { setter->load_state(wrong_type); }),
            who +
                ": the saved state entry 'last_epoch_set' should be a 0-d int64 tensor, but it is "
                "a 0-d Double tensor");

  CallbackState wrong_shape = good;
  wrong_shape["value"] = at::ones({2}, at::kDouble);
  EXPECT_THAT(message_of<std::invalid_argument>([&] { setter->load_state(wrong_shape); }),
              HasSubstr("entry 'value' should be a 0-d float64 tensor, but it is a 1-d Double"));

  CallbackState unknown = good;
  unknown["best"] = at::scalar_tensor(1.0, at::kDouble);
  EXPECT_EQ(message_of<std::invalid_argument>([&] { setter->load_state(unknown); }),
            who +
                ": the saved state has an entry 'best' that this callback does not save (its "
                "entries: last_value, last_epoch_set, applied_epoch, value); it comes from a "
                "different callback of the same name, or another version");

  // Nothing was changed by the refused states.
  expect_same_state(setter->state(), good);

  auto stat = std::make_shared<StatMonitorParamSetter>(
      p.make(), "e", [](double x) { return x; }, 0.0, 2);
  NoOpTrainer trainer2;
  trainer2.setup_callbacks({stat}, {});
  CallbackState lengths = stat->state();
  lengths["history_steps"] = at::tensor(std::vector<int64_t>{1, 2}, at::kLong);
  EXPECT_EQ(message_of<std::invalid_argument>([&] { stat->load_state(lengths); }),
            "StatMonitorParamSetter: the saved state entries 'history_steps' and "
            "'history_values' should have the same length, but have 2 and 0");
}

// ---- EstimatedTimeLeft ----

TEST(CallbackState, EstimatedTimeLeftEstimatesFromTheEpochsBeforeTheResume) {
  // A clock that the epoch-end of a callback before EstimatedTimeLeft advances by the epoch's
  // duration; the time of the interruption is not counted (the clock stands still meanwhile).
  const std::map<int64_t, double> seconds = {{1, 100}, {2, 200}, {3, 1000}, {4, 300},
                                             {5, 400}, {6, 50},  {7, 60},   {8, 70}};
  auto clock = std::make_shared<double>(0.0);
  auto make = [&]() -> std::vector<CallbackPtr> {
    auto tick = std::make_shared<ActionCallback>();
    tick->trigger_epoch_fn = [clock, &seconds](ActionCallback& self) {
      *clock += seconds.at(self.epoch_num());
    };
    return {tick, std::make_shared<EstimatedTimeLeft>(3, true, [clock] { return *clock; })};
  };
  const int64_t max_epoch = 8;
  std::vector<std::string> full;
  {
    Lines lines({"Estimated Time Left"});
    NoOpTrainer trainer;
    run(trainer, make(), {}, 1, max_epoch);
    full = lines.lines;
  }
  ASSERT_EQ(full.size(), 7u);
  for (int64_t split : {1, 3, 5}) {
    SCOPED_TRACE(split);
    *clock = 0;
    Lines lines({"Estimated Time Left"});
    Saved saved;
    {
      NoOpTrainer trainer;
      auto cbs = make();
      cbs.push_back(stop_at(split));  // one step per epoch
      saved = run(trainer, cbs, {}, 1, max_epoch);
      saved.states.pop_back();
    }
    NoOpTrainer trainer;
    const Saved end = run(trainer, make(), {}, 1, max_epoch, saved);
    EXPECT_EQ(lines.lines, full);
    EXPECT_TRUE(at::equal(end.states[1].at("epoch_seconds"),
                          at::tensor(std::vector<double>{50, 60, 70}, at::kDouble)));
  }
}

TEST(CallbackState, EstimatedTimeLeftStateThatDoesNotFit) {
  EstimatedTimeLeft etl(2);
  EXPECT_EQ(message_of<std::invalid_argument>([&] {
              etl.load_state({{"epoch_seconds", at::ones({2, 2}, at::kDouble)}});
            }),
            "EstimatedTimeLeft: the saved state entry 'epoch_seconds' should be a 1-d float64 "
            "tensor, but it is a 2-d Double tensor");
  EXPECT_THAT(message_of<std::invalid_argument>([&] { etl.load_state({}); }),
              HasSubstr("EstimatedTimeLeft: the saved state has no entry 'epoch_seconds'"));
  // A longer history (last_k_epochs was larger) keeps its last last_k_epochs durations.
  etl.load_state({{"epoch_seconds", at::tensor(std::vector<double>{1, 2, 3}, at::kDouble)}});
  EXPECT_TRUE(at::equal(etl.state().at("epoch_seconds"),
                        at::tensor(std::vector<double>{2, 3}, at::kDouble)));
}

// ---- moving averages ----

// Deterministic, irregular values.
double value_at(int64_t gs, double salt) {
  return 0.5 + 0.3 * std::sin(static_cast<double>(gs) * 1.7 + salt) +
         0.01 * static_cast<double>(gs);
}

// Records the debiased averages after every hooked run (a callback after MovingAverageSummary
// sees the step's update in its after_run).
CallbackPtr record_averages(std::vector<std::vector<float>>* out) {
  auto cb = std::make_shared<ActionCallback>();
  cb->after_run_fn = [out](ActionCallback& self) {
    std::vector<float> row;
    for (const auto& m : self.trainer().tower_registry().moving_averages()) {
      row.push_back(m.average().item<float>());
    }
    out->push_back(row);
  };
  return cb;
}

TEST(CallbackState, MovingAverageSummaryResumedMidEpochContinuesEveryAverage) {
  auto tower = [](TowerContext& t, int64_t gs) {
    t.add_moving_summary("cost", at::full({}, value_at(gs, 0.0), at::kFloat));
    t.add_moving_summary("train/error", at::full({}, value_at(gs, 1.0), at::kDouble), 0.9);
  };
  const int64_t spe = 5;
  const int64_t max_epoch = 3;
  std::vector<std::vector<float>> full;
  CallbackState full_state;
  {
    TowerFunctionTrainer trainer;
    trainer.tower = tower;
    auto mas = std::make_shared<MovingAverageSummary>();
    full_state = run(trainer, {mas, record_averages(&full)}, {}, spe, max_epoch).states[0];
  }
  ASSERT_EQ(full.size(), 15u);
  EXPECT_EQ(full_state.at("updates/cost").item<int64_t>(), 15);
  EXPECT_EQ(full_state.at("decay/train/error").item<double>(), 0.9);
  EXPECT_EQ(full_state.at("biased/cost").scalar_type(), at::kDouble);

  for (int64_t stop : {1, 5, 7}) {
    SCOPED_TRACE(stop);
    std::vector<std::vector<float>> resumed;
    Saved saved;
    {
      TowerFunctionTrainer trainer;
      trainer.tower = tower;
      saved =
          run(trainer,
              {std::make_shared<MovingAverageSummary>(), record_averages(&resumed), stop_at(stop)},
              {}, spe, max_epoch);
    }
    TowerFunctionTrainer trainer;
    trainer.tower = tower;
    const Saved end = run(trainer,
                          {std::make_shared<MovingAverageSummary>(), record_averages(&resumed),
                           std::make_shared<ActionCallback>()},
                          {}, spe, max_epoch, saved);
    EXPECT_EQ(resumed, full);  // bitwise: the float32 averages continue exactly
    expect_same_state(end.states[0], full_state);
  }
}

TEST(CallbackState, RestoredMovingAveragesKeepTheTowersOrder) {
  TowerRegistry registry;
  registry.restore_moving_averages({{"a", 0.95, 1.0, 2}, {"b", 0.95, 2.0, 3}, {"c", 0.5, 3.0, 1}});
  // Not recorded yet: the state still holds them.
  EXPECT_EQ(registry.moving_average_states().size(), 3u);
  registry.record_moving("b", at::full({}, 1.0, at::kFloat), 0.95);
  registry.record_moving("a", at::full({}, 1.0, at::kFloat), 0.95);
  {
    testing::LogCapture log;
    registry.record_moving("c", at::full({}, 1.0, at::kFloat), 0.95);  // another decay
    EXPECT_TRUE(log.contains(
        "WRN MovingAverageSummary: the moving average 'c' was saved with decay 0.5, but the tower "
        "now uses decay 0.95; it starts again"));
  }
  ASSERT_EQ(registry.moving_averages().size(), 3u);
  EXPECT_EQ(registry.moving_averages()[0].name, "b");
  EXPECT_EQ(registry.moving_averages()[0].updates, 3);
  EXPECT_EQ(registry.moving_averages()[1].name, "a");
  EXPECT_EQ(registry.moving_averages()[1].biased.item<float>(), 1.0f);
  EXPECT_EQ(registry.moving_averages()[2].updates, 0);
  EXPECT_EQ(registry.update_moving_averages(), 3u);
  // b: biased 2 -> 0.95 * 2 + 0.05 * 1, t = 4.
  const auto states = registry.moving_average_states();
  ASSERT_EQ(states.size(), 3u);
  EXPECT_EQ(states[0].updates, 4);
  EXPECT_EQ(
      states[0].biased,
      static_cast<double>(
          at::full({}, 2.0, at::kFloat).lerp_(at::full({}, 1.0, at::kFloat), 0.05).item<float>()));
  EXPECT_EQ(states[2].updates, 1);  // c started again
}

TEST(CallbackState, MovingAverageSummaryStateThatDoesNotFit) {
  TowerFunctionTrainer trainer;
  auto mas = std::make_shared<MovingAverageSummary>();
  EXPECT_THROW(mas->load_state({}), std::logic_error);  // before setup_graph
  trainer.setup_callbacks({mas}, {});
  EXPECT_TRUE(mas->state().empty());
  EXPECT_EQ(message_of<std::invalid_argument>([&] {
              mas->load_state({{"updates/cost", at::scalar_tensor(int64_t{3}, at::kLong)}});
            }),
            "MovingAverageSummary: the saved state has an entry 'updates/cost' that this callback "
            "does not save (its entries: biased/<name>, updates/<name> and decay/<name> for each "
            "moving average)");
  EXPECT_THAT(message_of<std::invalid_argument>([&] {
                mas->load_state({{"biased/cost", at::scalar_tensor(1.0, at::kDouble)},
                                 {"updates/cost", at::scalar_tensor(int64_t{3}, at::kLong)}});
              }),
              HasSubstr("MovingAverageSummary: the saved state has no entry 'decay/cost'"));
  EXPECT_THAT(message_of<std::invalid_argument>([&] {
                mas->load_state({{"biased/cost", at::scalar_tensor(1.0, at::kDouble)},
                                 {"updates/cost", at::scalar_tensor(int64_t{0}, at::kLong)},
                                 {"decay/cost", at::scalar_tensor(0.95, at::kDouble)}});
              }),
              HasSubstr("the saved moving average 'cost' has updates 0 and decay 0.95"));
  // Another collection keeps no state, and accepts only an empty one.
  TowerFunctionTrainer trainer2;
  auto other = std::make_shared<MovingAverageSummary>("my_ops");
  trainer2.setup_callbacks({other}, {});
  EXPECT_TRUE(other->state().empty());
  EXPECT_THROW(other->load_state({{"biased/x", at::scalar_tensor(1.0, at::kDouble)}}),
               std::invalid_argument);
}

// Records every scalar put to the monitors: (name, global step, value).
class ScalarRecorder : public MonitorBase {
 public:
  std::vector<std::tuple<std::string, int64_t, double>> puts;
  void process_scalar(const std::string& name, double value) override {
    puts.emplace_back(name, global_step(), value);
  }
};

TEST(CallbackState, SimpleMovingAverageResumedMidWindowPutsTheSameMeans) {
  auto tower = [](TowerContext& t, int64_t gs) {
    t.output("cost", at::full({}, value_at(gs, 0.0), at::kFloat));
    t.output("acc", at::full({}, value_at(gs, 2.0), at::kDouble));
  };
  auto make = [] {
    return std::make_shared<SimpleMovingAverage>(std::vector<std::string>{"cost", "acc"}, 4);
  };
  const int64_t spe = 5;
  const int64_t max_epoch = 3;
  auto full = std::make_shared<ScalarRecorder>();
  CallbackState full_state;
  {
    TowerFunctionTrainer trainer;
    trainer.tower = tower;
    full_state = run(trainer, {make()}, {full}, spe, max_epoch).states[0];
  }
  ASSERT_EQ(full->puts.size(), 6u);  // gs 4, 8, 12 for both names
  EXPECT_EQ(full_state.at("rows").item<int64_t>(), 15);
  EXPECT_EQ(full_state.at("values/cost").numel(), 4);

  for (int64_t stop : {2, 4, 6, 9}) {
    SCOPED_TRACE(stop);
    auto first = std::make_shared<ScalarRecorder>();
    Saved saved;
    {
      TowerFunctionTrainer trainer;
      trainer.tower = tower;
      saved = run(trainer, {make(), stop_at(stop)}, {first}, spe, max_epoch);
    }
    auto second = std::make_shared<ScalarRecorder>();
    TowerFunctionTrainer trainer;
    trainer.tower = tower;
    const Saved end =
        run(trainer, {make(), std::make_shared<ActionCallback>()}, {second}, spe, max_epoch, saved);
    auto puts = first->puts;
    puts.insert(puts.end(), second->puts.begin(), second->puts.end());
    EXPECT_EQ(puts, full->puts);
    expect_same_state(end.states[0], full_state);
  }
}

TEST(CallbackState, SimpleMovingAverageStateAcrossWindowSizesAndMisfits) {
  auto values = [](std::vector<double> v) { return at::tensor(v, at::kDouble); };
  SimpleMovingAverage sma({"cost"}, 2);
  // Saved with window 4 after 6 rows: rows 2..5 kept; window 2 keeps the last two.
  sma.load_state(
      {{"rows", at::scalar_tensor(int64_t{6}, at::kLong)}, {"values/cost", values({2, 3, 4, 5})}});
  expect_same_state(sma.state(), {{"rows", at::scalar_tensor(int64_t{6}, at::kLong)},
                                  {"values/cost", values({4, 5})}});
  // Saved with window 2 after 6 rows, loaded with window 5: the two rows are all there is.
  SimpleMovingAverage wide({"cost"}, 5);
  wide.load_state(
      {{"rows", at::scalar_tensor(int64_t{6}, at::kLong)}, {"values/cost", values({4, 5})}});
  expect_same_state(wide.state(), {{"rows", at::scalar_tensor(int64_t{2}, at::kLong)},
                                   {"values/cost", values({4, 5})}});

  SimpleMovingAverage two({"cost", "acc"}, 3);
  EXPECT_THAT(message_of<std::invalid_argument>([&] {
                two.load_state({{"rows", at::scalar_tensor(int64_t{2}, at::kLong)},
                                {"values/cost", values({1, 2})}});
              }),
              HasSubstr("SimpleMovingAverage: the saved state has no entry 'values/acc'"));
  EXPECT_EQ(message_of<std::invalid_argument>([&] {
              two.load_state({{"rows", at::scalar_tensor(int64_t{2}, at::kLong)},
                              {"values/cost", values({1, 2})},
                              {"values/acc", values({1})}});
            }),
            "SimpleMovingAverage: the saved state entry 'values/acc' has 1 values, but 'rows' is 2 "
            "and 'values/cost' has 2; every column holds min(rows, window) values");
  EXPECT_EQ(message_of<std::invalid_argument>([&] {
              two.load_state({{"rows", at::scalar_tensor(int64_t{2}, at::kLong)},
                              {"values/loss", values({1, 2})}});
            }),
            "SimpleMovingAverage: the saved state has an entry 'values/loss' that this callback "
            "does not save (its entries: rows, and values/<name> for cost, acc)");
}

TEST(CallbackState, AStringIsA1dInt64TensorOfItsBytes) {
  const std::string text("key-\xff\x01 \xc3\xa9", 9);
  const at::Tensor t = state_string(text);
  EXPECT_EQ(t.scalar_type(), at::kLong);
  EXPECT_EQ(t.dim(), 1);
  EXPECT_EQ(t.numel(), 9);
  EXPECT_EQ(t[4].item<int64_t>(), 255);
  EXPECT_EQ(state_string("Mine", {{"id", t}}, "id"), text);
  EXPECT_EQ(state_string("Mine", {{"id", state_string("")}}, "id"), "");
}

TEST(CallbackState, AStringEntryThatDoesNotFitNamesTheCallbackAndTheEntry) {
  try {
    state_string("Mine", {{"id", state_vector(std::vector<int64_t>{104, 256})}}, "id");
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "Mine: the saved state entry 'id' should hold the bytes of a string (0..255), but "
                 "it holds 256");
  }
  EXPECT_THROW(state_string("Mine", {{"id", state_scalar(int64_t{3})}}, "id"),
               std::invalid_argument);
  EXPECT_THROW(state_string("Mine", {}, "id"), std::invalid_argument);
}

}  // namespace callback_state_test
}  // namespace trainpack
