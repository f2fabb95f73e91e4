#!/usr/bin/env bash
# One command for a GPU machine: builds what the GPU checks need against the LibTorch of its
# Python's torch (a CUDA build) with every core, runs the CUDA tests, the main job on the GPU
# (eager, then as a CUDA graph) and the GPU benchmark, and writes the logs and a summary to OUT_DIR,
# all within a deadline (8 minutes by default, the build included).
#
#   bash scripts/gpu_check.sh [OUT_DIR]      (default: gpu-check/)
#
# The stages, each timed, each with its own log in OUT_DIR (<stage>.log), each under `timeout`:
#   configure   cmake, Release, benchmarks on, Ninja when `ninja` exists; -Werror off unless
#               WERROR=ON: a warning of that machine's newer compiler must not cost the one GPU
#               run its figures (the summary counts the build's warnings instead);
#   build       only trainpack_cuda_tests, fashion_mnist and trainpack_bench_gpu (and the library);
#   ctest_cuda  ctest -L cuda: tests/cuda/ (trainpack_cuda_tests), each skipped with a message
#               without a GPU;
#   main_eager  the main job, 2 epochs: fashion_mnist --device cuda --max-epoch 2
#               --max-val-error 0.15 (two epochs are not the 10 the default limit of 0.10 is
#               for), log directory OUT_DIR/main_eager/;
#   main_graph  the same with --cuda-graph, into OUT_DIR/main_graph/;
#   bench_gpu   bench/gpu/run.py --device cuda: bare C++, trainpack, trainpack's CUDA graph, bare
#               Python and Lightning, ms/step and the ratios against their goals; JSON in
#               OUT_DIR/bench_gpu.json;
#   main_torchrun  the main job under torchrun, one process per GPU (--nproc_per_node: the GPUs
#               present; a world of one on a one-GPU machine), 1 epoch of 12,800 images, in
#               what time the deadline leaves.
# A stage that fails does not stop the later ones (a stage whose program was not built is skipped
# and counted as failed); the exit status is 0 only when every stage passed. OUT_DIR/summary.txt
# (also printed) holds the versions (torch, CUDA, GPU, compiler, CMake), each stage's time and
# outcome, the test counts, the main job's verdict lines, the benchmark's table and goals.
#
# Deadline: DEADLINE seconds (default 450, under 8 minutes with the `timeout -k` grace) for
# everything. Each stage's timeout is its own cap or what the deadline leaves after the minimum
# the later stages keep, whichever is smaller; a stage left with under 10 s is skipped. So a slow
# build eats into the later stages' caps but never into their minimum (ctest 30 s, each main job
# 30 s, the benchmark 60 s).
#
# For machines where nothing can be installed: it needs CMake, a C++ compiler, Python's torch (its
# CMake package: torch.utils.cmake_prefix_path), the CUDA toolkit it was built for, and the
# libraries of docs/libtorch-versions.md. Gloo's headers are optional (without them the CPU
# data-parallel backend is left out). The rest of the test suite and the chaos suite are left out
# (they run in CI, without a GPU).
#
# Environment:
#   PYTHON             the Python whose torch is built against (default: python3)
#   TORCH_PREFIX       CMake prefix of the LibTorch (default: PYTHON's
#                      torch.utils.cmake_prefix_path)
#   BUILD_DIR          default: build-gpu
#   JOBS               build jobs (default: all cores); CTEST_JOBS: ctest's (default: 4)
#   DEVICE             cuda (default), or cpu to try the script on a machine without a GPU (the
#                      main job then runs on the CPU, the graph run is skipped, the benchmark runs
#                      --device cpu)
#   FASHION_MNIST_DIR  the dataset's gzipped IDX files (default: /usr/share/datasets/fashion-mnist,
#                      Debian's dataset-fashion-mnist); without them the main job is skipped with
#                      a line in the summary (it has no synthetic data)
#   MAIN_JOB_ARGS      more flags for both main job runs (e.g. "--train-limit 2000")
#   BENCH_ARGS         more flags for bench/gpu/run.py (e.g. "--smoke")
#   DEADLINE           seconds for everything (default 450)
#   WERROR             ON: build with -Werror (default OFF, see configure above)
#   GPU_CHECK_DRY_RUN  1: print every stage's command and timeout, run nothing
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT" || exit 1
OUT_DIR="${1:-gpu-check}"
BUILD_DIR="${BUILD_DIR:-build-gpu}"
JOBS="${JOBS:-$(nproc)}"
CTEST_JOBS="${CTEST_JOBS:-4}"
PYTHON="${PYTHON:-python3}"
DEVICE="${DEVICE:-cuda}"
DATA_DIR="${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"
DEADLINE="${DEADLINE:-450}"
DRY_RUN="${GPU_CHECK_DRY_RUN:-0}"
read -r -a MAIN_JOB_EXTRA <<<"${MAIN_JOB_ARGS:-}"
read -r -a BENCH_EXTRA <<<"${BENCH_ARGS:-}"
mkdir -p "$OUT_DIR" && OUT_DIR="$(cd "$OUT_DIR" && pwd)" || exit 1
SUMMARY="$OUT_DIR/summary.txt"
: >"$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }

