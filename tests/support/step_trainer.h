// Test support: trainers without a model whose step is what the test gives, in one hooked run or
// in two. Neither handles signals.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>

#include "trainpack/core/trainer.h"

namespace trainpack {
namespace testing {

// What a test gives a step: called inside a hooked run with the global step before that run's
// increment.
using StepBody = std::function<void(StepContext&, int64_t)>;

// A trainer whose step is one hooked run that calls `step` (nothing when it is empty).
class StepTrainer : public Trainer {
 public:
  explicit StepTrainer(StepBody body = {}) : step(std::move(body)) { set_handle_signals(false); }
  StepBody step;

  void run_step() override {
    hooked_run([this](StepContext& ctx) { in_run(ctx); });
  }

 protected:
  // What the hooked run does: calls `step`. A subclass may record more around it.
  virtual void in_run(StepContext& ctx) {
    if (step) step(ctx, global_step());
  }
};

// A trainer whose step is two hooked runs (as a GAN's discriminator and generator runs), the second
// skipped once a stop was requested: the global step moves twice a step. `first` and `second`
// (nothing when empty) are called in them.
class TwoRunTrainer : public Trainer {
 public:
  TwoRunTrainer() { set_handle_signals(false); }
  StepBody first;
  StepBody second;

  void run_step() override {
    hooked_run([this](StepContext& ctx) {
      if (first) first(ctx, global_step());
    });
    if (stop_requested()) return;
    hooked_run([this](StepContext& ctx) {
      if (second) second(ctx, global_step());
    });
  }
};

}  // namespace testing
}  // namespace trainpack
