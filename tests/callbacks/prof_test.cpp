// ThroughputTracker and HostMemoryTracker.
#include "trainpack/callbacks/prof.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "trainpack/callbacks/trigger.h"
#include "trainpack/core/monitor_base.h"
#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"

namespace trainpack {
namespace prof_test {

using ::testing::HasSubstr;
using testing::LogCapture;

// Trains and returns the history of `key` (taken in after_train).
Monitors::History train_and_get(std::vector<CallbackPtr> callbacks, const std::string& key,
                                int64_t spe, int64_t max_epoch) {
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train(callbacks, {}, spe, 1, max_epoch);
  return trainer.monitors().get_history(key);
}

TEST(ThroughputTracker, PutsStepsPerSecondEveryEpoch) {
  auto tracker = std::make_shared<ThroughputTracker>();
  EXPECT_FALSE(tracker->chief_only());
  const auto history = train_and_get({tracker}, "Throughput (steps/sec)", 50, 3);
  ASSERT_EQ(history.size(), 3u);
  for (size_t i = 0; i < history.size(); ++i) {
    EXPECT_EQ(history[i].first, 50 * static_cast<int64_t>(i + 1));  // put at the epoch end
    EXPECT_GT(history[i].second, 0);
  }
}

TEST(ThroughputTracker, SamplesVariantPutsSamplesPerSecond) {
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  trainer.train({std::make_shared<ThroughputTracker>(32)}, {}, 20, 1, 2);
  EXPECT_EQ(trainer.monitors().get_history("Throughput (samples/sec)").size(), 2u);
  EXPECT_GT(trainer.monitors().get_latest("Throughput (samples/sec)"), 0);
  EXPECT_TRUE(trainer.monitors().get_history("Throughput (steps/sec)").empty());
}

TEST(ThroughputTracker, ZeroStepsPerEpochPutsZero) {
  const auto history =
      train_and_get({std::make_shared<ThroughputTracker>()}, "Throughput (steps/sec)", 0, 2);
  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[0].second, 0);
}

TEST(ThroughputTracker, TriggerWithoutMeasuredTimePutsNothing) {
  // Under PeriodicTrigger(before_train=true) the first trigger comes before any epoch.
  auto wrapped = std::make_shared<PeriodicTrigger>(
      std::make_shared<ThroughputTracker>(),
      PeriodicTriggerOptions().before_train(true).every_k_epochs(1));
  const auto history = train_and_get({wrapped}, "Throughput (steps/sec)", 5, 1);
  ASSERT_EQ(history.size(), 1u);  // the epoch end only
  EXPECT_GT(history[0].second, 0);
}

// With a FakeClock the figure is exact: 4 steps of 0.25 s per epoch are 4 steps/sec, and the time
// spent before the timer starts (an earlier callback's before_epoch) and at the epoch end (after
// after_epoch) is not counted.
TEST(ThroughputTracker, CountsOnlyTheEpochsStepsOnAFakeClock) {
  testing::FakeClock clock(1000);
  auto slow_epoch_ends = std::make_shared<testing::ActionCallback>();
  slow_epoch_ends->before_epoch_fn = [&](testing::ActionCallback&) { clock.advance(7); };
  slow_epoch_ends->trigger_step_fn = [&](testing::ActionCallback&) { clock.advance(0.25); };
  slow_epoch_ends->trigger_epoch_fn = [&](testing::ActionCallback&) { clock.advance(30); };
  auto tracker = std::make_shared<ThroughputTracker>(std::nullopt, clock);
  const auto history = train_and_get({slow_epoch_ends, tracker}, "Throughput (steps/sec)", 4, 2);
  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[0], (std::pair<int64_t, double>{4, 4.0}));
  EXPECT_EQ(history[1], (std::pair<int64_t, double>{8, 4.0}));

  auto samples = std::make_shared<ThroughputTracker>(32, clock);
  EXPECT_DOUBLE_EQ(
      train_and_get({slow_epoch_ends, samples}, "Throughput (samples/sec)", 4, 1)[0].second, 128);
}

TEST(ThroughputTracker, BadSamplesPerStepIsAnError) {
  EXPECT_THROW(ThroughputTracker(0.0), std::invalid_argument);
  EXPECT_THROW(ThroughputTracker(-4.0), std::invalid_argument);
}

TEST(HostMemoryTracker, ParsesMemAvailable) {
  EXPECT_EQ(parse_meminfo_available("MemTotal:       16318412 kB\n"
                                    "MemFree:         1234567 kB\n"
                                    "MemAvailable:    8000000 kB\n"
                                    "Buffers:          123456 kB\n"),
            std::optional<uint64_t>(8000000ull * 1024));
  EXPECT_EQ(parse_meminfo_available("MemTotal: 1 kB\n"), std::nullopt);
  EXPECT_EQ(parse_meminfo_available("MemAvailable: x kB\n"), std::nullopt);
}

TEST(HostMemoryTracker, LogsAndPutsFreeMemory) {
  ASSERT_TRUE(host_available_memory_bytes().has_value()) << "no MemAvailable in /proc/meminfo";
  auto tracker = std::make_shared<HostMemoryTracker>();
  EXPECT_FALSE(tracker->chief_only());
  LogCapture log;
  const auto history = train_and_get({tracker}, "HostFreeMemory (GB)", 2, 2);
  ASSERT_EQ(history.size(), 2u);
  EXPECT_GT(history[0].second, 0);
  ASSERT_GE(log.lines().size(), 2u);
  EXPECT_THAT(log.lines(), ::testing::Contains(::testing::MatchesRegex(
                               "\\[HostMemoryTracker\\] Free RAM in setup_graph\\(\\) is "
                               "[0-9]+\\.[0-9][0-9] GB\\.")));
  EXPECT_THAT(log.lines(), ::testing::Contains(::testing::MatchesRegex(
                               "\\[HostMemoryTracker\\] Free RAM in before_train\\(\\) is "
                               "[0-9]+\\.[0-9][0-9] GB\\.")));
}

}  // namespace prof_test
}  // namespace trainpack
