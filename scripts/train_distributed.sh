#!/usr/bin/env bash
# Runs the main job (build/examples/fashion_mnist/fashion_mnist) as N processes on this machine,
# data-parallel, under torchrun (docs/distributed.md):
#
#   bash scripts/train_distributed.sh <processes> [fashion_mnist flags ...]
#   bash scripts/train_distributed.sh 2 --max-epoch 10 --batch-size 128
#
# --batch-size is the global batch (a multiple of <processes>): each process trains on its part,
# and the run is the one-process run with the same flags up to float rounding. Rank 0 writes
# --logdir (train_log/fashion_mnist); the others print warnings and errors only. Each process uses
# the hardware threads divided by <processes> unless --threads says otherwise.
#
# Environment: TORCHRUN (default: torchrun, from Debian's python3-torch), FASHION_MNIST (default:
# build/examples/fashion_mnist/fashion_mnist under the repository).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TORCHRUN="${TORCHRUN:-torchrun}"
FASHION_MNIST="${FASHION_MNIST:-$ROOT/build/examples/fashion_mnist/fashion_mnist}"

if [[ $# -lt 1 || ! $1 =~ ^[1-9][0-9]*$ ]]; then
  sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
  echo "train_distributed.sh: error: the first argument must be the number of processes" \
       "(a whole number of at least 1), got '${1:-}'" >&2
  exit 2
fi
readonly NPROC=$1
shift
if ! command -v "$TORCHRUN" >/dev/null; then
  echo "train_distributed.sh: error: $TORCHRUN not found; install Debian's python3-torch" \
       "(scripts/setup.sh does)" >&2
  exit 2
fi
if [[ ! -x $FASHION_MNIST ]]; then
  echo "train_distributed.sh: error: $FASHION_MNIST is not built; run bash scripts/setup.sh" >&2
  exit 2
fi

# --standalone: torchrun serves the rendezvous itself on a free local port. --no_python: the
# program is a C++ executable, not a Python script.
# --redirects 9:1 --tee 9:1: on Debian 12 (Python 3.11), torchrun 1.13 crashes at start in
# Std.from_str when they are not given (pytorch/pytorch#92319): their default, "0" (no
# redirection), is looked up by iterating the IntFlag Std, and since Python 3.11 that iteration
# skips the zero member, so the lookup fails. A rule for local rank 9 ("9:1", which this run does
# not have) avoids the default and changes nothing: every process still prints to this terminal.
# USE_LIBUV=0: from PyTorch 2.4 torchrun's store asks for libuv, which a PyTorch built without it
# (Debian's) refuses ("use_libuv was requested but PyTorch was built without libuv support"); the
# classic store, which trainpack's ranks use too, works with every version.
export USE_LIBUV="${USE_LIBUV:-0}"
exec "$TORCHRUN" --standalone --nproc_per_node "$NPROC" --no_python \
  --redirects 9:1 --tee 9:1 "$FASHION_MNIST" "$@"
