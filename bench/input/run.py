#!/usr/bin/env python3
"""trainpack_bench_input's driver: trainpack's ImageFolder against torchvision's ImageFolder +
DataLoader on the same image folders, side by side in one run; then the main job's model trained
from the PNG files against training from the IDX arrays.

    python3 bench/input/run.py --build build      # or: cmake --build build --target
                                                  #     run_bench_input

The data sets are made once, under a scratch directory (--data DIR keeps and reuses them):
  fashion  the first --fashion-images training images of Fashion-MNIST as grey 28x28 PNGs
           (build/examples/image_folder/image_folder --export-fashion-mnist), 10 classes;
  jpeg     --jpeg-images RGB JPEGs (Pillow, quality 90) of smooth content (gradients and
           circles), sizes from 320x240 to 480x360, 10 classes.
Pipeline settings: fashion grey, resized to 32, cropped to 28 (the image_folder example's
defaults); jpeg RGB, resized to 256, cropped to 224 (ImageNet's training sizes). Batches of 64.

For every data set and every thread count in 1, 2 and os.cpu_count() (duplicates once), the two
sides run alternately (which goes first alternates from rep to rep), --reps times each:
  trainpack    build/bench/trainpack_bench_input --pipeline --threads N: ImageFolder on N worker
               threads, BatchData iterated on the main thread;
  torchvision  bench/input/torchvision_reference.py --workers N (with --python, Debian's
               python3-torch and python3-torchvision by default): DataLoader with N worker
               processes.
Each prints images/s over --passes timed passes after one untimed pass; the table gives the
medians and trainpack's over torchvision's. Then `--train`: fashion_mnist::Model trained by
SimpleTrainer (QueueInput, 1 intra-op thread) for --train-steps steps after --train-warmup, fed
from the IDX arrays or from the fashion PNGs (ImageFolder, --decode-threads worker threads),
alternately, --reps times each: steps/s, medians, png over idx.

`--smoke`: tiny sets, one rep, threads 0 and 2, a few training steps: checks that every side
runs and reports (and that both sides' batches have the same shape), measures nothing. A side
that cannot run fails the run; torchvision's side, when torch or torchvision cannot be imported
(its exit status 3), is reported skipped, and fails the run only without `--may-skip
torchvision`.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SKIPPED = 3  # torchvision_reference.py's exit status when torch or torchvision is missing

# name -> pipeline flags (both sides take these)
PIPELINES = {
    "fashion": {"size": 32, "crop": 28, "grey": True},
    "jpeg": {"size": 256, "crop": 224, "grey": False},
}
PIPELINES_SMOKE = {
    "fashion": {"size": 32, "crop": 28, "grey": True},
    "jpeg": {"size": 64, "crop": 56, "grey": False},
}


def default_python():
    # Debian's python3 has python3-torch and python3-torchvision; a python3 earlier on the PATH
    # (a virtual environment, pyenv) may have neither.
    return "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable


def parse_args():
    p = argparse.ArgumentParser(description="trainpack ImageFolder vs torchvision DataLoader")
    p.add_argument("--build", default="build", help="the CMake build directory")
    p.add_argument("--bench", help="trainpack_bench_input (default: BUILD/bench/...)")
    p.add_argument("--image-folder",
                   help="the image_folder example (default: BUILD/examples/image_folder/...)")
    p.add_argument("--python", default=default_python(),
                   help="the python3 that runs torchvision's side (default: %(default)s)")
    p.add_argument("--data", help="where the data sets are made (kept; reused when present); "
                   "default: a scratch directory, removed at the end")
    p.add_argument("--reps", type=int, default=3, help="runs of each side per setting")
    p.add_argument("--passes", type=int, default=2, help="timed passes per pipeline run")
    p.add_argument("--threads", help="comma-separated thread counts (default: 1,2,cpu_count)")
    p.add_argument("--fashion-images", type=int, default=10000)
    p.add_argument("--jpeg-images", type=int, default=1000)
    p.add_argument("--datasets", default="fashion,jpeg", help="comma-separated: fashion, jpeg")
    p.add_argument("--batch", type=int, default=64, help="pipeline batch")
    p.add_argument("--train-steps", type=int, default=100, help="0: no training comparison")
    p.add_argument("--train-warmup", type=int, default=10)
    p.add_argument("--train-batch", type=int, default=128)
    p.add_argument("--decode-threads", type=int, default=1, help="png training's workers")
    p.add_argument("--may-skip", action="append", default=[], choices=["torchvision"],
                   help="a side that may be reported skipped without failing the run")
    p.add_argument("--json", help="also write every run's result to this file")
    p.add_argument("--smoke", action="store_true", help="tiny sets, one rep, a few steps")
    p.add_argument("--verbose", action="store_true", help="show every run's whole output")
    args = p.parse_args()
    args.pipelines = PIPELINES
    if args.smoke:
        args.reps, args.passes = 1, 1
        args.fashion_images, args.jpeg_images = 256, 96
        args.train_steps, args.train_warmup = min(args.train_steps, 4), 2
        args.threads = args.threads or "0,2"
        args.pipelines = PIPELINES_SMOKE
    if args.threads:
        try:
            args.threads = [int(t) for t in args.threads.split(",")]
        except ValueError:
            p.error(f"--threads {args.threads}: expected comma-separated integers")
    else:
        args.threads = [1, 2, os.cpu_count() or 1]
    args.threads = list(dict.fromkeys(args.threads))  # duplicates once, order kept
    if any(t < 0 for t in args.threads):
        p.error("--threads: thread counts must be >= 0")
    args.datasets = [d for d in args.datasets.split(",") if d]
    for d in args.datasets:
        if d not in PIPELINES:
            p.error(f"--datasets: unknown data set {d!r} (fashion, jpeg)")
    for name in ("reps", "passes", "fashion_images", "jpeg_images", "batch", "train_batch"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if args.train_steps < 0 or args.train_warmup < 0 or args.decode_threads < 0:
        p.error("--train-steps, --train-warmup and --decode-threads must be >= 0")
    args.bench = args.bench or os.path.join(args.build, "bench", "trainpack_bench_input")
    args.image_folder = args.image_folder or os.path.join(args.build, "examples", "image_folder",
                                                          "image_folder")
    for flag, path in (("--bench", args.bench), ("--image-folder", args.image_folder)):
        if not os.access(path, os.X_OK):
            p.error(f"{path} not found: build it first (cmake --build {args.build} --target "
                    f"{os.path.basename(path)}) or pass {flag} / --build")
    return args


def run_json(name, cmd, verbose, may_skip=False):
    """Runs `cmd`; returns (the last JSON line of its stdout as a dict, seconds), or (None,
    seconds) when it exits with SKIPPED and `may_skip`."""
    start = time.monotonic()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seconds = time.monotonic() - start
    if verbose:
        sys.stdout.write(proc.stdout + proc.stderr)
    if proc.returncode == SKIPPED and may_skip:
        return None, seconds, proc.stderr.strip().splitlines()[-1:] or [""]
    if proc.returncode != 0:
        sys.stdout.write(proc.stdout + proc.stderr)
        sys.exit(f"run.py: {name} failed (exit status {proc.returncode}): {' '.join(cmd)}")
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line), seconds, None
    sys.stdout.write(proc.stdout + proc.stderr)
    sys.exit(f"run.py: {name} printed no JSON line: {' '.join(cmd)}")


# ---- the data sets ----

def count_images(root):
    return sum(len(files) for _, _, files in os.walk(root))


def make_fashion(args, out):
    train = os.path.join(out, "train")
    if os.path.isdir(train) and count_images(train) == args.fashion_images:
        return train
    shutil.rmtree(out, ignore_errors=True)
    cmd = [args.image_folder, "--export-fashion-mnist", out, "--train-limit",
           str(args.fashion_images), "--val-limit", "1"]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        sys.stdout.write(proc.stdout)
        sys.exit(f"run.py: the Fashion-MNIST export failed (exit status {proc.returncode}): "
                 f"{' '.join(cmd)}")
    return train


def make_jpegs(args, out):
    """--jpeg-images JPEGs in out/class-<k>/, made with Pillow (and numpy) by this process."""
    if os.path.isdir(out) and count_images(out) == args.jpeg_images:
        return out
    shutil.rmtree(out, ignore_errors=True)
    try:
        import numpy as np
        from PIL import Image
    except ImportError as e:
        sys.exit(f"run.py: making the JPEGs needs numpy and Pillow ({e}); run run.py with a "
                 "python3 that has them (Debian: python3-numpy python3-pil)")
    rng = np.random.default_rng(1)
    for k in range(10):
        os.makedirs(os.path.join(out, f"class-{k}"))
    for i in range(args.jpeg_images):
        w = int(rng.integers(320, 481)) if not args.smoke else int(rng.integers(80, 121))
        h = int(rng.integers(240, 361)) if not args.smoke else int(rng.integers(60, 91))
        # a linear gradient per channel, then a few soft-edged circles
        y, x = np.mgrid[0:h, 0:w].astype(np.float32)
        image = np.empty((h, w, 3), np.float32)
        for c in range(3):
            a, b, base = rng.uniform(-1, 1, 3)
            image[..., c] = 128 + 60 * base + 60 * (a * x / w + b * y / h)
        for _ in range(int(rng.integers(2, 6))):
            cx, cy = rng.uniform(0, w), rng.uniform(0, h)
            r = rng.uniform(0.1, 0.4) * min(w, h)
            inside = np.clip((r - np.hypot(x - cx, y - cy)) / 4, 0, 1)[..., None]
            image = image * (1 - inside) + rng.uniform(0, 255, 3).astype(np.float32) * inside
        pil = Image.fromarray(np.clip(image, 0, 255).astype(np.uint8), "RGB")
        pil.save(os.path.join(out, f"class-{i % 10}", f"{i:05d}.jpg"), quality=90)
    return out


# ---- the runs ----

def pipeline_cmds(args, root, settings, threads):
    common = ["--batch", str(args.batch), "--size", str(settings["size"]), "--crop",
              str(settings["crop"]), "--passes", str(args.passes)]
    if settings["grey"]:
        common.append("--grey")
    return {
        "trainpack": [args.bench, "--pipeline", "--root", root, "--threads", str(threads)] +
        common,
        "torchvision": [args.python, os.path.join(HERE, "torchvision_reference.py"), "--root",
                        root, "--workers", str(threads)] + common,
    }


def fmt_rate(v):
    return "skipped" if v is None else f"{v:.0f}"


def main():
    args = parse_args()
    print(f"trainpack_bench_input: {os.cpu_count()} CPUs, threads {args.threads}, {args.reps} "
          f"rep(s) per side, {args.passes} timed pass(es) after 1 untimed, batch {args.batch}; "
          f"torchvision's side on {args.python}")
    print("load average at start: %.2f %.2f %.2f" % os.getloadavg(), flush=True)
    scratch = args.data or tempfile.mkdtemp(prefix="trainpack_bench_input.")
    os.makedirs(scratch, exist_ok=True)
    results = []
    skipped = []
    try:
        roots = {}
        start = time.monotonic()
        if "fashion" in args.datasets or args.train_steps > 0:
            roots["fashion"] = make_fashion(args, os.path.join(scratch, "fashion"))
        if "jpeg" in args.datasets:
            roots["jpeg"] = make_jpegs(args, os.path.join(scratch, "jpeg"))
        print(f"data sets under {scratch}: " + ", ".join(
            f"{name} {count_images(root)} images" for name, root in roots.items()) +
            f" ({time.monotonic() - start:.1f} s)", flush=True)

        rows = []
        for dataset in args.datasets:
            settings = args.pipelines[dataset]
            for threads in args.threads:
                cmds = pipeline_cmds(args, roots[dataset], settings, threads)
                rates = {"trainpack": [], "torchvision": []}
                shapes = {}
                for r in range(args.reps):
                    order = ["trainpack", "torchvision"]
                    if r % 2 == 1:
                        order.reverse()
                    for side in order:
                        if side in skipped:
                            continue
                        out, seconds, why = run_json(f"{side} {dataset} threads={threads}",
                                                     cmds[side], args.verbose,
                                                     may_skip=side == "torchvision")
                        if out is None:
                            print(f"{side}: skipped: {why[0]}", flush=True)
                            skipped.append(side)
                            continue
                        out.update({"dataset": dataset, "rep": r})
                        results.append(out)
                        rates[side].append(out["images_per_s"])
                        shapes[side] = out["batch_shape"]
                        print(f"{dataset:8s} threads {threads:2d} rep {r}: {side:11s} "
                              f"{out['images_per_s']:9.1f} images/s ({out['images']} images in "
                              f"{out['seconds']:.2f} s; run {seconds:.1f} s, load "
                              f"{os.getloadavg()[0]:.2f})", flush=True)
                if len(shapes) == 2 and shapes["trainpack"] != shapes["torchvision"]:
                    sys.exit(f"run.py: {dataset}: the first batches differ in shape: trainpack "
                             f"{shapes['trainpack']}, torchvision {shapes['torchvision']}")
                med = {side: statistics.median(v) if v else None for side, v in rates.items()}
                ratio = (med["trainpack"] / med["torchvision"]
                         if med["trainpack"] and med["torchvision"] else None)
                rows.append((dataset, threads, med["trainpack"], med["torchvision"], ratio))

        if rows:
            print()
            print("| data set | threads / workers | trainpack images/s | torchvision images/s "
                  "| trainpack / torchvision |")
            print("|---|---:|---:|---:|---:|")
            for dataset, threads, tp, tv, ratio in rows:
                s = args.pipelines[dataset]
                label = (f"{dataset} ({'grey' if s['grey'] else 'RGB'}, resize {s['size']}, "
                         f"crop {s['crop']})")
                print(f"| {label} | {threads} | {fmt_rate(tp)} | {fmt_rate(tv)} | "
                      f"{'-' if ratio is None else f'{ratio:.2f}'} |")
            print(flush=True)

        if args.train_steps > 0:
            cmds = {
                "idx": [args.bench, "--train", "--source", "idx"],
                "png": [args.bench, "--train", "--source", "png", "--root", roots["fashion"],
                        "--decode-threads", str(args.decode_threads)],
            }
            common = ["--steps", str(args.train_steps), "--warmup", str(args.train_warmup),
                      "--batch", str(args.train_batch), "--threads", "1"]
            rates = {"idx": [], "png": []}
            for r in range(args.reps):
                order = ["idx", "png"] if r % 2 == 0 else ["png", "idx"]
                for source in order:
                    out, seconds, _ = run_json(f"train {source}", cmds[source] + common,
                                               args.verbose)
                    out.update({"dataset": "train", "rep": r})
                    results.append(out)
                    rates[source].append(out["steps_per_s"])
                    print(f"train rep {r}: {source} {out['steps_per_s']:8.2f} steps/s (median "
                          f"step {out['median_step_ms']:.2f} ms; run {seconds:.1f} s, load "
                          f"{os.getloadavg()[0]:.2f})", flush=True)
            med = {source: statistics.median(v) for source, v in rates.items()}
            print()
            print(f"training: fashion_mnist::Model, SimpleTrainer + QueueInput, batch "
                  f"{args.train_batch}, 1 intra-op thread, {args.train_steps} steps timed after "
                  f"{args.train_warmup}; png: ImageFolder on {args.decode_threads} decode "
                  "thread(s)")
            print("| source | steps/s (median) | images/s | png / idx |")
            print("|---|---:|---:|---:|")
            for source in ("idx", "png"):
                ratio = med[source] / med["idx"]
                print(f"| {source} | {med[source]:.2f} | {med[source] * args.train_batch:.0f} | "
                      f"{ratio:.3f} |")
            print(flush=True)
    finally:
        if not args.data:
            shutil.rmtree(scratch, ignore_errors=True)

    print("load average at end: %.2f %.2f %.2f" % os.getloadavg())
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    for side in skipped:
        if side not in args.may_skip:
            sys.exit(f"run.py: {side}'s side was skipped (pass --may-skip {side} to allow it)")


if __name__ == "__main__":
    main()
