// The main of trainpack_tests: Google Test's own, plus one mode that ctest uses.
//
// Run as usual (`trainpack_tests --gtest_filter=...`), it is Google Test's main: every selected
// test in this process.
//
// With --trainpack_fork_each_test, every test that --gtest_filter selects runs in a child process
// of its own, forked from this one, one after the other; this process runs none. A test therefore
// sees a fresh process, as if it were run alone (signal handlers, globals, the logger's directory,
// the working directory and the environment cannot leak from one test to the next), but the
// suite no longer pays the start of a LibTorch program once per test: loading LibTorch and its
// static registrations takes about a second of CPU on Debian's 1.13 and 0.7 s on pip's 2.15,
// before any test code runs, and ctest ran 1,300 such processes. Each child:
//   - is the leader of a process group of its own (a test that signals its group signals
//     nothing else), and is killed if this process dies (PR_SET_PDEATHSIG);
//   - runs exactly one test through RUN_ALL_TESTS, so Google Test's environments, listeners and
//     output are those of a one-test run;
//   - is killed with its whole group after TRAINPACK_TEST_TIMEOUT_S seconds (default 600), and
//     the test counts as failed.
// Exit status: 0 when no test failed and at least one passed; 77 when every selected test was
// skipped (GTEST_SKIP; ctest's SKIP_RETURN_CODE); 1 when a test failed, crashed or timed out;
// 2 when the filter selected no test. The last lines name every test that did not pass.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace trainpack_test_runner {

constexpr const char* kForkEachFlag = "--trainpack_fork_each_test";
// A child whose test skipped, and this process when every test skipped (ctest's SKIP_RETURN_CODE).
constexpr int kSkippedExit = 77;
constexpr int kDefaultTimeoutSeconds = 600;

// Google Test's glob: '*' any string, '?' one character.
bool glob_matches(std::string_view pattern, std::string_view name) {
  size_t p = 0, n = 0, star = std::string_view::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

// Whether any of the ':'-separated patterns matches.
bool any_matches(std::string_view patterns, std::string_view name) {
  while (true) {
    const size_t colon = patterns.find(':');
    if (glob_matches(patterns.substr(0, colon), name)) return true;
    if (colon == std::string_view::npos) return false;
    patterns.remove_prefix(colon + 1);
  }
}

// --gtest_filter's rule: POSITIVE[-NEGATIVE], an empty POSITIVE selecting every test.
bool filter_selects(const std::string& filter, const std::string& full_name) {
  const size_t dash = filter.find('-');
  const std::string_view positive = std::string_view(filter).substr(0, dash);
  if (!positive.empty() && !any_matches(positive, full_name)) return false;
  return dash == std::string::npos ||
         !any_matches(std::string_view(filter).substr(dash + 1), full_name);
}

std::vector<std::string> selected_tests() {
  const std::string filter = ::testing::GTEST_FLAG(filter);
  const bool run_disabled = ::testing::GTEST_FLAG(also_run_disabled_tests);
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  std::vector<std::string> names;
  for (int s = 0; s < unit.total_test_suite_count(); ++s) {
    const ::testing::TestSuite& suite = *unit.GetTestSuite(s);
    for (int t = 0; t < suite.total_test_count(); ++t) {
      const ::testing::TestInfo& info = *suite.GetTestInfo(t);
      const std::string suite_name = info.test_suite_name();
      const std::string test_name = info.name();
      const bool disabled = suite_name.rfind("DISABLED_", 0) == 0 ||
                            suite_name.find("/DISABLED_") != std::string::npos ||
                            test_name.rfind("DISABLED_", 0) == 0;
      const std::string full = suite_name + "." + test_name;
      if ((!disabled || run_disabled) && filter_selects(filter, full)) names.push_back(full);
    }
  }
  return names;
}

int timeout_seconds() {
  const char* value = std::getenv("TRAINPACK_TEST_TIMEOUT_S");
  if (value == nullptr || *value == '\0') return kDefaultTimeoutSeconds;
  char* end = nullptr;
  const long seconds = std::strtol(value, &end, 10);
  if (*end != '\0' || seconds <= 0) {
    std::fprintf(stderr,
                 "TRAINPACK_TEST_TIMEOUT_S='%s' is not a positive number of seconds; "
                 "using %d\n",
                 value, kDefaultTimeoutSeconds);
    return kDefaultTimeoutSeconds;
  }
  return static_cast<int>(seconds);
}

// In the child: one test, then exit with 0 (passed), 1 (failed) or kSkippedExit.
[[noreturn]] void run_one_in_child(const std::string& full_name, pid_t parent) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) _exit(1);  // the parent died before the line above
  ::testing::GTEST_FLAG(filter) = full_name;
  const int failed = RUN_ALL_TESTS();
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  const int code = failed != 0 ? 1 : unit.skipped_test_count() > 0 ? kSkippedExit : 0;
  std::fflush(nullptr);
  std::exit(code);
}

