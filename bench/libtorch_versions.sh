#!/usr/bin/env bash
# What an upgrade of LibTorch does to trainpack, side by side on one machine in one run: the loop's
# dispatch overhead (trainpack_bench_overhead) and the main job's step time in float32 and
# bfloat16 (trainpack_bench_precision), each built against Debian 12's LibTorch 1.13 (HOST_BUILD)
# and Debian sid's 2.14 (SID_BUILD, built in the root of scripts/debian_sid.sh, with benchmarks).
# The two run alternately, REPS times, so that drift in the machine's speed hits them alike; every
# run's output goes to OUT_DIR, and the lines that matter are printed at the end.
#
#   bash bench/libtorch_versions.sh HOST_BUILD SID_BUILD [REPS (2)] [OUT_DIR (bench-versions)]
#
# Needs root (the sid root is a chroot). About 3 minutes a rep on 2 cores.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
[[ $# -ge 2 ]] || { sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
HOST_BUILD=$1 SID_BUILD=$2 REPS=${3:-2} OUT_DIR=${4:-bench-versions}
mkdir -p "$OUT_DIR"
for b in "$HOST_BUILD" "$SID_BUILD"; do
  for t in overhead precision; do
    [[ -x $b/bench/trainpack_bench_$t ]] || { echo "$b/bench/trainpack_bench_$t is not built" >&2; exit 1; }
  done
done

# run LABEL BENCH ARGS...: on this machine (1.13) or in the sid root (2.14).
run() {
  local label=$1 bench=$2
  shift 2
  local out="$OUT_DIR/${label}_${bench}_rep${rep}.txt"
  if [[ $label == lt1.13 ]]; then
    "$HOST_BUILD/bench/trainpack_bench_$bench" "$@" >"$out" 2>/dev/null
  else
    bash scripts/debian_sid.sh --exec "$SID_BUILD/bench/trainpack_bench_$bench" "$@" >"$out" 2>/dev/null
  fi
}

for rep in $(seq 1 "$REPS"); do
  for label in lt1.13 lt2.14; do
    run "$label" overhead --reps 3
    run "$label" precision --epochs 1 --steps 150 --reps 1
  done
done

echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p')"
for label in lt1.13 lt2.14; do
  echo "== LibTorch ${label#lt}"
  for rep in $(seq 1 "$REPS"); do
    grep -h -E "^\(a\)|^\(c\)|overhead_ns_per_step" "$OUT_DIR/${label}_overhead_rep${rep}.txt" |
      sed "s/^/rep $rep overhead: /"
    grep -h -E "ms/step|step time|bf16_over_fp32" "$OUT_DIR/${label}_precision_rep${rep}.txt" |
      sed "s/^/rep $rep precision: /"
  done
done