SECONDS=0
status=0
[[ "$DEVICE" == cuda || "$DEVICE" == cpu ]] || { note "DEVICE must be cuda or cpu, got '$DEVICE'"; exit 2; }
[[ "$DRY_RUN" == 1 ]] && note "GPU_CHECK_DRY_RUN=1: nothing runs; each stage says what it would run"
commit="? (no git repository)"
if head="$(git rev-parse --short HEAD 2>/dev/null)"; then
  commit="$head"
  git diff --quiet HEAD 2>/dev/null || commit+=" with uncommitted changes"
fi
note "gpu_check.sh: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit $commit, device $DEVICE, deadline ${DEADLINE}s, $JOBS build jobs"

# ---- stages ----

# The timeout of the next stage: min(CAP, the deadline - elapsed - RESERVE), RESERVE being the
# minimum that the stages after it keep. Sets LIMIT.
limit_for() {
  local cap=$1 reserve=$2 left
  left=$((DEADLINE - SECONDS - reserve))
  LIMIT=$((cap < left ? cap : left))
}

# run_stage NAME COMMAND...: runs COMMAND under `timeout $LIMIT`, its output in OUT_DIR/NAME.log;
# notes the time and the outcome in the summary; sets STAGE_STATUS (125: skipped by the deadline).
run_stage() {
  local name=$1 t0
  shift
  if ((LIMIT < 10)); then
    note "$name: SKIPPED: the deadline (${DEADLINE}s) leaves no time for it (${SECONDS}s spent)"
    STAGE_STATUS=125
    status=1
    return
  fi
  if [[ "$DRY_RUN" == 1 ]]; then
    note "$name: would run with timeout ${LIMIT}s: $*"
    STAGE_STATUS=0
    return
  fi
  t0=$SECONDS
  timeout -k 10 "$LIMIT" "$@" >"$OUT_DIR/$name.log" 2>&1
  STAGE_STATUS=$?
  local took=$((SECONDS - t0))
  case $STAGE_STATUS in
    0) note "$name: ok in ${took}s" ;;
    124 | 137) note "$name: TIMED OUT after ${took}s (timeout ${LIMIT}s; $name.log)" ;;
    *) note "$name: FAILED with exit status $STAGE_STATUS after ${took}s ($name.log)" ;;
  esac
  ((STAGE_STATUS == 0)) || status=1
}

# skip_stage NAME REASON: a stage that cannot run (counted as failed).
skip_stage() {
  note "$1: SKIPPED: $2"
  status=1
}

# ---- versions ----

if [[ "$DRY_RUN" == 1 && -z "${TORCH_PREFIX:-}" ]]; then
  PREFIX="<$PYTHON's torch.utils.cmake_prefix_path>"
else
  # One Python start (importing torch takes seconds): the prefix and the versions.
  versions="$(timeout 120 "$PYTHON" -c '
import torch
print(torch.utils.cmake_prefix_path)
gpus = torch.cuda.device_count()
names = ", ".join(torch.cuda.get_device_name(i) for i in range(gpus))
print("torch %s, CUDA %s, cuDNN %s, %d GPU(s)%s" % (torch.__version__, torch.version.cuda,
      torch.backends.cudnn.version(), gpus, " (" + names + ")" if names else ""))
' 2>"$OUT_DIR/python_torch.log")" || {
    note "$PYTHON cannot import torch (python_torch.log): no LibTorch to build against"
    [[ -n "${TORCH_PREFIX:-}" ]] || exit 1
  }
  PREFIX="$(sed -n 1p <<<"$versions")"
  note "Python: $("$PYTHON" --version 2>&1) ($(command -v "$PYTHON")); $(sed -n 2p <<<"$versions")"
fi
PREFIX="${TORCH_PREFIX:-$PREFIX}"
note "LibTorch: CMake prefix $PREFIX"
if command -v nvidia-smi >/dev/null; then
  timeout 30 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 |
    sed 's/^/GPU (nvidia-smi): /' | tee -a "$SUMMARY"
