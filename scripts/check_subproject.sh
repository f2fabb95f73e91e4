#!/usr/bin/env bash
# Checks that a project taking trainpack in from source (FetchContent or add_subdirectory) gets
# the library alone: configures tests/consumer_subproject both ways against this checkout and
# checks that
#   - the targets are trainpack's library and the project's own (no trainpack_tests, examples or
#     benchmarks);
#   - trainpack's compile flags carry no -Werror, and no build type was forced on the project;
#   - `cmake --install` of the project installs nothing of trainpack's.
# With --build it also builds the consumer each way and runs it (a whole library build each: about
# 10 minutes on 2 cores, so the suite's ctest entry only configures).
#
#   bash scripts/check_subproject.sh [--build] [-- CMAKE_ARGS...]   (e.g. -- -DTorch_DIR=...)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD=0
if [[ ${1:-} == --build ]]; then BUILD=1; shift; fi
if [[ $# -gt 0 ]]; then
  [[ $1 == -- ]] || { sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
  shift
fi
JOBS="${JOBS:-$(nproc)}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/trainpack-subproject.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

fail() { echo "check_subproject.sh: FAILED ($1): $2" >&2; exit 1; }

check_way() {
  local way=$1 dir="$WORK/$1"
  local -a args=(-DTRAINPACK_CONSUME="$way")
  if [[ $way == subdirectory ]]; then
    args+=(-DTRAINPACK_SOURCE_DIR="$ROOT")
  else
    args+=(-DFETCHCONTENT_SOURCE_DIR_TRAINPACK="$ROOT")
  fi
  echo "==> $way: configuring tests/consumer_subproject"
  # No CMAKE_BUILD_TYPE and the Makefile generator: what a plain `cmake -S . -B build` does.
  cmake -S "$ROOT/tests/consumer_subproject" -B "$dir" -G "Unix Makefiles" "${args[@]}" "$@" \
    >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log" >&2; fail "$way" "configure failed"; }

  local targets
  targets="$(cmake --build "$dir" --target help)"
  grep -qE '^\.\.\. trainpack$' <<<"$targets" || fail "$way" "no target trainpack"
  grep -qE '^\.\.\. consumer$' <<<"$targets" || fail "$way" "no target consumer"
  local extra
  extra="$(grep -E '^\.\.\. (trainpack_tests|trainpack_cuda_tests|trainpack_docs_snippets|fashion_mnist|polynomial_fit|gan|bench_.*|gtest.*)$' <<<"$targets" || true)"
  [[ -z $extra ]] || fail "$way" "targets of trainpack's own were configured: $(tr '\n' ' ' <<<"$extra")"

  local flags
  flags="$(find "$dir" -path '*CMakeFiles/trainpack.dir/flags.make')"
  [[ -n $flags ]] || fail "$way" "no flags.make for the trainpack target"
  if grep -q -- '-Werror' $flags; then fail "$way" "trainpack is compiled with -Werror"; fi
  grep -q -- '-Wall' $flags || fail "$way" "the check is blind: -Wall not found in $flags"

  local build_type
  build_type="$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$dir/CMakeCache.txt")"
  [[ -z $build_type ]] || fail "$way" "CMAKE_BUILD_TYPE was set to '$build_type' for the project"

  # Nothing is built yet: trainpack's install rules, if there were any, would fail here.
  cmake --install "$dir" --prefix "$dir/prefix" >"$dir.install.log" 2>&1 ||
    fail "$way" "cmake --install runs trainpack's install rules: $(head -3 "$dir.install.log")"
  if [[ -e $dir/prefix ]] && [[ -n "$(find "$dir/prefix" -type f)" ]]; then
    fail "$way" "cmake --install installed trainpack's files: $(find "$dir/prefix" -type f | head -3)"
  fi
  echo "    the library alone: targets, flags, build type and install rules as expected"

  if [[ $BUILD == 1 ]]; then
    echo "==> $way: building and running the consumer"
    cmake --build "$dir" -j "$JOBS" --target consumer
    "$dir/consumer"
  fi
}

check_way subdirectory "$@"
check_way fetchcontent "$@"
echo "check_subproject.sh: OK"
