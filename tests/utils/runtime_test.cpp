// configure_runtime: threads, malloc, BLAS and OpenMP's waiting in one call.
#include "trainpack/utils/runtime.h"

#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include <array>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include "trainpack/testing.h"

namespace trainpack {
namespace runtime_test {

using testing::LogCapture;

bool has_line_starting(const RuntimeReport& report, const std::string& prefix) {
  for (const auto& line : report.lines) {
    if (line.rfind(prefix, 0) == 0) return true;
  }
  return false;
}

// configure_runtime without the re-execution (this process is the test runner).
RuntimeOptions in_process() { return RuntimeOptions().passive_omp_wait(false); }

TEST(ConfigureRuntime, SetsTheIntraOpThreadsAndSaysSo) {
  const int before = at::get_num_threads();
  char* argv[] = {nullptr};
  LogCapture log;
  const RuntimeReport report =
      configure_runtime(0, argv, in_process().intra_op_threads(1).log_level(logger::Level::kInfo));
  EXPECT_EQ(at::get_num_threads(), 1);
  EXPECT_TRUE(has_line_starting(report, "Threads: 1 intra-op (torch::get_num_threads)"));
  EXPECT_TRUE(log.contains("Threads: 1 intra-op"));
  at::set_num_threads(before);
}

// A first program says nothing about the machine settings unless asked: they are DEBUG lines.
TEST(ConfigureRuntime, TheSettingsAreDebugLinesByDefault) {
  char* argv[] = {nullptr};
  const logger::Level before = logger::level();
  {
    LogCapture log;
    const RuntimeReport report = configure_runtime(0, argv, in_process());
    EXPECT_EQ(report.level, logger::Level::kDebug);
    EXPECT_FALSE(log.contains("Threads: "));
  }
  logger::set_level(logger::Level::kDebug);
  {
    LogCapture log;
    configure_runtime(0, argv, in_process());
    EXPECT_TRUE(log.contains("Threads: "));
  }
  logger::set_level(before);
}

TEST(ConfigureRuntime, ReportsMallocBlasAndWaitPolicy) {
  char* argv[] = {nullptr};
  const RuntimeReport report = configure_runtime(0, argv, in_process().tune_malloc(false));
  EXPECT_TRUE(has_line_starting(
      report, "Malloc: glibc malloc, default thresholds (dynamic mmap threshold)"));
  EXPECT_TRUE(has_line_starting(report, "OMP_WAIT_POLICY: "));
  EXPECT_TRUE(has_line_starting(report, "BLAS"));
  EXPECT_TRUE(has_line_starting(report, "at::get_parallel_info():\n"));
}

TEST(ConfigureRuntime, TunedMallocSetsTheThresholdsOrWarnsWhenRefused) {
  char* argv[] = {nullptr};
  const RuntimeReport report = configure_runtime(0, argv, in_process());
  // Under a sanitizer the allocator is not glibc's and refuses; either way it is said.
  const bool tuned = has_line_starting(
      report, "Malloc: glibc malloc, mallopt M_MMAP_THRESHOLD=32 MiB, M_TRIM_THRESHOLD=512 MiB");
  const bool refused = has_line_starting(
      report, "Malloc: glibc malloc, default thresholds (mallopt refused the fixed ones)");
  EXPECT_TRUE(tuned || refused);
  EXPECT_EQ(refused,
            !report.warnings.empty() && report.warnings[0].rfind("mallopt refused", 0) == 0);
}

TEST(ConfigureRuntime, LogFalseLogsNothingUntilAskedTo) {
  char* argv[] = {nullptr};
  LogCapture log;
  const RuntimeReport report =
      configure_runtime(0, argv, in_process().log(false).log_level(logger::Level::kInfo));
  EXPECT_TRUE(log.lines().empty());
  report.log();
  EXPECT_GE(log.lines().size(), report.lines.size());
  EXPECT_TRUE(log.contains("Threads: "));
}

TEST(ConfigureRuntime, BadOptionsNameTheField) {
  char* argv[] = {nullptr};
  try {
    configure_runtime(0, argv, in_process().intra_op_threads(-1));
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "RuntimeOptions: intra_op_threads must be >= 0 (0: one per hardware thread), got "
                 "-1");
  }
  try {
    configure_runtime(0, argv, in_process().blas_threads(-3));
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "RuntimeOptions: blas_threads must be >= 0 (0: leave OpenBLAS's setting), got -3");
  }
  // Re-executing needs main's argv.
  EXPECT_THROW(configure_runtime(0, argv, RuntimeOptions()), std::invalid_argument);
}

// Runs the child program under `env_prefix` ("env -u OMP_WAIT_POLICY", ...) and returns its output.
std::string run_child(const std::string& env_prefix) {
  const std::string command = env_prefix + " " + TRAINPACK_RUNTIME_CHILD + " one 'two words' 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) throw std::runtime_error("popen failed: " + command);
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe.get())) > 0) out.append(buf.data(), n);
  return out;
}

TEST(ConfigureRuntime, SetsPassiveWaitingByExecutingTheProgramOnceMore) {
  const std::string out =
      run_child("env -u OMP_WAIT_POLICY -u " + std::string(kRuntimeSetWaitPolicyVariable));
  EXPECT_EQ(out,
            "start\nstart\nOMP_WAIT_POLICY=PASSIVE marker=1 args= one two words\n"
            "OMP_WAIT_POLICY: PASSIVE (set by trainpack::configure_runtime: OpenMP threads sleep "
            "while they wait instead of spinning; OMP_WAIT_POLICY=ACTIVE makes them spin)\n");
}

TEST(ConfigureRuntime, KeepsAWaitPolicyFromTheEnvironment) {
  const std::string out =
      run_child("env -u " + std::string(kRuntimeSetWaitPolicyVariable) + " OMP_WAIT_POLICY=ACTIVE");
  EXPECT_EQ(out,
            "start\nOMP_WAIT_POLICY=ACTIVE marker=- args= one two words\n"
            "OMP_WAIT_POLICY: ACTIVE\n");
}

}  // namespace runtime_test
}  // namespace trainpack
