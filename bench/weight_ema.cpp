// trainpack_bench_weight_ema: what WeightEMA's update costs per step, against the optimizer step
// it follows.
//
// The parameters are the shapes of the main job's model (two 3x3 convolutions, 32 and 64
// channels, and two linear layers, 3136 -> 128 -> 10: about 0.42 M float parameters), each with a
// gradient of ones. Forms, each `--steps` steps of a NoOpTrainer whose step does:
//   (a) nothing (the loop's own cost);
//   (b) a torch::optim::SGD step with momentum 0.9 on the parameters;
//   (c) the SGD step, and a WeightEMA(0.999) over the parameters (its trigger_step).
// Each form runs `--reps` times after a warm-up, interleaved; the median ns/step is reported.
// The last line is `ema_over_sgd_step=<((c) - (b)) / ((b) - (a))>`: the update's cost in optimizer
// steps.
//
//   trainpack_bench_weight_ema [--steps N (default 2000)] [--reps R (default 5)]
#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "support.h"
#include "trainpack/callbacks/weight_ema.h"
#include "trainpack/core/trainer.h"
#include "trainpack/utils/logger.h"

namespace {

using Clock = std::chrono::steady_clock;

// A NoOpTrainer-like trainer whose step runs an SGD step (or nothing).
class StepTrainer : public trainpack::Trainer {
 public:
  explicit StepTrainer(torch::optim::Optimizer* opt) : opt_(opt) {}
  void run_step() override {
    hooked_run([this](trainpack::StepContext&) {
      if (opt_ != nullptr) opt_->step();
    });
  }

 private:
  torch::optim::Optimizer* opt_;
};

double run(int form, int64_t steps) {
  std::vector<at::Tensor> params;
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{
           {32, 1, 3, 3}, {32}, {64, 32, 3, 3}, {64}, {128, 3136}, {128}, {10, 128}, {10}}) {
    at::Tensor p = torch::randn(shape).requires_grad_(true);
    p.mutable_grad() = torch::ones_like(p);
    params.push_back(p);
  }
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(1e-6).momentum(0.9));
  StepTrainer trainer(form == 0 ? nullptr : &sgd);
  trainer.set_handle_signals(false);
  for (size_t i = 0; i < params.size(); ++i) {
    trainer.graph().add_trainable_variable("p" + std::to_string(i), params[i]);
  }
  std::vector<trainpack::CallbackPtr> callbacks;
  if (form == 2) callbacks.push_back(std::make_shared<trainpack::WeightEMA>(0.999));
  const auto start = Clock::now();
  trainer.train(callbacks, {}, steps, 1, 1);
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() /
         static_cast<double>(steps);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t steps = 2000;
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--steps") == 0) {
      steps = trainpack::bench::parse_positive("--steps", argv[i + 1]);
    } else if (std::strcmp(argv[i], "--reps") == 0) {
      reps = static_cast<int>(trainpack::bench::parse_positive("--reps", argv[i + 1]));
    } else {
      std::fprintf(stderr, "usage: %s [--steps N] [--reps R]\n", argv[0]);
      return 2;
    }
  }
  trainpack::logger::set_level(trainpack::logger::Level::kError);
  at::set_num_threads(1);
  for (int form = 0; form < 3; ++form) run(form, steps / 10 + 1);  // warm-up
  std::vector<double> ns[3];
  for (int r = 0; r < reps; ++r) {
    for (int form = 0; form < 3; ++form) ns[form].push_back(run(form, steps));
  }
  const char* names[3] = {"(a) bare trainer", "(b) SGD step", "(c) SGD step + WeightEMA"};
  double med[3];
  for (int form = 0; form < 3; ++form) {
    med[form] = trainpack::bench::median(ns[form]);
    std::printf("%-28s %10.0f ns/step\n", names[form], med[form]);
  }
  std::printf("WeightEMA update: %.0f ns/step for 0.42 M parameters\n", med[2] - med[1]);
  std::printf("ema_over_sgd_step=%.3f\n", (med[2] - med[1]) / (med[1] - med[0]));
  return 0;
}
