#!/usr/bin/env bash
# Tests of the fashion_mnist program's checkpoints and resuming, run by ctest as
#   bash resume_test.sh <fashion_mnist> <logdir> <sigterm|sighup|continue|no_resume|changed_flags|unwritable>
# (bash rather than a CMake script: the sigterm mode signals a program running in the background.)
#
# sigterm: SIGTERM to a running job (sent once log.log shows that epoch 2 started) makes it exit
#   with 143 after saving the checkpoint model-<N> of the step where it stopped (N from its log
#   line, named by the `checkpoint` index); the same command again resumes at that step (its log
#   says so), finishes with 0 and appends to stats.json: the entries written before the stop stay
#   byte for byte, and the epochs go on 1, 2, ... with global_step 4 per epoch.
# sighup: the same with SIGHUP (a closed terminal): exit status 129, the checkpoint of the stop step,
#   and the same command resumes there.
# continue: --max-epoch 1, then --max-epoch 2 in the same directory: the second run trains epoch 2
#   only, resuming at global_step 4, and appends its entry; a third run with --max-epoch 2 has
#   nothing left to train: it reports the final val-error-top1 held by its checkpoint, exits with
#   0 and changes nothing in stats.json; a fourth, after stats.json was replaced by one claiming
#   a val-error-top1 of 0, still takes the verdict from the checkpoint.
# unwritable: a run whose checkpoints cannot be written (a file-size limit) trains on and ends
#   FAILED with status 1, naming the files.
# no_resume: a finished run, then --no-resume: the old directory is moved aside whole to
#   <logdir>.<MMDD-HHMMSS> and the new run starts from step 0 in a fresh directory.
# changed_flags: a finished run resumed with another --batch-size or --train-limit is refused
#   before the first step (exit 1, the saved and the given flags named, the directory unchanged);
#   with another --weight-decay it goes on with a warning that the resume is not exact.
# Each mode also checks MinSaver's copy: min-val-error-top1.data exists and is the
# checkpoint of the epoch with the lowest val-error-top1 in stats.json (the first one on ties).
#
# Every run uses a few hundred images, 4 steps per epoch and 1 thread, so it is deterministic and
# takes seconds (most of it reading the dataset). Nothing here measures time.
set -euo pipefail

