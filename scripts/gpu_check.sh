#!/usr/bin/env bash
# Builds trainpack on a GPU machine against the LibTorch of its Python's torch (a CUDA build) with
# every core, and runs the test suite there; the logs and a summary go to OUT_DIR.
#
#   bash scripts/gpu_check.sh [OUT_DIR]      (default: gpu-check/)
#
# For machines where nothing can be installed: it needs CMake, a C++ compiler, Python's torch
# (its CMake package: torch.utils.cmake_prefix_path), the CUDA toolkit it was built for, and the
# libraries of docs/libtorch-versions.md. Gloo's headers are optional (without them the CPU
# data-parallel backend is left out, and its tests say so). The chaos suite is left out (it runs
# in CI). Environment: JOBS (default: all cores), BUILD_DIR (default: build-gpu).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
OUT_DIR="${1:-gpu-check}"
BUILD_DIR="${BUILD_DIR:-build-gpu}"
JOBS="${JOBS:-$(nproc)}"
mkdir -p "$OUT_DIR"
SUMMARY="$OUT_DIR/summary.txt"
: >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }

SECONDS=0
PREFIX="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')" || {
  note "Python's torch is not importable: no LibTorch to build against"
  exit 1
}
note "torch $(python3 -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())')"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null |
  sed 's/^/GPU: /' | tee -a "$SUMMARY"

if ! cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DTRAINPACK_WERROR=ON \
    -DTRAINPACK_BUILD_BENCHMARKS=OFF -DCMAKE_PREFIX_PATH="$PREFIX" >"$OUT_DIR/configure.log" 2>&1; then
  tail -30 "$OUT_DIR/configure.log"
  note "configure FAILED (configure.log)"
  exit 1
fi
grep "trainpack:" "$OUT_DIR/configure.log" | tee -a "$SUMMARY"
note "configured in ${SECONDS}s"
if ! cmake --build "$BUILD_DIR" -j "$JOBS" -- -k >"$OUT_DIR/build.log" 2>&1; then
  grep -E "error|Error" "$OUT_DIR/build.log" | head -40
  note "build FAILED after ${SECONDS}s (build.log)"
  exit 1
fi
note "built in ${SECONDS}s with $JOBS jobs"

ctest --test-dir "$BUILD_DIR" -j "$JOBS" -LE chaos --output-on-failure --timeout 300 \
  >"$OUT_DIR/ctest.log" 2>&1
status=$?
grep -E "tests passed|tests failed|Total Test time" "$OUT_DIR/ctest.log" | tee -a "$SUMMARY"
sed -n '/The following tests FAILED/,$p' "$OUT_DIR/ctest.log" | tee -a "$SUMMARY"
note "done in ${SECONDS}s, ctest status $status"
exit $status
