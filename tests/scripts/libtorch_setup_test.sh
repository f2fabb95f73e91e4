#!/usr/bin/env bash
# The bad inputs of building against a Python's LibTorch, each with the message it must give:
#   python   scripts/python_torch.sh with stand-in Pythons: no torch, a torch older than 1.13, a
#            CUDA build without nvcc, a CPU build (accepted, no CUDA compiler asked for);
#   cmake    cmake/find_torch.cmake in a small project with stand-in LibTorch packages: a CUDA
#            build without nvcc, Debian's libtorch.so taken for another LibTorch's (only where
#            Debian's libtorch-dev is installed), a LibTorch's own lib/ and Caffe2 package taken
#            first (also when only Torch_DIR names it), and the nvidia-* wheels' libraries first;
#   offline  scripts/pip_libtorch.sh with a registry that cannot be reached: it fails within a
#            minute, naming the command that failed.
# ctest runs each case as its own test: bash libtorch_setup_test.sh CASE WORKDIR.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CASE=${1:?case: python, cmake or offline}
WORK=${2:?work directory}
rm -rf "$WORK" && mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"
HOST_PYTHON=/usr/bin/python3

fail() {
  echo "FAILED: $*" >&2
  exit 1
}
# expect_fail NAME NEEDLE... -- CMD...: CMD fails, and its output has every NEEDLE.
expect_fail() {
  local name=$1 out=$WORK/$1.out
  shift
  local needles=()
  while [[ $1 != -- ]]; do needles+=("$1"); shift; done
  shift
  if "$@" >"$out" 2>&1; then cat "$out"; fail "$name: succeeded"; fi
  # CMake wraps its messages: compared with every run of blanks and newlines made one space.
  local n flat
  flat="$(tr -s ' \n' '  ' <"$out")"
  for n in "${needles[@]}"; do
    grep -qF -- "$n" <<<"$flat" || { cat "$out"; fail "$name: no '$n' in its output"; }
  done
  echo "ok: $name: $(grep -m1 -E 'error|Error' "$out" | cut -c1-160)"
}

# fake_python NAME VERSION CUDA: a Python whose `import torch` finds a stand-in torch package
# (VERSION; CUDA a version or None) with a LibTorch CMake package directory.
fake_python() {
  local name=$1 version=$2 cuda=$3 dir=$WORK/$1
  mkdir -p "$dir/site/torch/utils" "$dir/site/torch/share/cmake/Torch"
  cat >"$dir/site/torch/__init__.py" <<PY
__version__ = "$version"
from . import version, utils
PY
  echo "cuda = $cuda" >"$dir/site/torch/version.py"
  echo "cmake_prefix_path = '$dir/site/torch/share/cmake'" >"$dir/site/torch/utils/__init__.py"
  printf '#!/bin/sh\nPYTHONPATH=%s exec %s "$@"\n' "$dir/site" "$HOST_PYTHON" >"$dir/python"
  chmod +x "$dir/python"
  echo "$dir/python"
}

case_python() {
  local no_torch old cuda cpu out
  no_torch="$WORK/no_torch/python"
  mkdir -p "$WORK/no_torch"
  printf '#!/bin/sh\nPYTHONPATH= exec %s -S "$@"\n' "$HOST_PYTHON" >"$no_torch"
  chmod +x "$no_torch"
  expect_fail no_torch "has no torch" "--pip-torch" -- bash "$ROOT/scripts/python_torch.sh" "$no_torch"
  old="$(fake_python old 1.12.1 None)"
  expect_fail old_torch "torch 1.12.1" "needs LibTorch 1.13 or later" -- \
    bash "$ROOT/scripts/python_torch.sh" "$old"
  cuda="$(fake_python cuda 2.15.0+cu132 "'13.2'")"
  expect_fail cuda_without_nvcc "built with CUDA 13.2" "install the CUDA toolkit" "CPU LibTorch" -- \
    env PATH=/usr/bin:/bin CUDA_HOME="$WORK/no-cuda" bash "$ROOT/scripts/python_torch.sh" "$cuda"
  cpu="$(fake_python cpu 2.15.0+cpu None)"
  out="$(env PATH=/usr/bin:/bin CUDA_HOME="$WORK/no-cuda" bash "$ROOT/scripts/python_torch.sh" "$cpu")" ||
    fail "a CPU torch was refused"
  grep -qx -- "-DCMAKE_PREFIX_PATH=$WORK/cpu/site/torch/share/cmake" <<<"$out" || fail "no prefix: $out"
  grep -qx -- "-DTRAINPACK_TORCH_PYTHON=$cpu" <<<"$out" || fail "no Python: $out"
  if grep -q CUDA_COMPILER <<<"$out"; then fail "a CPU torch asked for nvcc: $out"; fi
  echo "ok: cpu_torch accepted without nvcc"
}

