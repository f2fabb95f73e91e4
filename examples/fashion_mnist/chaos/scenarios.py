"""The scenarios. Each takes a Case: a scratch directory, the job, a seeded random generator, and
where its failures go. Most start from a copy of a finished 3-epoch run (model-4, -8, -12, the
best copy min-val-error-top1, stats.json) and run the job on with a larger --max-epoch."""

import os
import resource
import signal
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
                    os.killpg(run.pid, signal.SIGKILL)
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

def _two_runs(case, second_flags):
    d = case.base_copy()
    before = invariants.snapshot(d)
    first = case.start(d, _max_epoch(6), "first")
    first.wait_for("Start Epoch 4 ...")
    # Stopped, the first run holds the directory for as long as the second needs to notice.
    first.signal(signal.SIGSTOP)
    try:
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


def _limit_memory():
    # A job reading /dev/zero to the end must not take the machine's memory: 6 GiB of address
    # space (the job needs well under 2 GiB).
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))


def dev_zero_checkpoint(case):
    """model-12.data a link to /dev/zero: skipped, the run resumes model-8, ends OK."""
    _expect_fallback(case, *_special(case, "model-12.data", lambda p: os.symlink("/dev/zero", p),
                                     preexec_fn=_limit_memory))


ALL = {f.__name__: f for f in (
    sigterm, sigkill, disk_full, readonly_dir, two_runs, two_runs_no_resume, corrupt_truncate,
    corrupt_bitflip, all_corrupt, foreign_checkpoint, hyper_nan, hyper_inf, hyper_negative,
    hyper_garbage, tmp_symlink, fifo_checkpoint, fifo_index, fifo_stats, dev_zero_checkpoint)}
# Those whose moment or damage is drawn at random: --trials N runs them N times.
RANDOMISED = {"sigterm", "sigkill", "corrupt_truncate", "corrupt_bitflip", "all_corrupt",
              "hyper_garbage"}
