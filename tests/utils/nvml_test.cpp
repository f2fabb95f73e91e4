// Nvml: loading NVML at run time, through dlopen of the fake library the tests build.
#include "trainpack/utils/nvml.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "support/fake_nvml.h"

namespace trainpack {
namespace nvml_test {

using testing::FakeNvml;
using ::testing::HasSubstr;
using testing::ScopedEnv;

// The message of the NvmlError that `fn` throws ("" when it throws none).
template <typename Fn>
std::string nvml_error(Fn&& fn) {
  try {
    fn();
  } catch (const NvmlError& e) {
    return e.what();
  }
  return "";
}

TEST(Nvml, ReadsTheUtilizationOfADevice) {
  FakeNvml fake;
  fake.set_device_count(3);
  {
    auto nvml = Nvml::open(FakeNvml::kPath);
    EXPECT_EQ(nvml->path(), FakeNvml::kPath);
    EXPECT_EQ(fake.initialized(), 1);
    EXPECT_EQ(nvml->device_count(), 3u);
    fake.push(2, 37);
    fake.push(0, 5);
    EXPECT_EQ(nvml->gpu_utilization(nvml->device(2)), 37u);
    EXPECT_EQ(nvml->gpu_utilization(nvml->device(0)), 5u);
    EXPECT_EQ(fake.served(), 2u);
    EXPECT_EQ(nvml->error_string(2), "Invalid Argument");
  }
  EXPECT_EQ(fake.initialized(), 0);  // nvmlShutdown when it goes
}

TEST(Nvml, AMissingLibraryIsAnErrorNamingIt) {
  EXPECT_THAT(nvml_error([] { Nvml::open("/nonexistent/libnvidia-ml.so.1"); }),
              HasSubstr("cannot load /nonexistent/libnvidia-ml.so.1: "));
}

TEST(Nvml, AMissingFunctionIsAnErrorNamingIt) {
  EXPECT_THAT(nvml_error([] { Nvml::open(FakeNvml::kPartialPath); }),
              HasSubstr(std::string(FakeNvml::kPartialPath) +
                        " has no function nvmlDeviceGetUtilizationRates: "));
}

TEST(Nvml, AFailedInitIsAnErrorWithNvmlsMessage) {
  FakeNvml fake;
  fake.set_init_result(9);  // NVML_ERROR_DRIVER_NOT_LOADED
  EXPECT_EQ(nvml_error([] { Nvml::open(FakeNvml::kPath); }),
            "nvmlInit_v2 failed: Driver Not Loaded");
  EXPECT_EQ(fake.initialized(), 0);
}

TEST(Nvml, FailedCallsAreErrorsWithNvmlsMessage) {
  FakeNvml fake;
  auto nvml = Nvml::open(FakeNvml::kPath);
  EXPECT_EQ(nvml_error([&] { nvml->device(2); }),
            "nvmlDeviceGetHandleByIndex_v2(2) failed: Invalid Argument");
  const nvml::Device device = nvml->device(1);
  fake.set_utilization_result(999);  // NVML_ERROR_UNKNOWN
  EXPECT_EQ(nvml_error([&] { nvml->gpu_utilization(device); }),
            "nvmlDeviceGetUtilizationRates failed: Unknown Error");
}

TEST(Nvml, LibraryPathIsTheArgumentThenTheVariableThenTheDriversName) {
  {
    ScopedEnv unset(Nvml::kLibraryVariable, std::nullopt);
    EXPECT_EQ(Nvml::library_path(), "libnvidia-ml.so.1");
    EXPECT_EQ(Nvml::library_path("/opt/nvml.so"), "/opt/nvml.so");
  }
  {
    ScopedEnv set(Nvml::kLibraryVariable, std::string(FakeNvml::kPath));
    EXPECT_EQ(Nvml::library_path(), FakeNvml::kPath);
    EXPECT_EQ(Nvml::library_path("/opt/nvml.so"), "/opt/nvml.so");
    FakeNvml fake;
    fake.set_device_count(4);
    EXPECT_EQ(Nvml::open()->device_count(), 4u);  // loaded through the variable
  }
  {
    ScopedEnv empty(Nvml::kLibraryVariable, std::string());
    EXPECT_EQ(Nvml::library_path(), "libnvidia-ml.so.1");
  }
}

}  // namespace nvml_test
}  // namespace trainpack
