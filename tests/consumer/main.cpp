// Uses the installed trainpack package through its two installed entry headers,
// trainpack/trainpack.h and trainpack/testing.h: trains a NoOpTrainer for 3 epochs of 4 steps with
// one custom callback, a recorder and a ThroughputTracker on a fake clock, and checks what they
// saw. Exits non-zero on any mismatch.
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>

#include <trainpack/testing.h>
#include <trainpack/trainpack.h>

namespace {

class CountSteps : public trainpack::Callback {
 public:
  int64_t steps = 0;
  int64_t epochs = 0;
  int64_t last_global_step = -1;
  bool after_train_called = false;
  bool mismatch = false;

 protected:
  void _trigger_step() override {
    ++steps;
    // trigger_step sees the incremented global_step.
    if (global_step() != steps) mismatch = true;
  }
  void _trigger_epoch() override {
    ++epochs;
    if (epoch_num() != epochs) mismatch = true;
  }
  void _after_train() override {
    after_train_called = true;
    last_global_step = global_step();
  }
};

}  // namespace

int main() {
  constexpr int64_t kStepsPerEpoch = 4;
  constexpr int64_t kMaxEpoch = 3;
  try {
    auto cb = std::make_shared<CountSteps>();
    auto trace = std::make_shared<trainpack::testing::Trace>();
    trainpack::testing::FakeClock clock;
    auto tick = std::make_shared<trainpack::testing::ActionCallback>();
    tick->trigger_step_fn = [&](trainpack::testing::ActionCallback&) { clock.advance(0.25); };
    trainpack::NoOpTrainer trainer;
    trainer.train({cb, tick, std::make_shared<trainpack::ThroughputTracker>(std::nullopt, clock),
                   std::make_shared<trainpack::testing::TraceCallback>(trace)},
                  {}, kStepsPerEpoch, /*starting_epoch=*/1, kMaxEpoch);
    const std::string last = trace->empty() ? "" : trace->back();
    const double speed = trainer.monitors().get_latest("Throughput (steps/sec)");
    if (last != "after_train ep=3 ls=3 gs=12" || speed != 4.0) {
      std::fprintf(stderr, "consumer: FAILED: last hook '%s', throughput %g (expected 4)\n",
                   last.c_str(), speed);
      return 1;
    }

    const int64_t expected = kStepsPerEpoch * kMaxEpoch;
    if (trainer.global_step() != expected || cb->steps != expected || cb->epochs != kMaxEpoch ||
        !cb->after_train_called || cb->last_global_step != expected || cb->mismatch) {
      std::fprintf(stderr,
                   "consumer: FAILED: global_step=%lld steps=%lld epochs=%lld after_train=%d "
                   "mismatch=%d (expected global_step=%lld, epochs=%lld)\n",
                   static_cast<long long>(trainer.global_step()), static_cast<long long>(cb->steps),
                   static_cast<long long>(cb->epochs), cb->after_train_called ? 1 : 0,
                   cb->mismatch ? 1 : 0, static_cast<long long>(expected),
                   static_cast<long long>(kMaxEpoch));
      return 1;
    }
    std::printf("consumer: OK: global_step=%lld after %lld epochs of %lld steps\n",
                static_cast<long long>(trainer.global_step()), static_cast<long long>(kMaxEpoch),
                static_cast<long long>(kStepsPerEpoch));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: FAILED with an exception: %s\n", e.what());
    return 1;
  }
}
