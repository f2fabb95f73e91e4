#!/usr/bin/env bash
# Checks that a checkpoint written by trainpack on one LibTorch is read bit for bit, and resumed,
# by trainpack on another, and by Python's torch.load on both.
#
#   bash scripts/checkpoints_across_versions.sh same BUILD WORKDIR
#       One LibTorch: the main job trains 1 epoch into WORKDIR/run; the checkpoint as trainpack
#       reads it (tests/tools/checkpoint_digest.cpp) must equal what torch.load reads (skipped
#       with status 77 when Python's torch is missing). ctest runs this.
#   bash scripts/checkpoints_across_versions.sh across BUILD_A BUILD_B WORKDIR
#       Two builds against two LibTorches: the machine's (Debian 12's 1.13 in build/), pip's
#       (build-pip/, scripts/setup.sh --pip-torch), or Debian sid's (build-sid/, made inside the
#       root of scripts/debian_sid.sh, and run there). Each side trains epoch 1 and the other
#       resumes it for epoch 2. Every checkpoint is read by both trainpacks and by both builds'
#       Pythons' torch.load(weights_only=True): the four digests must be the same text. WORKDIR
#       must be inside the source tree (the sid root sees the tree at /src). CI runs this for
#       build/ with build-sid/ and with build-pip/.
#
# Each build's Python is the TRAINPACK_TORCH_PYTHON of its CMakeCache.txt (pip's venv for
# build-pip/), or Debian's /usr/bin/python3.
#
# A digest is one line per tensor: name, dtype, shape, bytes and zlib's CRC-32 of the elements.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The main job with a few hundred images and 4 steps an epoch: seconds per run.
JOB_FLAGS=(--train-limit 256 --val-limit 64 --batch-size 32 --val-batch-size 64
           --steps-per-epoch 4 --lr 0.05 --threads 1 --max-val-error 1)

# where_of BUILD: SID for a build made in the sid root (its source directory is /src), else HOST.
where_of() {
  if grep -q '^CMAKE_HOME_DIRECTORY:INTERNAL=/src$' "$ROOT/$1/CMakeCache.txt" 2>/dev/null ||
     grep -q '^CMAKE_HOME_DIRECTORY:INTERNAL=/src$' "$1/CMakeCache.txt" 2>/dev/null; then
    echo SID
  else
    echo HOST
  fi
}
# python_of BUILD: the Python with the torch of BUILD's LibTorch; Debian's, not one that a PATH of
# pyenv or a venv puts first, unless the build names another.
python_of() {
  local cache="$1/CMakeCache.txt" py=""
  [[ -f $cache ]] || cache="$ROOT/$1/CMakeCache.txt"
  py="$(sed -n 's/^TRAINPACK_TORCH_PYTHON:FILEPATH=//p' "$cache" 2>/dev/null || true)"
  echo "${py:-/usr/bin/python3}"
}

die() {
  echo "checkpoints_across_versions.sh: $*" >&2
  exit 1
}

# on HOST|SID CMD...: runs CMD in the source tree, on this machine or in the sid root.
on() {
  local where=$1
  shift
  if [[ $where == HOST ]]; then
    (cd "$ROOT" && "$@")
  else
    bash "$ROOT/scripts/debian_sid.sh" --exec "$@"
  fi
}

# train WHERE BUILD LOGDIR MAX_EPOCH: the main job, resuming when LOGDIR has a checkpoint.
train() {
  local where=$1 build=$2 logdir=$3 epochs=$4 out
  out="$(mktemp)"
  if ! on "$where" "$build/examples/fashion_mnist/fashion_mnist" "${JOB_FLAGS[@]}" \
      --logdir "$logdir" --max-epoch "$epochs" >"$out" 2>&1; then
    cat "$out"
    rm -f "$out"
    die "the main job ($where, $build) failed training $logdir to epoch $epochs"
  fi
  if [[ $epochs -gt 1 ]] && ! grep -q "Resuming at epoch" "$out"; then
    cat "$out"
    rm -f "$out"
    die "the main job ($where, $build) did not say that it resumed $logdir"
  fi
  rm -f "$out"
}

