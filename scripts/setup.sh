#!/usr/bin/env bash
# Sets up trainpack on a fresh Debian 12 machine, then builds it. Safe to run again: it installs
# only what is missing and rebuilds only what changed.
#
#   bash scripts/setup.sh            install packages, configure and build (build/, Release)
#   bash scripts/setup.sh --run      ... build only the main job (library and example) and run it;
#                                    alone, it installs only the packages that the build needs
#   bash scripts/setup.sh --test     ... then run the whole test suite (ctest)
#   bash scripts/setup.sh --asan     build and test with AddressSanitizer+UBSan in build-asan/
#   bash scripts/setup.sh --tsan     build and test with ThreadSanitizer in build-tsan/
#   bash scripts/setup.sh --install-only   install the packages, then stop (no build)
#   bash scripts/setup.sh --pip-torch ...  build against pip's LibTorch (PyTorch's CUDA wheel, set
#                                          up by scripts/pip_libtorch.sh in .venvs/) in build-pip/
#   bash scripts/setup.sh --torch-python PYTHON ...   build against the torch that PYTHON imports
#                                          (a venv's or conda's python; CPU or CUDA) in build-pip/
#
# Options combine (`--test --asan` tests the release build, then the ASan build). Arguments after
# `--` go to every cmake configure, e.g. `-- -DTorch_DIR=/opt/libtorch/share/cmake/Torch`.
# Environment: JOBS (parallel compile jobs; default: all cores); BUILD_DIR (the release build's
# directory; default build, or build-pip with a Python's torch; the sanitizer builds go to
# BUILD_DIR-asan/ and BUILD_DIR-tsan/); BUILD_TARGETS (build only these targets, e.g.
# "fashion_mnist", instead of everything; --test then runs what was built); SKIP_LABELS (a ctest
# label regex that --test leaves out, e.g. "tracking"). Compiles go through ccache when it is installed (setup.sh
# installs it; its cache, ~/.cache/ccache, is outside the clone): a second clone, or a rebuild
# after `git clean`, compiles only what changed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# Debian 12 packages the project needs, in two sets. BUILD_PACKAGES build the library and the
# examples and run the main job: libopenblas0-pthread replaces the slow reference BLAS that
# Debian's LibTorch loads otherwise; libgloo-dev holds the headers of Gloo, the library under
# c10d's CPU collectives, which data-parallel training (DataParallelTrainer, docs/distributed.md)
# compiles against (libtorch-dev ships c10d itself but not these headers); dataset-fashion-mnist
# holds the data of the Fashion-MNIST example; libprotobuf-dev/protobuf-compiler build the event
# files' messages; libcurl4-openssl-dev sends the experiment-tracking monitors' requests
# (CometMLMonitor, MLflowMonitor; docs/experiment-tracking.md) over http and https; libpng-dev
# encodes image summaries and, with libjpeg-dev (libjpeg-turbo), decodes PNG and JPEG files
# (trainpack/utils/image_decode.h).
BUILD_PACKAGES=(
  cmake g++ make
  libtorch-dev libopenblas0-pthread libgloo-dev
  nlohmann-json3-dev libfmt-dev libpng-dev libjpeg-dev zlib1g-dev libcli11-dev
  libprotobuf-dev protobuf-compiler libcurl4-openssl-dev
  dataset-fashion-mnist ccache
)
# TEST_PACKAGES build and run the test suite and the benchmarks. python3-pil lets the tests decode
# the PNG inside an image event and the test images of the PNG and JPEG decoders, whose pixels they
# compare with Pillow's. python3-torchvision is the peer that the image augmentors' resize is
# compared with, and the input benchmark's other side (torchvision's ImageFolder and DataLoader;
# both skip with a message without it). python3-torch provides torchrun, PyTorch's launcher, which starts
# the processes of a data-parallel run (scripts/train_distributed.sh; the distributed tests pass
# with a message without it), and lets the tests check that Python's torch.load reads a
# checkpoint (skipped without it). The python3-protobuf ... python3-bleach line is what
# TensorBoard's own Python loader needs, with which a test reads split event files back
# (TRAINPACK_TENSORBOARD_READER in tests/CMakeLists.txt; skipped when that script is absent).
# python3-venv makes pip's venv (scripts/pip_libtorch.sh; a test makes one too). iproute2 and
# util-linux make the test hosts of the multi-host tests (network namespaces joined by a bridge,
# tests/multihost/; skipped without root). chromium renders TensorBoard's page headless for the
# screenshot test (scripts/tensorboard_screenshot.py; skipped without it).
TEST_PACKAGES=(
  libgtest-dev libgmock-dev libbenchmark-dev iproute2 util-linux
  python3-numpy python3-pil python3-torch python3-torchvision
  python3-protobuf python3-grpcio python3-werkzeug python3-markdown python3-six python3-packaging
  python3-absl python3-setuptools python3-bleach
  python3-venv chromium
)
# With a Python's torch (--pip-torch, --torch-python), Debian's LibTorch and Python torch are not
# needed, and pip's venv needs python3-venv whatever is built.
DEBIAN_TORCH_PACKAGES=(libtorch-dev python3-torch python3-torchvision)

