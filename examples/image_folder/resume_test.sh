#!/usr/bin/env bash
# Tests of the image_folder program, run by ctest as
#   bash resume_test.sh <image_folder> <trainpack_checkpoint_digest> <workdir> <mode>
# On an image folder exported from Fashion-MNIST (320 training, 64 validation images; 10 steps of
# 32 per epoch, 3 epochs, 3 decoding threads, 1 intra-op thread, a checkpoint every 3 steps):
# sigterm: SIGTERM once model-12 is saved (epoch 2): exit 143 after saving the checkpoint of the
#   stop step; the same command resumes there, mid-epoch, and ends with final parameters equal,
#   bit for bit, to those of a run that was not stopped; stats.json holds epochs 1 to 3 once each.
# sigkill: the same with SIGKILL: the run resumes from the latest step checkpoint (mid-epoch).
# bad_folders: a missing root, a class folder without images, a validation class the training
#   folder lacks (exit 2, each named), and a truncated PNG (exit 1, the file named).
set -euo pipefail

if [[ $# -ne 4 ]]; then
  echo "usage: bash resume_test.sh <image_folder> <checkpoint_digest> <workdir> <sigterm|sigkill|bad_folders>" >&2
  exit 2
fi
readonly PROGRAM=$1 DIGEST=$2 WORK=$3 MODE=$4

fail() {
  echo "FAIL ($MODE): $*" >&2
  exit 1
}

rm -rf "$WORK"
mkdir -p "$WORK"
if [[ ! -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]]; then
  echo "SKIP: Debian's dataset-fashion-mnist is not installed (apt-get install dataset-fashion-mnist)"
  exit 0
fi
"$PROGRAM" --export-fashion-mnist "$WORK/data" --train-limit 320 --val-limit 64 >/dev/null
FLAGS=(--train "$WORK/data/train" --val "$WORK/data/val" --max-epoch 3 --batch-size 32
  --threads 1 --decode-threads 3 --grey --size 32 --crop 28 --checkpoint-every 3)

# The parameters and optimizer state of a checkpoint, one line per tensor with its CRC: the
# entries that training computes (not the callbacks' clocks).
params() {
  "$DIGEST" "$1" | grep -E '^(model|optimizer)[/.]' || fail "no parameters in $1: $("$DIGEST" "$1" | head -5)"
}

# The epochs stats.json records, one per line.
epochs() {
  python3 -c 'import json,sys; print("\n".join(str(e["epoch_num"]) for e in json.load(open(sys.argv[1]))))' "$1"
}

expect_exit() {  # expect_exit WANT GOT WHAT
  [[ $2 -eq $1 ]] || fail "$3 exited with $2, expected $1"
}

run_case() {
  local sig=$1 want_status=$2
  "$PROGRAM" "${FLAGS[@]}" --logdir "$WORK/reference" >"$WORK/reference.out" 2>&1 \
    || fail "the reference run failed: $(tail -5 "$WORK/reference.out")"
  "$PROGRAM" "${FLAGS[@]}" --logdir "$WORK/run" >"$WORK/first.out" 2>&1 &
  local pid=$!
  for ((i = 0; i < 6000; ++i)); do
    grep -q 'model-12' "$WORK/run/log.log" 2>/dev/null && break
    sleep 0.01
  done
  kill "-$sig" "$pid"
  local status=0
  wait "$pid" || status=$?
  expect_exit "$want_status" "$status" "the run stopped by SIG$sig"
  grep -q 'model-30' "$WORK/run/checkpoint" && fail "the run ended before SIG$sig arrived"
  "$PROGRAM" "${FLAGS[@]}" --logdir "$WORK/run" >"$WORK/resumed.out" 2>&1 \
    || fail "the resumed run failed: $(tail -5 "$WORK/resumed.out")"
  local from
  from=$(grep -o 'continuing the run in .* from .*model-[0-9]*' "$WORK/run/log.log" | grep -o '[0-9]*$' | tail -1)
  [[ -n $from ]] || fail "the second run did not resume: $(tail -5 "$WORK/resumed.out")"
  ((from % 10 != 0)) || fail "resumed from model-$from, at an epoch's end, not mid-epoch"
  echo "resumed mid-epoch from model-$from"
  diff <(params "$WORK/reference/model-30") <(params "$WORK/run/model-30") \
    || fail "the resumed run's final parameters differ from the uninterrupted run's"
  [[ $(epochs "$WORK/run/stats.json" | tr '\n' ' ') == "1 2 3 " ]] \
    || fail "stats.json holds epochs $(epochs "$WORK/run/stats.json" | tr '\n' ' '), expected 1 2 3"
}

expect_error() {  # expect_error STATUS TEXT ARGS...: the program exits with STATUS, TEXT in its output
  local want=$1 text=$2 status=0
  shift 2
  "$PROGRAM" "$@" >"$WORK/out" 2>&1 || status=$?
  expect_exit "$want" "$status" "image_folder $*"
  grep -qF -- "$text" "$WORK/out" || fail "no '$text' in: $(cat "$WORK/out")"
}

case $MODE in
  sigterm) run_case TERM 143 ;;
  sigkill) run_case KILL 137 ;;
  bad_folders)
    expect_error 2 "the root '$WORK/nope' does not exist" --train "$WORK/nope" --logdir "$WORK/l1"
    mkdir -p "$WORK/data/train/9-empty"
    expect_error 2 "the class folder '$WORK/data/train/9-empty' holds no image" \
      --train "$WORK/data/train" --logdir "$WORK/l2"
    rmdir "$WORK/data/train/9-empty"
    mkdir -p "$WORK/data/val/zebra"
    cp "$WORK/data/val/0-t-shirt/"*.png "$WORK/data/val/zebra/" 2>/dev/null || true
    cp "$(find "$WORK/data/train" -name "*.png" | sort | sed -n 1p)" "$WORK/data/val/zebra/x.png"
    expect_error 2 "the class folder '$WORK/data/val/zebra' is not in the class list given" \
      --train "$WORK/data/train" --val "$WORK/data/val" --logdir "$WORK/l3"
    rm -r "$WORK/data/val/zebra"
    # (sed reads all its input: `head -1` would end `sort` by SIGPIPE, which pipefail reports.)
    victim=$(find "$WORK/data/train" -name "*.png" | sort | sed -n 1p)
    head -c 60 "$victim" >"$WORK/cut.png" && mv "$WORK/cut.png" "$victim"
    expect_error 1 "$victim" "${FLAGS[@]}" --logdir "$WORK/l4"
    ;;
  *) fail "unknown mode" ;;
esac
echo "PASS ($MODE)"