enum class Outcome { kPassed, kSkipped, kFailed };

struct Result {
  Outcome outcome;
  std::string how;  // for a test that did not pass or skip: exit status, signal or timeout
};

Result wait_for(pid_t child, int timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  long sleep_us = 200;
  int status = 0;
  while (true) {
    const pid_t done = ::waitpid(child, &status, WNOHANG);
    if (done == child) break;
    if (done < 0 && errno != EINTR) {
      return {Outcome::kFailed, std::string("waitpid failed: ") + std::strerror(errno)};
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(-child, SIGKILL);
      ::kill(child, SIGKILL);
      while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
      }
      return {Outcome::kFailed, "timed out after " + std::to_string(timeout_s) +
                                    " s (TRAINPACK_TEST_TIMEOUT_S), killed with its group"};
    }
    const timespec pause{0, sleep_us * 1000};
    ::nanosleep(&pause, nullptr);
    sleep_us = std::min(sleep_us * 2, 20'000L);
  }
  if (WIFSIGNALED(status)) {
    return {Outcome::kFailed, std::string("killed by signal ") + std::to_string(WTERMSIG(status)) +
                                  " (" + strsignal(WTERMSIG(status)) + ")"};
  }
  const int code = WEXITSTATUS(status);
  if (code == 0) return {Outcome::kPassed, ""};
  if (code == kSkippedExit) return {Outcome::kSkipped, ""};
  return {Outcome::kFailed, "exit status " + std::to_string(code)};
}

int run_each_in_its_own_process() {
  const std::vector<std::string> names = selected_tests();
  if (names.empty()) {
    std::fprintf(stderr, "%s: --gtest_filter='%s' selects no test\n", kForkEachFlag,
                 ::testing::GTEST_FLAG(filter).c_str());
    return 2;
  }
  const int timeout_s = timeout_seconds();
  int passed = 0, skipped = 0;
  std::vector<std::string> failures;
  for (const std::string& name : names) {
    std::fflush(nullptr);  // nothing buffered here is printed twice by the child
    const pid_t parent = ::getpid();
    const pid_t child = ::fork();
    if (child < 0) {
      failures.push_back(name + ": fork failed: " + std::strerror(errno));
      continue;
    }
    if (child == 0) run_one_in_child(name, parent);
    const Result result = wait_for(child, timeout_s);
    switch (result.outcome) {
      case Outcome::kPassed:
        ++passed;
        break;
      case Outcome::kSkipped:
        ++skipped;
        break;
      case Outcome::kFailed:
        failures.push_back(name + ": " + result.how);
        break;
    }
  }
  std::printf(
      "\n[ fork each ] %zu tests, each in its own process: %d passed, %d skipped, %zu "
      "failed\n",
      names.size(), passed, skipped, failures.size());
  for (const std::string& failure : failures) std::printf("[  FAILED  ] %s\n", failure.c_str());
  std::fflush(stdout);
  if (!failures.empty()) return 1;
  return passed == 0 ? kSkippedExit : 0;
}

}  // namespace trainpack_test_runner

int main(int argc, char** argv) {
  bool fork_each = false;
  int kept = 0;
  for (int i = 0; i < argc; ++i) {
    if (i > 0 && std::strcmp(argv[i], trainpack_test_runner::kForkEachFlag) == 0) {
      fork_each = true;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argv[kept] = nullptr;
  argc = kept;
  ::testing::InitGoogleTest(&argc, argv);
  if (!fork_each || ::testing::GTEST_FLAG(list_tests)) return RUN_ALL_TESTS();
  return trainpack_test_runner::run_each_in_its_own_process();
}
