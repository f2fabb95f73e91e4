// trainpack_bench_profiler_window: the per-step cost of a GraphProfiler waiting for its window.
//
// A trivial step (one counter increment through a volatile) trained by a Trainer in three forms:
//   (a) no callbacks;
//   (b) one callback that overrides no hook (the idle callback of bench/overhead.cpp);
//   (c) GraphProfiler in EnableCallbackIf with a window that never comes (the main job's
//       --profile-steps outside its steps): the wrapper's before_run evaluates the predicate every
//       step and calls nothing else.
// Each form runs `--reps` times after a warm-up, interleaved; the median ns/step is reported (the
// minimum beside it). The last line is `profiler_window_ns_per_step=<median (c) - median (b)>`:
// what waiting costs beyond an idle callback (target: nothing measurable).
//
//   trainpack_bench_profiler_window [--steps N (default 10000000)] [--reps R (default 5)]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "support.h"
#include "trainpack/callbacks/graph_profiler.h"
#include "trainpack/callbacks/trigger.h"
#include "trainpack/train/trainer.h"
#include "trainpack/utils/logger.h"

namespace {

using Clock = std::chrono::steady_clock;
using trainpack::bench::median;
using trainpack::bench::parse_positive;

volatile uint64_t g_counter = 0;

class CountingTrainer : public trainpack::Trainer {
 public:
  void run_step() override {
    hooked_run([](trainpack::StepContext&) { g_counter = g_counter + 1; });
  }
};

class Idle : public trainpack::Callback {};

enum class Form { kNone, kIdle, kWindow };

// ns per step of one train() of `steps` steps (epochs of at most 1,000,000 steps).
double run(Form form, int64_t steps) {
  const int64_t spe = std::min<int64_t>(steps, 1000000);
  const int64_t epochs = (steps + spe - 1) / spe;
  std::vector<trainpack::CallbackPtr> callbacks;
  if (form == Form::kIdle) callbacks.push_back(std::make_shared<Idle>());
  if (form == Form::kWindow) {
    callbacks.push_back(std::make_shared<trainpack::EnableCallbackIf>(
        std::make_shared<trainpack::GraphProfiler>(), [](const trainpack::EnableCallbackIf& self) {
          return self.global_step() + 1 >= 1000000000000 && self.global_step() + 1 <= 1000000000001;
        }));
  }
  CountingTrainer trainer;
  const auto start = Clock::now();
  trainer.train(callbacks, {}, spe, 1, epochs);
  const std::chrono::duration<double, std::nano> took = Clock::now() - start;
  if (trainer.received_signal() != 0) {
    std::exit(trainpack::exit_code_for_signal(trainer.received_signal()));
  }
  return took.count() / static_cast<double>(trainer.global_step());
}

double minimum(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

}  // namespace

int main(int argc, char** argv) {
  int64_t steps = 10000000;
  int64_t reps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--steps" || arg == "--reps") && i + 1 < argc) {
      (arg == "--steps" ? steps : reps) = parse_positive(arg.c_str(), argv[++i]);
    } else {
      std::fprintf(arg == "--help" || arg == "-h" ? stdout : stderr,
                   "usage: %s [--steps N (default 10000000)] [--reps R (default 5)]\n", argv[0]);
      return arg == "--help" || arg == "-h" ? 0 : 2;
    }
  }
  trainpack::logger::set_level(trainpack::logger::Level::kWarning);
  // GraphProfiler needs the logger directory (it writes nothing here).
  trainpack::bench::ScratchLoggerDir dir("trainpack_bench_profiler_window");

  const int64_t warm = std::max<int64_t>(steps / 10, 1);
  for (Form form : {Form::kNone, Form::kIdle, Form::kWindow}) run(form, warm);
  std::vector<double> none, idle, window;
  for (int64_t r = 0; r < reps; ++r) {
    none.push_back(run(Form::kNone, steps));
    idle.push_back(run(Form::kIdle, steps));
    window.push_back(run(Form::kWindow, steps));
  }
  std::printf("profiler window benchmark: %lld steps per run, %lld reps\n",
              static_cast<long long>(steps), static_cast<long long>(reps));
  std::printf("form                                         median ns/step   min ns/step\n");
  std::printf("(a) Trainer, no callbacks                    %14.2f  %12.2f\n", median(none),
              minimum(none));
  std::printf("(b) Trainer, 1 idle callback                 %14.2f  %12.2f\n", median(idle),
              minimum(idle));
  std::printf("(c) Trainer, GraphProfiler outside its window %13.2f  %12.2f\n", median(window),
              minimum(window));
  std::printf("profiler_window_ns_per_step=%.2f\n", median(window) - median(idle));
  return 0;
}