JOBS="${JOBS:-$(nproc)}"
CTEST_JOBS=2

# ---- the main job: what `--run` runs. One place to change it. ----
# A small CNN trained on Fashion-MNIST with its defaults (a few minutes on 2 cores), writing
# into train_log/fashion_mnist/ (README: "The main job").
MAIN_JOB_NAME="fashion_mnist example"
run_main_job() {
  local MAIN_JOB=("$BUILD_DIR/examples/fashion_mnist/fashion_mnist")
  step "Running the main job: ${MAIN_JOB_NAME} (${MAIN_JOB[*]})"
  if [[ ! -x "${MAIN_JOB[0]}" ]]; then
    die "the main job's executable ${MAIN_JOB[0]} was not built"
  fi
  "${MAIN_JOB[@]}"
}

# ---- helpers ----
if [[ -t 1 ]]; then BOLD=$'\033[1m' PLAIN=$'\033[0m'; else BOLD='' PLAIN=''; fi
step() { printf '\n%s==> %s%s\n' "$BOLD" "$*" "$PLAIN"; }
die() {
  printf 'setup.sh: error: %s\n' "$*" >&2
  exit 1
}
usage() { sed -n '2,/^[^#]/{/^#/p}' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

DO_RUN=0 DO_TEST=0 DO_ASAN=0 DO_TSAN=0 INSTALL_ONLY=0 PIP_TORCH=0 TORCH_PYTHON=""
EXTRA_CMAKE_ARGS=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --run) DO_RUN=1 ;;
    --test) DO_TEST=1 ;;
    --asan) DO_ASAN=1 ;;
    --tsan) DO_TSAN=1 ;;
    --install-only) INSTALL_ONLY=1 ;;
    --pip-torch) PIP_TORCH=1 ;;
    --torch-python)
      [[ $# -ge 2 ]] || die "--torch-python needs the path of a Python, e.g. --torch-python ~/venv/bin/python"
      TORCH_PYTHON=$2
      shift
      ;;
    -h | --help) usage; exit 0 ;;
    --) shift; EXTRA_CMAKE_ARGS=("$@"); break ;;
    *) usage >&2; die "unknown option '$1'" ;;
  esac
  shift
done
if [[ $PIP_TORCH -eq 1 && -n $TORCH_PYTHON ]]; then
  die "--pip-torch and --torch-python each pick the LibTorch: give one of them"
fi
# `--run` alone (no tests, no sanitizer builds, no BUILD_TARGETS) needs only the build packages:
# the test suite's (its Python above all) are installed by the first command that tests.
RUN_ONLY=0
if [[ $DO_RUN -eq 1 && $((DO_TEST + DO_ASAN + DO_TSAN + INSTALL_ONLY)) -eq 0 && -z ${BUILD_TARGETS:-} ]]; then
  RUN_ONLY=1
  PACKAGES=("${BUILD_PACKAGES[@]}")
else
  PACKAGES=("${BUILD_PACKAGES[@]}" "${TEST_PACKAGES[@]}")
