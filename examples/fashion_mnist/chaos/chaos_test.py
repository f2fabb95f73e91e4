#!/usr/bin/env python3
"""The main job's chaos suite: fashion_mnist runs on a bad day, checked from the outside.

    python3 chaos_test.py --binary build/examples/fashion_mnist/fashion_mnist [--workdir DIR]
                          [--fault-lib LIB] [--trials N] [--seed S] [--only NAME[,NAME...]]
                          [--list] [--keep]

Each scenario (--list names them) starts the job with small flags on a log directory, does one
bad thing to it (a signal at a random moment, a full disk, a read-only directory, a second run,
corrupt or foreign checkpoints, bad hyper.txt values, planted links and FIFOs, a write that fails
or kills the job, a file size limit, a pipe or terminal that goes away, closed standard
descriptors, the console's stop) and ends with the invariant check of invariants.py: the best
copy and every checkpoint that was valid before the run are still there and unchanged, or
replaced by a newer valid one; stats.json is valid JSON; every event file is a valid TFRecord
stream; the exit code tells the truth (0 only when every checkpoint and statistic the run
promised was written). Each scenario prints PASS, FAIL (with the reasons and the job's output)
or SKIP.

The short mode (the default, what ctest runs) does one trial of each; --trials N (or the
environment's TRAINPACK_CHAOS_TRIALS) repeats the randomised scenarios N times. The seed is
printed first: --seed S (or TRAINPACK_CHAOS_SEED) replays a run's random choices.
Needs only the Python 3 standard library. The disk-full and read-only scenarios mount a tmpfs or
a read-only bind mount, so they run as root only and are skipped otherwise. The scenarios that
make one particular write fail preload the fault library (--fault-lib, built from
tests/tools/fault_injection.c as the target trainpack_fault_injection) and are skipped without it.
"""

import argparse
import os
import random
import shutil
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import scenarios  # noqa: E402
from job import Job  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--binary", required=True, help="the fashion_mnist program")
    parser.add_argument("--workdir", default=None, help="scratch directory (default: a new one "
                        "under $TMPDIR); emptied first")
    parser.add_argument("--fault-lib", default=None,
                        help="the LD_PRELOAD fault library (tests/tools/fault_injection.c); the "
                        "scenarios that need it are skipped without it")
    parser.add_argument("--trials", type=int,
                        default=int(os.environ.get("TRAINPACK_CHAOS_TRIALS", "1")),
                        help="trials of each randomised scenario (default 1, or "
                        "$TRAINPACK_CHAOS_TRIALS)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of the random choices (default: random, or "
                        "$TRAINPACK_CHAOS_SEED); printed at the start")
    parser.add_argument("--only", action="append", default=[],
                        help="run only these scenarios (repeat or separate with commas)")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directories")
    args = parser.parse_args()

    if args.list:
        for name, fn in scenarios.ALL.items():
            print(f"{name:22} {fn.__doc__.strip().splitlines()[0]}")
        return 0
    only = [n for item in args.only for n in item.split(",") if n]
    unknown = [n for n in only if n not in scenarios.ALL]
    if unknown:
        print(f"chaos: unknown scenario(s) {', '.join(unknown)}; --list names them",
              file=sys.stderr)
        return 2
    seed = args.seed
    if seed is None and os.environ.get("TRAINPACK_CHAOS_SEED"):
        seed = int(os.environ["TRAINPACK_CHAOS_SEED"])
    if seed is None:
        seed = random.SystemRandom().randrange(1 << 31)
    binary = os.path.abspath(args.binary)
    fault_lib = None
    if args.fault_lib:
        # A path that is wrong must not turn those scenarios into silent skips.
        fault_lib = os.path.abspath(args.fault_lib)
        if not os.path.isfile(fault_lib):
            print(f"chaos: --fault-lib {fault_lib}: no such file", file=sys.stderr)
            return 2
    workdir = os.path.abspath(args.workdir or os.path.join(
        os.environ.get("TMPDIR", "/tmp"), f"trainpack-chaos-{os.getpid()}"))
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    print(f"chaos: seed {seed} (replay with --seed {seed} --trials {args.trials}"
          f"{''.join(' --only ' + n for n in only)}); workdir {workdir}", flush=True)

    job = Job(binary, workdir, fault_lib=fault_lib)
    names = only or list(scenarios.ALL)
    results = []
    start = time.monotonic()
    for name in names:
        fn = scenarios.ALL[name]
        for trial in range(args.trials if name in scenarios.RANDOMISED else 1):
            label = name if trial == 0 else f"{name}#{trial + 1}"
            rng = random.Random(f"{seed}:{name}:{trial}")
            case = scenarios.Case(label, job, os.path.join(workdir, label), rng)
            t0 = time.monotonic()
            try:
                fn(case)
                status = case.status()
            except scenarios.Skip as e:
                status = "SKIP"
                case.note(str(e))
            except Exception:  # noqa: BLE001 - a bug of the suite is a failure of the case
                case.fail("the scenario raised:\n" + traceback.format_exc())
                status = "FAIL"
            finally:
                case.cleanup()
            results.append((label, status))
            print(f"{status} {label} ({time.monotonic() - t0:.1f} s)", flush=True)
            for line in case.report_lines(status):
                print(f"    {line}", flush=True)
            if status != "FAIL" and not args.keep:
                shutil.rmtree(case.dir, ignore_errors=True)
                for extra in case.extra_dirs:
                    shutil.rmtree(extra, ignore_errors=True)

    failed = [label for label, status in results if status == "FAIL"]
    skipped = [label for label, status in results if status == "SKIP"]
    print(f"chaos: {len(results) - len(failed) - len(skipped)} passed, {len(failed)} failed, "
          f"{len(skipped)} skipped in {time.monotonic() - start:.0f} s (seed {seed})")
    if failed:
        print(f"chaos: FAILED: {' '.join(failed)}; replay one with --seed {seed} --only NAME")
        return 1
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
