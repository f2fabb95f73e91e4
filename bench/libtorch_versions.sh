#!/usr/bin/env bash
# What the choice of LibTorch does to trainpack, side by side on one machine in one run: the loop's
# dispatch overhead with idle and with the default callbacks (trainpack_bench_overhead) and the main
# job's step time in float32 and bfloat16 (trainpack_bench_precision), each built against a
# different LibTorch: Debian 12's 1.13 (build/), pip's newest CUDA wheel run on the CPU
# (build-pip/, scripts/setup.sh --pip-torch), Debian sid's 2.14 (build-sid/, built in the root of
# scripts/debian_sid.sh with benchmarks; run there). The builds run in turn, REPS times, so that
# drift in the machine's speed hits them alike; every run's output goes to OUT_DIR, and the lines
# that matter are printed at the end, per build.
#
#   bash bench/libtorch_versions.sh [--reps N (2)] [--out OUT_DIR (bench-versions)] BUILD...
#   e.g. bash bench/libtorch_versions.sh --reps 3 build build-pip
#
# A sid build needs root (the sid root is a chroot). About 1.5 minutes a build a rep on 2 cores.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
usage() { sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
REPS=2 OUT_DIR=bench-versions
BUILDS=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --reps) REPS=$2; shift ;;
    --out) OUT_DIR=$2; shift ;;
    -h | --help) usage ;;
    -*) usage ;;
    *) BUILDS+=("${1%/}") ;;
  esac
  shift
done
[[ ${#BUILDS[@]} -ge 1 ]] || usage
mkdir -p "$OUT_DIR"

# in_sid BUILD: whether BUILD was made in the sid root (its source directory is /src).
in_sid() { grep -q '^CMAKE_HOME_DIRECTORY:INTERNAL=/src$' "$1/CMakeCache.txt"; }
# torch_of BUILD: the LibTorch version that the build's configure found.
torch_of() { sed -n 's/^TRAINPACK_TORCH_VERSION_FOUND:INTERNAL=/LibTorch /p' "$1/CMakeCache.txt"; }
for b in "${BUILDS[@]}"; do
  for t in overhead precision; do
    [[ -x $b/bench/trainpack_bench_$t ]] || {
      echo "$b/bench/trainpack_bench_$t is not built: cmake --build $b --target trainpack_benchmarks" \
        "(in the sid root for a sid build: scripts/debian_sid.sh --exec cmake --build $b ...)" >&2
      exit 1
    }
  done
done

# run BUILD BENCH ARGS...: on this machine, or in the sid root for a sid build.
run() {
  local build=$1 bench=$2
  shift 2
  local out="$OUT_DIR/$(basename "$build")_${bench}_rep${rep}.txt"
  if in_sid "$build"; then
    bash scripts/debian_sid.sh --exec "$build/bench/trainpack_bench_$bench" "$@" >"$out" 2>/dev/null
  else
    "$build/bench/trainpack_bench_$bench" "$@" >"$out" 2>/dev/null
  fi
}

echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1 /proc/loadavg)"
for rep in $(seq 1 "$REPS"); do
  for build in "${BUILDS[@]}"; do
    run "$build" overhead --reps 3
    run "$build" precision --epochs 1 --steps 150 --reps 1
  done
done
echo "load at the end: $(cut -d' ' -f1 /proc/loadavg)"

for build in "${BUILDS[@]}"; do
  echo "== $build: $(torch_of "$build")"
  for rep in $(seq 1 "$REPS"); do
    grep -h -E "^\(a\)|^\(c\)|overhead_ns_per_step" "$OUT_DIR/$(basename "$build")_overhead_rep${rep}.txt" |
      sed "s/^/rep $rep overhead: /"
    grep -h -E "ms/step|step time|bf16_over_fp32" "$OUT_DIR/$(basename "$build")_precision_rep${rep}.txt" |
      sed "s/^/rep $rep precision: /"
  done
done
