// configure_runtime: threads, malloc, BLAS and OpenMP's waiting in one call.
#include "trainpack/utils/runtime.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/child_process.h"
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

TEST(DefaultIntraOpThreads, ShareTheHardwareAmongTheLaunchersProcessesOnThisMachine) {
  EXPECT_EQ(default_intra_op_threads(16, nullptr), 16);
  EXPECT_EQ(default_intra_op_threads(16, "2"), 8);
  EXPECT_EQ(default_intra_op_threads(16, "3"), 5);
  EXPECT_EQ(default_intra_op_threads(2, "8"), 1);  // at least one each
  EXPECT_EQ(default_intra_op_threads(0, nullptr), 1);
  for (const char* bad : {"", "0", "-2", "two", "2x"}) {
    EXPECT_EQ(default_intra_op_threads(16, bad), 16) << "LOCAL_WORLD_SIZE=" << bad;
  }
}

TEST(ConfigureRuntime, UnderTorchrunEachProcessTakesItsShareOfTheHardwareThreads) {
  const int before = at::get_num_threads();
  const int hardware = static_cast<int>(std::thread::hardware_concurrency());
  ::setenv("LOCAL_WORLD_SIZE", "2", 1);
  char* argv[] = {nullptr};
  const RuntimeReport report = configure_runtime(0, argv, in_process());
  ::unsetenv("LOCAL_WORLD_SIZE");
  EXPECT_EQ(at::get_num_threads(), std::max(1, hardware / 2));
  if (hardware >= 2) {
    EXPECT_TRUE(has_line_starting(
        report, fmt::format("Threads: {} intra-op (torch::get_num_threads), {} inter-op, {} "
                            "hardware shared by LOCAL_WORLD_SIZE=2 processes",
                            hardware / 2, at::get_num_interop_threads(), hardware)))
        << fmt::format("{}", fmt::join(report.lines, "\n"));
  }
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

// ---- memory limits ----

struct LimitedRun {
  std::string output;   // stdout and stderr together
  int status = 0;       // from waitpid
  bool killed = false;  // still running after the deadline
  double seconds = 0;
};

// Runs the child with `args` under the soft and hard `resource` limit of `limit` bytes (none when
// negative), set between fork and exec as `ulimit` does; kills it after `deadline_s`.
LimitedRun run_limited(int resource, long long limit, const std::vector<std::string>& args,
                       double deadline_s = 20) {
  LimitedRun run;
  std::vector<std::string> argv{TRAINPACK_RUNTIME_CHILD};
  argv.insert(argv.end(), args.begin(), args.end());
  testing::SpawnOptions options;  // stderr into the pipe too
  options.before_exec = [resource, limit] {
    if (limit >= 0) {
      struct rlimit l {};
      l.rlim_cur = l.rlim_max = static_cast<rlim_t>(limit);
      if (::setrlimit(resource, &l) != 0) ::_exit(126);
    }
  };
  const auto start = std::chrono::steady_clock::now();
  const testing::Spawned child = testing::spawn(argv, options);
  if (child.pid < 0) return run;
  const pid_t pid = child.pid;
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  for (;;) {
    if (!run.killed && elapsed() > deadline_s) {
      ::kill(pid, SIGKILL);
      run.killed = true;
    }
    if (testing::read_available(child.out_fd, 100, &run.output) == testing::ReadResult::kEnd) break;
  }
  ::close(child.out_fd);
  while (::waitpid(pid, &run.status, 0) < 0 && errno == EINTR) {
  }
  run.seconds = elapsed();
  return run;
}

std::string describe(const LimitedRun& run) {
  std::ostringstream out;
  out << (run.killed ? "killed after the deadline (hung)" : "ended") << " in " << run.seconds
      << " s, status " << run.status << ", output:\n"
      << run.output;
  return out.str();
}

// The child's VmSize and VmData at start, in bytes, from a run without a limit.
struct AtStart {
  long long vm_size = -1;
  long long vm_data = -1;
};

AtStart measure_child() {
  const LimitedRun run = run_limited(RLIMIT_AS, -1, {"--memory-job"}, 60);
  AtStart at;
  std::istringstream in(run.output);
  std::string word;
  while (in >> word) {
    if (word == "at_start" && in >> at.vm_size >> at.vm_data) {
      at.vm_size *= 1024;
      at.vm_data *= 1024;
    }
  }
  EXPECT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << describe(run);
  EXPECT_NE(run.output.find("\nran "), std::string::npos) << describe(run);
  return at;
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RUNTIME_TEST_SKIP_UNDER_SANITIZERS() \
  GTEST_SKIP() << "a sanitizer's shadow memory needs far more address space than any ulimit -v"
#else
#define RUNTIME_TEST_SKIP_UNDER_SANITIZERS() (void)0
#endif

// A limit that leaves the job 96 MiB beyond what it had mapped at start: enough to start, not
// for OpenBLAS's buffers. Without the check OpenBLAS retries its allocation forever (Debian's
// LibTorch) or LibTorch fails with an allocation error and its backtrace.
TEST(ConfigureRuntimeMemory, AnAddressSpaceLimitBelowTheNeedIsRefusedAtOnceInOneLine) {
  RUNTIME_TEST_SKIP_UNDER_SANITIZERS();
  const AtStart at = measure_child();
  ASSERT_GT(at.vm_size, 0);
  const long long limit = at.vm_size + (96LL << 20);
  const LimitedRun run = run_limited(RLIMIT_AS, limit, {"--memory-job"});
  ASSERT_FALSE(run.killed) << describe(run);
  EXPECT_LT(run.seconds, 10) << describe(run);
  ASSERT_TRUE(WIFEXITED(run.status)) << describe(run);
  EXPECT_EQ(WEXITSTATUS(run.status), kOutOfMemoryExitStatus) << describe(run);
  // The start line, then one line naming the limit, its value and what is needed.
  const std::string refusal = run.output.substr(run.output.find('\n') + 1);
  EXPECT_EQ(std::count(refusal.begin(), refusal.end(), '\n'), 1) << describe(run);
  EXPECT_NE(refusal.find("trainpack_runtime_child: configure_runtime: the address-space limit "
                         "(ulimit -v) is " +
                         std::to_string(limit / 1024) + " KiB, below the "),
            std::string::npos)
      << describe(run);
  EXPECT_NE(refusal.find("KiB this job needs ("), std::string::npos) << describe(run);
  EXPECT_NE(refusal.find("Raise the limit (ulimit -v "), std::string::npos) << describe(run);
}

TEST(ConfigureRuntimeMemory, ADataSizeLimitBelowTheNeedIsRefusedNamingUlimitD) {
  RUNTIME_TEST_SKIP_UNDER_SANITIZERS();
  const AtStart at = measure_child();
  ASSERT_GT(at.vm_data, 0);
  const long long limit = at.vm_data + (96LL << 20);
  const LimitedRun run = run_limited(RLIMIT_DATA, limit, {"--memory-job"});
  ASSERT_FALSE(run.killed) << describe(run);
  ASSERT_TRUE(WIFEXITED(run.status)) << describe(run);
  EXPECT_EQ(WEXITSTATUS(run.status), kOutOfMemoryExitStatus) << describe(run);
  EXPECT_NE(run.output.find("configure_runtime: the data-size limit (ulimit -d) is " +
                            std::to_string(limit / 1024) + " KiB"),
            std::string::npos)
      << describe(run);
}

// A limit above the estimate: the job runs (the estimate does not refuse what fits).
TEST(ConfigureRuntimeMemory, ALimitAboveTheNeedLetsTheJobRun) {
  RUNTIME_TEST_SKIP_UNDER_SANITIZERS();
  const AtStart at = measure_child();
  ASSERT_GT(at.vm_size, 0);
  const LimitedRun run = run_limited(RLIMIT_AS, at.vm_size + (1LL << 30), {"--memory-job"});
  ASSERT_FALSE(run.killed) << describe(run);
  EXPECT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << describe(run);
  EXPECT_NE(run.output.find("\nran "), std::string::npos) << describe(run);
}

TEST(ConfigureRuntimeMemory, FailedAllocationsAreOutOfMemoryEvenWhenNested) {
  EXPECT_TRUE(is_out_of_memory(std::bad_alloc()));
  EXPECT_TRUE(is_out_of_memory(MemoryLimitError("configure_runtime: ...")));
  EXPECT_FALSE(is_out_of_memory(std::runtime_error("no such file")));
  try {
    try {
      // What LibTorch's CPU allocator throws (1.13's wording).
      TORCH_CHECK(false,
                  "[enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: can't "
                  "allocate memory: you tried to allocate 25088000 bytes. Error code 12 "
                  "(Cannot allocate memory)");
    } catch (...) {
      std::throw_with_nested(std::runtime_error("Callback InferenceRunner failed in before_train"));
    }
  } catch (const std::exception& e) {
    EXPECT_TRUE(is_out_of_memory(e));
    const std::string line = describe_out_of_memory(e);
    EXPECT_EQ(line.rfind("out of memory: [enforce fail at alloc_cpu.cpp:75] err == 0. "
                         "DefaultCPUAllocator: can't allocate memory: you tried to allocate "
                         "25088000 bytes. Error code 12 (Cannot allocate memory)",
                         0),
              0u)
        << line;
    EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  }
  try {
    TORCH_CHECK(false, "shapes do not match");
  } catch (const std::exception& e) {
    EXPECT_FALSE(is_out_of_memory(e));
  }
}

}  // namespace runtime_test
}  // namespace trainpack
