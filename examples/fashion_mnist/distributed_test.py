"""The main job under torchrun, 2 processes on 127.0.0.1 (docs/distributed.md). Run by ctest as

    python3 distributed_test.py --binary <fashion_mnist> --workdir <dir> <standalone|elastic>

standalone: `torchrun --standalone --nproc_per_node 2` runs the job unchanged: it finishes with
  status 0, the verdict is printed once (by rank 0), only rank 0 writes its log directory (each
  rank runs in its own working directory with the same relative --logdir: rank 1's stays
  absent), and the final val-error-top1 is below a loose bound. A --batch-size that is not a
  multiple of the 2 ranks is refused, naming both.
elastic: `torchrun --max_restarts 1` with a static rendezvous (torchrun's agent serves the store:
  TORCHELASTIC_USE_AGENT_STORE=True, the ranks use the prefix /worker/attempt_<n>). Rank 1 is
  killed with SIGKILL once rank 0 has saved a checkpoint; torchrun restarts the group, rank 0
  auto-resumes from its latest checkpoint, and the run ends with status 0 and final parameters
  (the chief's last checkpoint) bitwise equal to those of a run that was never interrupted. Both
  runs trace their reads (--trace-samples): for the steps the run kept, every pass's images are
  read once each and every step's global batch is the uninterrupted run's.

ctrl_c: the same launch in a real terminal (a pty, as a shell gives), and Ctrl-C typed once rank
  0 trains epoch 2. The terminal sends SIGINT to its foreground process group, and torchrun
  forwards one more to each worker (Debian's torchrun runs its workers in its own group, so they
  get both; newer torchruns start them in sessions of their own, so they get the forwarded one
  only; and two that arrive before the first is handled are merged by the kernel). Either way it
  is one Ctrl-C: rank 0 writes the stop checkpoint of the step where both ranks stopped, no rank
  reports the other dead, and the same command resumes there. (Whether a repeat arrives after
  the first was handled depends on timing; tests/train/trainer_errors_test.cpp raises it
  deterministically.)

Without /usr/bin/torchrun (Debian's python3-torch) the test prints why and passes (ctest shows
the message). Python standard library only; a few seconds of training, most of the time is
torchrun's start (importing torch) and reading the dataset.
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "chaos"))
import checkpoint_file  # noqa: E402  (the chaos suite's checkpoint reader)
import sample_traces  # noqa: E402  (--trace-samples files)
import test_report  # noqa: E402
from test_report import free_port, read  # noqa: E402

# Debian's (python3-torch) unless --torchrun names another (pip's venv's, for a build against
# pip's LibTorch: the launcher's c10d store then matches the program's).
TORCHRUN = "/usr/bin/torchrun"
# Debian's Python 3.11 crashes torchrun 1.13 in Std.from_str unless --redirects and --tee are
# given (pytorch/pytorch#92319); a rule for local rank 9, which does not exist, changes nothing.
WORKAROUND = ["--redirects", "9:1", "--tee", "9:1"]
RUN_TIMEOUT = 180  # a bound for a run that hangs; a run takes about 10 s
# 256 images in global batches of 32 (16 per rank), 4 steps per epoch, 1 thread per rank: an
# epoch is a fraction of a second, and deterministic.
ELASTIC_FLAGS = ["--train-limit", "256", "--val-limit", "64", "--batch-size", "32",
                 "--val-batch-size", "64", "--steps-per-epoch", "4", "--lr", "0.05",
                 "--threads", "1", "--max-val-error", "1", "--dist-timeout", "60"]
ELASTIC_EPOCHS = 8
STEPS_PER_EPOCH = 4
ELASTIC_IMAGES = 256  # --train-limit: 8 global batches of 32 per pass, 2 epochs
ELASTIC_BATCH = 32


def fail(message, *outputs):
    test_report.fail("distributed_test.py", message, *outputs)


def start(args, out, cwd=None):
    """Starts torchrun with `args`, its output (and its workers') in the file `out`."""
    # USE_LIBUV=0: torchrun's own store asks for libuv by default (PyTorch 2.4 and later), which
    # a PyTorch built without it (Debian's) refuses; the classic store works everywhere.
    env = dict(os.environ, USE_LIBUV="0")
    with open(out, "wb") as f:
        return subprocess.Popen([TORCHRUN] + args, stdout=f, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=cwd, start_new_session=True, env=env)


def finish(proc, out):
    try:
        return proc.wait(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        fail(f"torchrun did not end within {RUN_TIMEOUT} s", out)


def children(pid):
    """The pids whose parent is `pid` (from /proc)."""
    found = []
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            text = read(stat)
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces, so split after its ')'.
        fields = text[text.rfind(")") + 2:].split()
        if int(fields[1]) == pid:
            found.append(int(stat.split("/")[2]))
    return found


def worker_of_rank(torchrun_pid, rank):
    """The pid of the worker with RANK=`rank` among torchrun's children, or None."""
    for pid in children(torchrun_pid):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                variables = f.read().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in variables:
            return pid
    return None


def parameters(path):
    """The module entries (parameters and buffers: names without '/') of a checkpoint, as raw
    bytes of their storages."""
    entries = checkpoint_file.module_entries(path)
    if entries is None:
        fail(f"{path} is not a valid checkpoint: {checkpoint_file.inspect(path).why}")
    return entries


def last_stats(logdir):
    entries = json.loads(read(os.path.join(logdir, "stats.json")))
    return entries[-1] if entries else {}


def standalone(binary, workdir):
    # Each rank in its own working directory with the same relative --logdir: what rank 1 writes
    # (it must write nothing) lands apart from rank 0's directory.
    for rank in (0, 1):
        os.makedirs(os.path.join(workdir, f"rank{rank}"))
    script = (f'cd "{workdir}/rank$RANK" && exec "{binary}" "$@"')
    flags = ["--train-limit", "2048", "--val-limit", "500", "--batch-size", "64",
             "--val-batch-size", "250", "--max-epoch", "3", "--lr", "0.05",
             "--max-val-error", "0.5", "--dist-timeout", "60", "--logdir", "log"]
    launch = ["--standalone", "--nproc_per_node", "2", "--no_python"] + WORKAROUND
    out = os.path.join(workdir, "standalone.out")
    status = finish(start(launch + ["bash", "-c", script, "fashion_mnist"] + flags, out), out)
    if status != 0:
        fail(f"torchrun --standalone exited with {status}, expected 0", out)
    text = read(out)
    if text.count("fashion_mnist: OK") != 1:
        fail(f"'fashion_mnist: OK' printed {text.count('fashion_mnist: OK')} times, expected "
             "once (by rank 0)", out)
    # Rank 1 logs warnings only (its chief-only callbacks are skipped at INFO, not shown there).
    if "[DataParallelTrainer] rank 0 of 2" not in text:
        fail("the job did not train on 2 ranks", out)
    if "WRN rank 1: Callback " in text:
        fail("rank 1 warned about skipping chief-only callbacks, which it does by design", out)
    chief_dir = os.path.join(workdir, "rank0", "log")
    other_dir = os.path.join(workdir, "rank1", "log")
    for name in ("log.log", "stats.json", "checkpoint", "model-96.data",
                 "min-val-error-top1.data"):
        if not os.path.exists(os.path.join(chief_dir, name)):
            fail(f"rank 0 did not write {name} in its log directory: {os.listdir(chief_dir)}", out)
    if os.path.exists(other_dir):
        fail(f"rank 1 wrote into its log directory: {os.listdir(other_dir)}", out)
    if len(glob.glob(os.path.join(chief_dir, "events.out.tfevents.*"))) != 1:
        fail("expected one event file in rank 0's log directory", out)
    error = last_stats(chief_dir).get("val-error-top1")
    if error is None or not error < 0.5:
        fail(f"final val-error-top1 {error}, expected below 0.5", out)
    print(f"standalone: 2 ranks, final val-error-top1 {error}, rank 1 wrote nothing")

    # --batch-size is the global batch: one that 2 ranks cannot split is refused by both.
    out = os.path.join(workdir, "odd_batch.out")
    status = finish(start(launch + [binary, "--batch-size", "33", "--logdir",
                                    os.path.join(workdir, "odd_log")], out), out)
    if status == 0:
        fail("--batch-size 33 on 2 ranks was accepted", out)
    if "--batch-size 33 is not a multiple of the 2 ranks" not in read(out):
        fail("the refusal of --batch-size 33 does not name the batch and the ranks", out)
    if os.path.exists(os.path.join(workdir, "odd_log")):
        fail("the refused run created its log directory", out)
    print("standalone: --batch-size 33 on 2 ranks refused")


def elastic(binary, workdir):
    def launch(logdir):
        # Not --standalone: a static rendezvous at 127.0.0.1:<port>, where torchrun's agent
        # serves the store. --monitor_interval 0.5: the agent notices a dead worker quickly.
        # Each rank's reads go to <logdir>.samples (--trace-samples).
        os.makedirs(logdir + ".samples")
        return (["--nnodes", "1", "--nproc_per_node", "2", "--max_restarts", "1",
                 "--monitor_interval", "0.5", "--master_addr", "127.0.0.1", "--master_port",
                 str(free_port()), "--no_python"] + WORKAROUND +
                [binary, "--logdir", logdir, "--max-epoch", str(ELASTIC_EPOCHS),
                 "--trace-samples", logdir + ".samples"] + ELASTIC_FLAGS)

    def kept_batches(logdir):
        try:
            return sample_traces.read_run(logdir + ".samples", ELASTIC_EPOCHS * STEPS_PER_EPOCH,
                                          ELASTIC_BATCH, ELASTIC_IMAGES // ELASTIC_BATCH)[1]
        except sample_traces.TraceError as e:
            fail(f"{logdir}: {e}")

    # The reference: never interrupted.
    reference = os.path.join(workdir, "reference")
    out_ref = os.path.join(workdir, "reference.out")
    status = finish(start(launch(reference), out_ref), out_ref)
    if status != 0:
        fail(f"the uninterrupted run exited with {status}", out_ref)
    if "(torchrun's store)" not in read(out_ref):
        fail("the ranks did not use torchrun's agent store", out_ref)

    # The same, with rank 1 killed once rank 0 has saved a checkpoint.
    killed = os.path.join(workdir, "killed")
    out = os.path.join(workdir, "killed.out")
    proc = start(launch(killed), out)
    deadline = time.monotonic() + RUN_TIMEOUT
    while not os.path.exists(os.path.join(killed, "checkpoint")):
        if proc.poll() is not None or time.monotonic() > deadline:
            fail("the run ended (or hung) before its first checkpoint", out)
        time.sleep(0.005)
    victim = worker_of_rank(proc.pid, 1)
    if victim is None:
        fail("no worker with RANK=1 among torchrun's children", out)
    os.kill(victim, signal.SIGKILL)
    killed_at = read(os.path.join(killed, "checkpoint")).splitlines()[0]
    status = finish(proc, out)
    text = read(out)
    if status != 0:
        fail(f"the run with a killed rank exited with {status}, expected 0 (restarted)", out)
    if "Will load checkpoint at " + killed + "/model-" not in text:
        fail(f"the restarted group did not resume from a checkpoint (rank 1 was killed after "
             f"{killed_at})", out)
    resumed = text[text.index("Will load checkpoint at "):].splitlines()[0]
    if f"/model-{ELASTIC_EPOCHS * STEPS_PER_EPOCH}." in resumed:
        fail("rank 1 was killed after the last epoch: nothing was restarted mid-run", out)

    last = f"model-{ELASTIC_EPOCHS * STEPS_PER_EPOCH}.data"
    expected = parameters(os.path.join(reference, last))
    got = parameters(os.path.join(killed, last))
    if sorted(expected) != sorted(got):
        fail(f"the checkpoints hold other entries: {sorted(expected)} vs {sorted(got)}")
    different = [name for name in expected if expected[name] != got[name]]
    if different:
        fail(f"after the restart, {len(different)} of {len(expected)} parameters and buffers "
             f"differ from the uninterrupted run's: {different}", out, out_ref)
    # The images: every pass read once each, every step the uninterrupted run's global batch.
    reference_batches = sample_traces.global_batches(kept_batches(reference))
    problem = sample_traces.partition_problem(kept_batches(killed), ELASTIC_BATCH, ELASTIC_IMAGES,
                                              reference_batches)
    if problem:
        fail(f"after the restart: {problem}", out)
    a, b = last_stats(reference), last_stats(killed)
    if a.get("val-error-top1") != b.get("val-error-top1"):
        fail(f"final val-error-top1 {b.get('val-error-top1')} after the restart, "
             f"{a.get('val-error-top1')} uninterrupted", out, out_ref)
    print(f"elastic: rank 1 killed after {killed_at}; {resumed.strip()}; the final "
          f"{len(got)} parameters and buffers equal the uninterrupted run's bitwise; every "
          "pass's images read once each, every step's global batch the uninterrupted run's")


def ctrl_c(binary, workdir):
    import pty
    import select
    logdir = os.path.join(workdir, "log")
    launch = (["--nnodes", "1", "--nproc_per_node", "2", "--max_restarts", "0",
               "--master_addr", "127.0.0.1", "--master_port", str(free_port()), "--no_python"] +
              WORKAROUND + [binary, "--logdir", logdir] + ELASTIC_FLAGS)
    out = os.path.join(workdir, "ctrl_c.out")
    env = dict(os.environ, USE_LIBUV="0")
    pid, terminal = pty.fork()
    if pid == 0:  # the child: torchrun, with the pty as its controlling terminal
        try:
            os.execve(TORCHRUN, [TORCHRUN] + launch + ["--max-epoch", "1000"], env)
        finally:
            os._exit(127)
    typed = False
    deadline = time.monotonic() + RUN_TIMEOUT
    with open(out, "wb") as log:
        while True:  # read everything (a terminal nobody reads would hold the job up)
            ready, _, _ = select.select([terminal], [], [], 0.05)
            if ready:
                try:
                    data = os.read(terminal, 65536)
                except OSError:  # EIO: every process of the terminal has closed it
                    data = b""
                if not data:
                    break
                log.write(data)
            chief_log = os.path.join(logdir, "log.log")
            if not typed and os.path.exists(chief_log) and "Start Epoch 2 ..." in read(chief_log):
                os.write(terminal, b"\x03")  # Ctrl-C, as the terminal's line discipline takes it
                typed = True
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                fail(f"torchrun did not end within {RUN_TIMEOUT} s of its start", out)
    os.waitpid(pid, 0)
    os.close(terminal)
    text = read(out)
    if not typed:
        fail("the run ended before Ctrl-C was typed", out)
    if "Detected Ctrl-C and exiting main loop." not in text:
        fail("rank 0 did not stop on Ctrl-C", out)
    found = [line for line in text.splitlines()
             if "fashion_mnist: stopped by SIGINT at global_step " in line]
    if not found:
        fail("no 'stopped by SIGINT at global_step N' line", out)
    stop = int(found[0].split("at global_step ")[1].split(";")[0])
    if "has died" in text or "Training failed" in text:
        fail("a rank failed, or reported the other dead, on one Ctrl-C", out)
    if "holds that point. Run the same command again" not in text:
        fail(f"no stop checkpoint of global_step {stop} was written", out)
    index = read(os.path.join(logdir, "checkpoint")).splitlines()[0]
    if index != f'model_checkpoint_path: "model-{stop}"':
        fail(f"the checkpoint index names '{index}', expected model-{stop}", out)
    epoch = stop // STEPS_PER_EPOCH + 1
    print(f"ctrl_c: one Ctrl-C at a terminal stopped both ranks at global_step {stop}; "
          f"model-{stop} written")

    # The same command (up to the epoch after the stop) resumes there.
    out2 = os.path.join(workdir, "resumed.out")
    launch[launch.index("--master_port") + 1] = str(free_port())
    status = finish(start(launch + ["--max-epoch", str(epoch + 1)], out2), out2)
    if status != 0:
        fail(f"the resumed run exited with {status}", out2)
    if f"Will load checkpoint at {logdir}/model-{stop}." not in read(out2):
        fail(f"the resumed run did not load model-{stop}", out2)
    print(f"ctrl_c: the same command resumed from model-{stop} and finished epoch {epoch + 1}")


def store_refusal():
    """Why torchrun's Python cannot open the TCPStore that torchrun's rendezvous needs, or None.

    Debian's PyTorch 2.x is built without libuv, yet its TCPStore asks for libuv by default, and
    torchrun's rendezvous backends create their store with that default (USE_LIBUV=0 does not
    reach them): there torchrun cannot start at all, whatever program it runs.
    """
    with open(TORCHRUN, "rb") as f:
        first = f.readline().decode(errors="replace")
    python = first[2:].strip().split()[0] if first.startswith("#!") else sys.executable
    probe = ("import datetime, torch.distributed as d; "
             "d.TCPStore('127.0.0.1', 0, 1, True, timeout=datetime.timedelta(seconds=10))")
    r = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=60)
    if r.returncode != 0 and "libuv" in r.stderr:
        return [line for line in r.stderr.splitlines() if "libuv" in line][-1].strip()
    return None


def main():
    global TORCHRUN
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--torchrun", default=TORCHRUN)
    parser.add_argument("mode", choices=["standalone", "elastic", "ctrl_c"])
    args = parser.parse_args()
    TORCHRUN = args.torchrun
    if not os.access(TORCHRUN, os.X_OK):
        print(f"distributed_test.py {args.mode}: SKIPPED: torchrun ({TORCHRUN}) is missing "
              "(Debian package python3-torch, which scripts/setup.sh installs; or the venv of "
              "scripts/pip_libtorch.sh)")
        return
    refusal = store_refusal()
    if refusal:
        print(f"distributed_test.py {args.mode}: SKIPPED: {TORCHRUN} cannot start on this PyTorch: "
              f"its rendezvous store says: {refusal}")
        return
    workdir = os.path.abspath(args.workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    binary = os.path.abspath(args.binary)
    {"standalone": standalone, "elastic": elastic, "ctrl_c": ctrl_c}[args.mode](binary, workdir)
    print(f"distributed_test.py {args.mode}: OK")


if __name__ == "__main__":
    main()
