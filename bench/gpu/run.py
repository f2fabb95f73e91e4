#!/usr/bin/env python3
"""trainpack_bench_gpu's driver: the main job's model on one device, trained by a bare C++ loop,
by trainpack (eager and as a CUDA graph), by a bare Python loop and by Lightning, in one run.

    python3 bench/gpu/run.py --build build [--device cuda] [--json summary.json]
    cmake --build build --target run_bench_gpu          # the same, on CUDA

It runs build/bench/trainpack_bench_gpu (forms bare_cpp, trainpack, trainpack_graph), then
bench/gpu/python_loops.py twice (python_bare; lightning, in a process of its own so that its
import and its failures touch nothing else), every side with the same --steps, --warmup, --runs,
batches and threads (bench/gpu/main.cpp and python_loops.py say what each form is). Then it prints
a table, ms/step per run and the median of the runs per form, and the ratios against the goals:

    bare_over_trainpack      bare_cpp / trainpack           >= 0.98  (trainpack at most ~2% slower)
    trainpack_over_python    trainpack / python_bare        <= 0.5
    graph_over_python        trainpack_graph / python_bare  <= 0.15
    lightning_over_trainpack lightning / trainpack          >= 4

each with `met` or `NOT met` (or `n/a` and why: a form skipped or failed; the graph form when the
trainer fell back to eager, as it does on the CPU). --json writes the same as a JSON object.
The exit status is 1 when a form failed (a skipped form is not a failure, unless it is left out
of --may-skip), 0 otherwise, whether the goals are met or not.

--device cpu runs everything on the CPU (the graph form then runs eager and says so): with
--smoke (2 runs of 3 steps after 2) it is the ctest bench_gpu_smoke, which checks that every
side runs and reports; CPU figures are not GPU figures. --deadline S bounds the whole run: each
side gets the time left (a side that runs out is reported as failed, and the table is still
printed).
"""

import argparse
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LINE = re.compile(r"^(result|skip|error|info) (.*)$")
CPP_FORMS = ("bare_cpp", "trainpack", "trainpack_graph")
PY_FORMS = ("python_bare", "lightning")
ALL_FORMS = CPP_FORMS + PY_FORMS
LABELS = {
    "bare_cpp": "bare C++ LibTorch loop",
    "trainpack": "trainpack SimpleTrainer + main job's callbacks",
    "trainpack_graph": "trainpack, CUDA graph",
    "python_bare": "bare Python loop",
    "lightning": "Lightning, defaults",
}
# The share of --deadline that each side keeps for itself while the sides before it run: the C++
# side is the longest (three forms), Lightning's import alone takes seconds.
SHARE = {"C++": 0.4, "python_bare": 0.2, "lightning": 0.3}
# (name, numerator, denominator, comparison, target, what it says)
GOALS = (
    ("bare_over_trainpack", "bare_cpp", "trainpack", ">=", 0.98,
     "trainpack's step at most ~2% slower than the bare C++ loop"),
    ("trainpack_over_python", "trainpack", "python_bare", "<=", 0.5,
     "trainpack eager at most half the bare Python loop's step"),
    ("graph_over_python", "trainpack_graph", "python_bare", "<=", 0.15,
     "trainpack with the CUDA graph at most 0.15 of the bare Python loop's step"),
    ("lightning_over_trainpack", "lightning", "trainpack", ">=", 4.0,
     "Lightning's defaults at least 4 times trainpack's step"),
)