fi
# The peers that tests and benchmarks compare with but that nothing needs to build or pass
# (python3-torchvision: about 100 packages with its video libraries) are left out where
# TRAINPACK_NO_PEER_PACKAGES=1: Debian sid's root (scripts/debian_sid.sh), which builds for the
# cross-version check and runs no test.
if [[ ${TRAINPACK_NO_PEER_PACKAGES:-0} == 1 ]]; then
  keep=()
  for pkg in "${PACKAGES[@]}"; do
    [[ $pkg == python3-torchvision ]] || keep+=("$pkg")
  done
  PACKAGES=("${keep[@]}")
fi
if [[ $PIP_TORCH -eq 1 || -n $TORCH_PYTHON ]]; then
  BUILD_DIR="${BUILD_DIR:-build-pip}"
  [[ " ${PACKAGES[*]} " == *" python3-venv "* ]] || PACKAGES+=(python3-venv)
  keep=()
  for pkg in "${PACKAGES[@]}"; do
    [[ " ${DEBIAN_TORCH_PACKAGES[*]} " == *" $pkg "* ]] || keep+=("$pkg")
  done
  PACKAGES=("${keep[@]}")
else
  BUILD_DIR="${BUILD_DIR:-build}"
fi
# The release build is made unless only sanitizer builds were asked for.
DO_RELEASE=1
# `--run` alone builds what the main job needs (the library and the example), not the tests and
# benchmarks (most of a full build): the job starts minutes sooner. `--test` builds everything.
# A build directory that `--run` configures first leaves the tests and benchmarks out (their
# packages are not installed); one that already has them keeps them; every other command
# configures them in.
MAIN_JOB_TARGETS="fashion_mnist"
SUITE_ARGS=(-DTRAINPACK_BUILD_TESTS=ON -DTRAINPACK_BUILD_BENCHMARKS=ON)
if [[ $RUN_ONLY -eq 1 ]]; then
  BUILD_TARGETS=$MAIN_JOB_TARGETS
  SUITE_ARGS=()
  if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]]; then
    SUITE_ARGS=(-DTRAINPACK_BUILD_TESTS=OFF -DTRAINPACK_BUILD_BENCHMARKS=OFF)
  fi
fi
if [[ $((DO_ASAN + DO_TSAN)) -gt 0 && $((DO_RUN + DO_TEST)) -eq 0 ]]; then DO_RELEASE=0; fi

