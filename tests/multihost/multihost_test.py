"""The main job across test hosts (network namespaces, netns_hosts.py), one torchrun agent per
host, and what happens when a host dies or its link is cut. Run by ctest (label multihost) as

    python3 multihost_test.py --binary <fashion_mnist> --workdir <dir> <scenario> [--long]

Every host runs `trainpack_torchrun.py` (torchrun with a 10 s exit barrier) with the c10d
rendezvous on host0 (10.213.0.1:29400), its own host name (torchrun 1.13 finds its address from
it), Gloo on its interface (GLOO_SOCKET_IFNAME=eth0), 2 ranks per host, and one log directory
that every host sees (a cluster's shared file system). Scenarios:

two_hosts      2 hosts x 2 ranks train to the end; the final parameters equal, bit for bit,
               those of 4 ranks on one host with the same flags; stats.json holds every epoch once.
host_killed    2 hosts x 2 ranks under `--nnodes 1:2 --max_restarts 1`; host1 (its agent and
               workers) killed with SIGKILL mid-epoch: host0's ranks fail within the heartbeat
               timeout naming rank 2 or 3 on host1, torchrun restarts them on host0 alone (2
               ranks), they resume from the last checkpoint and finish: every checkpoint valid,
               stats.json has every epoch once, and the parameters equal the reference run's up
               to float rounding (the world size changed: the same global batches, averaged over
               2 ranks instead of 4).
link_cut       host1's link cut silently (its switch port leaves the bridge: no reset) mid-epoch:
               both hosts end within a minute, each naming what it lost (host0: rank 2/3 on
               host1; host1: the rendezvous store on host0); the link restored and the same
               command run again on both hosts, the job resumes and ends with the parameters of
               the uninterrupted run, bit for bit.
store_host_lost  host0 (the rendezvous store, torchrun's c10d rendezvous and the chief) killed:
               host1's ranks end within the heartbeat timeout naming the store; the job relaunched
               on both hosts resumes from the chief's last checkpoint and ends with the
               uninterrupted run's parameters, bit for bit.
slow_link      host1's link limited to 50 Mbit/s each way (tc tbf; this kernel has no netem for a
               delay): the job finishes, with the parameters of the unlimited run bit for bit and
               no false alarm. (The step time against PyTorch's DDP under the same link:
               bench/distributed/run.py --hosts 2 --rate-mbit R.)
chief_killed_writing  host0 (the chief) killed the moment a checkpoint's temporary file appears:
               every checkpoint left is valid, and the relaunched job resumes from the newest one
               and ends with the uninterrupted run's parameters bit for bit.
local_logdir   each host with a log directory of its own: host0's holds everything, host1's stays
               empty; host1 killed, host0 ends naming it; relaunched, the job resumes from host0's
               directory to the uninterrupted run's parameters, bit for bit.
elastic        3 hosts, 1 rank each, `--nnodes 1:3`: host0 and host1 start, host2 joins after the
               first epoch (torchrun regroups: 3 ranks resume mid-epoch), and is killed once the 3
               ranks finished an epoch (host0 and host1 go on as 2). With --trace-samples: every
               epoch's images, as read for the steps the run kept, are the training set once each,
               and every step's global batch is the uninterrupted run's.
mismatch       host1 given another --max-epoch (and then another --batch-size): the job refuses to
               start, before any step, with a message naming host1 and the difference. Then a
               --batch-size host1's ranks refuse before joining: host0's ranks end at once naming
               host1 and the error (not after the join timeout).
no_rendezvous  an endpoint where nothing answers: torchrun gives up within its store's connect
               timeout (--rdzv_conf read_timeout=10; 60 s by default) with an error naming the
               endpoint.

--long (or TRAINPACK_MULTIHOST_LONG=1): longer runs (more epochs, the fault later). Exit status 77 (ctest: skipped) without root
or network namespaces, or without Debian's torchrun.
"""

import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "examples", "fashion_mnist", "chaos"))
import checkpoint_file  # noqa: E402
import sample_traces  # noqa: E402
import netns_hosts  # noqa: E402
import test_report  # noqa: E402
from test_report import read  # noqa: E402

SKIP = 77
PYTHON = "/usr/bin/python3"  # Debian's, with python3-torch (torchrun)
LAUNCHER = [PYTHON, os.path.join(ROOT, "scripts", "trainpack_torchrun.py")]
# Debian's Python 3.11 crashes torchrun 1.13 in Std.from_str unless --redirects and --tee are
# given (pytorch/pytorch#92319); a rule for local rank 9, which does not exist, changes nothing.
WORKAROUND = ["--redirects", "9:1", "--tee", "9:1"]
PORT = 29400  # every host is a namespace of its own: no other test shares this port
STEPS_PER_EPOCH = 4
# Global batches of 32 (8 per rank on 4 ranks, 16 on 2), 1 thread per rank; deterministic.
BASE_FLAGS = ["--train-limit", "256", "--val-limit", "64", "--batch-size", "32",
              "--val-batch-size", "64", "--steps-per-epoch", str(STEPS_PER_EPOCH), "--lr", "0.05",
              "--threads", "1", "--oversubscribe", "--max-val-error", "1", "--dist-timeout",
              "600"]
