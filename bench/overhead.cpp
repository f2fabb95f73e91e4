// trainpack_bench_overhead: the per-step cost of the training loop itself.
//
// A trivial step (one counter increment through a volatile) runs in three forms:
//   (a) a bare `for` loop;
//   (b) a Trainer whose run_step is hooked_run([&](StepContext&) { ++counter; }), with no
//       callbacks and no monitors (only the trainer's own MaintainStepCounter and the empty
//       Monitors group);
//   (c) the same trainer with 20 callbacks that override no hook;
//   (d) train_with_defaults: the default callbacks (ProgressBar, RunUpdateOps) and monitors
//       (TFEventWriter, JSONWriter, ScalarPrinter, writing into a fresh temporary logger
//       directory), in epochs of 1000 steps, so that the epoch-end work (event file flush and
//       fsync, the stats.json entry and its fdatasync) is part of the figure as in a job with
//       short epochs. It runs `--default-steps` steps (rounded up to whole epochs) in two
//       variants:
//       (d1) the trivial step alone;
//       (d2) a step that also puts one scalar per step (JSONWriter then appends an entry to
//            stats.json every step, as tensorpack's does).
// Each form runs `--reps` times after a warm-up, all forms interleaved in every rep; the median
// ns/step (and the minimum) is reported, timed with steady_clock. The last three lines are
// `overhead_ns_per_step=<median (c) - median (a)>` (what the framework adds to every step of a
// real job), `defaults_overhead_ns_per_step=<median (d1) - median (a)>` and
// `defaults_scalar_overhead_ns_per_step=<median (d2) - median (a)>`.
//
//   trainpack_bench_overhead [--steps N] [--reps R] [--default-steps M]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "support.h"
#include "trainpack/core/callback.h"
#include "trainpack/core/trainer.h"
#include "trainpack/utils/logger.h"

namespace {

using Clock = std::chrono::steady_clock;
using trainpack::bench::median;
using trainpack::bench::parse_positive;

// The step's side effect: a volatile store the compiler must keep.
volatile uint64_t g_counter = 0;

inline void trivial_step() { g_counter = g_counter + 1; }

class CountingTrainer : public trainpack::Trainer {
 public:
  void run_step() override {
    hooked_run([](trainpack::StepContext&) { trivial_step(); });
  }
};

class Idle : public trainpack::Callback {};

// The trivial step, plus one scalar put to the monitors per step.
class PuttingTrainer : public trainpack::Trainer {
 public:
  void run_step() override {
    hooked_run([](trainpack::StepContext&) { trivial_step(); });
    monitors().put_scalar("cost", static_cast<double>(g_counter % 1000) * 1e-3);
  }
};

// Returns ns per step of the bare loop.
double run_bare(int64_t steps) {
  const auto start = Clock::now();
  for (int64_t i = 0; i < steps; ++i) trivial_step();
  const std::chrono::duration<double, std::nano> took = Clock::now() - start;
  return took.count() / static_cast<double>(steps);
}

// Returns ns per step of a fresh trainer with `idle_callbacks` idle callbacks. train() is one
// call, so the setup (microseconds) is inside the timed region, negligible against millions of
// steps. Stopped by SIGINT/SIGTERM, the benchmark exits with the conventional status.
double run_trainer(int64_t steps, int idle_callbacks) {
  const trainpack::bench::EpochShape shape = trainpack::bench::epoch_shape(steps);
  CountingTrainer trainer;
  std::vector<trainpack::CallbackPtr> callbacks;
  for (int i = 0; i < idle_callbacks; ++i) callbacks.push_back(std::make_shared<Idle>());
  const auto start = Clock::now();
  trainer.train(callbacks, {}, shape.steps_per_epoch, 1, shape.epochs);
  const std::chrono::duration<double, std::nano> took = Clock::now() - start;
  if (trainer.received_signal() != 0) {
    std::exit(trainpack::exit_code_for_signal(trainer.received_signal()));
  }
  return took.count() / static_cast<double>(trainer.global_step());
}

// Epochs of form (d): short enough that the epoch-end work weighs on the per-step figure.
constexpr int64_t kDefaultStepsPerEpoch = 1000;

// Returns ns per step of train_with_defaults with the default callbacks and monitors, logging
// into a fresh temporary directory (removed afterwards), with or without one scalar per step.
// The time includes after_train (the final flush and fsync of both files), divided over at
// least `steps` steps in whole epochs of kDefaultStepsPerEpoch.
template <typename TrainerT>
double run_defaults(int64_t steps) {
  trainpack::bench::ScratchLoggerDir dir("trainpack_bench_overhead");
  const int64_t epochs = (steps + kDefaultStepsPerEpoch - 1) / kDefaultStepsPerEpoch;
  TrainerT trainer;
  const auto start = Clock::now();
  trainer.train_with_defaults(
      trainpack::TrainOptions().steps_per_epoch(kDefaultStepsPerEpoch).max_epoch(epochs));
  const std::chrono::duration<double, std::nano> took = Clock::now() - start;
  if (trainer.received_signal() != 0) {
    std::exit(trainpack::exit_code_for_signal(trainer.received_signal()));
  }
  return took.count() / static_cast<double>(trainer.global_step());
}

double minimum(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

void usage(std::FILE* out, const char* argv0) {
  std::fprintf(out,
               "usage: %s [--steps N (default 10000000)] [--reps R (default 5)] "
               "[--default-steps M (default 200000)]\n",
               argv0);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t steps = 10000000;
  int64_t reps = 5;
  int64_t default_steps = 200000;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--steps" || arg == "--reps" || arg == "--default-steps") && i + 1 < argc) {
      const int64_t v = parse_positive(arg.c_str(), argv[++i]);
      (arg == "--steps" ? steps : arg == "--reps" ? reps : default_steps) = v;
    } else if (arg == "--help" || arg == "-h") {
      usage(stdout, argv[0]);
      return 0;
    } else {
      usage(stderr, argv[0]);
      return 2;
    }
  }

