"""The scenarios. Each takes a Case: a scratch directory, the job, a seeded random generator, and
where its failures go. Most start from a copy of a finished 3-epoch run (model-4, -8, -12, the
best copy min-val-error-top1, stats.json) and run the job on with a larger --max-epoch."""

import json
import os
import re
import resource
import signal
import stat
import subprocess
import time

import checkpoint_file
import invariants
from job import STEPS_PER_EPOCH


class Skip(Exception):
    """The scenario cannot run here (not root, no mount); the message says why."""


class Case:
    def __init__(self, name, job, directory, rng):
        self.name = name
        self.job = job
        self.dir = directory
        self.rng = rng
        self.failures = []
        self.notes = []
        self.runs = []
        self.extra_dirs = []
        self._cleanups = []
        os.makedirs(directory)

    def fail(self, message):
        self.failures.append(message)

    def note(self, message):
        self.notes.append(message)

    def status(self):
        return "FAIL" if self.failures else "PASS"

    def on_cleanup(self, fn):
        self._cleanups.append(fn)

    def cleanup(self):
        for run in self.runs:
            if run.running():
                try:
                    os.killpg(run.pgid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                run.proc.wait()
        while self._cleanups:
            try:
                self._cleanups.pop()()
            except Exception as e:  # noqa: BLE001
                self.note(f"cleanup failed: {e}")

    def report_lines(self, status):
        lines = list(self.notes)
        if status == "FAIL":
            lines += [f"- {f}" for f in self.failures]
            for run in self.runs:
                text = run.output()
                tail = text.splitlines()[-25:]
                lines.append(f"output of {' '.join(run.flags)} (pid {run.pid}, "
                             f"{run.out}), last lines:")
                lines += ["  | " + line[:200] for line in tail]
        return lines

    # ---- helpers ----

    def base_copy(self, name="log"):
        return self.job.copy_base(os.path.join(self.dir, name))

    def start(self, logdir, flags, tag, **kw):
        run = self.job.start(logdir, flags, os.path.join(self.dir, f"{tag}.out"), **kw)
        self.runs.append(run)
        return run

    def run(self, logdir, flags, tag, timeout=None, **kw):
        run = self.start(logdir, flags, tag, **kw)
        status = run.wait(timeout) if timeout else run.wait()
        if run.timed_out:
            self.fail(f"run '{tag}' did not end within {timeout or 'the time limit'} s (hung); "
                      f"after SIGTERM it exited with {status}")
        return run, status

    def expect_status(self, tag, status, want):
        if want == "nonzero":
            if status == 0:
                self.fail(f"run '{tag}' exited with 0, expected a non-zero exit status")
        elif status != want:
            self.fail(f"run '{tag}' exited with {status}, expected {want}")


def _max_epoch(n):
    return ["--max-epoch", str(n)]


# ---- signals at random moments ----

MOMENTS = ("startup", "epoch", "validation", "save")


def _signal_then_resume(case, sig):
    """Runs epochs 4-6 on the base run, sends `sig` at a random moment, checks, then resumes."""
    d = case.base_copy()
    moment = case.rng.choice(MOMENTS)
    epoch = case.rng.randint(4, 6)
    delay = 0.0
    before = invariants.snapshot(d)
    run = case.start(d, _max_epoch(6), "interrupted")
    if moment == "startup":
        delay = case.rng.uniform(0, 2.5)
        time.sleep(delay)
    elif moment == "epoch":
        run.wait_for(f"Start Epoch {epoch} ...")
        delay = case.rng.uniform(0, 0.2)
        time.sleep(delay)
    elif moment == "validation":
        run.wait_for(f"Epoch {epoch} (global_step")
        delay = case.rng.uniform(0, 0.05)
        time.sleep(delay)
    else:  # a save: ModelSaver's line, after which MinSaver's copy and stats.json follow
        run.wait_for("Model saved to", count=epoch - 3)
        delay = case.rng.uniform(0, 0.02)
        time.sleep(delay)
    case.note(f"{signal.Signals(sig).name} at {moment} (epoch {epoch}, +{delay:.3f} s)")
    run.signal(sig)
    status = run.wait()
    allowed = {0, -sig} | ({143} if sig == signal.SIGTERM else set())
    if status not in allowed:
        case.fail(f"after {signal.Signals(sig).name} the job exited with {status}, expected one "
                  f"of {sorted(allowed)}")
    invariants.check(case, before, run, status, max_epoch=6)
    middle = invariants.snapshot(d)
    resumed, status = case.run(d, _max_epoch(6), "resumed")
    case.expect_status("resumed", status, 0)
    invariants.check(case, middle, resumed, status, max_epoch=6)


def sigterm(case):
    """SIGTERM at a random moment (start-up, mid-epoch, validation, a save), then resume."""
    _signal_then_resume(case, signal.SIGTERM)


def sigkill(case):
    """SIGKILL at a random moment (start-up, mid-epoch, validation, a save), then resume."""
    _signal_then_resume(case, signal.SIGKILL)


# ---- a full disk, a read-only directory ----

def _need_root(what):
    if os.geteuid() != 0:
        raise Skip(f"SKIP: {what} needs root (mount); run the suite as root to include it")


def _mount(case, args, source, target):
    result = subprocess.run(["mount"] + args + [source, target], capture_output=True, text=True)
    if result.returncode != 0:
        raise Skip(f"SKIP: mount {' '.join(args)} {source} {target} failed: {result.stderr.strip()}")
    case.on_cleanup(lambda: subprocess.run(["umount", target], check=True))


def disk_full(case):
    """The disk fills mid-run (a small tmpfs): the run must end non-zero, keeping what it had."""
    _need_root("a full disk (tmpfs)")
    base = case.job.base()
    used = sum(-(-os.path.getsize(os.path.join(base, n)) // 4096) * 4096
               for n in os.listdir(base))
    ckpt = os.path.getsize(os.path.join(base, "model-12.data"))
    mnt = os.path.join(case.dir, "mnt")
    os.makedirs(mnt)
    # Room for one more checkpoint and its best copy at most, not for the four epochs to come.
    size = used + ckpt + ckpt // 2
    _mount(case, ["-t", "tmpfs", "-o", f"size={size}"], "tmpfs", mnt)
    d = case.job.copy_base(os.path.join(mnt, "log"))
    before = invariants.snapshot(d)
    run, status = case.run(d, _max_epoch(7), "disk-full")
    missing = [e for e in range(4, 8) if not os.path.exists(f"{d}/model-{e * STEPS_PER_EPOCH}.data")]
    case.note(f"tmpfs of {size} bytes; checkpoints of epochs {missing} were not written")
    if not missing:
        case.fail("the scenario is mis-sized: every checkpoint fitted on the tmpfs")
    case.expect_status("disk-full", status, "nonzero")
    invariants.check(case, before, run, status, max_epoch=7)


def readonly_dir(case):
    """The log directory becomes read-only mid-run: the run must end non-zero."""
    d = case.base_copy()
    before = invariants.snapshot(d)
    run = case.start(d, _max_epoch(7), "read-only")
    run.wait_for("Start Epoch 5 ...")
    if os.geteuid() == 0:
        # Root ignores permissions: a read-only bind mount of the directory on itself. Files the
        # job has open already (log.log, the event file) stay writable, as with chmod.
        try:
            _mount(case, ["--bind"], d, d)
            subprocess.run(["mount", "-o", "remount,bind,ro", d], check=True,
                           capture_output=True)
        except (Skip, subprocess.CalledProcessError) as e:
            raise Skip(f"SKIP: cannot make {d} read-only with a bind mount: {e}")
        case.note("made read-only (bind mount) once epoch 5 started")
    else:
        os.chmod(d, 0o555)
        case.on_cleanup(lambda: os.chmod(d, 0o755))
        case.note("made read-only (chmod 555) once epoch 5 started")
    status = run.wait()
    case.expect_status("read-only", status, "nonzero")
    invariants.check(case, before, run, status, max_epoch=7)


# ---- two runs on one directory ----

def _two_runs(case, second_flags, while_stopped=None):
    d = case.base_copy()
    before = invariants.snapshot(d)
    first = case.start(d, _max_epoch(6), "first")
    first.wait_for("Start Epoch 4 ...")
    # Stopped, the first run holds the directory for as long as the second needs to notice.
    first.signal(signal.SIGSTOP)
    try:
        if while_stopped:
            while_stopped(d)
        second, status = case.run(d, _max_epoch(6) + second_flags, "second", timeout=60)
    finally:
        first.signal(signal.SIGCONT)
    case.expect_status("second", status, "nonzero")
    if str(first.pid) not in second.output():
        case.fail(f"the second run's output does not name the holder's process id {first.pid}")
    status_first = first.wait()
    case.expect_status("first", status_first, 0)
    moved = [n for n in os.listdir(case.dir) if n.startswith("log.")]
    if moved:
        case.fail(f"the second run moved the directory aside: {moved}")
    invariants.check(case, before, first, status_first, max_epoch=6)


def two_runs(case):
    """A second run on a directory in use stops at once naming the holder; the first finishes."""
    _two_runs(case, [])


def two_runs_no_resume(case):
    """--no-resume on a directory another run holds: refused, nothing moved."""
    _two_runs(case, ["--no-resume"])


def lock_deleted(case):
    """.trainpack.lock deleted under a running job: a second run is still refused, naming it.

    The first run is stopped (SIGSTOP) while the lock file is removed and the second runs; once
    continued it must finish."""
    def delete_lock(d):
        os.remove(os.path.join(d, ".trainpack.lock"))
        case.note("removed .trainpack.lock while the first run was stopped (SIGSTOP)")

    _two_runs(case, [], while_stopped=delete_lock)


# ---- damaged and foreign checkpoints ----

def _damage(rng, path, how):
    size = os.path.getsize(path)
    if how == "truncate":
        with open(path, "r+b") as f:
            f.truncate(rng.randrange(0, size))
    else:
        at = rng.randrange(0, size)
        with open(path, "r+b") as f:
            f.seek(at)
            byte = f.read(1)[0]
            f.seek(at)
            f.write(bytes([byte ^ (1 << rng.randrange(8))]))
    return how


def _corrupt_newest(case, how):
    d = case.base_copy()
    _damage(case.rng, os.path.join(d, "model-12.data"), how)
    before = invariants.snapshot(d)
    if before.checkpoints["model-12.data"].valid:
        case.note("the damage left model-12.data valid (a flip in unchecked bytes?)")
    run, status = case.run(d, _max_epoch(4), "resumed")
    case.expect_status("resumed", status, 0)
    if f"Will load checkpoint at {d}/model-8." not in run.output():
        case.fail("the run did not fall back to model-8 ('Will load checkpoint at .../model-8.')")
    invariants.check(case, before, run, status, max_epoch=4)


def corrupt_truncate(case):
    """The newest checkpoint truncated: resume falls back to the one before."""
    _corrupt_newest(case, "truncate")


def corrupt_bitflip(case):
    """A bit of the newest checkpoint flipped: resume falls back to the one before."""
    _corrupt_newest(case, "flip")


def _expect_refusal(case, d, tag):
    """The run must refuse (non-zero), saying how to start over (--no-resume), and leave every
    file as it was (log.log may be renamed aside, and the lock file names the latest run that
    held the directory) and add no checkpoint."""
    files = invariants.file_digests(d)
    before = invariants.snapshot(d)
    run, status = case.run(d, _max_epoch(4), tag)
    case.expect_status(tag, status, "nonzero")
    if "--no-resume" not in run.output():
        case.fail("the refusal does not say how to start over (--no-resume)")
    after = invariants.file_digests(d)
    for name, digest in files.items():
        if name in ("log.log", ".trainpack.lock"):
            continue
        if after.get(name) != digest:
            case.fail(f"{name} was {'removed' if name not in after else 'changed'} by the run")
    added = [n for n in after if n not in files and invariants.CHECKPOINT.match(n)]
    if added:
        case.fail(f"the run wrote checkpoints {added}")
    invariants.check(case, before, run, status, max_epoch=4)


def all_corrupt(case):
    """Every model-<step>.data corrupt: the run refuses and leaves everything in place."""
    d = case.base_copy()
    hows = [_damage(case.rng, os.path.join(d, f"model-{s}.data"), case.rng.choice(
        ("truncate", "flip"))) for s in (4, 8, 12)]
    case.note(f"damage of model-4, -8, -12: {hows}")
    _expect_refusal(case, d, "refused")


def foreign_checkpoint(case):
    """Every checkpoint a valid one of another model (no entry name matches): refused."""
    d = case.base_copy()
    for s in (4, 8, 12):
        p = os.path.join(d, f"model-{s}.data")
        checkpoint_file.make_foreign(p, p)
    _expect_refusal(case, d, "refused")


# ---- bad hyper.txt values ----

def _hyper(case, text):
    d = case.base_copy()
    with open(os.path.join(d, "hyper.txt"), "wb") as f:
        f.write(text)
    before = invariants.snapshot(d)
    run, status = case.run(d, _max_epoch(5), "hyper")
    case.expect_status("hyper", status, 0)
    invariants.check(case, before, run, status, max_epoch=5)
    for name, info in invariants.checkpoints(d).items():
        if info.valid and not info.finite:
            case.fail(f"{name} holds non-finite values: {', '.join(info.nonfinite[:6])}")
        if info.valid and info.learning_rate is not None and not info.learning_rate > 0:
            case.fail(f"{name} holds the learning rate {info.learning_rate}")


def hyper_nan(case):
    """hyper.txt sets learning_rate: nan: refused, the run ends OK, no NaN in checkpoints."""
    _hyper(case, b"learning_rate: nan\n")


def hyper_inf(case):
    """hyper.txt sets learning_rate: inf: refused, the run ends OK, no NaN in checkpoints."""
    _hyper(case, b"learning_rate: inf\n")


def hyper_negative(case):
    """hyper.txt sets learning_rate: -1: refused, the run ends OK, the rate stays positive."""
    _hyper(case, b"learning_rate: -1\n")


def hyper_garbage(case):
    """hyper.txt of random binary bytes: the run ends OK, no NaN in checkpoints."""
    _hyper(case, b"learning_rate: " + bytes(case.rng.randrange(256) for _ in range(4096)))


# ---- planted links and special files ----

def tmp_symlink(case):
    """Temporary-file names planted as links to files outside: those are never touched."""
    d = case.base_copy()
    outside = os.path.join(case.dir, "outside")
    os.makedirs(outside)
    victims = {}
    for name in ("model-16.data.tmp", "model-20.data.tmp", "min-val-error-top1.data.tmp",
                 "stats.json.tmp", "checkpoint.tmp", "checkpoint.previous.tmp"):
        victim = os.path.join(outside, "victim-" + name)
        content = f"outside file behind {name}\n".encode() * 20
        with open(victim, "wb") as f:
            f.write(content)
        os.symlink(victim, os.path.join(d, name))
        victims[victim] = content
    before = invariants.snapshot(d)
    run, status = case.run(d, _max_epoch(5), "planted")
    for victim, content in victims.items():
        with open(victim, "rb") as f:
            now = f.read()
        if now != content:
            case.fail(f"{victim} (outside the log directory) was written through a link: "
                      f"{len(content)} bytes became {len(now)}")
    for name in os.listdir(d):
        p = os.path.join(d, name)
        if os.path.islink(p) and not name.endswith(".tmp"):
            case.fail(f"{name} in the log directory is now a link to {os.readlink(p)}")
    invariants.check(case, before, run, status, max_epoch=5)


def _special(case, name, make, timeout=30, **kw):
    d = case.base_copy()
    p = os.path.join(d, name)
    if os.path.lexists(p):
        os.remove(p)
    make(p)
    before = invariants.snapshot(d)
    run, status = case.run(d, _max_epoch(5), "special", timeout=timeout, **kw)
    if run.timed_out:
        acted = "ended it" if status in (143, -signal.SIGTERM) else "was not acted on (SIGKILL)"
        case.note(f"hung on {name}; SIGTERM {acted}")
    invariants.check(case, before, run, status, max_epoch=5)
    return run, status


def _expect_fallback(case, run, status):
    case.expect_status("special", status, 0)
    if "/model-8." not in run.output():
        case.fail("the run did not fall back to model-8")


def fifo_checkpoint(case):
    """The newest checkpoint model-12.data a FIFO: skipped, the run resumes model-8, ends OK."""
    _expect_fallback(case, *_special(case, "model-12.data", os.mkfifo))


def fifo_index(case):
    """The `checkpoint` index a FIFO: the job must not hang; its exit code tells the truth."""
    _special(case, "checkpoint", os.mkfifo)


def fifo_stats(case):
    """stats.json a FIFO: the job must not hang; its exit code tells the truth."""
    _special(case, "stats.json", os.mkfifo)


def dev_zero_checkpoint(case):
    """model-12.data a link to /dev/zero: skipped, the run resumes model-8, ends OK."""
    # A job reading /dev/zero to the end must not take the machine's memory: 6 GiB (the job
    # needs well under 2 GiB).
    _expect_fallback(case, *_special(case, "model-12.data", lambda p: os.symlink("/dev/zero", p),
                                     **case.job.memory_limit(6)))


# ---- a write that fails or kills the job (the fault library) ----

BEST = "min-val-error-top1.data"


def _fault_env(case, fault, path):
    env = case.job.fault_env(fault, path)
    if env is None:
        raise Skip("SKIP: needs the fault library (--fault-lib LIB; the CMake target "
                   "trainpack_fault_injection builds it from tests/tools/fault_injection.c)")
    case.note(f"TRAINPACK_FAULT={fault} on writes to paths containing {path!r}")
    return env


def _expect_best_copy(case, d, step):
    info = invariants.inspect(os.path.join(d, BEST))
    if info is None:
        case.fail(f"{BEST} is missing after the second run (the copy of model-{step} owed since "
                  f"the first)")
    elif not info.valid:
        case.fail(f"{BEST} after the second run is not a valid checkpoint ({info.why})")
    elif info.global_step != step:
        case.fail(f"{BEST} after the second run is of global_step {info.global_step}, not {step}")


def _best_copy_fault(case, fault):
    """A new log directory, one epoch (always a new best), the write of the best copy failing;
    then the same command without the fault must make the copy it owes."""
    env = _fault_env(case, fault, BEST)
    d = os.path.join(case.dir, "log")
    before = invariants.snapshot(d)
    run, status = case.run(d, _max_epoch(1), "faulty", extra_env=env)
    if fault == "kill":
        case.expect_status("faulty", status, -signal.SIGKILL)
    else:
        case.expect_status("faulty", status, 1)
        if BEST not in run.output():
            case.fail(f"the failed run's output does not name {BEST}, the file it could not write")
    invariants.check(case, before, run, status, max_epoch=1)
    if not os.path.exists(os.path.join(d, f"model-{STEPS_PER_EPOCH}.data")):
        case.fail(f"the scenario is mis-built: the faulty run left no model-{STEPS_PER_EPOCH}.data "
                  f"to copy (it should fail at the copy, after the checkpoint)")
    middle = invariants.snapshot(d)
    again, status = case.run(d, _max_epoch(1), "again")
    case.expect_status("again", status, 0)
    _expect_best_copy(case, d, STEPS_PER_EPOCH)
    invariants.check(case, middle, again, status, max_epoch=1)


def best_copy_killed(case):
    """SIGKILL while writing the first best copy: the next run makes the copy it owes."""
    _best_copy_fault(case, "kill")


def best_copy_enospc(case):
    """The best copy's write fails (ENOSPC): exit 1 naming it; the next run makes the copy."""
    _best_copy_fault(case, "enospc")


# ---- a file size limit ----

def file_size_limit(case):
    """RLIMIT_FSIZE below a checkpoint's size: no death by SIGXFSZ; exit 1 saying EFBIG."""
    d = case.base_copy()
    limit = os.path.getsize(os.path.join(d, "model-12.data")) // 2

    def limit_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        # The default action (death, with a core) whatever the parent ignores: the job itself
        # must not be killed by it.
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)

    case.note(f"RLIMIT_FSIZE {limit} bytes (half a checkpoint)")
    for tag in ("limited", "resumed"):
        before = invariants.snapshot(d)
        run, status = case.run(d, _max_epoch(5), tag, preexec_fn=limit_file_size)
        if status in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ):
            case.fail(f"run '{tag}' was killed by SIGXFSZ (status {status}) writing past the file "
                      f"size limit, instead of failing the write with EFBIG")
        else:
            case.expect_status(tag, status, 1)
        lines = [line for line in run.output().splitlines() if "File too large" in line]
        if not lines:
            case.fail(f"run '{tag}''s output does not say 'File too large' (EFBIG)")
        elif not any("model-16" in line for line in lines):
            case.fail(f"run '{tag}''s 'File too large' lines do not name model-16.data, the first "
                      f"checkpoint over the limit: {lines[0][:200]!r}")
        left = sorted(n for n in os.listdir(d) if ".tmp." in n)
        if left:
            case.fail(f"run '{tag}' left temporary files in the log directory: {left}")
        invariants.check(case, before, run, status, max_epoch=5)


