// trainpack_bench_hooks: the per-step cost of hooks (callbacks/hooks.h).
//
// A trivial step (one counter increment through a volatile, and a 0-d tensor published as
// "cost") runs in four forms:
//   (a) a Trainer with no callbacks;
//   (b) the same with 20 HookToCallback adapters around hooks that override nothing (idle: the
//       trainer never visits them per step);
//   (c) the same with 20 adapters around hooks that override after_run only (an empty body), so
//       every step makes 20 virtual calls through the adapters;
//   (d) a LocalDebugHook watching "cost" (fetch, has_inf_or_nan with its host read), with
//       `--debug-steps` steps: what the debugger costs while nothing goes wrong.
// Each form runs `--reps` times after a warm-up, interleaved; the median ns/step (and the minimum)
// is reported. The last lines are `idle_hooks_ns_per_step=<(b) - (a)>` (target: 0, as idle
// callbacks) and `debug_hook_ns_per_step=<(d) - (a)>`.
//
//   trainpack_bench_hooks [--steps N] [--reps R] [--debug-steps M]
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "support.h"
#include "trainpack/callbacks/hooks.h"
#include "trainpack/train/trainer.h"
#include "trainpack/utils/logger.h"

namespace {

using Clock = std::chrono::steady_clock;
using trainpack::bench::median;
using trainpack::bench::parse_positive;

volatile uint64_t g_counter = 0;

class PublishingTrainer : public trainpack::Trainer {
 public:
  PublishingTrainer() : cost_(at::zeros({}, at::kFloat)) { set_handle_signals(false); }
  void run_step() override {
    hooked_run([this](trainpack::StepContext& ctx) {
      g_counter = g_counter + 1;
      ctx.publish("cost", cost_);
    });
  }

 private:
  at::Tensor cost_;
};

class IdleHook : public trainpack::StepHook {};
class AfterRunHook : public trainpack::StepHook {
 public:
  void after_run(const trainpack::StepContext&, const trainpack::RunValues&) override {}
};

enum class Form { kNone, kIdle, kAfterRun, kDebug };

double run(int64_t steps, Form form) {
  PublishingTrainer trainer;
  std::vector<trainpack::CallbackPtr> callbacks;
  for (int i = 0; i < 20 && (form == Form::kIdle || form == Form::kAfterRun); ++i) {
    trainpack::StepHookPtr hook = form == Form::kIdle
                                      ? trainpack::StepHookPtr(std::make_shared<IdleHook>())
                                      : trainpack::StepHookPtr(std::make_shared<AfterRunHook>());
    callbacks.push_back(std::make_shared<trainpack::HookToCallback>(hook));
  }
  if (form == Form::kDebug) {
    callbacks.push_back(std::make_shared<trainpack::LocalDebugHook>(
        trainpack::LocalDebugHookOptions().names({"cost"}).action(trainpack::DebugAction::kStop)));
  }
  const auto start = Clock::now();
  trainer.train(callbacks, {}, steps, 1, 1);
  const std::chrono::duration<double, std::nano> took = Clock::now() - start;
  return took.count() / static_cast<double>(trainer.global_step());
}

double minimum(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

void usage(std::FILE* out, const char* argv0) {
  std::fprintf(out,
               "usage: %s [--steps N (default 5000000)] [--reps R (default 5)] "
               "[--debug-steps M (default 100000)]\n",
               argv0);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t steps = 5000000;
  int64_t reps = 5;
  int64_t debug_steps = 100000;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--steps" || arg == "--reps" || arg == "--debug-steps") && i + 1 < argc) {
      const int64_t v = parse_positive(arg.c_str(), argv[++i]);
      (arg == "--steps" ? steps : arg == "--reps" ? reps : debug_steps) = v;
    } else if (arg == "--help" || arg == "-h") {
      usage(stdout, argv[0]);
      return 0;
    } else {
      usage(stderr, argv[0]);
      return 2;
    }
  }
  trainpack::logger::set_level(trainpack::logger::Level::kWarning);
  trainpack::bench::ScratchLoggerDir dir("trainpack_bench_hooks");  // LocalDebugHook's directory
  std::printf("hooks benchmark: %lld steps per run (%lld for the debug hook), %lld reps\n",
              static_cast<long long>(steps), static_cast<long long>(debug_steps),
              static_cast<long long>(reps));

  run(std::max<int64_t>(steps / 10, 1), Form::kNone);
  run(std::max<int64_t>(steps / 10, 1), Form::kIdle);
  run(std::max<int64_t>(steps / 10, 1), Form::kAfterRun);
  run(std::max<int64_t>(debug_steps / 10, 1), Form::kDebug);

  std::vector<double> none, idle, after_run, debug;
  for (int64_t r = 0; r < reps; ++r) {
    none.push_back(run(steps, Form::kNone));
    idle.push_back(run(steps, Form::kIdle));
    after_run.push_back(run(steps, Form::kAfterRun));
    debug.push_back(run(debug_steps, Form::kDebug));
  }
  const double a = median(none), b = median(idle), c = median(after_run), d = median(debug);
  std::printf("form                                     median ns/step   min ns/step\n");
  std::printf("(a) Trainer, no callbacks                %14.2f  %12.2f\n", a, minimum(none));
  std::printf("(b) 20 idle HookToCallback               %14.2f  %12.2f\n", b, minimum(idle));
  std::printf("(c) 20 HookToCallback with after_run     %14.2f  %12.2f\n", c, minimum(after_run));
  std::printf("(d) LocalDebugHook watching one scalar   %14.2f  %12.2f\n", d, minimum(debug));
  std::printf("idle_hooks_ns_per_step=%.2f\n", b - a);
  std::printf("after_run_hooks_ns_per_step=%.2f\n", c - a);
  std::printf("debug_hook_ns_per_step=%.2f\n", d - a);
  return 0;
}