  trainpack::logger::set_level(trainpack::logger::Level::kWarning);

  const trainpack::bench::EpochShape shape = trainpack::bench::epoch_shape(steps);
  const int64_t total = shape.steps_per_epoch * shape.epochs;
  std::printf("overhead benchmark: %lld steps (%lld epochs x %lld) per run, %lld reps\n",
              static_cast<long long>(total), static_cast<long long>(shape.epochs),
              static_cast<long long>(shape.steps_per_epoch), static_cast<long long>(reps));

  // Warm-up: page in the code and let the CPU clock settle.
  const int64_t warm = std::max<int64_t>(total / 10, 1);
  run_bare(warm);
  run_trainer(warm, 0);
  run_trainer(warm, 20);
  run_defaults<CountingTrainer>(std::max<int64_t>(default_steps / 10, 1));
  run_defaults<PuttingTrainer>(std::max<int64_t>(default_steps / 10, 1));

  // Interleave the forms in every rep so that drift in the machine's speed hits all alike.
  std::vector<double> bare, trainer0, trainer20, defaults, defaults_scalar;
  for (int64_t r = 0; r < reps; ++r) {
    bare.push_back(run_bare(total));
    trainer0.push_back(run_trainer(total, 0));
    trainer20.push_back(run_trainer(total, 20));
    defaults.push_back(run_defaults<CountingTrainer>(default_steps));
    defaults_scalar.push_back(run_defaults<PuttingTrainer>(default_steps));
  }
  const double a = median(bare);
  const double b = median(trainer0);
  const double c = median(trainer20);
  const double d1 = median(defaults);
  const double d2 = median(defaults_scalar);
  const long long default_epochs =
      (default_steps + kDefaultStepsPerEpoch - 1) / kDefaultStepsPerEpoch;

  // The minimum is printed beside the median: on a busy machine it is the less disturbed figure.
  std::printf("form                              median ns/step   min ns/step\n");
  std::printf("(a) bare loop                     %14.2f  %12.2f\n", a, minimum(bare));
  std::printf("(b) Trainer, no callbacks         %14.2f  %12.2f\n", b, minimum(trainer0));
  std::printf("(c) Trainer, 20 idle callbacks    %14.2f  %12.2f\n", c, minimum(trainer20));
  std::printf("(d1) defaults                     %14.2f  %12.2f   (%lld epochs x %lld steps)\n", d1,
              minimum(defaults), default_epochs, static_cast<long long>(kDefaultStepsPerEpoch));
  std::printf("(d2) defaults + 1 scalar/step    %14.2f  %12.2f   (%lld epochs x %lld steps)\n", d2,
              minimum(defaults_scalar), default_epochs,
              static_cast<long long>(kDefaultStepsPerEpoch));
  std::printf("(b) - (a): %.2f ns/step; (c) - (b): %.2f ns/step\n", b - a, c - b);
  std::printf("overhead_ns_per_step=%.2f\n", c - a);
  std::printf("defaults_overhead_ns_per_step=%.2f\n", d1 - a);
  std::printf("defaults_scalar_overhead_ns_per_step=%.2f\n", d2 - a);
  return 0;
}
