#!/usr/bin/env bash
# Builds the trainpack library alone (no tests, examples or benchmarks) against a LibTorch, and
# installs it with its CMake package, for find_package(trainpack). Installs no system packages:
# LibTorch, fmt, protobuf, libpng, libjpeg, zlib and libcurl must be there (scripts/setup.sh installs
# Debian's; README.md, "Building against your LibTorch", lists them).
#
#   bash scripts/install.sh PREFIX [-- CMAKE_ARGS...]
#
#   bash scripts/install.sh /opt/trainpack                                    # Debian's LibTorch
#   bash scripts/install.sh /opt/trainpack -- -DTorch_DIR=/opt/libtorch/share/cmake/Torch
#   bash scripts/install.sh ~/.local -- \
#     -DCMAKE_PREFIX_PATH="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')"
#
# The build goes to build-install/ (BUILD_DIR overrides it). Warnings are not errors here
# (TRAINPACK_WERROR stays off): a deprecation in a newer LibTorch does not stop the build.
# Environment: JOBS (parallel compile jobs; default: all cores), BUILD_DIR.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
usage() { sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

[[ $# -ge 1 && $1 != -* ]] || { usage >&2; exit 2; }
PREFIX=$1
shift
if [[ $# -gt 0 ]]; then
  [[ $1 == -- ]] || { usage >&2; exit 2; }
  shift
fi
BUILD_DIR="${BUILD_DIR:-build-install}"
JOBS="${JOBS:-$(nproc)}"

SECONDS=0
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DTRAINPACK_BUILD_TESTS=OFF \
  -DTRAINPACK_BUILD_EXAMPLES=OFF -DTRAINPACK_BUILD_BENCHMARKS=OFF "$@"
cmake --build "$BUILD_DIR" -j "$JOBS"
cmake --install "$BUILD_DIR" --prefix "$PREFIX"
echo "install.sh: trainpack installed into $PREFIX in $((SECONDS / 60))m $((SECONDS % 60))s;" \
     "use it with find_package(trainpack) and -DCMAKE_PREFIX_PATH=$PREFIX"
