// Exact resume (docs/save-load.md): given a seed, a run stopped at any step (StopTraining, SIGTERM,
// a crash after a save, the end of max_epoch) and resumed from its latest checkpoint continues
// with exactly the steps, the costs and the learning rates of the same run never stopped, and ends
// with bitwise the same parameters, buffers, moving averages, RNG and input position
// (single-threaded, CPU). The model uses everything a checkpoint must carry: a shuffling seeded
// dataflow (its position), dropout (the RNG), batch norm (buffers), SGD with momentum or Adam (the
// optimizer state), a ScheduledHyperParamSetter on learning_rate (a Graph variable and the
// setter's state), a HyperParamSetterWithFunc that shrinks the dropout rate every epoch (a param
// that only the setter's state holds, and a function that must not be applied twice) and a moving
// summary (MovingAverageSummary's state).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "support/temp_dir.h"
#include "trainpack/callbacks/graph.h"
#include "trainpack/callbacks/json_writer.h"
#include "trainpack/callbacks/param.h"
#include "trainpack/callbacks/saver.h"
#include "trainpack/callbacks/summary.h"
#include "trainpack/callbacks/trigger.h"
#include "trainpack/core/session_init.h"
#include "trainpack/core/state.h"
#include "trainpack/input/dataflow.h"
#include "trainpack/input/input_source.h"
#include "trainpack/train/config.h"
#include "trainpack/train/single_cost.h"
#include "trainpack/utils/checkpoint.h"
#include "trainpack/utils/logger.h"

namespace trainpack {
namespace exact_resume_test {

namespace fs = std::filesystem;

// 24 datapoints in batches of 4: 6 steps per epoch; 4 epochs, 24 steps in all.
constexpr int64_t kStepsPerEpoch = 6;
constexpr int64_t kMaxEpoch = 4;
constexpr int64_t kTotalSteps = kStepsPerEpoch * kMaxEpoch;

enum class Source { kFeed, kQueue };
enum class Optim { kSgdMomentum, kAdam };
using Param = std::tuple<Source, Optim>;
void PrintTo(Source s, std::ostream* os) {
  *os << (s == Source::kFeed ? "FeedInput" : "QueueInput");
}
void PrintTo(Optim o, std::ostream* os) { *os << (o == Optim::kSgdMomentum ? "SGD" : "Adam"); }

std::string param_name(const Param& p) {
  return std::string(std::get<0>(p) == Source::kFeed ? "FeedInput" : "QueueInput") +
         (std::get<1>(p) == Optim::kSgdMomentum ? "_SgdMomentum" : "_Adam");
}

// A shuffled (seeded) flow over fixed points: pass k's order depends only on (seed, k).
DataFlowPtr make_flow() {
  std::vector<Datapoint> points;
  for (int i = 0; i < 24; ++i) {
    const float a = std::sin(0.7f * static_cast<float>(i));
    const float b = std::cos(1.3f * static_cast<float>(i));
    const float c = static_cast<float>(i % 5) / 2.0f - 1.0f;
    const float d = static_cast<float>(i % 7) / 3.0f - 1.0f;
    points.push_back({torch::tensor({a, b, c, d}), torch::tensor({a - 2 * c + 0.5f * b * d})});
  }
  return std::make_shared<BatchData>(
      std::make_shared<DataFromList>(points, DataFromListOptions().shuffle(true).seed(17)), 4);
}

struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc1(register_module("fc1", torch::nn::Linear(4, 16))),
        bn(register_module("bn", torch::nn::BatchNorm1d(16))),
        fc2(register_module("fc2", torch::nn::Linear(16, 1))) {}
  torch::nn::Linear fc1;
  torch::nn::BatchNorm1d bn;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Net);

// The same initial weights in every run (seed 11); the optimizer given by the test parameter.
// The dropout rate is a plain member, set by a HyperParamSetterWithFunc through an ObjAttrParam.
class Model : public ModelDesc {
 public:
  explicit Model(Optim optim) : optim_(optim) {
    torch::manual_seed(11);
    net_ = Net();
  }
  double dropout = 0.5;
  InputSignature inputs() const override {
    return {InputDesc("x", {-1, 4}), InputDesc("y", {-1, 1})};
  }
  std::shared_ptr<torch::nn::Module> module() override { return net_.ptr(); }
  at::Tensor build_graph(TowerContext& ctx, const std::vector<at::Tensor>& in) override {
    at::Tensor h = torch::relu(net_->bn(net_->fc1(in[0])));
    h = torch::dropout(h, dropout, ctx.is_training());  // draws from the CPU generator
    at::Tensor cost = torch::mse_loss(net_->fc2(h), in[1]);
    ctx.add_moving_summary("cost", cost);
    return cost;
  }
  std::unique_ptr<torch::optim::Optimizer> optimizer() override {
    if (optim_ == Optim::kAdam) {
      return std::make_unique<torch::optim::Adam>(net_->parameters(),
                                                  torch::optim::AdamOptions(0.01));
    }
    return std::make_unique<torch::optim::SGD>(net_->parameters(),
                                               torch::optim::SGDOptions(0.01).momentum(0.9));
  }

