#!/usr/bin/env bash
# Checks the suite's main (fork_each_main.cpp) through trainpack_runner_cases
# (cases/cases.cpp): with --trainpack_fork_each_test every selected test runs in a process of its
# own, the exit status says passed (0), all skipped (77), failed (1) or nothing selected (2), and
# the last lines name each test that failed, crashed or timed out.
# Usage: fork_each_test.sh PATH/TO/trainpack_runner_cases
set -uo pipefail
cases=$1
failures=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# expect STATUS PATTERN... -- COMMAND...: COMMAND exits with STATUS and its output matches every
# PATTERN (grep -E).
expect() {
  local status=$1
  shift
  local patterns=()
  while [[ $1 != -- ]]; do patterns+=("$1"); shift; done
  shift
  "$@" >"$out" 2>&1
  local got=$?
  local ok=1
  [[ $got == "$status" ]] || { echo "FAIL: exit status $got, expected $status: $*"; ok=0; }
  local pattern
  for pattern in "${patterns[@]}"; do
    grep -Eq -- "$pattern" "$out" || { echo "FAIL: no line matches '$pattern': $*"; ok=0; }
  done
  if [[ $ok == 0 ]]; then
    sed 's/^/    | /' "$out" | tail -30
    failures=$((failures + 1))
  else
    echo "ok: $*"
  fi
}

fork=--trainpack_fork_each_test
expect 0 'RunnerCases\.Passes' '6 tests, each in its own process: 4 passed, 2 skipped, 0 failed' \
  -- "$cases" $fork '--gtest_filter=RunnerCases.*:RunnerOnlySkips.*'
expect 77 '1 tests, each in its own process: 0 passed, 1 skipped, 0 failed' \
  -- "$cases" $fork --gtest_filter='RunnerOnlySkips.*'
expect 1 '^\[  FAILED  \] RunnerCases\.FailsWhenAsked: exit status 1$' 'failed on purpose' \
  '3 passed, 1 skipped, 1 failed' \
  -- env RUNNER_CASES_FAIL=1 "$cases" $fork --gtest_filter='RunnerCases.*'
expect 1 '^\[  FAILED  \] RunnerCases\.CrashesWhenAsked: killed by signal 6' \
  -- env RUNNER_CASES_CRASH=1 "$cases" $fork --gtest_filter='RunnerCases.*'
expect 1 '^\[  FAILED  \] RunnerCases\.HangsWhenAsked: timed out after 1 s' '3 passed, 1 skipped, 1 failed' \
  -- env RUNNER_CASES_HANG=1 TRAINPACK_TEST_TIMEOUT_S=1 "$cases" $fork --gtest_filter='RunnerCases.*'
expect 0 '3 passed, 0 skipped, 0 failed' -- "$cases" $fork --gtest_filter='RunnerIsolation.*'
# The same two in one process: the second sees what the first did (so the check above can fail).
expect 1 'RunnerIsolation.SecondSeesNeither' -- "$cases" --gtest_filter='RunnerIsolation.Fi*:RunnerIsolation.Se*'
# Google Test's filter rules: negative patterns, '?', and a filter that selects nothing.
expect 0 '2 tests, each in its own process: 1 passed, 1 skipped' \
  -- "$cases" $fork '--gtest_filter=Runner?ases.*-*Crashes*:*Hangs*:*Fails*'
expect 2 "selects no test" -- "$cases" $fork --gtest_filter='NoSuchSuite.*'

if [[ $failures != 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"
