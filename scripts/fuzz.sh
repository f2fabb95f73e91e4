#!/usr/bin/env bash
# Builds and runs the coverage-guided fuzzers of everything a resume reads (tests/fuzz): the
# checkpoint data file, the `checkpoint` index, stats.json and hyper.txt, and of the PNG and JPEG
# decoder (decode_image), under ASan and UBSan,
# with libFuzzer (clang). Each starts from a seed corpus that trainpack's own writers make.
#
#   bash scripts/fuzz.sh              # each fuzzer for FUZZ_SECONDS (default 20): CI's short run
#   bash scripts/fuzz.sh --long       # each for 600 s, unless FUZZ_SECONDS says otherwise
#   bash scripts/fuzz.sh --install    # apt-get install clang first (as setup.sh installs the rest)
#
# Needs the packages of `scripts/setup.sh --install-only` and clang. Fails (exit 1) when a fuzzer
# finds a crash, a sanitizer report or a leak; the input that did it is kept in
# build-fuzz/findings/<fuzzer>/ and named in the output, to be replayed with
#   build-fuzz/trainpack_fuzz_<fuzzer> build-fuzz/findings/<fuzzer>/crash-...
# Environment: FUZZ_SECONDS, JOBS (compile jobs, and fuzzers run at once; default: the cores),
# FUZZ_BUILD_DIR (default build-fuzz).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

SECONDS_EACH="${FUZZ_SECONDS:-20}"
for arg in "$@"; do
  case "$arg" in
    --long) SECONDS_EACH="${FUZZ_SECONDS:-600}" ;;
    --install)
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null
      ;;
    *)
      echo "fuzz.sh: unknown argument '$arg' (--long, --install)" >&2
      exit 2
      ;;
  esac
done
if ! command -v clang++ >/dev/null; then
  echo "fuzz.sh: clang++ is not installed; run 'bash scripts/fuzz.sh --install' (or" \
    "apt-get install clang)" >&2
  exit 1
fi

BUILD="${FUZZ_BUILD_DIR:-build-fuzz}"
LAUNCHER=()
if command -v ccache >/dev/null; then
  LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}"
fi
cmake -S tests/fuzz -B "$BUILD" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "${LAUNCHER[@]}" >/dev/null
cmake --build "$BUILD" -j "${JOBS:-$(nproc)}"

CORPUS="$BUILD/corpus"
rm -rf "$CORPUS.seeds"
"$BUILD/trainpack_fuzz_seeds" "$CORPUS.seeds"
# ASan's leak check on: a reader that leaks on a bad file is a finding too.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# Leaks within LibTorch's own error paths are suppressed (tests/fuzz/lsan.supp says which and why).
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$ROOT/tests/fuzz/lsan.supp:print_suppressions=0}"
# fuzz_one NAME: runs one fuzzer for SECONDS_EACH into its log; its exit status is the fuzzer's.
fuzz_one() {
  local fuzzer=$1
  mkdir -p "$CORPUS/$fuzzer" "$BUILD/findings/$fuzzer"
  # The corpus grows between runs on one machine (build-fuzz/corpus); the seeds are re-read each
  # time. -rss_limit_mb: an input that makes a reader allocate gigabytes is a finding.
  "$BUILD/trainpack_fuzz_$fuzzer" "$CORPUS/$fuzzer" "$CORPUS.seeds/$fuzzer" \
    -max_total_time="$SECONDS_EACH" -rss_limit_mb=2048 -max_len=65536 -timeout=10 \
    -artifact_prefix="$BUILD/findings/$fuzzer/" -print_final_stats=1 \
    >"$BUILD/$fuzzer.log" 2>&1
}
# The fuzzers run side by side, as many at once as there are cores (JOBS), each on one core.
FUZZERS=(checkpoint checkpoint_index stats_json hyper_txt image_decode)
declare -A pid_of=()
failed=()
for fuzzer in "${FUZZERS[@]}"; do
  while (($(jobs -rp | wc -l) >= ${JOBS:-$(nproc)})); do sleep 1; done
  echo "== fuzzing $fuzzer for ${SECONDS_EACH} s"
  fuzz_one "$fuzzer" &
  pid_of[$fuzzer]=$!
done
for fuzzer in "${FUZZERS[@]}"; do
  if ! wait "${pid_of[$fuzzer]}"; then
    echo "== $fuzzer: a finding (its log's end)"
    tail -60 "$BUILD/$fuzzer.log"
    failed+=("$fuzzer")
  else
    echo "== $fuzzer"
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb|cov:" "$BUILD/$fuzzer.log" | tail -3
  fi
done
if ((${#failed[@]})); then
  echo "fuzz.sh: the fuzzers of ${failed[*]} found a defect; the inputs are in" \
    "$BUILD/findings/ (replay: $BUILD/trainpack_fuzz_<name> <input>)" >&2
  exit 1
fi
echo "fuzz.sh: no finding (${SECONDS_EACH} s each)"