 private:
  Optim optim_;
  Net net_{nullptr};
};

// Records what every step saw: "epoch/local_step/global_step" before it ran, its cost and its
// learning rate; puts the cost to the monitors as `step_cost` (one stats.json entry per step).
class StepRecorder : public Callback {
 public:
  std::vector<std::string> steps;
  std::vector<float> costs;
  std::vector<double> lrs;

 protected:
  RunArgs _before_run(const StepContext&) override {
    steps.push_back(std::to_string(epoch_num()) + "/" + std::to_string(local_step()) + "/" +
                    std::to_string(global_step()));
    lrs.push_back(trainer().graph().variable("learning_rate").get());
    return RunArgs{"cost"};
  }
  void _after_run(const StepContext&, const RunValues& values) override {
    costs.push_back(values["cost"].item<float>());
  }
  void _trigger_step() override {
    trainer().monitors().put_scalar("step_cost", static_cast<double>(costs.back()));
  }
};

// How a segment of a run ends early.
enum class StopMode {
  kStopTraining,  // a callback throws StopTraining in trigger_step of the stop step
  kSigterm,       // a callback raises SIGTERM there: the loop stops at the next step boundary
  kCrash,         // a callback throws std::runtime_error there (after the save of that step)
};

enum class Resume { kNone, kAuto, kSaverRestore };

// Ends a segment at `step` (the global step after its increment, in trigger_step) as `mode` says.
// Registered after ModelSaver: a checkpoint due at that step is written first.
class StopAt : public Callback {
 public:
  StopAt(std::optional<int64_t> step, StopMode mode) : step_(step), mode_(mode) {}

 protected:
  void _trigger_step() override {
    if (!step_ || global_step() != *step_) return;
    const std::string what = "at global_step " + std::to_string(global_step());
    switch (mode_) {
      case StopMode::kStopTraining:
        throw StopTraining("stop " + what);
      case StopMode::kSigterm:
        std::raise(SIGTERM);  // the trainer's handler only sets a flag
        return;
      case StopMode::kCrash:
        throw std::runtime_error("crash " + what);
    }
  }

