"""Starting the main job and watching it: the issue's small flags, a finished base run that each
scenario copies, waiting for a line of its output, signals, time limits."""

import os
import resource
import shutil
import signal
import subprocess
import time

# A few hundred images, 4 steps per epoch, one thread: a run takes seconds, mostly reading the
# dataset. --max-val-error 1: the verdict never depends on what the model learned.
SMALL_FLAGS = ["--train-limit", "512", "--val-limit", "256", "--steps-per-epoch", "4",
               "--batch-size", "32", "--threads", "1", "--max-val-error", "1"]
STEPS_PER_EPOCH = 4
BASE_EPOCHS = 3
# A bound for a run that hangs (a FIFO, a lock never released); a run takes a few seconds.
RUN_TIMEOUT = 120


class Run:
    """A started job: its process, its output file (stdout and stderr), its flags.

    extra_env is added to the environment (LD_PRELOAD and the fault library's variables);
    wrapper goes before the program (["/bin/sh", "-c", 'exec "$0" "$@" ...']: the shell's own
    redirections); stdout replaces the output file (a pipe into tee or head, which then writes
    `out`), and process_group puts the job into that group (a pipeline's) instead of a new
    session of its own; cwd is the job's working directory (where InjectShell looks for
    INJECT_SHELL.tmp)."""

    def __init__(self, job, logdir, flags, out, extra_env=None, preexec_fn=None, wrapper=None,
                 stdout=None, process_group=None, cwd=None):
        self.logdir = logdir
        self.flags = flags
        self.out = out
        self.started = time.monotonic()
        env = dict(os.environ)
        env.update(extra_env or {})
        argv = list(wrapper or []) + [job.binary, "--logdir", logdir] + SMALL_FLAGS + flags
        group = {"start_new_session": True} if process_group is None else {
            "process_group": process_group}
        out_file = open(out, "wb") if stdout is None else None
        try:
            self.proc = subprocess.Popen(
                argv, stdout=out_file or stdout, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=env, preexec_fn=preexec_fn, cwd=cwd, **group)
        finally:
            if out_file:
                out_file.close()
        self.pid = self.proc.pid
        # The group to kill on a timeout or at the cleanup: the job's own, or the pipeline's.
        self.pgid = self.pid if process_group is None else process_group
        self.timed_out = False

    def output(self):
        try:
            with open(self.out, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def running(self):
        return self.proc.poll() is None

    def wait_for(self, text, timeout=RUN_TIMEOUT, count=1):
        """Waits until the output holds `text` `count` times; False when the job ended first or
        the time ran out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.output().count(text) >= count:
                return True
            if not self.running():
                return self.output().count(text) >= count
            time.sleep(0.005)
        return False

    def signal(self, sig):
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass

    def wait(self, timeout=RUN_TIMEOUT):
        """The exit status (negative: killed by that signal). On a timeout: SIGTERM, 5 seconds,
        then SIGKILL of its process group; timed_out says so."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.timed_out = True
            self.signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.pgid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                return self.proc.wait()


class Job:
    def __init__(self, binary, workdir, fault_lib=None):
        self.binary = binary
        self.workdir = workdir
        # The LD_PRELOAD library of tests/tools/fault_injection.c (--fault-lib), or None.
        self.fault_lib = fault_lib
        self._base = None
        self._sanitizer = None

    def sanitizer(self):
        """'address' or 'thread' when the job is built with that sanitizer (its runtime is among
        the libraries the program needs), else ''."""
        if self._sanitizer is None:
            with open(self.binary, "rb") as f:
                data = f.read()
            self._sanitizer = ("address" if b"libasan.so" in data else
                               "thread" if b"libtsan.so" in data else "")
        return self._sanitizer

    def memory_limit(self, gib=6):
        """The keyword arguments of start() that bound the job's memory to `gib` GiB: a limit on
        its address space (RLIMIT_AS). A sanitized job reserves terabytes of address space for its
        shadow memory and cannot start under such a limit, so it gets its sanitizer's own limit
        on resident memory instead (hard_rss_limit_mb: the sanitizer ends the job above it)."""
        kind = self.sanitizer()
        if kind:
            name = "ASAN_OPTIONS" if kind == "address" else "TSAN_OPTIONS"
            options = os.environ.get(name, "")
            return {"extra_env": {name: (options + ":" if options else "") +
                                  f"hard_rss_limit_mb={gib << 10}"}}
        limit = gib << 30
        return {"preexec_fn": lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))}

    def fault_env(self, fault, path, skip=0):
        """The environment that makes the job's writes to files whose path contains `path` fail
        (fault: kill, enospc or efbig) from the (skip+1)-th on; None without --fault-lib."""
        if self.fault_lib is None:
            return None
        # A job built with AddressSanitizer refuses to start when a preloaded library comes
        # before the sanitizer's runtime, unless told that the order is intended.
        asan = os.environ.get("ASAN_OPTIONS", "")
        return {"LD_PRELOAD": self.fault_lib, "TRAINPACK_FAULT": fault,
                "TRAINPACK_FAULT_PATH": path, "TRAINPACK_FAULT_SKIP": str(skip),
                "ASAN_OPTIONS": (asan + ":" if asan else "") + "verify_asan_link_order=0"}

    def start(self, logdir, flags, out, **kw):
        return Run(self, logdir, flags, out, **kw)

    def base(self):
        """A finished run of BASE_EPOCHS epochs (model-4, -8, -12, the best copy, stats.json),
        made once; scenarios copy it."""
        if self._base is None:
            path = os.path.join(self.workdir, "base")
            run = self.start(path, ["--max-epoch", str(BASE_EPOCHS)], path + ".out")
            status = run.wait()
            if status != 0:
                raise RuntimeError(f"the base run exited with {status}:\n{run.output()}")
            self._base = path
        return self._base

    def copy_base(self, dst):
        shutil.copytree(self.base(), dst, symlinks=True)
        # The base run's log.log would be renamed aside by the next run; keep copies small.
        return dst