if [[ $# -ne 3 ]]; then
  echo "usage: bash resume_test.sh <fashion_mnist> <logdir> <sigterm|sighup|continue|no_resume|changed_flags|unwritable>" >&2
  exit 2
fi
readonly PROGRAM=$1 LOGDIR=$2 MODE=$3
readonly STEPS_PER_EPOCH=4
if [[ $MODE == changed_flags ]]; then
  # Each run gives --train-limit and --batch-size itself (a flag may appear only once).
  SIZES=(--val-limit 64 --val-batch-size 64)
elif [[ $MODE == continue ]]; then
  # The smoke test's sizes: with them epoch 1 has the lower val-error-top1 (0.6 against 0.695
  # when this was written), so check_min_saver also checks that the resumed run remembered it (a
  # MinSaver that forgot its best would copy model-8).
  SIZES=(--train-limit 300 --val-limit 200 --batch-size 64 --val-batch-size 64)
else
  # 256 training images in batches of 32: a pass is 8 batches, so an epoch of 4 steps is half a
  # pass and a resume also has to find its place inside a pass.
  SIZES=(--train-limit 256 --val-limit 64 --batch-size 32 --val-batch-size 64)
fi
readonly -a COMMON=("${SIZES[@]}" --steps-per-epoch "$STEPS_PER_EPOCH" --lr 0.05 --threads 1
                    --max-val-error 1 --logdir "$LOGDIR")

OUTPUTS=()  # files holding each run's output, printed when a check fails

fail() {
  local out
  for out in "${OUTPUTS[@]}"; do
    echo "---- $out"
    cat "$out"
  done
  echo "resume_test.sh $MODE: FAILED: $*" >&2
  exit 1
}

# run <name> <expected status> <flags...>: runs the program with COMMON and the flags, its output
# in $LOGDIR.<name>.out (outside the log directory, which a run may move aside).
run() {
  local name=$1 expected=$2
  shift 2
  local out="$LOGDIR.$name.out" status=0
  OUTPUTS+=("$out")
  "$PROGRAM" "${COMMON[@]}" "$@" >"$out" 2>&1 || status=$?
  [[ $status == "$expected" ]] || fail "run '$name' ($*) exited with $status, expected $expected"
}

expect_in() {  # <file> <fixed string>
  grep -qF -- "$2" "$1" || fail "$1 lacks '$2'"
}

expect_not_in() {  # <file> <fixed string>
  if grep -qF -- "$2" "$1"; then fail "$1 has '$2'"; fi
}

# The entries of a stats.json (one line, Python json.dump's layout), one per line.
entries() {
  sed 's/}, {/}\n{/g' "$1"
  echo
}

# check_epochs <stats.json> <count>: entries 1..count with epoch_num i and global_step 4 i.
check_epochs() {
  local file=$1 count=$2 n=0 line epoch step
  [[ -f $file ]] || fail "$file does not exist"
  while IFS= read -r line; do
    [[ -n $line ]] || continue
    n=$((n + 1))
    epoch=$(sed -n 's/.*"epoch_num": \([0-9]*\).*/\1/p' <<<"$line")
    step=$(sed -n 's/.*"global_step": \([0-9]*\).*/\1/p' <<<"$line")
    if [[ $epoch != "$n" || $step != $((STEPS_PER_EPOCH * n)) ]]; then
      fail "$file entry $n has epoch_num '$epoch', global_step '$step'; expected $n and" \
           "$((STEPS_PER_EPOCH * n)):"$'\n'"$(cat "$file")"
    fi
  done < <(entries "$file")
  [[ $n == "$count" ]] || fail "$file has $n entries, expected $count:"$'\n'"$(cat "$file")"
}

# check_latest <dir> <step>: the `checkpoint` index names model-<step>, and its file exists.
check_latest() {
  local dir=$1 step=$2
  [[ -f $dir/checkpoint ]] || fail "$dir/checkpoint does not exist"
  local first
  first=$(head -n 1 "$dir/checkpoint")
  [[ $first == "model_checkpoint_path: \"model-$step\"" ]] ||
    fail "$dir/checkpoint names '$first', expected model-$step:"$'\n'"$(cat "$dir/checkpoint")"
  [[ -f $dir/model-$step.data ]] || fail "model-$step.data missing in $dir: $(ls "$dir")"
}

# check_min_saver <dir>: min-val-error-top1.* is the checkpoint of the best epoch in stats.json.
check_min_saver() {
  local dir=$1 best
  best=$(entries "$dir/stats.json" | awk '
    match($0, /"val-error-top1": [^,}]*/) {
      v = substr($0, RSTART + 18, RLENGTH - 18) + 0
      match($0, /"global_step": [0-9]+/)
      s = substr($0, RSTART + 15, RLENGTH - 15)
      if (!have || v < best) { have = 1; best = v; step = s }
    }
    END { print step }')
  [[ -n $best ]] || fail "no val-error-top1 in $dir/stats.json"
  [[ -f $dir/min-val-error-top1.data ]] || fail "$dir/min-val-error-top1.data does not exist"
  cmp -s "$dir/min-val-error-top1.data" "$dir/model-$best.data" ||
    fail "$dir/min-val-error-top1.data is not model-$best.data, the checkpoint of the lowest" \
         "val-error-top1 in stats.json:"$'\n'"$(cat "$dir/stats.json")"
  echo "min-val-error-top1 is model-$best"
}

rm -rf -- "$LOGDIR" "$LOGDIR".[0-9]* "$LOGDIR".*.out

case $MODE in
  sigterm | sighup)
    if [[ $MODE == sigterm ]]; then SIG=TERM STATUS=143; else SIG=HUP STATUS=129; fi
    readonly -a FLAGS=(--max-epoch 10)
    out="$LOGDIR.stopped.out"
    OUTPUTS+=("$out")
    "$PROGRAM" "${COMMON[@]}" "${FLAGS[@]}" >"$out" 2>&1 &
    pid=$!
    # Once epoch 2 has started, the signal lands during training (a stop needs global_step > 0 to
    # be told apart from a fresh start). 10 epochs leave the job far more time than it takes to
    # notice the line and signal it.
    until grep -qF "Start Epoch 2 ..." "$LOGDIR/log.log" 2>/dev/null; do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
    kill -"$SIG" "$pid" 2>/dev/null || true
    status=0
    wait "$pid" || status=$?
    [[ $status == "$STATUS" ]] || fail "the job exited with $status after SIG$SIG, expected $STATUS"
    stop=$(sed -n "s/.*fashion_mnist: stopped by SIG$SIG at global_step \\([0-9]*\\);.*/\\1/p" "$out")
    [[ -n $stop ]] || fail "$out has no 'stopped by SIG$SIG at global_step N' line"
    ((stop >= STEPS_PER_EPOCH)) || fail "stopped at global_step $stop, before epoch 2"
    expect_in "$out" "Detected SIG$SIG and exiting main loop."
    expect_in "$out" "checkpoint $LOGDIR/model-$stop holds that point. Run the same command again"
    check_latest "$LOGDIR" "$stop"
    epoch=$((stop / STEPS_PER_EPOCH + 1)) step_in_epoch=$((stop % STEPS_PER_EPOCH))
    check_epochs "$LOGDIR/stats.json" $((epoch - 1))
    before=$(cat "$LOGDIR/stats.json")

    run resumed 0 "${FLAGS[@]}"
    out="$LOGDIR.resumed.out"
    expect_in "$out" "Will load checkpoint at $LOGDIR/model-$stop."
    expect_in "$out" "Resuming at epoch $epoch, step $step_in_epoch of it (global_step $stop)."
    expect_in "$out" "fashion_mnist: OK"
    check_epochs "$LOGDIR/stats.json" 10
    after=$(cat "$LOGDIR/stats.json")
    [[ $after == "${before%]}, {"* ]] ||
      fail "stats.json was not appended to: before the resume"$'\n'"$before"$'\n'"after"$'\n'"$after"
    compgen -G "$LOGDIR/log.log.*" >/dev/null || fail "the stopped run's log.log was not kept"
    check_latest "$LOGDIR" 40
    check_min_saver "$LOGDIR"
    ;;

  continue)
    run first 0 --max-epoch 1
    check_epochs "$LOGDIR/stats.json" 1
    check_latest "$LOGDIR" 4
    before=$(cat "$LOGDIR/stats.json")

    run second 0 --max-epoch 2
    out="$LOGDIR.second.out"
    expect_in "$out" "Resuming at epoch 2, step 0 of it (global_step 4)."
    expect_in "$out" "Start Epoch 2 ..."
    expect_not_in "$out" "Start Epoch 1 ..."
    check_epochs "$LOGDIR/stats.json" 2
    after=$(cat "$LOGDIR/stats.json")
    [[ $after == "${before%]}, {"* ]] ||
      fail "stats.json was not appended to: before"$'\n'"$before"$'\n'"after"$'\n'"$after"
    check_latest "$LOGDIR" 8
    check_min_saver "$LOGDIR"

    run third 0 --max-epoch 2
    expect_in "$LOGDIR.third.out" "has finished its 2 epochs already"
    expect_in "$LOGDIR.third.out" "its final val-error-top1 (checkpoint $LOGDIR/model-8) is"
    expect_in "$LOGDIR.third.out" "fashion_mnist: OK"
    expect_not_in "$LOGDIR.third.out" "Start Epoch"
    [[ $(cat "$LOGDIR/stats.json") == "$after" ]] || fail "the third run changed stats.json"

    # A stats.json that claims a perfect last epoch does not change the verdict: it comes from
    # the checkpoint.
    echo '[{"val-error-top1": 0.0, "epoch_num": 2, "global_step": 8}]' >"$LOGDIR/stats.json"
    run fourth 0 --max-epoch 2
    expect_in "$LOGDIR.fourth.out" "its final val-error-top1 (checkpoint $LOGDIR/model-8) is"
    expect_not_in "$LOGDIR.fourth.out" "val-error-top1 (checkpoint $LOGDIR/model-8) is 0.0000"
    ;;

  unwritable)
    # Files larger than 200 KiB cannot be written (a limit binds root too): no checkpoint (0.9 MB)
    # can be saved. No trap hides SIGXFSZ: the job itself ignores it, so the write fails with
    # EFBIG instead of killing it. Training goes on, and the run ends FAILED with status 1 and the
    # files named, not OK.
    out="$LOGDIR.limited.out"
    OUTPUTS+=("$out")
    status=0
    (trap - XFSZ; ulimit -f 200; exec "$PROGRAM" "${COMMON[@]}" --max-epoch 2) >"$out" 2>&1 ||
      status=$?
    [[ $status == 1 ]] || fail "the run with a file-size limit exited with $status, expected 1"
    expect_in "$out" "Start Epoch 2 ..."
    expect_in "$out" "ERR Exception in ModelSaver!"
    expect_in "$out" "EFBIG: this process may not write files larger than 204800 bytes"
    expect_in "$out" "could not be saved"  # MinSaver: the save failed, not a missing ModelSaver
    expect_not_in "$out" "Do you forget to use ModelSaver?"
    expect_in "$out" "fashion_mnist: FAILED: Training ended, but not everything it was to write was written: 4 writes failed (3 files): $LOGDIR/model-4.data (ModelSaver, 1 failure)"
    expect_not_in "$out" "fashion_mnist: OK"
    ;;

  no_resume)
    run first 0 --max-epoch 1
    check_latest "$LOGDIR" 4
    run fresh 0 --max-epoch 1 --no-resume
    out="$LOGDIR.fresh.out"
    backups=("$LOGDIR".[0-9]*)
    [[ ${#backups[@]} == 1 && -d ${backups[0]} ]] ||
      fail "expected one backup directory $LOGDIR.<MMDD-HHMMSS>, found: ${backups[*]}"
    # The old run, whole, in the backup.
    check_latest "${backups[0]}" 4
    check_epochs "${backups[0]}/stats.json" 1
    expect_in "${backups[0]}/log.log" "fashion_mnist: OK"
    # The new run, from step 0, in a fresh directory.
    expect_not_in "$out" "Will load checkpoint"
    expect_not_in "$out" "Resuming at"
    expect_in "$out" "Start Epoch 1 ..."
    check_epochs "$LOGDIR/stats.json" 1
    check_latest "$LOGDIR" 4
    if compgen -G "$LOGDIR/log.log.*" >/dev/null; then fail "$LOGDIR is not a fresh directory"; fi
    check_min_saver "$LOGDIR"
    ;;

  changed_flags)
    run first 0 --max-epoch 1 --train-limit 256 --batch-size 32
    check_latest "$LOGDIR" 4
    # Every file but the logs: a refused run adds its own log.log and a new (empty) event file, and
    # changes nothing that was there.
    snapshot() {
      (cd "$LOGDIR" && for f in $(ls | grep -v -e '^log\.log' -e '^events\.out' | sort); do
        echo "$f $(cksum <"$f")"
      done)
    }
    before=$(snapshot)
    run batch 1 --max-epoch 2 --train-limit 256 --batch-size 16
    out="$LOGDIR.batch.out"
    expect_in "$out" "the checkpoint was saved by a run with --batch-size 32 (this run: 16)"
    expect_in "$out" "--no-resume"
    expect_not_in "$out" "Start Epoch"
    [[ $(snapshot) == "$before" ]] || fail "a refused resume changed $LOGDIR:"$'\n'"$before"$'\n'"$(snapshot)"
    run limit 1 --max-epoch 2 --train-limit 128 --batch-size 32
    expect_in "$LOGDIR.limit.out" "256 training images, --train-limit (this run: 128)"
    [[ $(snapshot) == "$before" ]] || fail "a refused resume changed $LOGDIR"
    run decay 0 --max-epoch 2 --train-limit 256 --batch-size 32 --weight-decay 0.001
    out="$LOGDIR.decay.out"
    expect_in "$out" "resuming with other flags than the run that saved the checkpoint: --weight-decay 0.0001 -> 0.001"
    expect_in "$out" "fashion_mnist: OK"
    ;;

  *)
    fail "unknown mode '$MODE'"
    ;;
esac
echo "resume_test.sh $MODE: OK"
