// trainpack_bench_inject_shell: what an InjectShell costs per step while its file is absent.
//
// A trivial step (one counter increment through a volatile, in hooked_run) runs with:
//   (a) one idle callback (a Callback that overrides no hook): the reference;
//   (b) InjectShell at its default trigger (every epoch end): the target is (a);
//   (c) InjectShell in PeriodicTrigger every_k_steps(1): one stat() of the absent file per step,
//       the most a user can ask for.
// The file is an absolute path in a fresh, empty directory, so nothing ever pauses. Each form runs
// `--reps` times after a warm-up, interleaved; the median ns/step (and the minimum) is printed,
// then `inject_shell_epoch_ns_per_step=<(b) - (a)>` and `inject_shell_every_step_ns=<(c) - (a)>`.
//
//   trainpack_bench_inject_shell [--steps N] [--reps R]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "support.h"
#include "trainpack/callbacks/misc.h"
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

enum class Form { kIdle, kEpoch, kEveryStep };

// ns per step of a fresh trainer with the form's callback; epochs of 100000 steps.
double run(Form form, int64_t steps, const std::string& file) {
  const int64_t per_epoch = std::min<int64_t>(steps, 100000);
  const int64_t epochs = (steps + per_epoch - 1) / per_epoch;
  trainpack::CallbackPtr cb;
  switch (form) {
    case Form::kIdle:
      cb = std::make_shared<Idle>();
      break;
    case Form::kEpoch:
      cb = std::make_shared<trainpack::InjectShell>(file);
      break;
    case Form::kEveryStep:
      cb = std::make_shared<trainpack::PeriodicTrigger>(
          std::make_shared<trainpack::InjectShell>(file),
          trainpack::PeriodicTriggerOptions().every_k_steps(1));
      break;
  }
  CountingTrainer trainer;
  const auto start = Clock::now();
  trainer.train({cb}, {}, per_epoch, 1, epochs);
  const std::chrono::duration<double, std::nano> took = Clock::now() - start;
  if (trainer.received_signal() != 0) {
    std::exit(trainpack::exit_code_for_signal(trainer.received_signal()));
  }
  return took.count() / static_cast<double>(trainer.global_step());
}

double minimum(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

}  // namespace

int main(int argc, char** argv) {
  int64_t steps = 2000000;
  int64_t reps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--steps" || arg == "--reps") && i + 1 < argc) {
      (arg == "--steps" ? steps : reps) = parse_positive(arg.c_str(), argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--steps N (default 2000000)] [--reps R (default 5)]\n",
                   argv[0]);
      return arg == "--help" || arg == "-h" ? 0 : 2;
    }
  }
  trainpack::logger::set_level(trainpack::logger::Level::kWarning);
  const std::filesystem::path dir =
      trainpack::bench::make_scratch_dir("/tmp", "trainpack_bench_inject_shell");
  const std::string file = (dir / "INJECT_SHELL.tmp").string();

  std::printf("inject_shell benchmark: %lld steps per run, %lld reps\n",
              static_cast<long long>(steps), static_cast<long long>(reps));
  const int64_t warm = std::max<int64_t>(steps / 10, 1);
  for (Form f : {Form::kIdle, Form::kEpoch, Form::kEveryStep}) run(f, warm, file);
  std::vector<double> idle, epoch, every;
  for (int64_t r = 0; r < reps; ++r) {
    idle.push_back(run(Form::kIdle, steps, file));
    epoch.push_back(run(Form::kEpoch, steps, file));
    every.push_back(run(Form::kEveryStep, steps, file));
  }
  std::filesystem::remove_all(dir);
  const double a = median(idle), b = median(epoch), c = median(every);
  std::printf("form                                   median ns/step   min ns/step\n");
  std::printf("(a) one idle callback                  %14.2f  %12.2f\n", a, minimum(idle));
  std::printf("(b) InjectShell, every epoch end       %14.2f  %12.2f\n", b, minimum(epoch));
  std::printf("(c) InjectShell, every step (stat)     %14.2f  %12.2f\n", c, minimum(every));
  std::printf("inject_shell_epoch_ns_per_step=%.2f\n", b - a);
  std::printf("inject_shell_every_step_ns=%.2f\n", c - a);
  return 0;
}
