#!/usr/bin/env bash
# Checks trainpack_test_programs' dispatch (main.cpp): started under its own name with no program
# name it exits 2 listing the programs; a program's name as the first argument runs that program
# (trainpack_resume_child without arguments prints its usage and exits 2).
#   bash dispatch_test.sh PATH/TO/trainpack_test_programs
set -u
programs=$1
fail() { echo "dispatch_test.sh: $*" >&2; exit 1; }

out=$("$programs" 2>&1); status=$?
((status == 2)) || fail "no program name: exit $status, not 2 ($out)"
for name in trainpack_resume_child trainpack_dp_worker trainpack_inference_worker \
  trainpack_runtime_child trainpack_timeout_child trainpack_shell_child trainpack_tracking_child; do
  [[ $out == *" $name"* ]] || fail "the list of programs lacks $name: $out"
done

out=$("$programs" trainpack_resume_child 2>&1); status=$?
((status == 2)) || fail "trainpack_resume_child without arguments: exit $status, not 2 ($out)"
[[ $out == "usage: trainpack_resume_child <log dir> [--stop-test]" ]] ||
  fail "trainpack_resume_child without arguments printed: $out"
echo "dispatch_test.sh: OK"