install_packages() {
  step "Checking Debian packages"
  local missing=() pkg
  for pkg in "${PACKAGES[@]}"; do
    if [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null || true)" != ii* ]]; then
      missing+=("$pkg")
    fi
  done
  if [[ ${#missing[@]} -eq 0 ]]; then
    echo "All ${#PACKAGES[@]} packages are installed."
    return
  fi
  echo "Missing: ${missing[*]}"
  command -v apt-get >/dev/null || die "apt-get not found; install these packages by hand: ${missing[*]}"
  local sudo=()
  if [[ "$(id -u)" -ne 0 ]]; then
    command -v sudo >/dev/null || die "not root and sudo is not installed; as root run: apt-get install ${missing[*]}"
    sudo=(sudo)
  fi
  step "Installing ${#missing[@]} packages with apt-get"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    "${missing[@]}"
}

report_blas() {
  # Which BLAS LibTorch will load (through Debian's alternatives); informational.
  local blas
  blas="$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || true)"
  if [[ -n "$blas" ]]; then
    echo "BLAS: $blas"
    [[ "$blas" == *openblas* ]] || echo "warning: not OpenBLAS; training will be several times slower"
  fi
}

# configure_and_build DIR BUILD_TYPE [cmake args...]
configure_and_build() {
  local dir="$1" type="$2"
  shift 2
  step "Configuring $dir ($type${*:+; $*})"
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE="$type" -DTRAINPACK_WERROR=ON \
    ${LAUNCHER_ARGS[@]+"${LAUNCHER_ARGS[@]}"} ${TORCH_ARGS[@]+"${TORCH_ARGS[@]}"} "$@" \
    ${EXTRA_CMAKE_ARGS[@]+"${EXTRA_CMAKE_ARGS[@]}"}
  if [[ -n ${BUILD_TARGETS:-} ]]; then
    step "Building $dir with $JOBS jobs: $BUILD_TARGETS (BUILD_TARGETS)"
    # shellcheck disable=SC2086  # a list of target names
    cmake --build "$dir" -j "$JOBS" --target $BUILD_TARGETS
  else
    step "Building $dir with $JOBS jobs"
    cmake --build "$dir" -j "$JOBS"
  fi
  if command -v ccache >/dev/null; then ccache --show-stats 2>/dev/null | grep -iE 'hits|misses' || true; fi
}

run_tests() {
  local dir="$1" skip=()
  if [[ -n ${SKIP_LABELS:-} ]]; then
    skip=(-LE "$SKIP_LABELS")
  else
    # The real MLflow server and client of the `tracking` tests (PyPI, into .venvs/; made once,
    # reused): a failure to make it leaves those tests skipped, each saying why.
    step "Setting up MLflow's and TensorBoard's servers (scripts/tracking_venv.sh)"
    bash scripts/tracking_venv.sh >/dev/null ||
      echo "warning: no tracking venv: the tests of label 'tracking' will be skipped" >&2
  fi
  step "Running the test suite in $dir${SKIP_LABELS:+ (without the labels $SKIP_LABELS)}"
  ctest --test-dir "$dir" --output-on-failure -j "$CTEST_JOBS" ${skip[@]+"${skip[@]}"}
}

# use_python_torch PYTHON: the build's LibTorch is the one inside PYTHON's torch package
# (scripts/python_torch.sh checks it and says why not).
TORCH_ARGS=()
use_python_torch() {
  local out
  out="$(bash scripts/python_torch.sh "$1")" || exit 1
  mapfile -t TORCH_ARGS <<<"$out"
  # No GPU to detect at configure time: LibTorch's package is told the architectures (trainpack
  # has no .cu files; this only replaces its detection). An H100/H200 is 9.0.
  export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
}

# ccache for every compile when it is installed; precompiled headers need its sloppiness.
LAUNCHER_ARGS=()
if command -v ccache >/dev/null; then
  LAUNCHER_ARGS=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
  export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-20G}"
  # Paths under the source tree hashed relative to it: another clone hits the same entries.
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}"
fi

SECONDS=0
install_packages
report_blas
if [[ $INSTALL_ONLY -eq 1 ]]; then
  step "Packages installed (--install-only: no build) in $((SECONDS / 60))m $((SECONDS % 60))s"
  exit 0
fi
if [[ $PIP_TORCH -eq 1 ]]; then
  step "Setting up pip's LibTorch (scripts/pip_libtorch.sh)"
  TORCH_PYTHON="$(bash scripts/pip_libtorch.sh | tail -1)"
fi
if [[ -n $TORCH_PYTHON ]]; then use_python_torch "$TORCH_PYTHON"; fi

if [[ $DO_RELEASE -eq 1 ]]; then
  configure_and_build "$BUILD_DIR" Release ${SUITE_ARGS[@]+"${SUITE_ARGS[@]}"}
  if [[ $DO_TEST -eq 1 ]]; then run_tests "$BUILD_DIR"; fi
  if [[ $DO_RUN -eq 1 ]]; then run_main_job; fi
fi
# Sanitizer builds: debug info for readable reports; benchmarks are not built there.
if [[ $DO_ASAN -eq 1 ]]; then
  configure_and_build "$BUILD_DIR-asan" RelWithDebInfo -DTRAINPACK_ASAN=ON \
    -DTRAINPACK_BUILD_BENCHMARKS=OFF
  run_tests "$BUILD_DIR-asan"
fi
if [[ $DO_TSAN -eq 1 ]]; then
  configure_and_build "$BUILD_DIR-tsan" RelWithDebInfo -DTRAINPACK_TSAN=ON \
    -DTRAINPACK_BUILD_BENCHMARKS=OFF
  run_tests "$BUILD_DIR-tsan"
fi

step "Done in $((SECONDS / 60))m $((SECONDS % 60))s"
