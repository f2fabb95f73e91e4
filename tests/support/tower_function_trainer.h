// Test support: a trainer without a model whose step runs the tower function the test gives, as
// SingleCostTrainer runs a model's (for what a tower context collects: moving summaries, images).
#pragma once

#include <cstdint>
#include <functional>

#include "trainpack/core/trainer.h"
#include "trainpack/train/tower.h"

namespace trainpack {
namespace testing {

// A trainer whose step runs `tower` through a main training TowerContext ("tower0") in each of
// its `hooked_runs_per_step` hooked runs; `tower` gets the global step before the run's
// increment. Signals are not handled.
class TowerFunctionTrainer : public Trainer {
 public:
  std::function<void(TowerContext&, int64_t)> tower;
  int hooked_runs_per_step = 1;

  TowerFunctionTrainer() { set_handle_signals(false); }
  // Starts counting from `global_step` (as a resumed run does).
  void start_at(int64_t global_step) { set_global_step(global_step); }

  void run_step() override {
    for (int i = 0; i < hooked_runs_per_step; ++i) {
      hooked_run([&](StepContext& ctx) {
        TowerContext t("tower0", /*is_training=*/true, &ctx, &tower_registry());
        if (tower) tower(t, global_step());
      });
    }
  }
};

}  // namespace testing
}  // namespace trainpack