# fake_libtorch ROOT CUDA(ON|OFF) LIBS(yes|no): a stand-in LibTorch package under ROOT whose
# TorchConfig.cmake looks for libtorch and libc10 as LibTorch's does (system paths before its own).
fake_libtorch() {
  local root=$1 cuda=$2 libs=$3
  mkdir -p "$root/share/cmake/Torch" "$root/share/cmake/Caffe2" "$root/lib"
  cat >"$root/share/cmake/Torch/TorchConfig.cmake" <<'CMAKE'
find_package(Caffe2 REQUIRED PATHS "${CMAKE_CURRENT_LIST_DIR}/../Caffe2")
find_library(TORCH_LIBRARY torch PATHS "${CMAKE_CURRENT_LIST_DIR}/../../../lib")
find_library(c10_LIBRARY c10 PATHS "${CMAKE_CURRENT_LIST_DIR}/../../../lib")
if(NOT TARGET torch)
  add_library(torch INTERFACE IMPORTED)
endif()
set(Torch_FOUND TRUE)
CMAKE
  echo "set(CAFFE2_USE_CUDA $cuda)" >"$root/share/cmake/Caffe2/Caffe2Config.cmake"
  if [[ $libs == yes ]]; then : >"$root/lib/libtorch.so"; : >"$root/lib/libc10.so"; fi
}

# configure NAME ROOT [ARGS...]: configures a project that includes cmake/find_torch.cmake, with
# CMAKE_PREFIX_PATH naming ROOT's packages; configure_dir does the same with Torch_DIR alone.
configure() {
  local name=$1 root=$2
  shift 2
  configure_with "$name" -DCMAKE_PREFIX_PATH="$root/share/cmake" "$@"
}
configure_dir() {
  local name=$1 root=$2
  shift 2
  configure_with "$name" -DTorch_DIR="$root/share/cmake/Torch" "$@"
}
configure_with() {
  local name=$1
  shift
  mkdir -p "$WORK/$name/src"
  cat >"$WORK/$name/src/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.18)
project(find_torch_check LANGUAGES CXX)
include("$ROOT/cmake/find_torch.cmake")
message(STATUS "TORCH_LIBRARY=\${TORCH_LIBRARY}")
message(STATUS "Caffe2_DIR=\${Caffe2_DIR}")
CMAKE
  env PATH=/usr/bin:/bin CUDA_HOME= cmake -S "$WORK/$name/src" -B "$WORK/$name/build" "$@"
}

case_cmake() {
  # Every directory that holds an nvcc here, hidden from CMake's search.
  local nvcc_dirs="/usr/local/cuda/bin" found
  for found in $(which -a nvcc 2>/dev/null) /usr/local/cuda*/bin/nvcc; do
    [[ -x $found ]] && nvcc_dirs+=";$(dirname "$found")"
  done
  fake_libtorch "$WORK/cuda_root" ON yes
  expect_fail cmake_cuda_without_nvcc "is a CUDA build" "nvcc" "Two ways out" "CPU LibTorch" -- \
    configure cuda "$WORK/cuda_root" -DCMAKE_IGNORE_PATH="$nvcc_dirs"

  fake_libtorch "$WORK/site/torch" OFF yes
  mkdir -p "$WORK/site/nvidia/cu13/lib" "$WORK/site/nvidia/nccl/lib"
  configure own "$WORK/site/torch" >"$WORK/own.out" 2>&1 || { cat "$WORK/own.out"; fail "own lib/ refused"; }
  grep -qF "TORCH_LIBRARY=$WORK/site/torch/lib/libtorch.so" "$WORK/own.out" ||
    { cat "$WORK/own.out"; fail "the LibTorch's own lib/ was not searched first"; }
  grep -qF "nvidia-* wheels' libraries come first" "$WORK/own.out" ||
    { cat "$WORK/own.out"; fail "the nvidia-* wheels' libraries were not named"; }
  echo "ok: cmake_own_lib_first, and the nvidia-* wheels' libraries first"
  configure_dir own_dir "$WORK/site/torch" >"$WORK/own_dir.out" 2>&1 ||
    { cat "$WORK/own_dir.out"; fail "Torch_DIR alone refused"; }
  grep -qF "Caffe2_DIR=$WORK/site/torch/share/cmake/Caffe2" "$WORK/own_dir.out" ||
    { cat "$WORK/own_dir.out"; fail "with Torch_DIR alone, another Caffe2 package was taken"; }
  grep -qF "TORCH_LIBRARY=$WORK/site/torch/lib/libtorch.so" "$WORK/own_dir.out" ||
    { cat "$WORK/own_dir.out"; fail "with Torch_DIR alone, another libtorch.so was taken"; }
  echo "ok: cmake_torch_dir_alone takes the LibTorch's own Caffe2 package and lib/"

  if [[ -e /usr/lib/x86_64-linux-gnu/libtorch.so ]]; then
    fake_libtorch "$WORK/empty_root" OFF no
    expect_fail cmake_two_libtorches "two LibTorches would be mixed" "/usr/lib/x86_64-linux-gnu" -- \
      configure mixed "$WORK/empty_root"
  else
    echo "skipped: cmake_two_libtorches (Debian's libtorch-dev is not installed here)"
  fi
}

case_offline() {
  local start=$SECONDS
  expect_fail pip_offline "this command failed" "pip install" "torch==" -- \
    env TRAINPACK_VENVS="$WORK/venvs" TRAINPACK_PIP_CACHE="$WORK/pip-cache" \
    PIP_INDEX_URL=http://127.0.0.1:9/simple PIP_FIND_LINKS= \
    bash "$ROOT/scripts/pip_libtorch.sh"
  ((SECONDS - start < 60)) || fail "pip_offline took $((SECONDS - start)) s (a minute at most)"
  echo "ok: pip_offline failed in $((SECONDS - start)) s"
}

"case_$CASE"
