"""The checks every scenario ends with.

snapshot(dir) records what a log directory holds before a run; check(case, before, run, status)
then requires:
  - every checkpoint (model-<step>.data, min-/max-<stat>.data) valid before the run is still
    there, a regular file, unchanged or replaced by a valid one (the best copy: by one of the
    same or a later global_step);
  - every checkpoint there after the run is valid, but for files the scenario damaged and the
    run left as they were;
  - stats.json, when there, is a regular file holding valid JSON (a list of entries with
    strictly increasing epochs), and one that was there before is still there; a copy of it
    (stats.json.<label><time>) is valid JSON too, or exactly the file as it was before the run;
  - every event file (events.out.tfevents.*) the run wrote or changed is a valid TFRecord stream
    that ends at a record boundary (read_tfrecords); a run killed by a signal may leave a final
    record unfinished;
  - the exit code tells the truth: 0 only with "fashion_mnist: OK", a valid checkpoint of every
    epoch the run trained (the last ten: ModelSaver keeps ten), the `checkpoint` index naming the
    last, a valid best copy of the step with the lowest val-error-top1 in stats.json, and a
    stats.json entry for every epoch the run trained.
"""

import hashlib
import json
import math
import os
import re
import stat
import struct

import checkpoint_file
from job import STEPS_PER_EPOCH

CHECKPOINT = re.compile(r"^(model-(\d+)|(min|max)-.+)\.data$")
EVENTS = "events.out.tfevents."
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


def _digest(path):
    """sha256 of a regular file, read in pieces (a stats.json padded with 64 MiB of NULs); None
    for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        h = hashlib.sha256()
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return h.hexdigest()
            h.update(chunk)
    finally:
        os.close(fd)


def _identity(path):
    st = os.lstat(path)
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def event_files(d):
    """name -> (inode, size, mtime) of the event files in d."""
    try:
        names = os.listdir(d)
    except OSError:
        return {}
    return {n: _identity(os.path.join(d, n)) for n in sorted(names)
            if n.startswith(EVENTS) and _is_regular(os.path.join(d, n))}


class Snapshot:
    def __init__(self, d):
        self.dir = d
        self.checkpoints = checkpoints(d)
        self.stats_existed = _stats_ok(d)[0] is not None
        self.stats_digest = _digest(os.path.join(d, "stats.json"))
        self.events = event_files(d)


def snapshot(d):
    return Snapshot(d)


# ---- TFRecord streams (the event files) ----

def _masked_crc(data):
    # TFRecord's masking of a CRC-32C: rotated right by 15 bits, plus a constant, mod 2**32.
    crc = checkpoint_file.crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def read_tfrecords(path, allow_partial_tail=False, limit=256 << 20):
    """(records, problem) of a TFRecord file, read strictly: each record is a uint64 length
    (little-endian), the masked CRC-32C of those 8 bytes, the data, the masked CRC-32C of the
    data; the file ends exactly where a record does. With allow_partial_tail, an unfinished last
    record (what a killed writer leaves) is dropped instead of being a problem. problem is None
    when the file is valid."""
    try:
        data = checkpoint_file._read_regular(path, limit)
    except OSError as e:
        return [], f"cannot read: {e.strerror}"
    if data is None:
        return [], "not a regular file of a sensible size"
    records = []
    pos = 0
    while pos < len(data):
        header = data[pos:pos + 12]
        if len(header) < 12:
            if allow_partial_tail:
                break
            return records, (f"ends inside the header of record {len(records)} at byte {pos} "
                             f"({len(data)} bytes in all)")
        length, length_crc = struct.unpack("<QI", header)
        if _masked_crc(header[:8]) != length_crc:
            return records, (f"record {len(records)} at byte {pos}: the CRC of its length does "
                             f"not match (not a record boundary: {header[:12]!r})")
        end = pos + 12 + length + 4
        if end > len(data):
            if allow_partial_tail:
                break
            return records, (f"record {len(records)} at byte {pos} ({length} bytes of data) "
                             f"runs past the end of the file ({len(data)} bytes)")
        body = data[pos + 12:pos + 12 + length]
        (body_crc,) = struct.unpack_from("<I", data, pos + 12 + length)
        if _masked_crc(body) != body_crc:
            return records, (f"record {len(records)} at byte {pos}: the CRC of its data does "
                             f"not match")
        records.append(body)
        pos = end
    return records, None


def _check_event_files(case, before, status):
    """Every event file the run created or changed is a valid TFRecord stream; one left as it was
    before the run was checked after the run that wrote it."""
    d = before.dir
    for name, identity in event_files(d).items():
        if before.events.get(name) == identity:
            continue
        _, problem = read_tfrecords(os.path.join(d, name), allow_partial_tail=status < 0)
        if problem:
            case.fail(f"event file {name} is not a valid TFRecord stream: {problem}")


def _check_best_copy(case, best, entries):
    """The best copy is the checkpoint of the step with the lowest val-error-top1 in stats.json
    (the first of several equal ones, as MinSaver keeps the first)."""
    lowest = None
    for entry in entries or []:
        value = entry.get("val-error-top1")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if not math.isfinite(value):
            continue
        if lowest is None or value < lowest[0]:
            lowest = (value, entry.get("global_step"), entry.get("epoch_num"))
    if lowest is None or best is None or not best.valid:
        return
    if best.global_step != lowest[1]:
        case.fail(f"exit status 0, but min-val-error-top1.data is of global_step {best.global_step}"
                  f", while stats.json's lowest val-error-top1, {lowest[0]}, is of global_step "
                  f"{lowest[1]} (epoch {lowest[2]})")


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
        # stats.json.tmp.<pid>.<n>: a new version of stats.json that a killed run was writing
        # (each is written whole, then renamed over stats.json); the next start removes it.
        if name.startswith("stats.json.tmp.") or name.endswith(".tmp"):
            continue
        if name.startswith("stats.json."):
            # A backup of stats.json (before a resume): never an empty or broken copy. A special
            # file moved aside (a FIFO that stood as stats.json) is what it was; opening it would
            # block.
            if not _is_regular(os.path.join(d, name)):
                continue
            # A damaged stats.json kept as it was found (before the job rewrote it) is a faithful
            # copy, not a broken one.
            if before.stats_digest is not None and _digest(
                    os.path.join(d, name)) == before.stats_digest:
                continue
            try:
                with open(os.path.join(d, name), "rb") as f:
                    json.load(f)
            except (OSError, ValueError, UnicodeDecodeError) as e:
                case.fail(f"{name}, a copy of stats.json, is neither valid JSON ({e}) nor the "
                          f"file as it was before the run")
    _check_event_files(case, before, status)

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
    _check_best_copy(case, best, entries)
    epochs = {e.get("epoch_num") for e in entries or []}
    missing = [e for e in range(first, max_epoch + 1) if e not in epochs]
    if missing:
        case.fail(f"exit status 0, but stats.json has no entry for epoch(s) {missing}")
