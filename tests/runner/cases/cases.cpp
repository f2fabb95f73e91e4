// The cases that tests/runner/fork_each_test.sh runs through the suite's main
// (fork_each_main.cpp): a test that passes, one that skips, and ones that fail, crash or hang when
// the environment variable named in them is set; and two tests whose second passes only if the
// first ran in another process.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>

namespace {

bool asked(const char* variable) { return std::getenv(variable) != nullptr; }

int touched_by_the_first = 0;

}  // namespace

TEST(RunnerCases, Passes) { EXPECT_EQ(1 + 1, 2); }

TEST(RunnerCases, Skips) { GTEST_SKIP() << "skipped on purpose"; }

TEST(RunnerCases, FailsWhenAsked) {
  EXPECT_FALSE(asked("RUNNER_CASES_FAIL")) << "failed on purpose";
}

TEST(RunnerCases, CrashesWhenAsked) {
  if (asked("RUNNER_CASES_CRASH")) std::abort();  // not SIGSEGV, which ASan turns into exit 1
}

TEST(RunnerCases, HangsWhenAsked) {
  if (asked("RUNNER_CASES_HANG")) ::pause();
}

TEST(RunnerOnlySkips, Skips) { GTEST_SKIP() << "skipped on purpose"; }

// Run in this order in one process, the second fails; each in its own process, both pass.
TEST(RunnerIsolation, FirstTouchesAGlobalAndTheWorkingDirectory) {
  touched_by_the_first = 1;
  ASSERT_EQ(::chdir("/"), 0);
}

TEST(RunnerIsolation, SecondSeesNeither) {
  EXPECT_EQ(touched_by_the_first, 0);
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof cwd), nullptr);
  EXPECT_STRNE(cwd, "/");
}

// Each test leads a process group of its own: signalling its group reaches nothing else.
TEST(RunnerIsolation, ATestLeadsItsOwnProcessGroup) { EXPECT_EQ(::getpgrp(), ::getpid()); }