else
  note "GPU (nvidia-smi): nvidia-smi not found"
fi
note "tools: $(cmake --version | head -1), $(c++ --version | head -1)$(command -v ninja >/dev/null && echo ", ninja $(ninja --version)"), $(nproc) cores"

# ---- configure and build ----

GENERATOR=()
if [[ -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  # The generator it was configured with stays (CMake refuses another).
  grep -q "CMAKE_GENERATOR:INTERNAL=Ninja" "$BUILD_DIR/CMakeCache.txt" && NINJA=1 || NINJA=0
elif command -v ninja >/dev/null; then
  GENERATOR=(-G Ninja)
  NINJA=1
else
  NINJA=0
fi
limit_for 120 180
run_stage configure cmake -S . -B "$BUILD_DIR" ${GENERATOR[@]+"${GENERATOR[@]}"} \
  -DCMAKE_BUILD_TYPE=Release -DTRAINPACK_WERROR="${WERROR:-OFF}" -DTRAINPACK_BUILD_TESTS=ON \
  -DTRAINPACK_BUILD_EXAMPLES=ON -DTRAINPACK_BUILD_BENCHMARKS=ON -DCMAKE_PREFIX_PATH="$PREFIX" \
  -DTRAINPACK_TORCH_PYTHON="$(command -v "$PYTHON" || echo "$PYTHON")"
[[ -f "$OUT_DIR/configure.log" ]] && grep "trainpack:" "$OUT_DIR/configure.log" | tee -a "$SUMMARY"

TARGETS=(trainpack_cuda_tests fashion_mnist trainpack_bench_gpu)
if [[ "$DRY_RUN" != 1 && ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
  skip_stage build "not configured"
else
  # Keep going past a failing unit (-k): the targets that do not need it are still built.
  KEEP_GOING=(-k)
  ((NINJA)) && KEEP_GOING=(-k 0)
  limit_for 420 150
  run_stage build cmake --build "$BUILD_DIR" -j "$JOBS" --target "${TARGETS[@]}" -- "${KEEP_GOING[@]}"
  if [[ "$DRY_RUN" != 1 && $STAGE_STATUS -ne 0 && -f "$OUT_DIR/build.log" ]]; then
    grep -E "error|Error" "$OUT_DIR/build.log" | head -20 | tee -a "$SUMMARY"
  fi
  if [[ "$DRY_RUN" != 1 && -f "$OUT_DIR/build.log" ]]; then
    note "build warnings: $(grep -c 'warning:' "$OUT_DIR/build.log") (build.log; -Werror is WERROR=${WERROR:-OFF})"
    grep -m 5 'warning:' "$OUT_DIR/build.log" | tee -a "$SUMMARY"
  fi
fi
CUDA_TESTS="$BUILD_DIR/tests/trainpack_cuda_tests"
FASHION_MNIST="$BUILD_DIR/examples/fashion_mnist/fashion_mnist"
BENCH="$BUILD_DIR/bench/trainpack_bench_gpu"
built() { [[ "$DRY_RUN" == 1 || -x "$1" ]]; }

# ---- the CUDA tests ----

if built "$CUDA_TESTS"; then
  limit_for 120 $((30 + 30 + 60))
  run_stage ctest_cuda ctest --test-dir "$BUILD_DIR" -L cuda -j "$CTEST_JOBS" --output-on-failure \
    --timeout 120
  if [[ -f "$OUT_DIR/ctest_cuda.log" && "$DRY_RUN" != 1 ]]; then
    log="$OUT_DIR/ctest_cuda.log"
    total="$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -1)"
    failed="$(sed -n 's/.* \([0-9]*\) tests failed out of.*/\1/p' "$log" | tail -1)"
    skipped="$(grep -c '(Skipped)' "$log")"
    note "CUDA tests: ${total:-?} in all, ${failed:-?} failed, ${skipped} skipped (a skipped one says why in ctest_cuda.log); $(grep -o 'Total Test time.*' "$log" | tail -1)"
    sed -n '/The following tests FAILED/,$p' "$log" | tee -a "$SUMMARY"
    [[ "$total" == 0 || -z "$total" ]] && { note "CUDA tests: none ran"; status=1; }
  fi
else
  skip_stage ctest_cuda "$CUDA_TESTS was not built"
fi

# ---- the main job ----

have_data() {
  local f
  for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz \
    t10k-labels-idx1-ubyte.gz; do
    [[ -f "$DATA_DIR/$f" ]] || return 1
  done
}

# main_job NAME FLAGS...: the main job for 2 epochs into OUT_DIR/NAME/, its verdict lines noted.
main_job() {
  local name=$1
  shift
  rm -rf "${OUT_DIR:?}/$name"
  run_stage "$name" "$FASHION_MNIST" --device "$DEVICE" --max-epoch 2 --max-val-error 0.15 \
    --data "$DATA_DIR" --logdir "$OUT_DIR/$name" "$@" ${MAIN_JOB_EXTRA[@]+"${MAIN_JOB_EXTRA[@]}"}
  if [[ -f "$OUT_DIR/$name.log" && "$DRY_RUN" != 1 ]]; then
    grep -E "\[CudaGraph\]|fashion_mnist: (OK|FAILED|training took|error|training failed)" \
      "$OUT_DIR/$name.log" | sed "s/^/$name: /" | tail -6 | tee -a "$SUMMARY"
    sed -n '/fashion_mnist: per epoch/,/training took/p' "$OUT_DIR/$name.log" |
      grep -E '^ *(epoch|[0-9])' | sed "s/^/$name: /" | tee -a "$SUMMARY"
  fi
}

if ! built "$FASHION_MNIST"; then
  skip_stage main_eager "$FASHION_MNIST was not built"
  skip_stage main_graph "$FASHION_MNIST was not built"
elif ! have_data; then
  # Not a failure of trainpack: the machine has no copy of the data (set FASHION_MNIST_DIR).
  note "main job skipped: no data at $DATA_DIR (the four gzipped IDX files of Fashion-MNIST; set FASHION_MNIST_DIR)"
else
  limit_for 90 $((30 + 60))
  main_job main_eager
  if [[ "$DEVICE" == cuda ]]; then
    limit_for 90 60
    main_job main_graph --cuda-graph
  else
    note "main_graph: not run: --cuda-graph needs --device cuda"
  fi
fi

# ---- the benchmark ----

if built "$BENCH"; then
  limit_for 200 0
  run_stage bench_gpu "$PYTHON" bench/gpu/run.py --build "$BUILD_DIR" --device "$DEVICE" \
    --python "$PYTHON" --json "$OUT_DIR/bench_gpu.json" --deadline $((LIMIT > 25 ? LIMIT - 15 : 10)) \
    ${BENCH_EXTRA[@]+"${BENCH_EXTRA[@]}"}
  if [[ -f "$OUT_DIR/bench_gpu.log" && "$DRY_RUN" != 1 ]]; then
    grep -E "^run.py: .*(failed|timed out|exit status)" "$OUT_DIR/bench_gpu.log" | tee -a "$SUMMARY"
    # The table and the goals: from the table's header to the end.
    sed -n '/^form  /,$p' "$OUT_DIR/bench_gpu.log" | grep -v "^run.py: summary written" |
      tee -a "$SUMMARY"
  fi
else
  skip_stage bench_gpu "$BENCH was not built"
fi

# ---- the main job under torchrun, one process per GPU (last: what time is left) ----
# NCCL between the ranks when there are several GPUs; on a machine with one, a world of one.

if [[ "$DEVICE" == cuda ]] && built "$FASHION_MNIST" && have_data; then
  NGPU="$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)"
  if [[ "$DRY_RUN" == 1 || "$NGPU" -ge 1 ]]; then
    limit_for 75 0
    run_stage main_torchrun env USE_LIBUV=0 "$PYTHON" -m torch.distributed.run --standalone \
      --nproc_per_node="${NGPU:-1}" "$FASHION_MNIST" --device cuda --max-epoch 1 \
      --train-limit 12800 --max-val-error 1 --data "$DATA_DIR" --logdir "$OUT_DIR/main_torchrun" \
      ${MAIN_JOB_EXTRA[@]+"${MAIN_JOB_EXTRA[@]}"}
    if [[ -f "$OUT_DIR/main_torchrun.log" && "$DRY_RUN" != 1 ]]; then
      grep -E "rank [0-9]+ of|fashion_mnist: (OK|FAILED|error|training failed)" \
        "$OUT_DIR/main_torchrun.log" | sed "s/^/main_torchrun: /" | tail -6 | tee -a "$SUMMARY"
    fi
  else
    skip_stage main_torchrun "torch.cuda.device_count() is ${NGPU:-?}"
  fi
fi

note "done in ${SECONDS}s (deadline ${DEADLINE}s), status $status; logs in $OUT_DIR"
exit $status
