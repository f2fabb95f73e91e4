// The "Testing a callback" example of docs/callbacks.md, as it is written there: a user's callback
// and its test, with trainpack/trainpack.h and trainpack/testing.h only.
#include <gtest/gtest.h>
#include <trainpack/testing.h>
#include <trainpack/trainpack.h>

#include <memory>
#include <utility>
#include <vector>

namespace {

class StepTime : public trainpack::Callback {
 public:
  StepTime(int every, trainpack::Clock clock) : every_(every), clock_(std::move(clock)) {}
  std::vector<double> logged;

 protected:
  void _before_epoch() override { start_ = clock_(); }
  void _trigger_epoch() override {
    if (epoch_num() % every_ != 0) return;
    logged.push_back((clock_() - start_) / trainer().steps_per_epoch());
    TP_LOG_INFO("[StepTime] {:.2f} s per step", logged.back());
  }

 private:
  int every_;
  trainpack::Clock clock_;
  double start_ = 0;
};

TEST(StepTime, LogsTheMeanStepTimeEverySecondEpoch) {
  using namespace trainpack::testing;
  FakeClock clock;
  auto tick = std::make_shared<ActionCallback>();
  tick->trigger_step_fn = [&](ActionCallback&) { clock.advance(0.5); };
  auto step_time = std::make_shared<StepTime>(2, clock);
  auto trace = std::make_shared<Trace>();
  LogCapture log;
  run_noop({tick, step_time, std::make_shared<TraceCallback>(trace)},
           /*steps_per_epoch=*/4, /*starting_epoch=*/1, /*max_epoch=*/4);
  EXPECT_EQ(step_time->logged, (std::vector<double>{0.5, 0.5}));  // after epochs 2 and 4
  EXPECT_TRUE(log.contains("[StepTime] 0.50 s per step"));
  EXPECT_EQ(trace->back(), "after_train ep=4 ls=3 gs=16");
}

}  // namespace
