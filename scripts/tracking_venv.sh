#!/usr/bin/env bash
# Sets up the real servers that the tracking tests (ctest label `tracking`) talk to: MLflow's
# tracking server and client, and TensorBoard's server, from PyPI, in a virtual environment inside
# the repository (.venvs/tracking-<versions>/, ignored by git). Safe to run again: a complete venv
# is reused, a partial one (a run that was killed) is made again. Downloads go to a pip cache
# outside the clone, kept between runs on one machine.
#
#   bash scripts/tracking_venv.sh            make the venv if needed; print its python's path last
#   bash scripts/tracking_venv.sh --python   print the venv's python's path if it is complete, or
#                                            fail saying how to make it (nothing is installed)
#
# Environment: TRAINPACK_PIP_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/trainpack/pip),
# TRAINPACK_VENVS (the folder of the venvs; default .venvs in the repository), VENV_PYTHON (the
# Python that makes the venv; default Debian's /usr/bin/python3, which needs python3-venv), and
# pip's own variables (PIP_INDEX_URL, ...).
set -euo pipefail

# ---- the pinned versions: the one place to change them ----
# mlflow 3.18.0 is on PyPI, but the mlflow-skinny 3.18.0 it requires was not when this was pinned
# (3.17.2 was its newest): 3.17.2, the newest that installs.
MLFLOW_VERSION=3.17.2
TENSORBOARD_VERSION=2.21.0

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENVS="${TRAINPACK_VENVS:-$ROOT/.venvs}"
VENV="$VENVS/tracking-mlflow$MLFLOW_VERSION-tensorboard$TENSORBOARD_VERSION"
STAMP="$VENV/.trainpack-complete"
WANTED="mlflow==$MLFLOW_VERSION tensorboard==$TENSORBOARD_VERSION"
export PIP_CACHE_DIR="${TRAINPACK_PIP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trainpack/pip}"
export PIP_DISABLE_PIP_VERSION_CHECK=1

die() {
  printf 'tracking_venv.sh: error: %s\n' "$*" >&2
  exit 1
}

complete() { [[ -x $VENV/bin/python && -f $STAMP && "$(cat "$STAMP")" == "$WANTED" ]]; }

if [[ ${1:-} == --python ]]; then
  complete || die "no complete venv in $VENV: run bash scripts/tracking_venv.sh"
  echo "$VENV/bin/python"
  exit 0
fi
[[ $# -eq 0 ]] || { sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2; }

mkdir -p "$VENVS" "$PIP_CACHE_DIR"
# Two set-ups at once (two checkouts' CI on one machine, two terminals) take turns.
exec 9>"$VENVS/.lock"
flock 9

if complete; then
  echo "tracking servers: $VENV ($WANTED, complete)" >&2
  echo "$VENV/bin/python"
  exit 0
fi

VENV_PYTHON="${VENV_PYTHON:-/usr/bin/python3}"
[[ -x $VENV_PYTHON ]] || die "$VENV_PYTHON not found: install Debian's python3 and python3-venv," \
  "or set VENV_PYTHON to a Python 3.10 or later"
"$VENV_PYTHON" -c 'import ensurepip, venv' 2>/dev/null ||
  die "$VENV_PYTHON cannot make a virtual environment: apt-get install python3-venv"

rm -rf "$VENV"  # a venv that a killed run left half-made is made again from the start
echo "==> Making $VENV with $VENV_PYTHON" >&2
"$VENV_PYTHON" -m venv "$VENV" || die "failed: $VENV_PYTHON -m venv $VENV"
# A registry that cannot be reached fails the first request at once (one retry, 30 s each).
install_cmd=("$VENV/bin/python" -m pip install --progress-bar off --retries 1 --timeout 30
             "mlflow==$MLFLOW_VERSION" "tensorboard==$TENSORBOARD_VERSION")
echo "==> ${install_cmd[*]} (cache: $PIP_CACHE_DIR)" >&2
SECONDS=0
"${install_cmd[@]}" >&2 || die "this command failed (is PyPI reachable? PIP_INDEX_URL=" \
  "${PIP_INDEX_URL:-unset}): ${install_cmd[*]}"
"$VENV/bin/python" -c 'import mlflow, tensorboard' >&2 ||
  die "mlflow or tensorboard does not import in $VENV after installing them"
echo "$WANTED" >"$STAMP"
echo "tracking servers: $VENV ($WANTED) installed in ${SECONDS}s" >&2
echo "$VENV/bin/python"