# ---- a closed terminal or pipe, closed standard descriptors ----

def _default_sighup():
    # The suite may itself run under nohup, whose ignored SIGHUP every child would inherit.
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _pipeline(case, d, flags, tag, reader_argv, reader_stdout):
    """Starts `job | reader` the way a shell starts a pipeline: the job's stdout and stderr
    into a pipe read by reader_argv, both in one new process group (the reader's). Not a new
    session: a process can only join a group of its own session."""
    reader = subprocess.Popen(reader_argv, stdin=subprocess.PIPE, stdout=reader_stdout,
                              stderr=subprocess.DEVNULL, process_group=0,
                              preexec_fn=_default_sighup)

    def stop_reader():
        if reader.poll() is None:
            reader.kill()
        reader.wait()

    case.on_cleanup(stop_reader)
    try:
        run = case.start(d, flags, tag, stdout=reader.stdin, process_group=reader.pid,
                         preexec_fn=_default_sighup)
    finally:
        # The job holds the pipe's writing end alone: the reader's end of input is the job's.
        reader.stdin.close()
    return reader, run


def _log_text(d):
    try:
        with open(os.path.join(d, "log.log"), "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


SIGHUP_MAX_EPOCH = 20


def sighup_tee(case):
    """`job | tee FILE`, SIGHUP to the group: the job stops (129) and saves; then it resumes.

    tee dies of the SIGHUP, so what the job prints while it stops goes to a pipe nobody reads:
    that must not kill it (SIGPIPE) before its checkpoint and log.log's last lines."""
    # Far more epochs than the signal needs: an epoch of this job takes well under 0.1 s, and
    # a run that ends before the signal arrives tests nothing.
    d = case.base_copy()
    before = invariants.snapshot(d)
    out = os.path.join(case.dir, "tee.out")
    reader, run = _pipeline(case, d, _max_epoch(SIGHUP_MAX_EPOCH), "tee", ["tee", out],
                            subprocess.DEVNULL)
    if not run.wait_for("Start Epoch 5 ..."):
        case.fail("the job never reached epoch 5 (the scenario could not send SIGHUP)")
    delay = case.rng.uniform(0, 0.2)
    time.sleep(delay)
    case.note(f"SIGHUP to the pipeline's process group {reader.pid} at epoch 5 (+{delay:.3f} s)")
    try:
        os.killpg(reader.pid, signal.SIGHUP)
    except ProcessLookupError:
        pass
    status = run.wait()
    reader.wait()
    if status == -signal.SIGPIPE:
        case.fail("the job died of SIGPIPE: it wrote to its stdout, the pipe into tee, after tee "
                  "had died of SIGHUP")
    else:
        case.expect_status("tee", status, 128 + signal.SIGHUP)
    log = _log_text(d)
    m = re.search(r"stopped by SIGHUP at global_step (\d+)", log)
    if not m:
        case.fail("log.log does not say where the job stopped ('stopped by SIGHUP at "
                  "global_step N')")
    else:
        step = int(m.group(1))
        if f"/model-{step} holds that point" not in log:
            case.fail(f"log.log does not say which checkpoint holds global_step {step} "
                      f"('.../model-{step} holds that point')")
        info = invariants.inspect(os.path.join(d, f"model-{step}.data"))
        if info is None:
            case.fail(f"no checkpoint of the stop step: model-{step}.data is missing")
        elif not info.valid:
            case.fail(f"model-{step}.data, the checkpoint of the stop step, is invalid: {info.why}")
        elif info.global_step != step:
            case.fail(f"model-{step}.data, the checkpoint of the stop step, is of global_step "
                      f"{info.global_step}")
    invariants.check(case, before, run, status, max_epoch=SIGHUP_MAX_EPOCH)
    middle = invariants.snapshot(d)
    resumed, status = case.run(d, _max_epoch(SIGHUP_MAX_EPOCH), "resumed")
    case.expect_status("resumed", status, 0)
    invariants.check(case, middle, resumed, status, max_epoch=SIGHUP_MAX_EPOCH)


def head_pipe(case):
    """`job | head -n 3`: once head is gone, the job carries on to the end (0), all in log.log."""
    d = case.base_copy()
    before = invariants.snapshot(d)
    with open(os.path.join(case.dir, "head-output"), "wb") as f:
        reader, run = _pipeline(case, d, _max_epoch(5), "head", ["head", "-n", "3"], f)
    status = run.wait()
    reader.wait()
    # What head printed is three lines; the run's record is log.log.
    run.out = os.path.join(d, "log.log")
    if status == -signal.SIGPIPE:
        case.fail("the job died of SIGPIPE once head had read its three lines and exited")
    else:
        case.expect_status("head", status, 0)
    log = _log_text(d)
    for text in ("Start Epoch 4 ...", "Start Epoch 5 ...", "Training has finished!",
                 "fashion_mnist: OK"):
        if text not in log:
            case.fail(f"log.log lacks {text!r}: the run did not carry on once head was gone")
    invariants.check(case, before, run, status, max_epoch=5)


def _lock_shape(text):
    # The owner line with its numbers (process id, date, time) blanked.
    return re.sub(r"\d+", "N", text)


def closed_std_fds(case):
    """stdin, stdout and stderr closed: the job ends OK, its files keep their content.

    A file the job opens must not take descriptor 1 or 2, where its log lines would go into it
    (log.log twice, the event file, the lock file)."""
    d = case.base_copy()
    with open(os.path.join(d, ".trainpack.lock"), encoding="utf-8", errors="replace") as f:
        normal_lock = f.read()
    before = invariants.snapshot(d)
    run, status = case.run(d, _max_epoch(5), "closed",
                           wrapper=["/bin/sh", "-c", 'exec "$0" "$@" <&- >&- 2>&-'])
    # Nothing reaches the output file: the run's record is log.log.
    run.out = os.path.join(d, "log.log")
    case.expect_status("closed", status, 0)
    log = _log_text(d)
    for epoch in (4, 5):
        n = log.count(f"Start Epoch {epoch} ...")
        if n != 1:
            case.fail(f"log.log holds 'Start Epoch {epoch} ...' {n} times, not once (stdout "
                      f"written into log.log?)")
    try:
        with open(os.path.join(d, ".trainpack.lock"), encoding="utf-8", errors="replace") as f:
            lock = f.read()
    except OSError as e:
        lock = f"<{e.strerror}>"
    if _lock_shape(lock) != _lock_shape(normal_lock):
        case.fail(f".trainpack.lock holds {lock[:200]!r}, not an owner line like a normal run's "
                  f"{normal_lock!r}")
    elif re.match(r"\d+ ", normal_lock) and not lock.startswith(f"{run.pid} "):
        case.fail(f".trainpack.lock names {lock.split()[0]}, not the job's process id {run.pid}")
    invariants.check(case, before, run, status, max_epoch=5)


# ---- what the job reads must not reach its log ----

def hyper_symlink_secret(case):
    """hyper.txt, INJECT_SHELL.tmp links to private files: nothing of them in output or log.

    The directory is private (700), so log.log must be too; the files behind the links are left
    as they were."""
    d = case.base_copy()
    os.chmod(d, 0o700)
    outside = os.path.join(case.dir, "outside")
    os.makedirs(outside)
    secrets = {}
    for name, content in (("secret-hyper", b"learning_rate: 0.5 SECRET-hyper-1a2b\n"
                                           b"SECRET-hyper-line-2\n"),
                          ("secret-shell", b"SECRET-shell-3c4d\n")):
        p = os.path.join(outside, name)
        with open(p, "wb") as f:
            f.write(content)
        os.chmod(p, 0o600)
        secrets[p] = content
    os.symlink(os.path.join(outside, "secret-hyper"), os.path.join(d, "hyper.txt"))
    os.symlink(os.path.join(outside, "secret-shell"), os.path.join(d, "INJECT_SHELL.tmp"))
    before = invariants.snapshot(d)
    # In the log directory: InjectShell looks for INJECT_SHELL.tmp in the working directory.
    run, status = case.run(d, _max_epoch(5), "hyper", cwd=d)
    case.expect_status("hyper", status, 0)
    if "SECRET" in run.output():
        case.fail("the job's output quotes a file behind a link: "
                  + next(line for line in run.output().splitlines() if "SECRET" in line)[:200])
    if "SECRET" in _log_text(d):
        case.fail("log.log quotes a file behind a link")
    try:
        mode = stat.S_IMODE(os.stat(os.path.join(d, "log.log")).st_mode)
        if mode & 0o077:
            case.fail(f"log.log has mode {mode:o} in a directory of mode 700: readable by others")
    except OSError as e:
        case.fail(f"log.log: {e.strerror}")
    for p, content in secrets.items():
        try:
            with open(p, "rb") as f:
                now = f.read()
            if now != content:
                case.fail(f"{p} (outside the log directory) was changed")
        except OSError as e:
            case.fail(f"{p} (outside the log directory): {e.strerror}")
    invariants.check(case, before, run, status, max_epoch=5)


def hyper_malformed_quiet(case):
    """A bad line in hyper.txt: the warning names its line number, not its text."""
    d = case.base_copy()
    with open(os.path.join(d, "hyper.txt"), "wb") as f:
        f.write(b"learning_rate: 0.01\nthis line is SECRET-junk\n")
    before = invariants.snapshot(d)
    run, status = case.run(d, _max_epoch(4), "hyper")
    case.expect_status("hyper", status, 0)
    out, log = run.output(), _log_text(d)
    if "SECRET-junk" in out or "SECRET-junk" in log:
        case.fail("the output or log.log quotes hyper.txt's bad line")
    if "line 2" not in out and "line 2" not in log:
        case.fail("neither the output nor log.log names the bad line of hyper.txt ('line 2')")
    invariants.check(case, before, run, status, max_epoch=4)


# ---- the console's stop, a stats.json that lacks or pads ----

def _stats_epochs(d):
    try:
        with open(os.path.join(d, "stats.json"), "rb") as f:
            return [e.get("epoch_num") for e in json.load(f)]
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def console_stop(case):
    """`stop` in INJECT_SHELL.tmp: the run ends at epoch 4 with its stats; the resume goes on.

    Without a terminal, InjectShell runs the file's lines as console commands. stats.json must
    hold epoch 4 after the stop, and epochs 1 to 6 once each after the resume."""
    d = case.base_copy()
    with open(os.path.join(d, "INJECT_SHELL.tmp"), "wb") as f:
        f.write(b"stop\n")
    before = invariants.snapshot(d)
    # In the log directory: InjectShell looks for INJECT_SHELL.tmp in the working directory.
    run, status = case.run(d, _max_epoch(6), "stopped", cwd=d)
    # A stop from the console is not a signal: main.cpp's exit statuses give it the verdict of
    # the epochs trained (0 within --max-val-error, everything written).
    case.note(f"the console's stop ended the run with status {status}")
    case.expect_status("stopped", status, 0)
    if "Start Epoch 5 ..." in run.output():
        case.fail("the run went on to epoch 5: the console's stop at epoch 4's end was not taken")
    epochs = _stats_epochs(d)
    if epochs is None or 4 not in epochs:
        case.fail(f"stats.json has no entry for epoch 4, which the stopped run trained "
                  f"(epochs: {epochs})")
    invariants.check(case, before, run, status, max_epoch=4)
    middle = invariants.snapshot(d)
    resumed, status = case.run(d, _max_epoch(6), "resumed", cwd=d)
    case.expect_status("resumed", status, 0)
    epochs = _stats_epochs(d)
    if epochs != list(range(1, 7)):
        case.fail(f"stats.json after the resume holds the epochs {epochs}, not 1 to 6 once each")
    invariants.check(case, middle, resumed, status, max_epoch=6)


def stats_hole(case):
    """stats.json lacks the last epoch its checkpoint holds: the resume fills it in."""
    d = case.base_copy()
    p = os.path.join(d, "stats.json")
    with open(p, "rb") as f:
        text = f.read()
    entries = json.loads(text)
    # The text cut before the last entry, so that the others keep their bytes exactly.
    cut = text.rstrip(b"]").rindex(b", {")
    shorter = text[:cut] + b"]"
    if json.loads(shorter) != entries[:-1] or entries[-1].get("epoch_num") != 3:
        raise RuntimeError(f"stats.json of the base run is not the expected layout: {text[:200]!r}")
    with open(p, "wb") as f:
        f.write(shorter)
    before = invariants.snapshot(d)
    run, status = case.run(d, _max_epoch(4), "resumed")
    case.expect_status("resumed", status, 0)
    epochs = _stats_epochs(d)
    if epochs != [1, 2, 3, 4]:
        case.fail(f"stats.json holds the epochs {epochs}, not 1, 2, 3 (from the checkpoint's "
                  f"record) and 4")
    invariants.check(case, before, run, status, max_epoch=4)


def stats_nul_padded(case):
    """stats.json padded by 64 MiB of NULs (a hole): the resume ends OK, copies stay sparse."""
    d = case.base_copy()
    p = os.path.join(d, "stats.json")
    size = os.path.getsize(p)
    with open(p, "r+b") as f:
        f.truncate(size + (64 << 20))
    before = invariants.snapshot(d)
    run, status = case.run(d, _max_epoch(4), "resumed", **case.job.memory_limit(6))
    case.expect_status("resumed", status, 0)
    epochs = _stats_epochs(d)
    if epochs != [1, 2, 3, 4]:
        case.fail(f"stats.json holds the epochs {epochs}, not 1 to 4")
    for name in sorted(os.listdir(d)):
        if name.startswith("stats.json"):
            st = os.lstat(os.path.join(d, name))
            if st.st_blocks * 512 >= 1 << 20:
                case.fail(f"{name} takes {st.st_blocks * 512} bytes on disk: the NUL padding "
                          f"was written out instead of staying a hole")
    invariants.check(case, before, run, status, max_epoch=4)

# ---- resuming with other flags, leftovers ----

def extend_schedule(case):
    """A finished 3-epoch run extended to 10 epochs: the learning rate goes on from 0.001."""
    d = case.base_copy()
    before = invariants.snapshot(d)
    run, status = case.run(d, _max_epoch(10), "extended")
    case.expect_status("extended", status, 0)
    invariants.check(case, before, run, status, max_epoch=10)
    # The 3-epoch schedule ends at 0.001. The 10-epoch one is (0, 0.1), (6, 0.01), (8, 0.001): it
    # gives 0.1 at epoch 3. Resumed by epoch, the rate stays 0.001 until that schedule's next
    # point (set at the end of epoch 6, after its checkpoint), never going back to 0.1.
    want = {4: 0.001, 5: 0.001, 6: 0.001, 7: 0.01, 8: 0.01, 9: 0.001, 10: 0.001}
    for epoch, rate in want.items():
        info = invariants.checkpoints(d).get(f"model-{epoch * STEPS_PER_EPOCH}.data")
        if info is None or not info.valid:
            continue
        if info.learning_rate is None or abs(info.learning_rate - rate) > 1e-9:
            case.fail(f"the checkpoint of epoch {epoch} holds the learning rate "
                      f"{info.learning_rate}, not {rate}: the schedule did not go on by epoch")
    if "resumed at epoch3 with 'learning_rate' = 0.001" not in run.output():
        case.fail("the run does not say that it keeps the checkpoint's learning rate")


def missing_parameter(case):
    """The newest checkpoint lacks one parameter: refused naming it; the flag allows it."""
    d = case.base_copy()
    for step in (4, 8, 12):
        p = os.path.join(d, f"model-{step}.data")
        checkpoint_file.make_missing(p, p, "fc.bias")
    files = invariants.file_digests(d)
    before = invariants.snapshot(d)
    run, status = case.run(d, _max_epoch(4), "refused")
    case.expect_status("refused", status, "nonzero")
    out = run.output()
    for text in ("fc.bias", "--allow-missing-parameters"):
        if text not in out:
            case.fail(f"the refusal does not name {text!r}")
    after = invariants.file_digests(d)
    for name, digest in files.items():
        if name not in ("log.log", ".trainpack.lock") and after.get(name) != digest:
            case.fail(f"{name} was changed by the refused run")
    invariants.check(case, before, run, status, max_epoch=4)
    before = invariants.snapshot(d)
    run, status = case.run(d, _max_epoch(4) + ["--allow-missing-parameters"], "allowed")
    case.expect_status("allowed", status, 0)
    invariants.check(case, before, run, status, max_epoch=4)


def precision_change(case):
    """A resume with another --precision warns, as other flag changes do."""
    d = case.base_copy()
    before = invariants.snapshot(d)
    run, status = case.run(d, _max_epoch(4) + ["--precision", "bf16"], "bf16")
    case.expect_status("bf16", status, 0)
    if "--precision float32 -> bfloat16" not in run.output():
        case.fail("the resume with --precision bf16 does not warn about the change")
    invariants.check(case, before, run, status, max_epoch=4)


def stale_temporary(case):
    """A killed run's temporary file (model-16.data.tmp.<dead pid>.0) is removed at the start."""
    d = case.base_copy()
    dead = subprocess.Popen(["true"])
    dead.wait()  # a process id that no longer runs
    name = f"model-16.data.tmp.{dead.pid}.0"
    with open(os.path.join(d, name), "wb") as f:
        f.write(b"half a checkpoint" * 1000)
    before = invariants.snapshot(d)
    run, status = case.run(d, _max_epoch(4), "cleaned")
    case.expect_status("cleaned", status, 0)
    if os.path.exists(os.path.join(d, name)):
        case.fail(f"{name}, left by a process that no longer runs, is still there")
    elif name not in run.output():
        case.fail(f"the run does not log that it removed {name}")
    invariants.check(case, before, run, status, max_epoch=4)


ALL = {f.__name__: f for f in (
    sigterm, sigkill, disk_full, readonly_dir, two_runs, two_runs_no_resume, lock_deleted,
    corrupt_truncate, corrupt_bitflip, all_corrupt, foreign_checkpoint, hyper_nan, hyper_inf,
    hyper_negative, hyper_garbage, hyper_symlink_secret, hyper_malformed_quiet, tmp_symlink,
    fifo_checkpoint, fifo_index, fifo_stats, dev_zero_checkpoint, best_copy_killed,
    best_copy_enospc, file_size_limit, sighup_tee, head_pipe, closed_std_fds, console_stop,
    stats_hole, stats_nul_padded, extend_schedule, missing_parameter, precision_change,
    stale_temporary)}
# Those whose moment or damage is drawn at random: --trials N runs them N times.
RANDOMISED = {"sigterm", "sigkill", "corrupt_truncate", "corrupt_bitflip", "all_corrupt",
              "hyper_garbage", "sighup_tee"}
