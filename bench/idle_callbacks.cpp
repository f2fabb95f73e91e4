// trainpack_bench_idle_callbacks: what the callbacks for looking inside a run cost per step while
// they have nothing to do, against an idle callback (the target: the same).
//
// A trivial step (one counter increment through a volatile) runs in these forms:
//   (a) a bare `for` loop;
//   (a') the bare loop with two steady_clock reads per step (what timing every run costs);
//   (b) a Trainer (hooked_run around the step) with one idle callback: it overrides before_run
//       and after_run and does nothing in them, so the trainer calls it around every run;
//   (b') the same Trainer with no callbacks (where a callback that overrides no per-step hook
//       lands: the trainer never calls it per step);
//   (c), (d), ... the same trainer with the callbacks of one case of `kCases` instead of the idle
//       one, made fresh for every run: SessionRunTimeout armed; GPUUtilizationTracker without
//       NVML and GPUMemoryTracker without CUDA (both inert); GraphProfiler outside its
//       EnableCallbackIf window; InjectShell with its file absent, at its default trigger (epoch
//       end) and checked every step (a stat() per step: not idle); HookToCallback around an empty
//       StepHook; LocalDebugHook watching a published 0-d tensor (not idle: a debugging tool).
// The not-idle cases run 1/`steps_divisor` of the steps (they cost microseconds per step); a case
// with `publish` trains a step that also publishes a 0-d tensor as "cost" (the debug hook's).
// Each form runs `--reps` times after a warm-up, all forms interleaved in every rep so that drift
// in the machine's speed hits them alike; the median ns/step (and the minimum) is reported, timed
// with steady_clock around train() (its setup, microseconds, is negligible against millions of
// steps). For each case: the ns/step it adds to (b), and its time over (b)'s and over (a)'s.
// The last lines are `<case>_over_idle=<median case / median (b)>`, one per case.
// Logging is at ERROR: the inert trackers warn once per run, as they should.
//
// To measure another callback, add a line to kCases: a key, a description and a function that
// makes the callbacks (fresh ones for every run).
//
//   trainpack_bench_idle_callbacks [--steps N (default 10000000)] [--reps R (default 5)]
//                                  [--only KEY,KEY]
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "support.h"
#include "trainpack/callbacks/graph_profiler.h"
#include "trainpack/callbacks/hooks.h"
#include "trainpack/callbacks/inject_shell.h"
#include "trainpack/callbacks/prof.h"
#include "trainpack/callbacks/session_run_timeout.h"
#include "trainpack/callbacks/trigger.h"
#include "trainpack/core/callback.h"
#include "trainpack/core/trainer.h"
#include "trainpack/utils/logger.h"

namespace {

using Clock = std::chrono::steady_clock;
using trainpack::CallbackPtr;
using trainpack::bench::median;
using trainpack::bench::parse_positive;

// The step's side effect: a volatile store the compiler must keep.
volatile uint64_t g_counter = 0;

// `publish`: the step also publishes a 0-d tensor as "cost" (for the cases that watch it).
class CountingTrainer : public trainpack::Trainer {
 public:
  explicit CountingTrainer(bool publish) : publish_(publish), cost_(at::zeros({}, at::kFloat)) {}
  void run_step() override {
    if (publish_) {
      hooked_run([this](trainpack::StepContext& ctx) {
        g_counter = g_counter + 1;
        ctx.publish("cost", cost_);
      });
    } else {
      hooked_run([](trainpack::StepContext&) { g_counter = g_counter + 1; });
    }
  }