# digests WHERE BUILD CHECKPOINT OUT: trainpack's digest into OUT.trainpack, torch.load's (by
# BUILD's Python) into OUT.torch_load (status 77 from the latter: Python's torch is not there).
digests() {
  local where=$1 build=$2 ckpt=$3 out=$4 python
  python="$(python_of "$build")"
  on "$where" "$build/tests/trainpack_checkpoint_digest" "$ckpt" >"$out.trainpack" ||
    die "trainpack ($where, $build) could not read $ckpt"
  if ! on "$where" "$python" -c 'import torch' 2>/dev/null; then
    return 77
  fi
  on "$where" "$python" tests/tools/torch_load_digest.py "$ckpt.data" >"$out.torch_load" 2>"$out.torch_load.err" ||
    { cat "$out.torch_load.err" >&2; die "torch.load ($where, $python) could not read $ckpt.data"; }
}

same_text() {
  local a=$1 b=$2
  if ! cmp -s "$a" "$b"; then
    diff -u "$a" "$b" | head -40 >&2
    die "$a and $b differ"
  fi
}

latest() { sed -n 's/^model_checkpoint_path: "\(.*\)"$/\1/p' "$1/checkpoint"; }

case "${1:-}" in
  same)
    [[ $# -eq 3 ]] || die "usage: same BUILD WORKDIR"
    build=$2 work=$3
    rm -rf "$work" && mkdir -p "$work"
    train HOST "$build" "$work/run" 1
    ckpt="$work/run/$(latest "$work/run")"
    status=0
    digests HOST "$build" "$ckpt" "$work/digest" || status=$?
    [[ -s $work/digest.trainpack ]] || die "empty digest of $ckpt"
    if [[ $status -eq 77 ]]; then
      echo "Python's torch is not installed: trainpack's digest only (skipped)"
      exit 77
    fi
    same_text "$work/digest.trainpack" "$work/digest.torch_load"
    echo "OK: $ckpt reads the same in trainpack and torch.load ($(wc -l <"$work/digest.trainpack") tensors)"
    ;;
  across)
    [[ $# -eq 4 ]] || die "usage: across BUILD_A BUILD_B WORKDIR"
    work=$4
    [[ $work == /* ]] || work="$ROOT/$work"
    [[ $work == "$ROOT"/* ]] || die "WORKDIR must be inside $ROOT (the sid root sees only the tree)"
    rel="${work#"$ROOT"/}"
    rm -rf "$work" && mkdir -p "$work"
    # Sides A and B: each build, where it runs, and a label (its directory's name).
    declare -A build=([A]="$2" [B]="$3") where label
    for side in A B; do
      where[$side]="$(where_of "${build[$side]}")"
      label[$side]="$(basename "${build[$side]}")"
      echo "side $side: ${build[$side]} (${where[$side]}, Python $(python_of "${build[$side]}"))"
    done
    [[ ${label[A]} != "${label[B]}" ]] || die "the two builds need different directory names"
    # check_latest RUN WHAT: the run's latest checkpoint, read by both trainpacks and both
    # torch.loads (the main job keeps one checkpoint: each is checked while it is there).
    check_latest() {
      local run=$1 what=$2 ckpt side ref other
      ckpt="$(latest "$ROOT/$run")"
      for side in A B; do
        digests "${where[$side]}" "${build[$side]}" "$run/$ckpt" \
          "$work/${run##*/}_${ckpt}_${side}" ||
          die "Python's torch is not installed for ${build[$side]}: $(python_of "${build[$side]}")" \
            "(Debian: python3-torch, which setup.sh installs; pip: scripts/pip_libtorch.sh)"
      done
      ref="$work/${run##*/}_${ckpt}_A.trainpack"
      for other in A.torch_load B.trainpack B.torch_load; do
        same_text "$ref" "$work/${run##*/}_${ckpt}_${other}"
      done
      echo "OK: $run/$ckpt ($what) reads the same in both trainpacks and both torch.loads" \
           "($(wc -l <"$ref") tensors)"
    }
    for first in A B; do
      if [[ $first == A ]]; then second=B; else second=A; fi
      run="$rel/from_${label[$first]}"
      train "${where[$first]}" "${build[$first]}" "$run" 1
      check_latest "$run" "epoch 1, written by ${label[$first]}"
      train "${where[$second]}" "${build[$second]}" "$run" 2
      check_latest "$run" "epoch 2, resumed from it by ${label[$second]}"
    done
    ;;
  *)
    sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
