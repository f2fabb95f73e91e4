// trainpack/testing.h: the tools a user tests their own callbacks with.
#include "trainpack/testing.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include <torch/torch.h>

#include "support/step_trainer.h"
#include "trainpack/callbacks/misc.h"

namespace trainpack {
namespace testing_test {

using testing::ActionCallback;
using testing::FakeClock;
using testing::LogCapture;
using testing::StepTrainer;
using testing::Trace;
using testing::TraceCallback;

TEST(FakeClock, MovesOnlyWhenToldAndCopiesShareTheTime) {
  FakeClock clock(5);
  const Clock as_clock = clock;
  FakeClock copy = clock;
  EXPECT_EQ(as_clock(), 5);
  clock.advance(2.5);
  EXPECT_EQ(as_clock(), 7.5);
  EXPECT_EQ(copy.now(), 7.5);
  copy.set(100);
  EXPECT_EQ(clock.now(), 100);
}

TEST(FakeClock, TheClockOutlivesTheFakeClock) {
  Clock c;
  {
    FakeClock clock(3);
    c = clock;
  }
  EXPECT_EQ(c(), 3);
}

// A user's callback tested with the recorder and a fake clock: EstimatedTimeLeft logs the median
// epoch time times the epochs left.
TEST(TestingTools, EstimatedTimeLeftOnAFakeClock) {
  FakeClock clock;
  auto trace = std::make_shared<Trace>();
  auto epoch_of_ten_seconds = std::make_shared<ActionCallback>();
  epoch_of_ten_seconds->trigger_step_fn = [&](ActionCallback&) { clock.advance(5); };
  LogCapture log;
  testing::run_noop({epoch_of_ten_seconds, std::make_shared<EstimatedTimeLeft>(5, true, clock),
                     std::make_shared<TraceCallback>(trace)},
                    /*steps_per_epoch=*/2, /*starting_epoch=*/1, /*max_epoch=*/4);
  EXPECT_TRUE(log.contains("Estimated Time Left: 30 seconds"));
  EXPECT_TRUE(log.contains("Estimated Time Left: 10 seconds"));
  EXPECT_EQ(trace->back(), "after_train ep=4 ls=1 gs=8");
}

TEST(TestingTools, ActionCallbackAsksForTensorsAndSeesThem) {
  auto probe = std::make_shared<ActionCallback>();
  probe->run_args = RunArgs({"x"});
  std::vector<double> seen;
  probe->after_run_fn = [&](ActionCallback& self) {
    ASSERT_NE(self.values, nullptr);
    seen.push_back((*self.values)["x"].item<double>());
  };
  StepTrainer trainer([](StepContext& ctx, int64_t gs) {
    ctx.publish("x", torch::scalar_tensor(static_cast<double>(gs)));
  });
  trainer.train({probe}, {}, 3, 1, 1);
  EXPECT_EQ(seen, (std::vector<double>{0, 1, 2}));
  EXPECT_EQ(probe->values, nullptr);  // only set during after_run
}

}  // namespace testing_test
}  // namespace trainpack
