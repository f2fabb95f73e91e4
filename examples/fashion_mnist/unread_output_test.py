"""A stop while nobody reads the job's output. Run by ctest as

    python3 unread_output_test.py --binary <fashion_mnist> --workdir <dir>

The job's stdout and stderr go into a pipe of one page that the test stops reading once epoch 2
has started (a paused `job | less`, a launcher that no longer collects the output): the job
fills it and waits, as any program does. Then SIGTERM: the job must still stop with its stop
checkpoint and exit 143 within a bound, instead of waiting on the console for ever. log.log
keeps every line, and says how many bytes the console missed.

Python standard library only; a few seconds.
"""

import argparse
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "chaos"))
import test_report  # noqa: E402

F_SETPIPE_SZ = 1031  # Linux's fcntl command (Python's fcntl module has it from 3.10 on)
STOP_BOUND = 30  # seconds from SIGTERM to the exit; the stop itself takes about one
FLAGS = ["--train-limit", "256", "--val-limit", "64", "--batch-size", "64", "--val-batch-size",
         "64", "--threads", "1", "--max-val-error", "1", "--max-epoch", "100000"]


def fail(message, *paths):
    test_report.fail("unread_output_test.py", message, *paths)


def size(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return -1


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()
    workdir = os.path.abspath(args.workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    logdir = os.path.join(workdir, "log")
    log = os.path.join(logdir, "log.log")

    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, F_SETPIPE_SZ, 4096)
    job = subprocess.Popen([args.binary, "--logdir", logdir] + FLAGS, stdout=write_end,
                           stderr=write_end, stdin=subprocess.DEVNULL)
    os.close(write_end)
    os.set_blocking(read_end, False)
    # Read until epoch 2 has started; from then on nobody reads.
    deadline = time.monotonic() + 120
    while not (os.path.exists(log) and "Start Epoch 2 ..." in open(log, errors="replace").read()):
        try:
            os.read(read_end, 65536)
        except BlockingIOError:
            pass
        if job.poll() is not None or time.monotonic() > deadline:
            fail("the job ended (or hung) before epoch 2", log)
        time.sleep(0.01)
    # The job fills the pipe, then waits on it: log.log stops growing (the console comes first).
    last, still_since = size(log), time.monotonic()
    while time.monotonic() - still_since < 2:
        time.sleep(0.1)
        if job.poll() is not None:
            fail("the job ended on its own; it should be waiting on its output", log)
        if size(log) != last:
            last, still_since = size(log), time.monotonic()
        if time.monotonic() > deadline:
            fail("the job never filled its output pipe", log)
    stalled_at = open(log, errors="replace").read().count("\n")

    job.send_signal(signal.SIGTERM)
    try:
        status = job.wait(timeout=STOP_BOUND)
    except subprocess.TimeoutExpired:
        job.kill()
        job.wait()
        fail(f"the job did not stop within {STOP_BOUND} s of SIGTERM: it waits on its output "
             "(nobody reads the pipe) instead of stopping", log)
    os.close(read_end)
    text = open(log, errors="replace").read()
    if status != 143:
        fail(f"exit status {status} after SIGTERM, expected 143", log)
    stop = [line for line in text.splitlines() if "fashion_mnist: stopped by SIGTERM" in line]
    if not stop:
        fail("log.log has no 'stopped by SIGTERM' line", log)
    step = int(stop[0].split("at global_step ")[1].split(";")[0])
    index = open(os.path.join(logdir, "checkpoint")).readline().strip()
    if index != f'model_checkpoint_path: "model-{step}"':
        fail(f"the checkpoint index names '{index}', expected the stop step's model-{step}", log)
    if "bytes of console output were dropped after the stop signal" not in text:
        fail("log.log does not say that console output was dropped", log)
    print(f"unread_output_test.py: OK: the job waited on its full pipe after {stalled_at} lines, "
          f"then stopped on SIGTERM with model-{step} written")


if __name__ == "__main__":
    main()