def parse_args():
    p = argparse.ArgumentParser(description="trainpack_bench_gpu: C++, trainpack, Python, "
                                "Lightning on one device")
    p.add_argument("--build", default="build", help="the CMake build directory")
    p.add_argument("--binary",
                   help="trainpack_bench_gpu (default: BUILD/bench/trainpack_bench_gpu)")
    p.add_argument("--python", default=sys.executable,
                   help="the Python that runs python_loops.py (default: this one)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--steps", type=int, default=600, help="timed steps per run")
    p.add_argument("--warmup", type=int, default=100, help="untimed steps before them")
    p.add_argument("--runs", type=int, default=2, help="timed runs of each form")
    p.add_argument("--batches", type=int, default=64, help="distinct batches, cycled")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--threads", type=int, default=0,
                   help="intra-op threads of every side (0: one per hardware thread)")
    p.add_argument("--forms", default=",".join(ALL_FORMS))
    p.add_argument("--smoke", action="store_true", help="2 runs of 3 steps after 2 warm-up")
    p.add_argument("--json", help="write the summary here as JSON")
    p.add_argument("--deadline", type=float, default=0,
                   help="seconds for the whole run (0: none); each side gets what is left")
    p.add_argument("--may-skip", default=",".join(ALL_FORMS),
                   help="the forms that may be skipped (not installed) without failing the run; "
                   "another form's skip is a failure (default: any)")
    p.add_argument("--verbose", action="store_true", help="show every side's whole output")
    args = p.parse_args()
    args.may_skip = [f for f in args.may_skip.split(",") if f]
    if args.smoke:
        args.runs, args.steps, args.warmup = 2, 3, 2
    args.forms = [f for f in args.forms.split(",") if f]
    for form in args.forms:
        if form not in ALL_FORMS:
            p.error(f"--forms: unknown form {form!r} (known: {', '.join(ALL_FORMS)})")
    for name in ("steps", "runs", "batches", "batch_size"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if args.warmup < 0 or args.threads < 0:
        p.error("--warmup and --threads must not be negative")
    args.binary = args.binary or os.path.join(args.build, "bench", "trainpack_bench_gpu")
    if any(f in CPP_FORMS for f in args.forms) and not os.access(args.binary, os.X_OK):
        p.error(f"{args.binary} not found: build it first (cmake --build {args.build} --target "
                "trainpack_bench_gpu) or pass --build or --binary")
    return args


def common(args):
    return ["--device", args.device, "--steps", str(args.steps), "--warmup", str(args.warmup),
            "--runs", str(args.runs), "--batches", str(args.batches), "--batch-size",
            str(args.batch_size), "--threads", str(args.threads)]


def parse_fields(text):
    """`a=1 b=2 reason=rest of the line` -> dict; reason= takes the rest of the line."""
    fields = {}
    while text:
        if text.startswith("reason="):
            fields["reason"] = text[len("reason="):]
            break
        token, _, text = text.partition(" ")
        key, _, value = token.partition("=")
        fields[key] = value
    return fields


def environment():
    """The environment of every side: what trainpack::configure_runtime sets in the C++ side
    (1 OpenBLAS thread, OpenMP threads that wait passively, glibc malloc thresholds that keep the
    activation buffers in the heap), so that the Python side runs with the same settings. On the
    CPU they matter (measured here: the bare Python loop 7 times slower without them); on a GPU
    the host's share of the step is small, but it gets the same."""
    env = dict(os.environ)
    env.update({
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_WAIT_POLICY": "PASSIVE",
        "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
        "MALLOC_TRIM_THRESHOLD_": str(512 << 20),
    })
    return env


def run_side(name, cmd, timeout, verbose):
    """Runs one side; returns (lines [(kind, fields)], exit status or None, seconds, output)."""
    print(f"run.py: {name}: {' '.join(shlex.quote(c) for c in cmd)}", flush=True)
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, env=environment(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              timeout=timeout if timeout and timeout > 0 else None)
        output, status = proc.stdout, proc.returncode
    except subprocess.TimeoutExpired as e:
        output = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (
            e.stdout or "")
        status = None
    seconds = time.monotonic() - start
    lines = []
    for line in output.splitlines():
        m = LINE.match(line)
        if m:
            lines.append((m.group(1), parse_fields(m.group(2))))
    if verbose or status != 0:
        sys.stdout.write(output if output.endswith("\n") or not output else output + "\n")
    return lines, status, seconds, output


def median(values):
    return statistics.median(values) if values else None


def main():
    args = parse_args()
    started = time.monotonic()

    def time_left(later):
        """The timeout of the next side: what --deadline leaves, less the share kept for the
        sides after it (`later`), so that one side that hangs does not take the others' time."""
        if not args.deadline:
            return None
        keep = sum(SHARE[name] for name in later) * args.deadline
        return max(1.0, args.deadline - (time.monotonic() - started) - keep)

    forms = {f: {"label": LABELS[f], "runs_ms": [], "final_loss": [], "notes": []}
             for f in args.forms}
    info = []
    failed = False
    sides = []
    cpp = [f for f in args.forms if f in CPP_FORMS]
    if cpp:
        sides.append(("C++", [args.binary] + common(args) + ["--forms", ",".join(cpp)], cpp))
    for form in (f for f in args.forms if f in PY_FORMS):
        sides.append((form, [args.python, os.path.join(HERE, "python_loops.py")] + common(args) +
                      ["--forms", form], [form]))

    print(f"trainpack_bench_gpu: device {args.device}, batch {args.batch_size}, {args.batches} "
          f"batches cycled, {args.warmup} warm-up + {args.steps} timed steps, {args.runs} run(s) "
          f"per form{' (smoke: measures nothing)' if args.smoke else ''}", flush=True)
    for i, (name, cmd, side_forms) in enumerate(sides):
        later = [side[0] for side in sides[i + 1:]]
        lines, status, seconds, _ = run_side(name, cmd, time_left(later), args.verbose)
        for kind, fields in lines:
            form = fields.get("form")
            if kind == "info":
                info.append(fields)
            elif form not in forms:
                continue
            elif kind == "result":
                forms[form]["runs_ms"].append(float(fields["ms_per_step"]))
                loss = float(fields.get("final_loss", "nan"))
                forms[form]["final_loss"].append(loss if loss == loss else None)  # NaN: None
                if "graph" in fields:
                    forms[form]["graph"] = fields["graph"]
                    if fields["graph"] == "eager_fallback":
                        note = "ran eager: no CUDA graph on this device"
                    else:
                        note = (f"run {fields.get('run')}: graph {fields['graph']}, captures "
                                f"{fields.get('captures')}, replays {fields.get('replays')}")
                    if note not in forms[form]["notes"]:
                        forms[form]["notes"].append(note)
            elif kind == "skip":
                forms[form]["skipped"] = fields.get("reason", "skipped")
            elif kind == "error":
                forms[form]["notes"].append(f"run {fields.get('run')}: {fields.get('reason')}")
        if status is None:
            why = f"timed out after {seconds:.0f} s (--deadline)"
        elif status != 0:
            why = f"exit status {status}"
        else:
            why = None
        for form in side_forms:
            entry = forms[form]
            if "skipped" in entry:
                if form not in args.may_skip:
                    entry["failed"] = f"skipped, and not in --may-skip: {entry['skipped']}"
                    failed = True
                continue
            if len(entry["runs_ms"]) < args.runs or why:
                entry["failed"] = why or f"{len(entry['runs_ms'])} of {args.runs} runs reported"
                failed = True
        print(f"run.py: {name}: {seconds:.1f} s" + (f", {why}" if why else ""), flush=True)

    for entry in forms.values():
        entry["median_ms"] = median(entry["runs_ms"])

    # The table.
    print()
    width = max(len(LABELS[f]) for f in forms) + 2
    print(f"{'form':17s} {'what':{width}s} {'median ms/step':>14s}   runs (ms/step)")
    for form, entry in forms.items():
        if "skipped" in entry:
            status = f"{'FAILED: ' if 'failed' in entry else ''}skipped: {entry['skipped']}"
            print(f"{form:17s} {entry['label']:{width}s} {'-':>14s}   {status}")
            continue
        runs = " ".join(f"{v:.4f}" for v in entry["runs_ms"])
        med = f"{entry['median_ms']:.4f}" if entry["median_ms"] is not None else "-"
        extra = []
        if "failed" in entry:
            extra.append(f"FAILED: {entry['failed']}")
        extra += entry["notes"]
        print(f"{form:17s} {entry['label']:{width}s} {med:>14s}   {runs}" +
              (f"   ({'; '.join(extra)})" if extra else ""))

    # The goals.
    print()
    goals = []
    for name, num, den, op, target, says in GOALS:
        goal = {"name": name, "ratio": f"{num} / {den}", "op": op, "target": target,
                "says": says, "value": None, "met": None}
        missing = [f for f in (num, den) if f not in forms or forms[f]["median_ms"] is None]
        if missing:
            reasons = []
            for f in missing:
                if f not in forms:
                    reasons.append(f"{f} not run (--forms)")
                elif "skipped" in forms[f]:
                    reasons.append(f"{f} skipped")
                else:
                    reasons.append(f"{f} failed")
            goal["why_na"] = ", ".join(reasons)
        elif forms[num].get("graph") == "eager_fallback" or forms[den].get("graph") == \
                "eager_fallback":
            goal["value"] = forms[num]["median_ms"] / forms[den]["median_ms"]
            goal["why_na"] = "the graph form ran eager (no CUDA graph on this device)"
        else:
            value = forms[num]["median_ms"] / forms[den]["median_ms"]
            goal["value"] = value
            goal["met"] = value >= target if op == ">=" else value <= target
        goals.append(goal)
        shown = f"{goal['value']:.4f}" if goal["value"] is not None else "-"
        verdict = ("met" if goal["met"] else "NOT met") if goal["met"] is not None else \
            f"n/a ({goal['why_na']})"
        print(f"{name:25s} = {shown:>8s}  (goal {op} {target}: {says}): {verdict}")
    if args.device != "cuda":
        print(f"(device {args.device}: these are not GPU figures)")
    if args.smoke:
        print("(smoke run: a few steps, the figures measure nothing)")

    if args.json:
        summary = {
            "device": args.device,
            "smoke": args.smoke,
            "steps": args.steps,
            "warmup": args.warmup,
            "runs": args.runs,
            "batches": args.batches,
            "batch_size": args.batch_size,
            "threads": args.threads,
            "host": platform.node(),
            "info": info,
            "forms": forms,
            "goals": goals,
            "failed": failed,
            "seconds": time.monotonic() - started,
        }
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
            f.write("\n")
        print(f"run.py: summary written to {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
