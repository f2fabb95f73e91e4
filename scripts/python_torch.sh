#!/usr/bin/env bash
# Says how to build trainpack against the LibTorch inside a Python's torch package (pip's wheel in
# a venv, conda's, a user's own), or why that Python's torch cannot serve: prints the CMake
# arguments, one per line, and fails with the reason and the fix otherwise. scripts/setup.sh
# --pip-torch and --torch-python use it.
#
#   bash scripts/python_torch.sh PYTHON
#
# What it checks: PYTHON runs; it imports torch; torch is 1.13 or later; a CUDA build has an nvcc
# to configure with (its CMake package runs nvcc, even without a GPU). A CPU build needs nothing
# more. Printed: -DCMAKE_PREFIX_PATH=<torch.utils.cmake_prefix_path>, -DTRAINPACK_TORCH_PYTHON,
# -DTRAINPACK_TORCHRUN (the torchrun beside PYTHON, if any), -DCMAKE_CUDA_COMPILER (CUDA builds).
# Environment: NVCC (the nvcc to use; default: PATH's, then $CUDA_HOME/bin/nvcc, CUDA_HOME
# defaulting to /usr/local/cuda).
set -euo pipefail

die() {
  printf 'python_torch.sh: error: %s\n' "$*" >&2
  exit 1
}
[[ $# -eq 1 ]] || { sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }
py=$1

command -v "$py" >/dev/null || die "the Python '$py' was not found"
# An absolute path: the build calls it from other directories.
if [[ $py == */* ]]; then
  py="$(cd "$(dirname "$py")" && pwd)/$(basename "$py")"
else
  py="$(command -v "$py")"
fi
info="$("$py" - <<'PY'
import sys
try:
    import torch
except Exception as e:  # ImportError, or a broken install's own error
    print(f"NOTORCH {type(e).__name__}: {e}")
    sys.exit(0)
import torch.utils
print("OK", torch.__version__.split("+")[0], torch.version.cuda or "cpu",
      torch.utils.cmake_prefix_path)
PY
)" || die "'$py' did not run (its error is above)"
info="$(tail -1 <<<"$info")"
case "$info" in
  OK\ *) ;;
  NOTORCH*)
    die "'$py' has no torch (${info#NOTORCH }): install it ('$py -m pip install torch')," \
      "or use bash scripts/setup.sh --pip-torch, which makes a venv with pip's LibTorch" ;;
  *) die "'$py' could not say where its torch is: $info" ;;
esac
read -r _ version cuda prefix <<<"$info"
major=${version%%.*}
rest=${version#*.}
minor=${rest%%.*}
if [[ ! $major =~ ^[0-9]+$ || ! $minor =~ ^[0-9]+$ ]]; then
  die "'$py' has a torch whose version '$version' is not MAJOR.MINOR[.PATCH]"
fi
if ((major * 100 + minor < 113)); then
  die "'$py' has torch $version; trainpack needs LibTorch 1.13 or later: upgrade it" \
    "('$py -m pip install -U torch') or use bash scripts/setup.sh --pip-torch"
fi
[[ -d $prefix/Torch ]] ||
  die "'$py' has torch $version but no LibTorch CMake package in $prefix/Torch: Debian's" \
    "python3-torch ships none (build against Debian's libtorch-dev: bash scripts/setup.sh);" \
    "another torch may have been built without its C++ files (reinstall it with pip)"

args=(-DCMAKE_PREFIX_PATH="$prefix" -DTRAINPACK_TORCH_PYTHON="$py")
if [[ $cuda != cpu ]]; then
  cuda_home="${CUDA_HOME:-/usr/local/cuda}"
  nvcc="${NVCC:-$(command -v nvcc || true)}"
  [[ -n $nvcc || ! -x $cuda_home/bin/nvcc ]] || nvcc=$cuda_home/bin/nvcc
  if [[ -z $nvcc || ! -x $nvcc ]]; then
    die "'$py' has torch $version built with CUDA $cuda, whose CMake package needs the CUDA" \
      "toolkit (nvcc, 12.0 or later) at configure time, even without a GPU, and none was found" \
      "(NVCC, PATH, $cuda_home/bin). Either install the CUDA toolkit, or use a CPU" \
      "LibTorch ('$py -m pip install torch --index-url https://download.pytorch.org/whl/cpu'," \
      "or Debian's: bash scripts/setup.sh without --pip-torch)"
  fi
  args+=(-DCMAKE_CUDA_COMPILER="$nvcc")
fi
torchrun="$(dirname "$py")/torchrun"
[[ ! -x $torchrun ]] || args+=(-DTRAINPACK_TORCHRUN="$torchrun")
echo "LibTorch: torch $version from $py (CUDA: $cuda), CMake prefix $prefix" >&2
printf '%s\n' "${args[@]}"
