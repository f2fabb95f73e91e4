"""The checks every scenario ends with.

snapshot(dir) records what a log directory holds before a run; check(case, before, run, status)
then requires:
  - every checkpoint (model-<step>.data, min-/max-<stat>.data) valid before the run is still
    there, a regular file, unchanged or replaced by a valid one (the best copy: by one of the
    same or a later global_step);
  - every checkpoint there after the run is valid, but for files the scenario damaged and the
    run left as they were;
  - stats.json, when there, is a regular file holding valid JSON (a list of entries with
    strictly increasing epochs), and one that was there before is still there;
  - the exit code tells the truth: 0 only with "fashion_mnist: OK", a valid checkpoint of every
    epoch the run trained (the last ten: ModelSaver keeps ten), the `checkpoint` index naming the
    last, a valid best copy, and a stats.json entry for every epoch the run trained.
"""

import json
import os
import re
import stat

import checkpoint_file
from job import STEPS_PER_EPOCH

CHECKPOINT = re.compile(r"^(model-(\d+)|(min|max)-.+)\.data$")
_cache = {}


def inspect(path):
    """checkpoint_file.inspect, cached by the file's identity (inode, size, mtime)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        info = checkpoint_file.Info()
        info.why = "not a regular file"
        info.digest = f"special:{st.st_mode:o}:{os.readlink(path) if stat.S_ISLNK(st.st_mode) else ''}"
        return info
    key = (path, st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _cache:
        _cache[key] = checkpoint_file.inspect(path)
    return _cache[key]


def checkpoints(d):
    try:
        names = os.listdir(d)
    except OSError:
        return {}
    return {n: inspect(os.path.join(d, n)) for n in sorted(names) if CHECKPOINT.match(n)}


def _is_regular(path):
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def file_digests(d):
    """name -> sha256 (or a description of a special file) of everything in the directory."""
    import hashlib

    out = {}
    for n in sorted(os.listdir(d)):
        p = os.path.join(d, n)
        st = os.lstat(p)
        if stat.S_ISREG(st.st_mode):
            with open(p, "rb") as f:
                out[n] = hashlib.sha256(f.read()).hexdigest()
        elif stat.S_ISLNK(st.st_mode):
            out[n] = "link:" + os.readlink(p)
        else:
            out[n] = f"mode:{st.st_mode:o}"
    return out


class Snapshot:
    def __init__(self, d):
        self.dir = d
        self.checkpoints = checkpoints(d)
        self.stats_existed = _stats_ok(d)[0] is not None


def snapshot(d):
    return Snapshot(d)


def _stats_ok(d):
    """(entries, problem): entries None when there is no stats.json."""
    p = os.path.join(d, "stats.json")
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return None, None
    if not stat.S_ISREG(st.st_mode):
        return [], "stats.json is not a regular file"
    try:
        with open(p, "rb") as f:
            entries = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        return [], f"stats.json is not valid JSON: {e}"
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        return [], "stats.json is not a list of entries"
    epochs = [e.get("epoch_num") for e in entries]
    if any(not isinstance(x, int) for x in epochs):
        return entries, f"stats.json has entries without an integer epoch_num: {epochs}"
    if any(b <= a for a, b in zip(epochs, epochs[1:])):
        return entries, f"stats.json's epochs do not increase strictly: {epochs}"
    return entries, None


def check(case, before, run, status, max_epoch=None):
    """Checks the directory `before.dir` after `run` ended with `status`; failures go to case."""
    d = before.dir
    after = checkpoints(d)
    for name, old in before.checkpoints.items():
        if not old.valid:
            continue
        new = after.get(name)
        if new is None:
            case.fail(f"{name} was a valid checkpoint before the run and is gone")
        elif new.digest != old.digest:
            if not new.valid:
                case.fail(f"{name} was a valid checkpoint before the run and is now invalid "
                          f"({new.why})")
            elif (new.global_step or 0) < (old.global_step or 0):
                case.fail(f"{name} (global_step {old.global_step}) was replaced by an older "
                          f"checkpoint (global_step {new.global_step})")
    for name, new in after.items():
        old = before.checkpoints.get(name)
        if not new.valid and not (old is not None and old.digest == new.digest):
            case.fail(f"{name} after the run is not a valid checkpoint ({new.why})")
    entries, problem = _stats_ok(d)
    if problem:
        case.fail(problem)
    if entries is None and before.stats_existed:
        case.fail("stats.json was there before the run and is gone")
    for name in sorted(os.listdir(d)):
        if name.startswith("stats.json.") and not name.endswith(".tmp"):
            # A backup of stats.json (before a resume): never an empty or broken copy. A special
            # file moved aside (a FIFO that stood as stats.json) is what it was; opening it would
            # block.
            if not _is_regular(os.path.join(d, name)):
                continue
            try:
                with open(os.path.join(d, name), "rb") as f:
                    json.load(f)
            except (OSError, ValueError, UnicodeDecodeError) as e:
                case.fail(f"{name}, a copy of stats.json, is not valid JSON: {e}")

    if status != 0 or run is None:
        return
    out = run.output()
    if "fashion_mnist: OK" not in out:
        case.fail("exit status 0 without 'fashion_mnist: OK'")
    if max_epoch is None or "has finished its" in out:
        return
    m = re.search(r"Resuming at epoch (\d+), step (\d+) of it", out)
    first = int(m.group(1)) if m else 1
    if not m and "training starts at step 0" not in out:
        case.fail("exit status 0, but the output says neither where it resumed nor that it "
                  "started at step 0")
    for epoch in range(max(first, max_epoch - 9), max_epoch + 1):
        name = f"model-{epoch * STEPS_PER_EPOCH}.data"
        info = after.get(name)
        if info is None or not info.valid:
            case.fail(f"exit status 0, but the checkpoint of epoch {epoch}, {name}, is "
                      f"{'missing' if info is None else 'invalid: ' + info.why}")
    index = os.path.join(d, "checkpoint")
    try:
        if not _is_regular(index):
            raise OSError(0, "not a regular file")
        with open(index, encoding="utf-8", errors="replace") as f:
            first_line = f.readline().strip()
    except OSError as e:
        first_line = f"<{e.strerror}>"
    want = f'model_checkpoint_path: "model-{max_epoch * STEPS_PER_EPOCH}"'
    if first_line != want:
        case.fail(f"exit status 0, but the checkpoint index says {first_line!r}, not {want!r}")
    best = after.get("min-val-error-top1.data")
    if best is None or not best.valid:
        case.fail("exit status 0, but min-val-error-top1.data is missing or invalid")
    epochs = {e.get("epoch_num") for e in entries or []}
    missing = [e for e in range(first, max_epoch + 1) if e not in epochs]
    if missing:
        case.fail(f"exit status 0, but stats.json has no entry for epoch(s) {missing}")