 private:
  std::optional<int64_t> step_;
  StopMode mode_;
};

struct Segment {
  std::optional<int64_t> stop_at;  // the global step (after its increment) where it stops
  StopMode mode = StopMode::kStopTraining;
  Resume resume = Resume::kNone;
  int64_t max_epoch = kMaxEpoch;
};

struct Plan {
  // ModelSaver wrapped in PeriodicTrigger(every_k_steps); 0: at every epoch end (its default).
  int64_t save_every_k_steps = 1;
  // The setters before ModelSaver in the callback list (a checkpoint then holds what they did
  // at that epoch end), or after it (it does not).
  bool setter_before_saver = false;
  std::vector<Segment> segments;
};

struct Outcome {
  std::vector<std::string> steps;
  std::vector<float> costs;
  std::vector<double> lrs;
  TensorMap state;    // collect_training_state after training
  std::string found;  // AutoResumeTrainConfig::found_checkpoint()
  int signal = 0;
  bool crashed = false;
};

Outcome run_segment(const Param& param, const Plan& plan, const Segment& seg, const fs::path& dir) {
  logger::set_logger_dir(dir.string(), 'k');
  auto recorder = std::make_shared<StepRecorder>();
  auto setter = std::make_shared<ScheduledHyperParamSetter>(
      "learning_rate", ScheduledHyperParamSetter::Schedule{{0, 0.01}, {2, 0.005}, {3, 0.002}});
  auto model = std::make_shared<Model>(std::get<1>(param));
  // Applied in before_train (epoch 0) and at every epoch end: 0.5 * 0.8^(epoch + 1).
  auto dropout_setter = std::make_shared<HyperParamSetterWithFunc>(
      std::make_shared<ObjAttrParam>([model] { return model->dropout; },
                                     [model](double v) { model->dropout = v; }, "dropout"),
      [](int64_t, double p) { return p * 0.8; });
  auto saver = std::make_shared<ModelSaver>(ModelSaverOptions().fsync(false).max_to_keep(3));
  CallbackPtr saving = saver;
  if (plan.save_every_k_steps > 0) {
    saving = std::make_shared<PeriodicTrigger>(
        saver, PeriodicTriggerOptions().every_k_steps(plan.save_every_k_steps));
  }
  auto stopper = std::make_shared<StopAt>(seg.stop_at, seg.mode);
  std::vector<CallbackPtr> callbacks{recorder};
  if (plan.setter_before_saver) {
    callbacks.insert(callbacks.end(), {setter, dropout_setter, saving});
  } else {
    callbacks.insert(callbacks.end(), {saving, setter, dropout_setter});
  }
  callbacks.push_back(stopper);

  InputSourcePtr input;
  if (std::get<0>(param) == Source::kFeed) {
    input = std::make_shared<FeedInput>(make_flow());
  } else {
    input = std::make_shared<QueueInput>(make_flow(), QueueInputOptions().capacity(5));
  }
  TrainConfig config = TrainConfig()
                           .model(model)
                           .data(input)
                           .callbacks(callbacks)
                           .extra_callbacks(std::vector<CallbackPtr>{
                               std::make_shared<MovingAverageSummary>(), MergeAllSummaries(),
                               std::make_shared<RunUpdateOps>()})
                           .monitors(std::vector<MonitorPtr>{JSONWriter::create()})
                           .max_epoch(seg.max_epoch);
  Outcome out;
  if (seg.resume == Resume::kSaverRestore) {
    config.session_init(std::make_shared<SaverRestore>(dir.string()));
  } else if (seg.resume == Resume::kAuto) {
    AutoResumeTrainConfig resumed(config);
    out.found = resumed.found_checkpoint();
    config = resumed;
  }
  SimpleTrainer trainer;
  try {
    launch_train_with_config(config, trainer);
  } catch (const std::runtime_error& e) {
    if (std::string(e.what()).find("crash at global_step") == std::string::npos) throw;
    out.crashed = true;
  }
  logger::unset_logger_dir();
  out.steps = recorder->steps;
  out.costs = recorder->costs;
  out.lrs = recorder->lrs;
  out.state = collect_training_state(trainer);
  out.signal = trainer.received_signal();
  return out;
}

// The step of the checkpoint a segment leaves as the latest: ModelSaver saves every
// `save_every_k_steps` steps (or at every epoch end), and at the stop step on SIGTERM.
int64_t latest_saved_step(const Plan& plan, const Segment& seg) {
  const int64_t last = seg.stop_at.value_or(seg.max_epoch * kStepsPerEpoch);
  if (seg.stop_at && seg.mode == StopMode::kSigterm) return last;
  const int64_t period = plan.save_every_k_steps > 0 ? plan.save_every_k_steps : kStepsPerEpoch;
  return last / period * period;
}

// The entries of <dir>/stats.json by global_step: (step_cost, cost) with NaN for an absent value.
std::map<int64_t, std::pair<double, double>> stats_by_step(const fs::path& dir,
                                                           std::vector<int64_t>* order) {
  std::map<int64_t, std::pair<double, double>> out;
  const auto stats = JSONWriter::load_existing_json(dir.string());
  if (!stats) return out;
  auto number = [](const StatsEntry& e, const std::string& key) {
    const StatValue* v = e.find(key);
    if (v == nullptr) return std::nan("");
    return std::holds_alternative<double>(*v) ? std::get<double>(*v)
                                              : static_cast<double>(std::get<int64_t>(*v));
  };
  for (const auto& e : *stats) {
    const int64_t gs = std::get<int64_t>(*e.find("global_step"));
    out[gs] = {number(e, "step_cost"), number(e, "cost")};
    if (order != nullptr) order->push_back(gs);
  }
  return out;
}

bool same_number(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

class ExactResume : public testing::TempDirFixture<::testing::TestWithParam<Param>> {
 protected:
  void SetUp() override {
    testing::TempDirFixture<::testing::TestWithParam<Param>>::SetUp();
    at::set_num_threads(1);
  }

  // A new empty directory (in dir()) for one run.
  fs::path new_dir() {
    const fs::path d = path("run" + std::to_string(runs_++));
    fs::create_directory(d);
    return d;
  }

  // The run never stopped (computed once per parameter), and its stats.json.
  struct Reference {
    Outcome outcome;
    std::map<int64_t, std::pair<double, double>> stats;
  };
  const Reference& reference() {
    static std::map<std::string, Reference> cache;
    const std::string key = param_name(GetParam());
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    const fs::path dir = new_dir();
    Plan plan;
    plan.segments = std::vector<Segment>{Segment()};
    Reference ref;
    ref.outcome = run_segment(GetParam(), plan, plan.segments[0], dir);
    ref.stats = stats_by_step(dir, nullptr);
    return cache.emplace(key, std::move(ref)).first->second;
  }

  // Runs the plan's segments in one directory, each after the first resuming from the latest
  // checkpoint there, and checks the whole run against the reference.
  void check(const Plan& plan) {
    const Reference& ref = reference();
    const Outcome& expected = ref.outcome;
    ASSERT_EQ(expected.steps.size(), static_cast<size_t>(kTotalSteps));
    ASSERT_EQ(expected.steps.front(), "1/0/0");
    ASSERT_EQ(expected.steps.back(), "4/5/23");
    const fs::path dir = new_dir();
    // What the run did at each global step, the steps a resume redid overwritten.
    std::vector<std::string> steps;
    std::vector<float> costs;
    std::vector<double> lrs;
    std::set<int64_t> lost_stats;  // steps whose stats.json entry a stop by exception skipped
    Outcome last;
    int64_t start = 0;
    for (size_t i = 0; i < plan.segments.size(); ++i) {
      const Segment& seg = plan.segments[i];
      SCOPED_TRACE("segment " + std::to_string(i));
      ASSERT_EQ(seg.resume != Resume::kNone, i > 0);
      last = run_segment(GetParam(), plan, seg, dir);
      if (i > 0) {
        // The resumed run starts exactly at the checkpoint's epoch, step and global step.
        ASSERT_FALSE(last.steps.empty());
        EXPECT_EQ(last.steps.front(), expected.steps.at(start));
        if (seg.resume == Resume::kAuto) {
          EXPECT_EQ(last.found, (dir / ("model-" + std::to_string(start))).string());
        }
      }
      steps.resize(start);
      costs.resize(start);
      lrs.resize(start);
      steps.insert(steps.end(), last.steps.begin(), last.steps.end());
      costs.insert(costs.end(), last.costs.begin(), last.costs.end());
      lrs.insert(lrs.end(), last.lrs.begin(), last.lrs.end());
      const int64_t end = seg.stop_at.value_or(seg.max_epoch * kStepsPerEpoch);
      EXPECT_EQ(static_cast<int64_t>(steps.size()), end) << "the segment ran to another step";
      EXPECT_EQ(last.signal, seg.stop_at && seg.mode == StopMode::kSigterm ? SIGTERM : 0);
      EXPECT_EQ(last.crashed, seg.stop_at && seg.mode == StopMode::kCrash);
      if (i + 1 == plan.segments.size()) break;
      // The latest checkpoint is the one expected; the next segment resumes from it.
      start = latest_saved_step(plan, seg);
      EXPECT_EQ(resolve_checkpoint_path(dir.string()),
                (dir / ("model-" + std::to_string(start))).string());
      const bool skipped_by_exception =
          seg.stop_at && seg.mode != StopMode::kSigterm && *seg.stop_at == start;
      if (skipped_by_exception) lost_stats.insert(start);
    }
    EXPECT_EQ(steps, expected.steps);
    EXPECT_EQ(costs, expected.costs);
    EXPECT_EQ(lrs, expected.lrs);

    // The final state, every entry: parameters, buffers, the optimizer's state, the learning
    // rate, counters, RNG, the moving average, the setters' and the input's state. Not compared:
    // QueueInput's queue-size average (it measures the prefetch thread's timing).
    std::vector<std::string> keys, expected_keys, differ;
    for (const auto& kv : last.state) keys.push_back(kv.first);
    for (const auto& kv : expected.state) expected_keys.push_back(kv.first);
    ASSERT_EQ(keys, expected_keys);
    int module_entries = 0, optimizer_entries = 0;
    for (const auto& [key, value] : expected.state) {
      if (key.find("/queue_size_") != std::string::npos) continue;
      if (key.rfind("fc1.", 0) == 0 || key.rfind("fc2.", 0) == 0 || key.rfind("bn.", 0) == 0) {
        ++module_entries;
      }
      if (key.rfind("optimizer", 0) == 0) ++optimizer_entries;
      const at::Tensor& got = last.state.at(key);
      if (got.scalar_type() != value.scalar_type() || !torch::equal(got, value)) {
        differ.push_back(key);
      }
    }
    EXPECT_EQ(module_entries, 9);  // 4 Linear tensors, 2 BatchNorm weights, 3 BatchNorm buffers
    EXPECT_GT(optimizer_entries, 0);
    EXPECT_EQ(differ, std::vector<std::string>{}) << "entries that differ from the reference";

    // stats.json: one entry per step in order, each as the reference's, except those of the
    // steps where an exception ended a segment right after its checkpoint (JSONWriter, after the
    // stopping callback, never wrote them, and the resumed run starts after them).
    std::vector<int64_t> order;
    const auto stats = stats_by_step(dir, &order);
    std::vector<int64_t> expected_order;
    for (int64_t gs = 1; gs <= kTotalSteps; ++gs) {
      if (!lost_stats.count(gs)) expected_order.push_back(gs);
    }
    EXPECT_EQ(order, expected_order);
    for (const auto& [gs, values] : stats) {
      SCOPED_TRACE("stats.json entry of global_step " + std::to_string(gs));
      const auto& want = ref.stats.at(gs);
      EXPECT_TRUE(same_number(values.first, want.first)) << values.first << " " << want.first;
      EXPECT_TRUE(same_number(values.second, want.second)) << values.second << " " << want.second;
    }
  }

 private:
  int runs_ = 0;
};

Segment first(std::optional<int64_t> stop_at, StopMode mode = StopMode::kStopTraining) {
  Segment s;
  s.stop_at = stop_at;
  s.mode = mode;
  return s;
}
Segment then(Resume resume, std::optional<int64_t> stop_at = std::nullopt,
             StopMode mode = StopMode::kStopTraining) {
  Segment s = first(stop_at, mode);
  s.resume = resume;
  return s;
}

TEST_P(ExactResume, EpochBoundaryRunEndedByMaxEpochAutoResumed) {
  Plan plan;
  plan.save_every_k_steps = 0;  // ModelSaver at epoch ends
  Segment a;
  a.max_epoch = 2;
  plan.segments = std::vector<Segment>{a, then(Resume::kAuto)};
  check(plan);
}

TEST_P(ExactResume, EpochBoundaryRunEndedByMaxEpochRestoredWithSaverRestore) {
  Plan plan;
  plan.setter_before_saver = true;
  Segment a;
  a.max_epoch = 2;
  plan.segments = std::vector<Segment>{a, then(Resume::kSaverRestore)};
  check(plan);
}

TEST_P(ExactResume, StopTrainingMidEpochSavedEveryStepAutoResumed) {
  Plan plan;
  plan.segments = std::vector<Segment>{first(9), then(Resume::kAuto)};
  check(plan);
}

TEST_P(ExactResume, StopTrainingMidEpochSavedEveryKStepsRestoredWithSaverRestore) {
  Plan plan;
  plan.save_every_k_steps = 4;
  plan.segments = std::vector<Segment>{first(16), then(Resume::kSaverRestore)};
  check(plan);
}

TEST_P(ExactResume, StopTrainingAtTheLastStepOfAnEpoch) {
  Plan plan;
  plan.segments = std::vector<Segment>{first(12), then(Resume::kAuto)};
  check(plan);
}

TEST_P(ExactResume, SigtermMidEpochSavesOnSignalAndAutoResumes) {
  Plan plan;
  plan.save_every_k_steps = 0;  // the stop step's checkpoint comes from save_on_signal
  plan.segments = std::vector<Segment>{first(15, StopMode::kSigterm), then(Resume::kAuto)};
  check(plan);
}

TEST_P(ExactResume, SigtermAtTheLastStepOfAnEpochRestoredWithSaverRestore) {
  Plan plan;
  plan.save_every_k_steps = 0;
  plan.segments = std::vector<Segment>{first(18, StopMode::kSigterm), then(Resume::kSaverRestore)};
  check(plan);
}

TEST_P(ExactResume, CrashRightAfterASave) {
  Plan plan;
  plan.save_every_k_steps = 2;
  plan.segments = std::vector<Segment>{first(10, StopMode::kCrash), then(Resume::kAuto)};
  check(plan);
}

TEST_P(ExactResume, StepsAfterTheLatestCheckpointRunAgain) {
  Plan plan;
  plan.save_every_k_steps = 0;  // stopped at step 9, resumed from the end of epoch 1 (step 6)
  plan.segments = std::vector<Segment>{first(9), then(Resume::kAuto)};
  check(plan);
}

TEST_P(ExactResume, ManyStopsOfEveryKind) {
  Plan plan;
  plan.setter_before_saver = true;
  plan.segments = std::vector<Segment>{first(1),
                                       then(Resume::kAuto, 5),
                                       then(Resume::kSaverRestore, 13, StopMode::kSigterm),
                                       then(Resume::kAuto, 20, StopMode::kCrash),
                                       then(Resume::kAuto, 23),
                                       then(Resume::kSaverRestore)};
  check(plan);
}

INSTANTIATE_TEST_SUITE_P(SourcesAndOptimizers, ExactResume,
                         ::testing::Combine(::testing::Values(Source::kFeed, Source::kQueue),
                                            ::testing::Values(Optim::kSgdMomentum, Optim::kAdam)),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return param_name(info.param);
                         });

}  // namespace exact_resume_test
}  // namespace trainpack
