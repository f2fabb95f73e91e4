#!/usr/bin/env bash
# Sets up the LibTorch that most users have: PyTorch's pip wheel (a CUDA build, the newest
# release), in a virtual environment inside the repository (.venvs/torch-<version>/, ignored by
# git), with the wheel's own nvidia-* dependencies as `pip install torch` gives them, torchrun, and
# Lightning for the Python side of bench/gpu. Safe to run again: a complete venv is reused, a
# partial one (a run that was killed) is made again. Downloads go to a pip cache outside the clone
# that survives between runs on one machine, so a second clone installs without the network.
#
#   bash scripts/pip_libtorch.sh            make the venv if needed; print its python's path last
#   bash scripts/pip_libtorch.sh --python   print the venv's python's path if it is complete, or
#                                           fail (nothing is installed)
#
# Environment: TRAINPACK_PIP_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/trainpack/pip),
# TRAINPACK_VENVS (the folder of the venvs; default .venvs in the repository),
# VENV_PYTHON (the Python that makes the venv; default Debian's /usr/bin/python3, which needs
# Debian's python3-venv), and pip's own variables (PIP_INDEX_URL, ...).
#
# About 3 GB to download the first time (torch 0.54 GB, nvidia-* wheels about 2.4 GB: cuDNN,
# cuBLAS, NCCL, ...), about 3 minutes here; from the cache, about 1.5 minutes.
set -euo pipefail

# ---- the pinned version: the one place to change it ----
# PyPI's newest torch. Its wheel is built with CUDA 13.2 (cuda-toolkit 13.2.2); the machines here
# have the CUDA 13.0 toolkit, with which it configures, builds, links and runs its CPU path: its
# find_package(Torch) needs an nvcc of 12.0 or later, not the wheel's own version, and the programs
# run with the wheel's CUDA 13.2 libraries (cmake/find_torch.cmake puts the nvidia-* wheels first).
# The toolkit's 13.0 runtime would also serve: every cudart symbol 2.15.0 needs is in it.
PIP_TORCH_VERSION=2.15.0
# Lightning, for bench/gpu's Python side (a bare Python loop and Lightning next to trainpack).
PIP_LIGHTNING_VERSION=2.6.6

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENVS="${TRAINPACK_VENVS:-$ROOT/.venvs}"
VENV="$VENVS/torch-$PIP_TORCH_VERSION"
STAMP="$VENV/.trainpack-complete"
WANTED="torch==$PIP_TORCH_VERSION lightning==$PIP_LIGHTNING_VERSION"
export PIP_CACHE_DIR="${TRAINPACK_PIP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trainpack/pip}"
export PIP_DISABLE_PIP_VERSION_CHECK=1

die() {
  printf 'pip_libtorch.sh: error: %s\n' "$*" >&2
  exit 1
}

complete() { [[ -x $VENV/bin/python && -f $STAMP && "$(cat "$STAMP")" == "$WANTED" ]]; }

if [[ ${1:-} == --python ]]; then
  complete || die "no complete venv in $VENV: run bash scripts/pip_libtorch.sh"
  echo "$VENV/bin/python"
  exit 0
fi
[[ $# -eq 0 ]] || { sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

mkdir -p "$VENVS" "$PIP_CACHE_DIR"
# Two set-ups at once (two checkouts' CI on one machine, two terminals) take turns.
exec 9>"$VENVS/.lock"
flock 9

if complete; then
  echo "pip's LibTorch: $VENV (torch $PIP_TORCH_VERSION, complete)" >&2
  echo "$VENV/bin/python"
  exit 0
fi

VENV_PYTHON="${VENV_PYTHON:-/usr/bin/python3}"
[[ -x $VENV_PYTHON ]] || die "$VENV_PYTHON not found: install Debian's python3 and python3-venv," \
  "or set VENV_PYTHON to a Python 3.10 or later"
if ! "$VENV_PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then
  die "$VENV_PYTHON cannot make a virtual environment: apt-get install python3-venv" \
    "(or set VENV_PYTHON to a Python that can)"
fi

# A venv that a killed run left half-made is made again from the start.
rm -rf "$VENV"
echo "==> Making $VENV with $VENV_PYTHON" >&2
"$VENV_PYTHON" -m venv "$VENV" || die "failed: $VENV_PYTHON -m venv $VENV"

# A registry that cannot be reached fails the first request at once (one retry, 30 s each)
# rather than after pip's default of five retries with back-off.
install_cmd=("$VENV/bin/python" -m pip install --progress-bar off --retries 1 --timeout 30
             "torch==$PIP_TORCH_VERSION" "lightning==$PIP_LIGHTNING_VERSION")
echo "==> ${install_cmd[*]} (cache: $PIP_CACHE_DIR)" >&2
SECONDS=0
if ! "${install_cmd[@]}" >&2; then
  die "this command failed (is PyPI reachable? PIP_INDEX_URL=${PIP_INDEX_URL:-unset}):" \
    "${install_cmd[*]}"
fi
"$VENV/bin/python" -c 'import torch, lightning' >&2 ||
  die "torch or lightning does not import in $VENV after installing them"
echo "$WANTED" >"$STAMP"
echo "pip's LibTorch: $VENV (torch $PIP_TORCH_VERSION) installed in ${SECONDS}s" >&2
echo "$VENV/bin/python"
