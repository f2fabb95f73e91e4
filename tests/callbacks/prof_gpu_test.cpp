// GPUUtilizationTracker (through the fake NVML library the tests build, loaded with dlopen) and
// GPUMemoryTracker (through an injected source of statistics, and inert on this CPU machine).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "support/fake_nvml.h"
#include "trainpack/callbacks/prof.h"
#include "trainpack/core/monitor_base.h"
#include "trainpack/core/trainer.h"
#include "trainpack/testing.h"

namespace trainpack {
namespace prof_gpu_test {

using testing::ActionCallback;
using ::testing::ElementsAre;
using testing::FakeNvml;
using ::testing::HasSubstr;
using testing::LogCapture;
using testing::ScopedEnv;
using ::testing::StartsWith;
using History = Monitors::History;

GPUUtilizationTrackerOptions fast_options() {
  return GPUUtilizationTrackerOptions()
      .nvml_library(FakeNvml::kPath)
      .period(std::chrono::milliseconds(1));
}

// The warnings the tracker logged.
std::vector<std::string> tracker_warnings(const LogCapture& log) {
  std::vector<std::string> out;
  for (const auto& line : log.lines()) {
    if (line.rfind("WRN [GPUUtilizationTracker]", 0) == 0) out.push_back(line);
  }
  return out;
}

// Trains `callbacks` on a NoOpTrainer for `max_epoch` epochs of `spe` steps; returns the trainer
// (to read the monitors' history).
std::unique_ptr<NoOpTrainer> train(std::vector<CallbackPtr> callbacks, int64_t spe,
                                   int64_t max_epoch) {
  auto trainer = std::make_unique<NoOpTrainer>();
  trainer->set_handle_signals(false);
  trainer->train(callbacks, {}, spe, 1, max_epoch);
  return trainer;
}

// Opens the fake's gate in after_train, placed before the tracker: a sampler waiting in the fake
// then returns, so the tracker's after_train can join it whatever a test left undone.
CallbackPtr open_gate_at_end(FakeNvml& fake) {
  auto cb = std::make_shared<ActionCallback>();
  cb->after_train_fn = [&fake](ActionCallback&) { fake.set_gated(false); };
  return cb;
}

// ---- GPUUtilizationTracker ----

// Two GPUs, three epochs of two steps. On each epoch's last step the test hands the sampler
// exactly the samples of the epoch and waits until it took them (and began the next); after the
// tracker's after_epoch (the stop) it hands one more sample, which the sampler takes after the
// stop and drops, unless it is the epoch's only one.
TEST(GPUUtilizationTracker, PutsEachEpochsMeanWithoutTheSampleAfterTheEpoch) {
  FakeNvml fake;
  const std::map<int64_t, std::vector<std::pair<unsigned, unsigned>>> in_epoch = {
      {1, {{10, 50}, {20, 60}, {30, 70}}},  // mean 20 / 60; the 4th sample (99/1) is dropped
      {2, {{40, 80}}},                      // mean 40 / 80; the 2nd (99/1) is dropped
      {3, {}}};                             // the sample after the stop is the only one: kept
  auto driver = std::make_shared<ActionCallback>();
  driver->trigger_step_fn = [&](ActionCallback& self) {
    if (self.local_step() != 1) return;
    const unsigned long before = fake.served();
    for (const auto& [gpu0, gpu1] : in_epoch.at(self.epoch_num())) {
      fake.push(0, gpu0);
      fake.push(1, gpu1);
    }
    ASSERT_TRUE(fake.wait_next_call(before + 2 * in_epoch.at(self.epoch_num()).size()));
  };
  driver->after_epoch_fn = [&](ActionCallback& self) {
    fake.push(0, self.epoch_num() == 3 ? 77 : 99);
    fake.push(1, self.epoch_num() == 3 ? 33 : 1);
  };
  auto tracker = std::make_shared<GPUUtilizationTracker>(fast_options().devices({0, 1}));
  EXPECT_FALSE(tracker->chief_only());
  LogCapture log;
  auto trainer = train({open_gate_at_end(fake), tracker, driver}, 2, 3);
  EXPECT_TRUE(tracker->enabled());
  EXPECT_EQ(tracker->devices(), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(trainer->monitors().get_history("GPUUtil/0"), (History{{2, 20}, {4, 40}, {6, 77}}));
  EXPECT_EQ(trainer->monitors().get_history("GPUUtil/1"), (History{{2, 60}, {4, 80}, {6, 33}}));
  EXPECT_EQ(fake.served(), 2u * (3 + 1 + 1 + 0 + 1 + 1));
  EXPECT_TRUE(tracker_warnings(log).empty());
  EXPECT_EQ(fake.initialized(), 0);  // after_train shut NVML down
}

// One epoch, one sample per device, taken after the stop (the only one, so kept).
std::unique_ptr<NoOpTrainer> train_one_sample(FakeNvml& fake, CallbackPtr tracker,
                                              const std::vector<unsigned>& devices,
                                              unsigned value) {
  auto driver = std::make_shared<ActionCallback>();
  driver->after_epoch_fn = [&fake, devices, value](ActionCallback&) {
    for (unsigned d : devices) fake.push(d, value);
  };
  return train({open_gate_at_end(fake), std::move(tracker), driver}, 1, 1);
}

TEST(GPUUtilizationTracker, CudaVisibleDevicesGivesThePhysicalIds) {
  FakeNvml fake;
  fake.set_device_count(4);
  ScopedEnv cvd("CUDA_VISIBLE_DEVICES", "3,1");
  auto tracker = std::make_shared<GPUUtilizationTracker>(fast_options());
  auto trainer = train_one_sample(fake, tracker, {3, 1}, 42);
  EXPECT_EQ(tracker->devices(), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(trainer->monitors().get_history("GPUUtil/3"), (History{{1, 42}}));
  EXPECT_EQ(trainer->monitors().get_history("GPUUtil/1"), (History{{1, 42}}));
  EXPECT_TRUE(trainer->monitors().get_history("GPUUtil/0").empty());
}

TEST(GPUUtilizationTracker, TheArgumentWinsOverCudaVisibleDevices) {
  FakeNvml fake;
  ScopedEnv cvd("CUDA_VISIBLE_DEVICES", "0,1");
  auto tracker = std::make_shared<GPUUtilizationTracker>(fast_options().devices({1}));
  auto trainer = train_one_sample(fake, tracker, {1}, 7);
  EXPECT_EQ(tracker->devices(), (std::vector<int64_t>{1}));
  EXPECT_EQ(trainer->monitors().get_history("GPUUtil/1"), (History{{1, 7}}));
}

TEST(GPUUtilizationTracker, WithoutDevicesOrCudaVisibleDevicesWatchesEveryGpuWithAWarning) {
  FakeNvml fake;
  fake.set_device_count(3);
  ScopedEnv cvd("CUDA_VISIBLE_DEVICES", std::nullopt);
  auto tracker = std::make_shared<GPUUtilizationTracker>(fast_options());
  LogCapture log;
  auto trainer = train_one_sample(fake, tracker, {0, 1, 2}, 12);
  EXPECT_EQ(tracker->devices(), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_THAT(tracker_warnings(log),
              ElementsAre("WRN [GPUUtilizationTracker] Both devices and CUDA_VISIBLE_DEVICES are "
                          "None! Will monitor all 3 visible GPUs!"));
  EXPECT_EQ(trainer->monitors().get_history("GPUUtil/2"), (History{{1, 12}}));
}

TEST(GPUUtilizationTracker, OneGpuFoundNeedsNoWarning) {
  FakeNvml fake;
  fake.set_device_count(1);
  ScopedEnv cvd("CUDA_VISIBLE_DEVICES", std::nullopt);
  auto tracker = std::make_shared<GPUUtilizationTracker>(fast_options());
  LogCapture log;
  auto trainer = train_one_sample(fake, tracker, {0}, 100);
  EXPECT_TRUE(tracker_warnings(log).empty());
  EXPECT_EQ(trainer->monitors().get_history("GPUUtil/0"), (History{{1, 100}}));
}

// Inert: exactly one warning saying why, nothing put, and no thread (the fake is never sampled).
void expect_inert(GPUUtilizationTrackerOptions options, const std::string& why,
                  FakeNvml* fake = nullptr) {
  auto tracker = std::make_shared<GPUUtilizationTracker>(std::move(options));
  LogCapture log;
  auto trainer = train({tracker}, 2, 2);
  EXPECT_FALSE(tracker->enabled());
  EXPECT_TRUE(tracker->devices().empty());
  const auto warnings = tracker_warnings(log);
  ASSERT_EQ(warnings.size(), 1u) << ::testing::PrintToString(log.lines());
  EXPECT_THAT(warnings[0],
              StartsWith("WRN [GPUUtilizationTracker] Not tracking GPU utilization: " + why));
  for (const auto& line : log.lines()) EXPECT_THAT(line, ::testing::Not(HasSubstr("GPUUtil/")));
  for (int d = 0; d < 4; ++d) {
    EXPECT_TRUE(trainer->monitors().get_history(fmt::format("GPUUtil/{}", d)).empty());
  }
  if (fake) {
    EXPECT_EQ(fake->served(), 0u);
    EXPECT_EQ(fake->initialized(), 0);
  }
}

TEST(GPUUtilizationTracker, WithoutTheNvmlLibraryWarnsOnceAndDoesNothing) {
  expect_inert(
      GPUUtilizationTrackerOptions().devices({0}).nvml_library("/nonexistent/libnvidia-ml.so.1"),
      "cannot load /nonexistent/libnvidia-ml.so.1: /nonexistent/libnvidia-ml.so.1: "
      "cannot open shared object file");
}

TEST(GPUUtilizationTracker, ANvmlWithoutAFunctionWarnsOnceAndDoesNothing) {
  expect_inert(
      fast_options().devices({0}).nvml_library(FakeNvml::kPartialPath),
      std::string(FakeNvml::kPartialPath) + " has no function nvmlDeviceGetUtilizationRates: ");
}

TEST(GPUUtilizationTracker, AFailedNvmlInitWarnsOnceWithNvmlsMessage) {
  FakeNvml fake;
  fake.set_init_result(9);  // NVML_ERROR_DRIVER_NOT_LOADED
  expect_inert(fast_options().devices({0}), "nvmlInit_v2 failed: Driver Not Loaded.", &fake);
}

TEST(GPUUtilizationTracker, NoGpuWarnsOnceAndDoesNothing) {
  FakeNvml fake;
  fake.set_device_count(0);
  ScopedEnv cvd("CUDA_VISIBLE_DEVICES", std::nullopt);
  expect_inert(fast_options(), "NVML reports no GPU.", &fake);
}

TEST(GPUUtilizationTracker, AnEmptyCudaVisibleDevicesWarnsOnceAndDoesNothing) {
  FakeNvml fake;
  ScopedEnv cvd("CUDA_VISIBLE_DEVICES", "");
  expect_inert(fast_options(), "CUDA_VISIBLE_DEVICES is empty, so no GPU is visible.", &fake);
}

TEST(GPUUtilizationTracker, CudaVisibleDevicesWithUuidsWarnsOnceAndDoesNothing) {
  FakeNvml fake;
  ScopedEnv cvd("CUDA_VISIBLE_DEVICES", "GPU-8f6c0f3e");
  expect_inert(fast_options(),
               "CUDA_VISIBLE_DEVICES=GPU-8f6c0f3e does not list GPU indices (give the devices to "
               "GPUUtilizationTracker).",
               &fake);
}

TEST(GPUUtilizationTracker, ADeviceNvmlDoesNotKnowWarnsOnceAndDoesNothing) {
  FakeNvml fake;
  expect_inert(fast_options().devices({0, 5}),
               "nvmlDeviceGetHandleByIndex_v2(5) failed: Invalid Argument.", &fake);
}

TEST(GPUUtilizationTracker, AFailedSampleStopsTrainingWithTensorpacksMessage) {
  FakeNvml fake;
  fake.set_utilization_result(999);  // NVML_ERROR_UNKNOWN
  auto tracker = std::make_shared<GPUUtilizationTracker>(fast_options().devices({0}));
  LogCapture log;
  auto trainer = train({open_gate_at_end(fake), tracker}, 2, 3);
  EXPECT_EQ(trainer->epoch_num(), 1);  // stopped at the first epoch's trigger
  EXPECT_EQ(trainer->global_step(), 2);
  EXPECT_TRUE(
      log.contains("ERR Exception in GPUUtilizationTracker.worker: "
                   "nvmlDeviceGetUtilizationRates failed: Unknown Error"))
      << ::testing::PrintToString(log.lines());
  EXPECT_TRUE(log.contains("GPUUtilizationTracker.worker has failed."));
  EXPECT_TRUE(trainer->monitors().get_history("GPUUtil/0").empty());
}

TEST(GPUUtilizationTracker, NoResultWithinTheTimeoutIsAnError) {
  FakeNvml fake;  // gated, and nothing is pushed: the first sample never returns
  auto tracker = std::make_shared<GPUUtilizationTracker>(
      fast_options().devices({0}).result_timeout(std::chrono::milliseconds(50)));
  try {
    train({open_gate_at_end(fake), tracker}, 1, 2);
    ADD_FAILURE() << "training did not fail";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr("GPUUtilizationTracker.worker is stuck. This is a bug."));
  }
}

TEST(GPUUtilizationTracker, BadArgumentsAreErrors) {
  auto message = [](GPUUtilizationTrackerOptions options) -> std::string {
    try {
      GPUUtilizationTracker tracker(std::move(options));
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_THAT(message(GPUUtilizationTrackerOptions().devices({})),
              StartsWith("[GPUUtilizationTracker] No GPU device given!"));
  EXPECT_THROW(GPUUtilizationTracker(std::vector<int64_t>{}), std::invalid_argument);
  EXPECT_EQ(message(GPUUtilizationTrackerOptions().devices({0, -1})),
            "GPUUtilizationTracker: devices has -1; a GPU index must be >= 0");
  EXPECT_EQ(message(GPUUtilizationTrackerOptions().period(std::chrono::milliseconds(-1))),
            "GPUUtilizationTracker: period must be >= 0 ms, got -1");
  EXPECT_EQ(message(GPUUtilizationTrackerOptions().result_timeout(std::chrono::milliseconds(0))),
            "GPUUtilizationTracker: result_timeout must be positive, got 0 ms");
}

TEST(GPUUtilizationTracker, DefaultsAreTensorpacks) {
  const GPUUtilizationTrackerOptions options;
  EXPECT_FALSE(options.devices().has_value());
  EXPECT_EQ(options.period(), std::chrono::seconds(1));
  EXPECT_EQ(options.result_timeout(), std::chrono::seconds(60));
  EXPECT_EQ(options.nvml_library(), "");
}

TEST(GPUUtilizationTracker, ChoosesDevicesFromCudaVisibleDevicesThenTheLocalRank) {
  using detail::choose_gpu_devices;
  auto devices = [](const char* cvd, std::optional<int64_t> rank) {
    return choose_gpu_devices(cvd, rank).devices;
  };
  EXPECT_EQ(devices(nullptr, std::nullopt), std::nullopt);  // every GPU
  EXPECT_EQ(choose_gpu_devices(nullptr, std::nullopt).none_reason, "");
  EXPECT_EQ(devices(nullptr, 3), (std::vector<int64_t>{3}));
  EXPECT_EQ(devices("2, 0", std::nullopt), (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(devices("1", 3), (std::vector<int64_t>{1}));
  for (const char* none : {"", "GPU-1234", "0,,1", "-1", "0,x"}) {
    EXPECT_EQ(devices(none, 1), std::nullopt) << none;
    EXPECT_NE(choose_gpu_devices(none, 1).none_reason, "") << none;
  }
}

// ---- GPUMemoryTracker ----

// Scripted peaks; records each call with the counters of the moment.
class ScriptedStats : public GPUMemoryStats {
 public:
  std::map<int64_t, std::vector<int64_t>> peaks;  // per device, one per read
  std::vector<std::string> calls;
  const Trainer* trainer = nullptr;

  int64_t peak_bytes(int64_t device) override {
    calls.push_back(record("peak", device));
    auto& script = peaks.at(device);
    const int64_t bytes = script.front();
    script.erase(script.begin());
    return bytes;
  }
  void reset_peak(int64_t device) override { calls.push_back(record("reset", device)); }

 private:
  std::string record(const char* what, int64_t device) const {
    return fmt::format("{} {} ep={} ls={}", what, device, trainer->epoch_num(),
                       trainer->local_step());
  }
};

TEST(GPUMemoryTracker, ReadsAndResetsThePeakOnTheLastStepOfEachEpoch) {
  auto stats = std::make_shared<ScriptedStats>();
  stats->peaks = {{0, {1500000, 2500000}}, {2, {123456789, 7}}};
  auto tracker = std::make_shared<GPUMemoryTracker>(std::vector<int64_t>{0, 2}, stats);
  EXPECT_FALSE(tracker->chief_only());
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  stats->trainer = &trainer;
  LogCapture log;
  trainer.train({tracker}, {}, 3, 1, 2);
  EXPECT_EQ(stats->calls,
            (std::vector<std::string>{"peak 0 ep=1 ls=2", "reset 0 ep=1 ls=2", "peak 2 ep=1 ls=2",
                                      "reset 2 ep=1 ls=2", "peak 0 ep=2 ls=2", "reset 0 ep=2 ls=2",
                                      "peak 2 ep=2 ls=2", "reset 2 ep=2 ls=2"}));
  EXPECT_EQ(trainer.monitors().get_history("PeakMemory(MB)/gpu:0"), (History{{3, 1.5}, {6, 2.5}}));
  EXPECT_EQ(trainer.monitors().get_history("PeakMemory(MB)/gpu:2"),
            (History{{3, 123456789 / 1e6}, {6, 7 / 1e6}}));
  EXPECT_FALSE(log.contains("WRN"));
}

TEST(GPUMemoryTracker, WithOneStepPerEpochReadsAtEveryStep) {
  auto stats = std::make_shared<ScriptedStats>();
  stats->peaks = {{0, {1000000, 2000000, 3000000}}};
  NoOpTrainer trainer;
  trainer.set_handle_signals(false);
  stats->trainer = &trainer;
  trainer.train({std::make_shared<GPUMemoryTracker>(std::vector<int64_t>{0}, stats)}, {}, 1, 1, 3);
  EXPECT_EQ(trainer.monitors().get_history("PeakMemory(MB)/gpu:0"),
            (History{{1, 1}, {2, 2}, {3, 3}}));
}

TEST(GPUMemoryTracker, WithoutAGpuWarnsAndCostsNothingPerStep) {
  ASSERT_EQ(cuda_caching_allocator_stats(), nullptr) << "this test expects a machine without GPU";
  auto tracker = std::make_shared<PeakMemoryTracker>();
  LogCapture log;
  auto trainer = train({tracker}, 3, 2);
  EXPECT_FALSE(tracker->enabled());
  EXPECT_THAT(log.lines(), ::testing::Contains("WRN GPUMemoryTracker only supports GPU!"));
  int warnings = 0;
  for (const auto& line : log.lines()) warnings += line.rfind("WRN ", 0) == 0;
  EXPECT_EQ(warnings, 1);
  EXPECT_TRUE(trainer->monitors().get_history("PeakMemory(MB)/gpu:0").empty());
  EXPECT_FALSE(tracker->overrides(Hook::kBeforeRun));  // never called per step
  EXPECT_FALSE(tracker->overrides(Hook::kAfterRun));
}

TEST(GPUMemoryTracker, PeakMemoryTrackerIsAnotherName) {
  static_assert(std::is_same_v<PeakMemoryTracker, GPUMemoryTracker>);
  GPUMemoryTracker tracker;
  EXPECT_TRUE(tracker.overrides(Hook::kAfterRun));  // before setup: not known to be inert
}

TEST(GPUMemoryTracker, BadArgumentsAreErrors) {
  auto message = [](std::vector<int64_t> devices) -> std::string {
    try {
      GPUMemoryTracker tracker(std::move(devices));
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(
      message({}),
      "GPUMemoryTracker: devices is an empty list; give at least one GPU index (default {0})");
  EXPECT_EQ(message({1, -2}), "GPUMemoryTracker: devices has -2; a GPU index must be >= 0");
}

}  // namespace prof_gpu_test
}  // namespace trainpack
