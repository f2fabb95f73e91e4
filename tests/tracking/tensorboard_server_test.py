"""The main job's log directory as TensorBoard's own server shows it (not a reader written here).
Run by ctest (label tracking) as

    python3 tensorboard_server_test.py --binary <fashion_mnist> --workdir <dir>

with any Python: it runs itself again with the Python of scripts/tracking_venv.sh's venv
(tensorboard from PyPI). The job trains 2 epochs, then the same command with --max-epoch 4
resumes it (a second process, a second event file in the same directory); then `tensorboard
--logdir` serves the directory on 127.0.0.1 at a free port (stopped at the end, also on
failure) and the test reads, through TensorBoard's HTTP data API (/data/plugin/scalars/...,
images, histograms), every tag of the run: the scalar tags are exactly stats.json's keys, each with
stats.json's steps (none doubled across the resume) and values (as the float32 an event holds);
the image tags are the job's input/image/0..2 and the histogram tag fc/weight-histogram, those
the event files hold (TensorBoard's own reader), each at every epoch's last step once, every
image served byte for byte as the event file's PNG, every histogram counting fc's 11520 weights.

Without the venv the test prints how to make it and exits 77 (ctest: skipped).
"""

import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tracking_support import free_port, stop_server, use_venv  # noqa: E402
import tracking_support  # noqa: E402

FLAGS = ["--train-limit", "256", "--val-limit", "64", "--batch-size", "32", "--val-batch-size",
         "64", "--steps-per-epoch", "4", "--lr", "0.05", "--threads", "1", "--max-val-error", "1"]
JOB_TIMEOUT = 300
SERVER_TIMEOUT = 120






