#!/usr/bin/env bash
# Checks that the installed package works for a user's project: installs the build in BUILD_DIR
# (default: build/, made by scripts/setup.sh) into a temporary prefix, then configures, builds and
# runs, against it with find_package(trainpack):
#   - tests/consumer (a NoOpTrainer with a custom callback; checks the counters);
#   - README.md's own snippets: the C++ of "Your first callback" with the CMakeLists.txt of
#     "Using trainpack from your project", taken from the README as they are written.
#
#   bash scripts/check_install.sh [BUILD_DIR]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD_DIR="${1:-build}"
JOBS="${JOBS:-$(nproc)}"

if [[ -t 1 ]]; then BOLD=$'\033[1m' PLAIN=$'\033[0m'; else BOLD='' PLAIN=''; fi
step() { printf '\n%s==> %s%s\n' "$BOLD" "$*" "$PLAIN"; }

[[ -f "$BUILD_DIR/CMakeCache.txt" ]] || {
  echo "check_install.sh: $BUILD_DIR is not a configured build; run scripts/setup.sh first" >&2
  exit 1
}

WORK="$(mktemp -d "${TMPDIR:-/tmp}/trainpack-install-check.XXXXXX")"
# The consumer's build runs in the background (below); stopped if this script ends first. No
# command of the trap may fail: under `set -e` its status would become the script's.
CONSUMER_BUILD=''
trap 'if [[ -n $CONSUMER_BUILD ]]; then kill "$CONSUMER_BUILD" 2>/dev/null || true; fi
      wait || true; rm -rf "$WORK"' EXIT
PREFIX="$WORK/prefix"

# Installed headers come from the source tree and the library from the build: bring the build
# up to date first, or a stale libtrainpack.a would not match the headers.
step "Bringing $BUILD_DIR up to date"
cmake --build "$BUILD_DIR" -j "$JOBS"

step "Installing $BUILD_DIR into $PREFIX"
cmake --install "$BUILD_DIR" --prefix "$PREFIX"

# The two projects below are configured and built side by side (each is one unit: one core each).
step "Building tests/consumer against the installed package (beside README.md's snippets; log: consumer.log)"
(
  cmake -S tests/consumer -B "$WORK/consumer" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$PREFIX" && cmake --build "$WORK/consumer" -j "$JOBS"
) >"$WORK/consumer.log" 2>&1 &
CONSUMER_BUILD=$!

# The first ```LANG block after the heading "## SECTION" of README.md.
readme_block() {
  awk -v section="## $1" -v fence="\`\`\`$2" '
    $0 == section { in_section = 1; next }
    in_section && /^## / { exit }
    in_section && !in_block && $0 == fence { in_block = 1; next }
    in_block && $0 == "```" { found = 1; exit }
    in_block { print }
    END { if (!found) exit 1 }
  ' README.md
}

step "Building README.md's snippets against the installed package"
mkdir -p "$WORK/readme"
readme_block "Your first callback" cpp >"$WORK/readme/main.cpp" ||
  { echo "check_install.sh: no cpp block under '## Your first callback' in README.md" >&2; exit 1; }
readme_block "Using trainpack from your project" cmake >"$WORK/readme/CMakeLists.txt" ||
  { echo "check_install.sh: no cmake block under '## Using trainpack from your project' in README.md" >&2; exit 1; }
cmake -S "$WORK/readme" -B "$WORK/readme/build" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_CXX_FLAGS="-Wall -Wextra -Werror"
cmake --build "$WORK/readme/build" -j "$JOBS"

step "Running README.md's example"
"$WORK/readme/build/my_app"

consumer_status=0
wait "$CONSUMER_BUILD" || consumer_status=$?
CONSUMER_BUILD=''
if ((consumer_status != 0)); then
  cat "$WORK/consumer.log"
  echo "check_install.sh: building tests/consumer against the installed package failed (above)" >&2
  exit 1
fi
step "Running the consumer"
"$WORK/consumer/consumer"