RUN_TIMEOUT = 300
HEARTBEAT_TIMEOUT = 20  # the main job's default --heartbeat-timeout
# A lost host or a cut link: noticed within the heartbeat timeout, then torchrun's monitor
# interval (5 s), its exit barrier (10 s with trainpack_torchrun.py) and the process exits.
END_BOUND = 60
SLOW_LINK_MBIT = 50  # the 0.42 MB of gradients of a step cross it in about 0.1 s


def fail(message, *outputs):
    test_report.fail("multihost_test.py", message, *outputs)


def wait_success(proc, out, what):
    """Waits for `proc` (at most RUN_TIMEOUT); fails naming `what` unless it exits with 0."""
    try:
        status = proc.wait(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        fail(f"{what} did not end within {RUN_TIMEOUT} s", out)
    if status != 0:
        fail(f"{what} exited with {status}", out)


def merge_flags(base, extra):
    """`base` with the flags of `extra` (flag, value pairs) replacing those of the same name."""
    given = {extra[i]: extra[i + 1] for i in range(0, len(extra), 2)}
    merged, i = [], 0
    while i < len(base):
        if base[i] == "--oversubscribe":
            merged.append(base[i])
            i += 1
            continue
        merged += [base[i], given.pop(base[i], base[i + 1])]
        i += 2
    for flag, value in given.items():
        merged += [flag, value]
    return merged


class Job:
    """Launches the main job on the test hosts and checks what it leaves."""

    def __init__(self, hosts, binary, workdir):
        self.hosts = hosts
        self.binary = binary
        self.workdir = workdir

    def launch(self, host, name, logdir, flags, nnodes="2", nproc=2, torchrun=(), endpoint=None):
        """torchrun on `host` (its output in <workdir>/<name>.out); returns (Popen, out path)."""
        out = os.path.join(self.workdir, f"{name}.out")
        endpoint = endpoint or f"{self.hosts.address(0)}:{PORT}"
        cmd = (["env", "USE_LIBUV=0", "GLOO_SOCKET_IFNAME=eth0"] + LAUNCHER +
               ["--nnodes", nnodes, "--nproc_per_node", str(nproc), "--rdzv_backend", "c10d",
                "--rdzv_endpoint", endpoint, "--rdzv_id", name.split("-")[0], "--no_python"] +
               WORKAROUND + list(torchrun) + [self.binary] + merge_flags(BASE_FLAGS, flags) +
               ["--logdir", logdir])
        with open(out, "wb") as f:
            proc = self.hosts.popen(host, cmd, stdout=f, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, cwd=self.workdir)
        return proc, out

    def run_on(self, host_list, name, logdir, flags, **kw):
        """The job on every host of `host_list` at once; returns [(status, out, seconds)]."""
        started = [(self.launch(h, f"{name}-host{h}", logdir, flags, **kw), time.monotonic())
                   for h in host_list]
        results = []
        for (proc, out), t0 in started:
            try:
                status = proc.wait(timeout=RUN_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.hosts.kill_all()
                fail(f"{name}: torchrun did not end within {RUN_TIMEOUT} s", out)
            results.append((status, out, time.monotonic() - t0))
        return results


def final_parameters(logdir):
    """The module entries of the newest checkpoint in `logdir`, as raw bytes, and its step."""
    files = glob.glob(os.path.join(logdir, "model-*.data"))
    if not files:
        fail(f"no checkpoint in {logdir}")
    newest = max(files, key=lambda p: int(p.rsplit("-", 1)[1].split(".")[0]))
    info = checkpoint_file.inspect(newest)
    entries = checkpoint_file.module_entries(newest)
    if entries is None:
        fail(f"{newest} is not a valid checkpoint: {info.why}")
    return entries, info.global_step


def check_checkpoints(logdir):
    """Every checkpoint in `logdir` loads (trailer, checksum, pickle); returns their steps."""
    steps = []
    for path in sorted(glob.glob(os.path.join(logdir, "*.data"))):
        info = checkpoint_file.inspect(path)
        if not info.valid:
            fail(f"{path} is not a valid checkpoint: {info.why}")
        steps.append(info.global_step)
    return steps


def check_stats(logdir, epochs, steps_per_epoch=STEPS_PER_EPOCH):
    """stats.json is valid JSON with epochs 1..`epochs`, each once, at the right steps."""
    path = os.path.join(logdir, "stats.json")
    try:
        entries = json.loads(read(path))
    except (OSError, ValueError) as e:
        fail(f"{path} is not valid JSON: {e}")
    seen = [e.get("epoch_num") for e in entries]
    if seen != list(range(1, epochs + 1)):
        fail(f"stats.json has the epochs {seen}, expected 1..{epochs} once each")
    for e in entries:
        if e.get("global_step") != e["epoch_num"] * steps_per_epoch:
            fail(f"stats.json: epoch {e['epoch_num']} at global_step {e.get('global_step')}")


def max_difference(a, b):
    """The largest absolute difference between the float32 entries of two parameter sets."""
    import array
    worst = 0.0
    for name in a:
        x, y = array.array("f"), array.array("f")
        x.frombytes(a[name])
        y.frombytes(b[name])
        worst = max([worst] + [abs(p - q) for p, q in zip(x, y)])
    return worst


def logdir_at(logdir, step, dest):
    """A copy of `logdir` as it stood when checkpoint `step` was its latest: that checkpoint, an
    index naming the ones up to it, and the epochs of stats.json up to it."""
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    shutil.copy(os.path.join(logdir, f"model-{step}.data"), dest)
    kept = [f'"model-{s}"' for s in range(STEPS_PER_EPOCH, step + 1, STEPS_PER_EPOCH)
            if os.path.exists(os.path.join(logdir, f"model-{s}.data"))]
    with open(os.path.join(dest, "checkpoint"), "w", encoding="utf-8") as f:
        f.write(f'model_checkpoint_path: "model-{step}"\n')
        f.writelines(f"all_model_checkpoint_paths: {k}\n" for k in kept)
    entries = json.loads(read(os.path.join(logdir, "stats.json")))
    with open(os.path.join(dest, "stats.json"), "w", encoding="utf-8") as f:
        json.dump([e for e in entries if e["global_step"] <= step], f)
    return dest


def reference(job, epochs):
    """The uninterrupted run: 2 hosts x 2 ranks; its log directory."""
    logdir = os.path.join(job.workdir, "reference")
    for status, out, _ in job.run_on([0, 1], "reference", logdir, ["--max-epoch", str(epochs)]):
        if status != 0:
            fail(f"the uninterrupted 2-host run exited with {status}", out)
    check_stats(logdir, epochs)
    return logdir


def wait_checkpoint(logdir, step, procs, timeout=120):
    path = os.path.join(logdir, f"model-{step}.data")
    if not netns_hosts.wait_for(lambda: os.path.exists(path) or
                                any(p.poll() is not None for p, _ in procs), timeout, 0.02):
        fail(f"model-{step} did not appear within {timeout} s", *[o for _, o in procs])
    if not os.path.exists(path):
        fail(f"a host ended before model-{step} was written", *[o for _, o in procs])


def scenario_two_hosts(job, epochs):
    ref = reference(job, epochs)
    params, step = final_parameters(ref)
    if step != epochs * STEPS_PER_EPOCH:
        fail(f"the 2-host run's last checkpoint is at step {step}")
    text = read(os.path.join(job.workdir, "reference-host0.out"))
    if "rank 0 of 4" not in text:
        fail("the 2-host run did not train 4 ranks", os.path.join(job.workdir,
                                                                    "reference-host0.out"))
    one = os.path.join(job.workdir, "one_host")
    [(status, out, _)] = job.run_on([0], "onehost", one, ["--max-epoch", str(epochs)], nnodes="1",
                                    nproc=4)
    if status != 0:
        fail(f"4 ranks on one host exited with {status}", out)
    check_stats(one, epochs)
    same, _ = final_parameters(one)
    if same != params:
        fail(f"2 hosts x 2 ranks and 1 host x 4 ranks differ after {epochs} epochs "
             f"(max |difference| {max_difference(params, same)})")
    print(f"two_hosts: {epochs} epochs on 2 hosts x 2 ranks equal 1 host x 4 ranks bit for bit; "
          f"stats.json epochs 1..{epochs} once each")


def scenario_host_killed(job, epochs, kill_after):
    ref = reference(job, epochs)
    logdir = os.path.join(job.workdir, "killed")
    elastic = ["--max_restarts", "1", "--rdzv_conf", "last_call_timeout=5"]
    procs = [job.launch(h, f"killed-host{h}", logdir, ["--max-epoch", str(epochs)], nnodes="1:2",
                        torchrun=elastic) for h in (0, 1)]
    wait_checkpoint(logdir, kill_after * STEPS_PER_EPOCH, procs)
    time.sleep(0.1)  # into the next epoch
    killed_at = time.monotonic()
    job.hosts.kill(1)
    out0 = procs[0][1]
    # host0's ranks notice, then torchrun starts them again as a group of 2.
    noticed = netns_hosts.wait_for(lambda: "on host host1 sent no heartbeat" in read(out0) or
                                   procs[0][0].poll() is not None, END_BOUND, 0.1)
    noticed_s = time.monotonic() - killed_at
    if not noticed or "on host host1 sent no heartbeat" not in read(out0):
        fail(f"host0's ranks did not name the lost rank on host1 within {END_BOUND} s", out0)
    regrouped = netns_hosts.wait_for(lambda: "rank 0 of 2" in read(out0) or
                                     procs[0][0].poll() is not None, END_BOUND, 0.1)
    regrouped_s = time.monotonic() - killed_at
    if not regrouped or "rank 0 of 2" not in read(out0):
        fail(f"torchrun did not restart host0's ranks as a group of 2 within {END_BOUND} s", out0)
    try:
        status = procs[0][0].wait(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        fail("host0 did not finish on its own after host1's loss", out0)
    total_s = time.monotonic() - killed_at
    text = read(out0)
    if status != 0:
        fail(f"host0 exited with {status} after continuing alone", out0)
    check_checkpoints(logdir)
    check_stats(logdir, epochs)
    params, step = final_parameters(logdir)
    if step != epochs * STEPS_PER_EPOCH:
        fail(f"after the loss of host1 the run ended at step {step}", out0)
    # What it must equal: the uninterrupted run's directory as it stood at the checkpoint the
    # survivors resumed from, continued by 2 ranks on one host. (Not the 4-rank run's end: the
    # model's BatchNorm layers normalise over each rank's part of the batch, 16 images instead
    # of 8, as without SyncBatchNorm in PyTorch.)
    resumed = [line for line in text.splitlines() if "Will load checkpoint at " in line]
    if len(resumed) != 1:
        fail(f"expected one resume on host0, found {len(resumed)}", out0)
    resume_step = int(resumed[0].rsplit("model-", 1)[1].rstrip("."))
    expected_dir = logdir_at(ref, resume_step, os.path.join(job.workdir, "killed_expected"))
    [(status, out, _)] = job.run_on([0], "killedexpected", expected_dir,
                                    ["--max-epoch", str(epochs)], nnodes="1")
    if status != 0:
        fail(f"resuming the uninterrupted run at step {resume_step} on 2 ranks exited with "
             f"{status}", out)
    expected, _ = final_parameters(expected_dir)
    if params != expected:
        fail(f"after the loss of host1 the parameters differ from the uninterrupted run resumed "
             f"at step {resume_step} on 2 ranks (max |difference| "
             f"{max_difference(expected, params)})", out0)
    diff = max_difference(final_parameters(ref)[0], params)
    if "died without a word" in text:
        fail("a rank on host0 blamed its neighbour, which ended because of host1", out0)
    print(f"host_killed: host1 killed after epoch {kill_after}; host0's ranks named it after "
          f"{noticed_s:.1f} s, torchrun regrouped them {regrouped_s:.1f} s after the kill, and "
          f"they finished alone {total_s:.1f} s after it; every "
          f"checkpoint valid, stats.json epochs 1..{epochs} once; resumed at step {resume_step}, "
          "the parameters equal bit for bit those of the uninterrupted run resumed there on 2 "
          f"ranks (and differ by up to {diff:.3f} from the 4-rank run's end)")


def lost_and_resumed(job, epochs, kill_after, name, fault, expect):
    """Starts 2 hosts, applies `fault` after checkpoint `kill_after`, checks that every surviving
    host ends within END_BOUND naming what `expect[h]` says, then runs the job again on both
    hosts and checks it resumes to the uninterrupted run's parameters."""
    ref = reference(job, epochs)
    logdir = os.path.join(job.workdir, name)
    flags = ["--max-epoch", str(epochs)]
    procs = [job.launch(h, f"{name}-host{h}", logdir, flags) for h in (0, 1)]
    wait_checkpoint(logdir, kill_after * STEPS_PER_EPOCH, procs)
    time.sleep(0.1)
    faulted_at = time.monotonic()
    fault()
    ended = {}
    for h, (proc, out) in enumerate(procs):
        if h not in expect:
            continue
        try:
            status = proc.wait(timeout=END_BOUND + 30)
        except subprocess.TimeoutExpired:
            fail(f"host{h} did not end within {END_BOUND + 30} s of the fault", out)
        ended[h] = time.monotonic() - faulted_at
        if status == 0:
            fail(f"host{h} reported success after the fault", out)
        if ended[h] > END_BOUND:
            fail(f"host{h} ended {ended[h]:.1f} s after the fault, more than {END_BOUND} s", out)
        if expect[h] not in read(out):
            fail(f"host{h}'s output does not say {expect[h]!r}", out)
    job.hosts.kill_all()
    job.hosts.restore(1)
    check_checkpoints(logdir)
    for status, out, _ in job.run_on([0, 1], f"{name}resumed", logdir, flags):
        if status != 0:
            fail(f"the relaunched job exited with {status}", out)
    check_checkpoints(logdir)
    check_stats(logdir, epochs)
    params, step = final_parameters(logdir)
    ref_params, _ = final_parameters(ref)
    if step != epochs * STEPS_PER_EPOCH or params != ref_params:
        fail(f"{name}: the resumed run ended at step {step} with parameters "
             f"{max_difference(ref_params, params)} from the uninterrupted run's")
    return ended


def scenario_link_cut(job, epochs, kill_after):
    ended = lost_and_resumed(
        job, epochs, kill_after, "cut", lambda: job.hosts.cut(1),
        {0: "on host host1 sent no heartbeat", 1: "lost contact with the rendezvous store"})
    print(f"link_cut: host1's link cut after epoch {kill_after}: host0 ended after "
          f"{ended[0]:.1f} s, host1 after {ended[1]:.1f} s, each naming what it lost; relaunched, "
          "the job resumed and ended with the uninterrupted run's parameters bit for bit")


def scenario_store_host_lost(job, epochs, kill_after):
    ended = lost_and_resumed(job, epochs, kill_after, "storelost", lambda: job.hosts.kill(0),
                             {1: "lost contact with the rendezvous store"})
    print(f"store_host_lost: host0 (store, rendezvous, chief) killed after epoch {kill_after}: "
          f"host1 ended after {ended[1]:.1f} s naming the store; relaunched, the job resumed and "
          "ended with the uninterrupted run's parameters bit for bit")


def scenario_local_logdir(job, epochs, kill_after):
    """Each host with a log directory of its own (no shared file system): host0's (the chief's)
    holds everything, host1's stays empty; host1 killed after checkpoint `kill_after`, host0 ends
    naming it, and the same commands run again resume from host0's directory to the uninterrupted
    run's parameters, bit for bit."""
    ref = reference(job, epochs)
    local = [os.path.join(job.workdir, "local", f"host{h}", "train_log") for h in (0, 1)]
    flags = ["--max-epoch", str(epochs)]
    procs = [job.launch(h, f"local-host{h}", local[h], flags) for h in (0, 1)]
    wait_checkpoint(local[0], kill_after * STEPS_PER_EPOCH, procs)
    time.sleep(0.1)
    killed_at = time.monotonic()
    job.hosts.kill(1)
    proc0, out0 = procs[0]
    try:
        status = proc0.wait(timeout=END_BOUND + 30)
    except subprocess.TimeoutExpired:
        fail(f"host0 did not end within {END_BOUND + 30} s of host1's loss", out0)
    ended_s = time.monotonic() - killed_at
    if status == 0 or "on host host1 sent no heartbeat" not in read(out0):
        fail(f"host0 exited with {status} without naming the lost host1", out0)
    job.hosts.kill_all()
    check_checkpoints(local[0])
    started = time.monotonic()
    relaunched = [(job.launch(h, f"localresumed-host{h}", local[h], flags), h) for h in (0, 1)]
    for (proc, out), h in relaunched:
        wait_success(proc, out, f"the relaunched host{h}")
    took = time.monotonic() - started
    text = read(relaunched[0][0][1])
    if f"Will load checkpoint at {local[0]}/model-" not in text:
        fail("the relaunched chief did not resume from host0's directory", relaunched[0][0][1])
    check_checkpoints(local[0])
    check_stats(local[0], epochs)
    params, step = final_parameters(local[0])
    if step != epochs * STEPS_PER_EPOCH or params != final_parameters(ref)[0]:
        fail("with local log directories the resumed run ended otherwise than the uninterrupted "
             "run with a shared one")
    written = [os.path.join(d, n) for d, _, names in os.walk(os.path.dirname(local[1]))
               for n in names]
    if written:
        fail(f"the ranks on host1 wrote into their local log directory: {written[:5]}")
    print(f"local_logdir: a log directory on each host: host1 killed after epoch {kill_after}, "
          f"host0 ended after {ended_s:.1f} s naming it; relaunched ({took:.1f} s), the chief "
          "resumed from host0's directory and ended with the uninterrupted run's parameters bit "
          "for bit; host1's directory received nothing")


def scenario_slow_link(job, epochs):
    ref = reference(job, epochs)
    job.hosts.shape(1, SLOW_LINK_MBIT)
    logdir = os.path.join(job.workdir, "slow")
    started = time.monotonic()
    results = job.run_on([0, 1], "slow", logdir, ["--max-epoch", str(epochs)])
    took = time.monotonic() - started
    job.hosts.restore(1)
    for status, out, _ in results:
        if status != 0:
            fail(f"under a {SLOW_LINK_MBIT} Mbit/s link the job exited with {status}", out)
    check_checkpoints(logdir)
    check_stats(logdir, epochs)
    params, _ = final_parameters(logdir)
    if params != final_parameters(ref)[0]:
        fail("under a slow link the parameters differ from the uninterrupted run's")
    print(f"slow_link: host1's link limited to {SLOW_LINK_MBIT} Mbit/s each way (tc tbf): the job "
          f"finished in {took:.1f} s with the parameters of the unlimited run, bit for bit, and "
          "no false alarm of the heartbeats")


def scenario_chief_killed_writing(job, epochs, kill_after):
    """host0 (the chief) killed while it writes a checkpoint: caught by watching the log directory
    for the writer's temporary file (`model-N.data.tmp.<pid>.<n>`) after checkpoint
    `kill_after`; tried at each later checkpoint until a kill lands inside a write."""
    ref = reference(job, epochs)
    logdir = os.path.join(job.workdir, "writing")
    flags = ["--max-epoch", str(epochs)]
    procs = [job.launch(h, f"writing-host{h}", logdir, flags) for h in (0, 1)]
    wait_checkpoint(logdir, kill_after * STEPS_PER_EPOCH, procs)
    pids = job.hosts.pids(0)  # gathered now: at the moment of the kill, no time to ask
    caught = None
    deadline = time.monotonic() + 120
    while caught is None and time.monotonic() < deadline and procs[0][0].poll() is None:
        try:
            names = os.listdir(logdir)
        except OSError:
            names = []
        temporary = [n for n in names if n.startswith("model-") and ".data.tmp." in n]
        if temporary:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            caught = temporary[0]
    if caught is None:
        fail("no checkpoint write was caught in the act", procs[0][1])
    out1 = procs[1][1]
    try:
        procs[1][0].wait(timeout=END_BOUND + 30)
    except subprocess.TimeoutExpired:
        fail(f"host1 did not end within {END_BOUND + 30} s of host0's loss", out1)
    job.hosts.kill_all()
    steps = check_checkpoints(logdir)  # every *.data file (temporary ones are not *.data)
    left = [n for n in os.listdir(logdir) if ".tmp." in n]
    target = caught.split(".tmp.")[0]
    landed = (f"inside the write: {target} never appeared, its temporary file was left" if
              not os.path.exists(os.path.join(logdir, target)) else
              f"just after the write: {target} was complete")
    for status, out, _ in job.run_on([0, 1], "writingresumed", logdir, flags):
        if status != 0:
            fail(f"the relaunched job exited with {status}", out)
    check_checkpoints(logdir)
    check_stats(logdir, epochs)
    params, step = final_parameters(logdir)
    if step != epochs * STEPS_PER_EPOCH or params != final_parameters(ref)[0]:
        fail("after the chief was killed in a checkpoint write, the resumed run ended otherwise "
             "than the uninterrupted run")
    print(f"chief_killed_writing: host0 killed when {caught} was seen, {landed}; the checkpoints "
          f"left (steps {sorted(s for s in steps if s)}) all valid, {len(left)} temporary file(s) "
          "beside them; relaunched, the job resumed from the newest valid one and ended with the "
          "uninterrupted run's parameters bit for bit")


ELASTIC_STEPS = 30  # --steps-per-epoch: one pass of the 1440 images in batches of 48
ELASTIC_BATCH = 48  # a multiple of 1, 2 and 3 ranks
JOINING = "Joining the process group: rank 0 of {}"  # once per start of rank 0
ELASTIC_FLAGS = ["--train-limit", str(ELASTIC_STEPS * ELASTIC_BATCH), "--batch-size",
                 str(ELASTIC_BATCH), "--steps-per-epoch", str(ELASTIC_STEPS)]


def scenario_elastic(job, epochs, join_after):
    """A host joins late and one leaves under `--nnodes 1:3`, one rank per host: host0 and host1
    start; after checkpoint `join_after` host2's agent starts, and torchrun regroups the 3 hosts
    (the ranks stop together, the chief saves, they resume as 3 ranks); after the first epoch the
    3 ranks finish, host2 is killed (it leaves between epochs), and host0 and host1 continue as 2
    ranks. Each epoch's images, as read by the ranks of the attempts whose steps the run kept,
    must be the whole training set once (a partition), and each step's global batch that of the
    uninterrupted run."""
    # The uninterrupted run (2 hosts x 1 rank) and what each of its steps read.
    ref_trace = os.path.join(job.workdir, "elastic_reference_trace")
    os.makedirs(ref_trace)
    flags = ELASTIC_FLAGS + ["--max-epoch", str(epochs)]
    results = job.run_on([0, 1], "elasticref", os.path.join(job.workdir, "elastic_reference"),
                         flags + ["--trace-samples", ref_trace], nproc=1)
    for status, out, _ in results:
        if status != 0:
            fail(f"the uninterrupted 2-host run exited with {status}", out)
    total = epochs * ELASTIC_STEPS
    images = ELASTIC_STEPS * ELASTIC_BATCH
    try:
        _, ref_kept = sample_traces.read_run(ref_trace, total, ELASTIC_BATCH, ELASTIC_STEPS)
    except sample_traces.TraceError as e:
        fail(f"the uninterrupted run's traces: {e}")
    problem = sample_traces.partition_problem(ref_kept, ELASTIC_BATCH, images)
    if problem:
        fail(f"the uninterrupted run: {problem}")
    expected = sample_traces.global_batches(ref_kept)

    trace = os.path.join(job.workdir, "elastic_trace")
    os.makedirs(trace)
    logdir = os.path.join(job.workdir, "elastic")
    flags += ["--trace-samples", trace]
    elastic = ["--max_restarts", "3", "--rdzv_conf", "last_call_timeout=3"]
    procs = [job.launch(h, f"elastic-host{h}", logdir, flags, nnodes="1:3", nproc=1,
                        torchrun=elastic) for h in (0, 1)]
    out0 = procs[0][1]
    wait_checkpoint(logdir, join_after * ELASTIC_STEPS, procs)
    joined_at = time.monotonic()
    procs.append(job.launch(2, "elastic-host2", logdir, flags, nnodes="1:3", nproc=1,
                            torchrun=elastic))
    if not netns_hosts.wait_for(lambda: JOINING.format(3) in read(out0) or
                                procs[0][0].poll() is not None, 120, 0.1):
        fail("torchrun did not regroup the 3 hosts within 120 s of host2's start", out0,
             procs[2][1])
    regrouped_s = time.monotonic() - joined_at
    # The first epoch the 3 ranks complete: then host2 leaves (killed, as a preempted host is).
    three_from = len(read(out0).split(JOINING.format(3))[0])
    deadline = time.monotonic() + 120
    leave_step = None
    while leave_step is None and time.monotonic() < deadline and procs[0][0].poll() is None:
        finished = [int(line.split("(global_step ")[1].split(")")[0])
                    for line in read(out0)[three_from:].splitlines()
                    if "finished, time:" in line and "(global_step " in line]
        if finished and os.path.exists(os.path.join(logdir, f"model-{finished[0]}.data")):
            leave_step = finished[0]
        time.sleep(0.02)
    if leave_step is None:
        fail("the 3 ranks completed no epoch", out0)
    left_at = time.monotonic()
    job.hosts.kill(2)
    if not netns_hosts.wait_for(lambda: read(out0).count(JOINING.format(2)) >= 2 or
                                procs[0][0].poll() is not None, END_BOUND + 30, 0.1):
        fail("torchrun did not regroup host0 and host1 after host2 left", out0)
    shrunk_s = time.monotonic() - left_at
    for h in (0, 1):
        wait_success(*procs[h], f"host{h}, after host2 left,")
    check_checkpoints(logdir)
    check_stats(logdir, epochs, ELASTIC_STEPS)

    try:
        attempts, kept = sample_traces.read_run(trace, total, ELASTIC_BATCH, ELASTIC_STEPS)
    except sample_traces.TraceError as e:
        fail(f"the elastic run's traces: {e}")
    problem = sample_traces.partition_problem(kept, ELASTIC_BATCH, images, expected)
    if problem:
        fail(f"the elastic run: {problem}", out0)
    worlds = []
    for step in range(1, total + 1):
        if not worlds or worlds[-1] != kept[step][0].world:
            worlds.append(kept[step][0].world)
    if worlds != [2, 3, 2]:
        fail(f"the steps the run kept were trained by world sizes {worlds}, expected 2, then 3, "
             "then 2", out0)
    changes = [s for s in range(2, total + 1) if kept[s][0] is not kept[s - 1][0]]
    print(f"elastic: host2 joined after epoch {join_after} (regrouped as 3 ranks after "
          f"{regrouped_s:.1f} s) and left after step {leave_step} (host0 and host1 regrouped as 2 "
          f"after {shrunk_s:.1f} s); {len(attempts)} starts of the ranks, the kept steps changed "
          f"hands at steps {changes}; world sizes {worlds}; every epoch's images read once each "
          f"({ELASTIC_STEPS * ELASTIC_BATCH} per epoch, {epochs} epochs), every step's global batch "
          "that of the uninterrupted run; every checkpoint valid, stats.json epochs 1.."
          f"{epochs} once each")


def scenario_mismatch(job):
    for what, flag0, flag1, expect in (
            ("max-epoch", ["--max-epoch", "3"], ["--max-epoch", "4"],
             "rank 2 (host host1) has steps_per_epoch 4, max_epoch 4, rank 0 (host host0) has "
             "steps_per_epoch 4, max_epoch 3"),
            ("batch-size", ["--max-epoch", "3"], ["--max-epoch", "3", "--batch-size", "64"],
             "different training data: rank 2 (host host1) reads BatchData(batch_size=16)")):
        logdir = os.path.join(job.workdir, f"mismatch-{what}")
        procs = [job.launch(0, f"mismatch{what}-host0", logdir, flag0),
                 job.launch(1, f"mismatch{what}-host1", logdir, flag1)]
        outs = [o for _, o in procs]
        for proc, out in procs:
            try:
                status = proc.wait(timeout=RUN_TIMEOUT)
            except subprocess.TimeoutExpired:
                fail(f"--{what} differing between hosts: the job did not end", *outs)
            if status == 0:
                fail(f"--{what} differing between hosts was accepted", *outs)
        text = read(outs[0]) + read(outs[1])
        if expect not in text or "host1" not in text:
            fail(f"--{what} differing: the refusal does not name host1 and the difference "
                 f"({expect!r})", *outs)
        if glob.glob(os.path.join(logdir, "model-*.data")):
            fail(f"--{what} differing: a step ran before the refusal", *outs)
    # A flag that host1's ranks refuse before they join (a global batch that 4 ranks cannot
    # split): host0's ranks, waiting for them to join, end at once naming host1 and the error,
    # not after the join timeout (120 s).
    logdir = os.path.join(job.workdir, "mismatch-prejoin")
    started = time.monotonic()
    procs = [job.launch(0, "mismatchprejoin-host0", logdir, ["--max-epoch", "3"]),
             job.launch(1, "mismatchprejoin-host1", logdir, ["--max-epoch", "3", "--batch-size",
                                                             "50"])]
    outs = [o for _, o in procs]
    ended = []
    for proc, out in procs:
        try:
            status = proc.wait(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            fail("host1 refusing its flags before joining: the job did not end", *outs)
        ended.append(time.monotonic() - started)
        if status == 0:
            fail("host1 refusing its flags before joining: a host reported success", *outs)
    text0 = read(outs[0])
    if ("(host host1) failed before joining: fashion_mnist: error: --batch-size 50 is not a "
            "multiple of the 4 ranks" not in text0):
        fail("host0's ranks do not name host1 and the error it failed with before joining", *outs)
    if ended[0] > END_BOUND:
        fail(f"host0 ended {ended[0]:.1f} s after the start, waiting for host1's ranks to join",
             *outs)
    print("mismatch: another --max-epoch or --batch-size on host1 is refused before any step, "
          "naming host1 and the difference; a --batch-size that host1's ranks refuse before "
          f"joining ends host0 after {ended[0]:.1f} s, naming host1 and the error")


def scenario_no_rendezvous(job):
    # host1 looks for a rendezvous on host0, where nothing listens.
    start = time.monotonic()
    [(status, out, _)] = job.run_on([1], "nordzv", os.path.join(job.workdir, "nordzv"),
                                    ["--max-epoch", "1"],
                                    torchrun=["--rdzv_conf", "join_timeout=10,read_timeout=10"])
    took = time.monotonic() - start
    if status == 0:
        fail("torchrun succeeded without a rendezvous", out)
    text = read(out)
    if f"({job.hosts.address(0)}, {PORT})" not in text or "RendezvousConnectionError" not in text:
        fail("torchrun's error does not name the rendezvous endpoint", out)
    if took > 40:
        fail(f"torchrun took {took:.0f} s to give up, expected about its read timeout (10 s)", out)
    print(f"no_rendezvous: torchrun gave up after {took:.1f} s naming the endpoint")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--long", action="store_true")
    p.add_argument("--torchrun", default="/usr/bin/torchrun",
                   help="the torchrun whose Python runs trainpack_torchrun.py")
    p.add_argument("scenario", choices=["two_hosts", "host_killed", "link_cut", "store_host_lost",
                                        "chief_killed_writing", "slow_link", "mismatch",
                                        "no_rendezvous", "elastic", "local_logdir"])
    args = p.parse_args()
    why = netns_hosts.unavailable()
    if why is None and not os.path.exists(args.torchrun):
        why = f"{args.torchrun} is missing (Debian: apt-get install python3-torch)"
    if why is None:
        # trainpack_torchrun.py runs with torchrun's own Python (its #! line).
        with open(args.torchrun, encoding="utf-8", errors="replace") as f:
            first = f.readline()
        if first.startswith("#!") and "python" in first:
            LAUNCHER[0] = first[2:].split()[0]
    if why:
        print(f"SKIPPED: {why}")
        sys.exit(SKIP)
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    long = args.long or os.environ.get("TRAINPACK_MULTIHOST_LONG") == "1"
    epochs, kill_after = (24, 10) if long else (8, 3)
    with netns_hosts.Hosts(3 if args.scenario == "elastic" else 2) as hosts:
        job = Job(hosts, os.path.abspath(args.binary), args.workdir)
        if args.scenario == "two_hosts":
            scenario_two_hosts(job, epochs)
        elif args.scenario == "host_killed":
            scenario_host_killed(job, epochs, kill_after)
        elif args.scenario == "link_cut":
            scenario_link_cut(job, epochs, kill_after)
        elif args.scenario == "store_host_lost":
            scenario_store_host_lost(job, epochs, kill_after)
        elif args.scenario == "chief_killed_writing":
            scenario_chief_killed_writing(job, epochs, kill_after)
        elif args.scenario == "slow_link":
            scenario_slow_link(job, epochs)
        elif args.scenario == "local_logdir":
            scenario_local_logdir(job, epochs, kill_after)
        elif args.scenario == "elastic":
            scenario_elastic(job, 80 if long else 30, 1)
        elif args.scenario == "mismatch":
            scenario_mismatch(job)
        else:
            scenario_no_rendezvous(job)


if __name__ == "__main__":
    main()