def run_job(binary, logdir, epochs, out):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "COMET_"))}
    env["OMP_WAIT_POLICY"] = "PASSIVE"
    with open(out, "ab") as f:
        proc = subprocess.Popen([binary] + FLAGS + ["--max-epoch", str(epochs), "--logdir", logdir],
                                stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env)
    try:
        status = proc.wait(timeout=JOB_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        fail(f"the job did not end within {JOB_TIMEOUT} s", out)
    if status != 0:
        fail(f"the job exited with {status}", out)


class TensorBoard:
    """`tensorboard --logdir` on 127.0.0.1 at a free port; stopped on exit."""

    def __init__(self, logdir, workdir):
        self.logdir = logdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = os.path.join(workdir, "tensorboard.log")
        self.proc = None

    def __enter__(self):
        tensorboard = os.path.join(os.path.dirname(sys.executable), "tensorboard")
        with open(self.log, "ab") as f:
            self.proc = subprocess.Popen(
                [tensorboard, "--logdir", self.logdir, "--host", "127.0.0.1", "--port",
                 str(self.port), "--load_fast", "false"],
                stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        return self

    def __exit__(self, *exc):
        stop_server(self.proc)
        return False

    def get(self, path, **query):
        return json.loads(self.get_bytes(path, **query).decode("utf-8"))

    def get_bytes(self, path, **query):
        url = self.url + path + ("?" + urllib.parse.urlencode(query) if query else "")
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read()

    def wait_for_tags(self, plugin, expected_count):
        """The plugin's {run: {tag: ...}} once it lists `expected_count` tags (TensorBoard loads
        the files in the background)."""
        deadline = time.monotonic() + SERVER_TIMEOUT
        tags = {}
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                fail(f"tensorboard exited with {self.proc.returncode}", self.log)
            try:
                tags = self.get(f"/data/plugin/{plugin}/tags")
                if sum(len(t) for t in tags.values()) >= expected_count:
                    return tags
            except OSError:
                pass
            time.sleep(0.5)
        fail(f"tensorboard listed {tags} for {plugin} after {SERVER_TIMEOUT} s, expected "
             f"{expected_count} tags", self.log)


FC_WEIGHTS = 10 * 128 * 3 * 3  # the main job's classifier: 10 classes x 128 x 3 x 3 features


def as_float32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    p.add_argument("--workdir", required=True)
    args = p.parse_args()
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError:
        use_venv("TensorBoard")
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    binary = os.path.abspath(args.binary)
    logdir = os.path.join(args.workdir, "run")
    run_job(binary, logdir, 2, os.path.join(args.workdir, "first.out"))
    resumed_out = os.path.join(args.workdir, "resumed.out")
    run_job(binary, logdir, 4, resumed_out)
    events = [n for n in os.listdir(logdir) if n.startswith("events.out.tfevents.")]
    if len(events) != 2:
        fail(f"expected an event file per process, found {events}", resumed_out)

    with open(os.path.join(logdir, "stats.json"), encoding="utf-8") as f:
        stats = json.load(f)
    expected = {}
    for entry in stats:
        for key, value in entry.items():
            if key not in ("global_step", "epoch_num") and isinstance(value, (int, float)):
                expected.setdefault(key, []).append((entry["global_step"], as_float32(value)))

    # What the files hold, by TensorBoard's own reader: the image and histogram tags to expect.
    accumulator = event_accumulator.EventAccumulator(logdir, size_guidance={
        event_accumulator.IMAGES: 0, event_accumulator.HISTOGRAMS: 0})
    accumulator.Reload()
    file_tags = accumulator.Tags()

    with TensorBoard(logdir, args.workdir) as board:
        scalar_tags = board.wait_for_tags("scalars", len(expected))
        if list(scalar_tags) != ["."]:
            fail(f"tensorboard shows the runs {list(scalar_tags)}, expected one ('.')", board.log)
        shown = set(scalar_tags["."])
        if shown != set(expected):
            fail(f"tensorboard's scalar tags {sorted(shown)} are not stats.json's "
                 f"{sorted(expected)}", board.log)
        points = 0
        for tag, want in expected.items():
            got = [(step, value) for _, step, value in
                   board.get("/data/plugin/scalars/scalars", run=".", tag=tag)]
            steps = [s for s, _ in got]
            if len(steps) != len(set(steps)):
                fail(f"{tag}: a step shown twice: {steps}", board.log)
            if len(got) != len(want) or not all(
                    s == t and same(v, w) for (s, v), (t, w) in zip(sorted(got), sorted(want))):
                fail(f"{tag}: tensorboard shows {sorted(got)}, stats.json holds {sorted(want)}",
                     board.log)
            points += len(got)
        # The main job's image and histogram summaries, at every epoch end of both processes.
        epoch_steps = sorted(e["global_step"] for e in stats)
        wanted = {"images": ["input/image/0", "input/image/1", "input/image/2"],
                  "histograms": ["fc/weight-histogram"]}
        kinds = {}
        for plugin in ("images", "histograms"):
            board.wait_for_tags(plugin, len(wanted[plugin]))
            tags = sorted(board.get(f"/data/plugin/{plugin}/tags").get(".", {}))
            if tags != wanted[plugin] or tags != sorted(file_tags[plugin]):
                fail(f"tensorboard's {plugin} tags {tags}: expected {wanted[plugin]}, the event "
                     f"files hold {sorted(file_tags[plugin])}", board.log)
            for tag in tags:
                entries = board.get(f"/data/plugin/{plugin}/{plugin}", run=".", tag=tag)
                steps = sorted(e["step"] if isinstance(e, dict) else e[1] for e in entries)
                if steps != epoch_steps:
                    fail(f"{plugin} {tag}: tensorboard shows steps {steps}, expected each epoch's "
                         f"last step once: {epoch_steps}", board.log)
                if plugin == "images":
                    written = {e.step: e.encoded_image_string for e in accumulator.Images(tag)}
                    for e in entries:
                        query = e.get("query") or urllib.parse.urlencode(
                            {"blob_key": e["blob_key"]})
                        served = board.get_bytes(f"/data/plugin/images/individualImage?{query}")
                        if served != written[e["step"]]:
                            fail(f"image {tag} at step {e['step']}: tensorboard serves other "
                                 "bytes than the event file holds", board.log)
                else:
                    written = {e.step: e.histogram_value for e in accumulator.Histograms(tag)}
                    for _, step, buckets in entries:
                        count = sum(b[2] for b in buckets)
                        if round(count) != round(written[step].num) or count != FC_WEIGHTS:
                            fail(f"histogram {tag} at step {step}: tensorboard counts {count} "
                                 f"values, the event file {written[step].num}, fc.weight has "
                                 f"{FC_WEIGHTS}", board.log)
            kinds[plugin] = len(tags)
    print(f"tensorboard: a run of 2 epochs resumed to 4 (2 event files): TensorBoard "
          f"{tensorboard_version()} serves stats.json's {len(expected)} scalar tags, {points} "
          f"points with stats.json's steps (none twice) and values; {kinds['images']} image tags "
          f"(the event files' PNGs byte for byte) and {kinds['histograms']} histogram tag "
          f"({FC_WEIGHTS} weights), each at the 4 epoch ends {epoch_steps}")


def tensorboard_version():
    import tensorboard
    return tensorboard.__version__


def fail(message, *outputs):
    tracking_support.fail("tensorboard_server_test.py", message, *outputs)


if __name__ == "__main__":
    main()