 private:
  bool publish_;
  at::Tensor cost_;
};

// Called around every run, does nothing: the reference the cases are held to.
class IdleStepCallback : public trainpack::Callback {
 protected:
  trainpack::RunArgs _before_run(const trainpack::StepContext&) override {
    return trainpack::RunArgs();
  }
  void _after_run(const trainpack::StepContext&, const trainpack::RunValues&) override {}
};

// A StepHook that overrides nothing.
class EmptyHook : public trainpack::StepHook {};

struct Case {
  const char* key;          // the result line's name: <key>_over_idle
  const char* description;  // the table's row
  std::function<std::vector<CallbackPtr>()> make;
  int64_t steps_divisor = 1;  // runs 1/steps_divisor of the steps (the slow, not-idle cases)
  bool publish = false;       // the step publishes a 0-d tensor as "cost"
};

// Where InjectShell looks: a file in the scratch directory that never exists (an absolute path,
// so that an INJECT_SHELL.tmp in the working directory cannot pause the benchmark). Set in main.
std::string g_absent_file;

template <typename T, typename... Args>
std::vector<CallbackPtr> one(Args&&... args) {
  return {std::make_shared<T>(std::forward<Args>(args)...)};
}

// The callbacks measured while idle, one case each.
const std::vector<Case> kCases = {
    {"session_run_timeout", "SessionRunTimeout(600000), armed",
     [] { return one<trainpack::SessionRunTimeout>(600000); }},
    {"gpu_utilization_tracker", "GPUUtilizationTracker, no NVML (inert)",
     [] {
       return one<trainpack::GPUUtilizationTracker>(
           trainpack::GPUUtilizationTrackerOptions().nvml_library(
               "/nonexistent/libnvidia-ml.so.1"));
     }},
    {"gpu_memory_tracker", "GPUMemoryTracker, no CUDA (inert)",
     [] { return one<trainpack::GPUMemoryTracker>(); }},
    {"graph_profiler_outside_window", "GraphProfiler outside its window",
     [] {
       return one<trainpack::EnableCallbackIf>(
           std::make_shared<trainpack::GraphProfiler>(),
           [](const trainpack::EnableCallbackIf& self) { return self.global_step() < 0; });
     }},
    {"inject_shell", "InjectShell, file absent, at epoch end",
     [] { return one<trainpack::InjectShell>(g_absent_file); }},
    {"inject_shell_every_step", "InjectShell every step, stat() (not idle)",
     [] {
       return one<trainpack::PeriodicTrigger>(
           std::make_shared<trainpack::InjectShell>(g_absent_file),
           trainpack::PeriodicTriggerOptions().every_k_steps(1));
     },
     10},
    {"hook_to_callback", "HookToCallback(empty StepHook)",
     [] { return one<trainpack::HookToCallback>(std::make_shared<EmptyHook>()); }},
    {"local_debug_hook", "LocalDebugHook on 1 scalar (not idle)",
     [] {
       return one<trainpack::LocalDebugHook>(
           trainpack::LocalDebugHookOptions().names({"cost"}).action(
               trainpack::DebugAction::kStop));
     },
     1000, true},
};

// ns per step of the bare loop with two steady_clock reads per step: what a callback that times
// every run (SessionRunTimeout) cannot do without.
double run_bare_with_clock_pair(int64_t steps) {
  int64_t sum = 0;
  const auto start = Clock::now();
  for (int64_t i = 0; i < steps; ++i) {
    sum += Clock::now().time_since_epoch().count();
    g_counter = g_counter + 1;
    sum -= Clock::now().time_since_epoch().count();
  }
  const std::chrono::duration<double, std::nano> took = Clock::now() - start;
  g_counter = g_counter + static_cast<uint64_t>(sum & 1);
  return took.count() / static_cast<double>(steps);
}

double run_bare(int64_t steps) {
  const auto start = Clock::now();
  for (int64_t i = 0; i < steps; ++i) g_counter = g_counter + 1;
  const std::chrono::duration<double, std::nano> took = Clock::now() - start;
  return took.count() / static_cast<double>(steps);
}

// ns per step of a fresh trainer with `callbacks`. Stopped by SIGINT/SIGTERM, the benchmark exits
// with the conventional status.
double run_trainer(int64_t steps, const std::vector<CallbackPtr>& callbacks, bool publish = false) {
  const trainpack::bench::EpochShape shape = trainpack::bench::epoch_shape(steps);
  CountingTrainer trainer(publish);
  const auto start = Clock::now();
  trainer.train(callbacks, {}, shape.steps_per_epoch, 1, shape.epochs);
  const std::chrono::duration<double, std::nano> took = Clock::now() - start;
  if (trainer.received_signal() != 0) {
    std::exit(trainpack::exit_code_for_signal(trainer.received_signal()));
  }
  return took.count() / static_cast<double>(trainer.global_step());
}

std::vector<CallbackPtr> idle() { return {std::make_shared<IdleStepCallback>()}; }

double minimum(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

void usage(std::FILE* out, const char* argv0) {
  std::fprintf(out,
               "usage: %s [--steps N (default 10000000)] [--reps R (default 5)] "
               "[--only KEY,KEY]\ncases:",
               argv0);
  for (const Case& c : kCases) std::fprintf(out, " %s", c.key);
  std::fprintf(out, "\n");
}

}  // namespace

int main(int argc, char** argv) {
  int64_t steps = 10000000;
  int64_t reps = 5;
  std::vector<const Case*> cases;
  for (const Case& c : kCases) cases.push_back(&c);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--steps" || arg == "--reps") && i + 1 < argc) {
      (arg == "--steps" ? steps : reps) = parse_positive(arg.c_str(), argv[++i]);
    } else if (arg == "--only" && i + 1 < argc) {
      cases.clear();
      std::stringstream keys(argv[++i]);
      for (std::string key; std::getline(keys, key, ',');) {
        auto it =
            std::find_if(kCases.begin(), kCases.end(), [&](const Case& c) { return key == c.key; });
        if (it == kCases.end()) {
          std::fprintf(stderr, "--only: unknown case '%s'\n", key.c_str());
          usage(stderr, argv[0]);
          return 2;
        }
        cases.push_back(&*it);
      }
    } else if (arg == "--help" || arg == "-h") {
      usage(stdout, argv[0]);
      return 0;
    } else {
      usage(stderr, argv[0]);
      return 2;
    }
  }

  trainpack::logger::set_level(trainpack::logger::Level::kError);
  // GraphProfiler and LocalDebugHook need a logger directory (neither writes to it here).
  trainpack::bench::ScratchLoggerDir dir("trainpack_bench_idle_callbacks");
  g_absent_file = (dir.dir() / "INJECT_SHELL.absent").string();

  const trainpack::bench::EpochShape shape = trainpack::bench::epoch_shape(steps);
  const int64_t total = shape.steps_per_epoch * shape.epochs;
  std::printf("idle callbacks benchmark: %lld steps (%lld epochs x %lld) per run, %lld reps\n",
              static_cast<long long>(total), static_cast<long long>(shape.epochs),
              static_cast<long long>(shape.steps_per_epoch), static_cast<long long>(reps));

  // Warm-up: page in the code and let the CPU clock settle.
  const int64_t warm = std::max<int64_t>(total / 10, 1);
  run_bare(warm);
  run_bare_with_clock_pair(warm);
  run_trainer(warm, idle());
  run_trainer(warm, {});
  auto case_steps = [&](const Case* c, int64_t n) {
    return std::max<int64_t>(n / c->steps_divisor, 1);
  };
  for (const Case* c : cases) run_trainer(case_steps(c, warm), c->make(), c->publish);

  std::vector<double> bare, clock_pair, base, none;
  std::vector<std::vector<double>> measured(cases.size());
  for (int64_t r = 0; r < reps; ++r) {
    bare.push_back(run_bare(total));
    clock_pair.push_back(run_bare_with_clock_pair(total));
    base.push_back(run_trainer(total, idle()));
    none.push_back(run_trainer(total, {}));
    for (size_t i = 0; i < cases.size(); ++i) {
      measured[i].push_back(
          run_trainer(case_steps(cases[i], total), cases[i]->make(), cases[i]->publish));
    }
  }
  const double a = median(bare);
  const double b = median(base);

  // The minimum beside the median: on a busy machine it is the less disturbed figure.
  // Every row runs `total` steps but the not-idle cases, whose step count is in the steps column.
  const char* row_format = "%-58s %9s %14.2f %12.2f %12.2f %9.3f %9.3f\n";
  std::printf("%-58s %9s %14s %12s %12s %9s %9s\n", "form", "steps", "median ns/step",
              "min ns/step", "over (b) ns", "/ (b)", "/ (a)");
  std::printf("%-58s %9s %14.2f %12.2f\n", "(a) bare loop", "", a, minimum(bare));
  std::printf("%-58s %9s %14.2f %12.2f\n", "(a') bare loop + 2 steady_clock reads", "",
              median(clock_pair), minimum(clock_pair));
  std::printf(row_format, "(b) Trainer + idle callback", "", b, minimum(base), 0.0, 1.0, b / a);
  std::printf(row_format, "(b') Trainer, no callbacks", "", median(none), minimum(none),
              median(none) - b, median(none) / b, median(none) / a);
  for (size_t i = 0; i < cases.size(); ++i) {
    const double m = median(measured[i]);
    const std::string row =
        "(" + std::string(1, static_cast<char>('c' + i)) + ") Trainer + " + cases[i]->description;
    const std::string n =
        cases[i]->steps_divisor > 1 ? std::to_string(case_steps(cases[i], total)) : "";
    std::printf(row_format, row.c_str(), n.c_str(), m, minimum(measured[i]), m - b, m / b, m / a);
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    std::printf("%s_over_idle=%.3f\n", cases[i]->key, median(measured[i]) / b);
  }
  return 0;
}
