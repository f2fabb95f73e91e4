#!/usr/bin/env python3
"""trainpack_bench_distributed's driver: trainpack's DataParallelTrainer against PyTorch's own
DistributedDataParallel, 2 ranks each on Gloo, side by side in one run.

    python3 bench/distributed/run.py --build build          # or: cmake --build build --target
                                                            #     run_bench_distributed

Every round runs, in an order that rotates from round to round (so that neither side always
runs first, or right after the other):
  trainpack  torchrun ... --no_python build/bench/trainpack_bench_distributed: DataParallelTrainer,
             2 ranks x 1 intra-op thread, the global batch split over the ranks;
  ddp        torchrun ... bench/distributed/ddp_reference.py (Debian's python3-torch): the same
             model, optimizer, data and batches with DistributedDataParallel;
  single     build/bench/trainpack_bench_distributed --single: SimpleTrainer in one process at
             the same global batch, with as many intra-op threads as the two ranks have together;
and once per round the all-reduce alone (trainpack's process group, 2 ranks, tensors of the
gradient's size and larger, and the trainer's per-step stop vote), which gives the
communication's share of the step (comm_share: gradient + vote, each alone, over trainpack's
median step; not overlapped with anything, so an upper bound of what the step waits for) and its
cost per byte.

Every side gets the same environment: OMP_NUM_THREADS, OPENBLAS_NUM_THREADS=1,
OMP_WAIT_POLICY=PASSIVE and glibc malloc thresholds equal to those trainpack::configure_runtime
sets (MALLOC_MMAP_THRESHOLD_=32 MiB, MALLOC_TRIM_THRESHOLD_=512 MiB), so that the Python side's
allocator does not return and re-fault its activation buffers at every step while trainpack's
keeps them.

Each side prints the median of its per-step times (warm-up steps left out) and its rank 0's CPU
time per step (every thread of the process: Gloo's too); the figures below are medians over the
rounds. The last line is
    trainpack_over_ddp=<median over the rounds of (trainpack's median step / ddp's median step)>
(goal: at most 1.0). `--smoke` runs one short round (a few steps: checks that everything runs,
measures nothing).
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RESULT = re.compile(r"result side=(\w+) (.*)$")


def parse_args():
    p = argparse.ArgumentParser(description="trainpack DataParallelTrainer vs PyTorch DDP")
    p.add_argument("--build", default="build", help="the CMake build directory")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=200, help="timed steps per side and round")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps before them")
    p.add_argument("--batch-size", type=int, default=128, help="global batch")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    p.add_argument("--random", action="store_true",
                   help="random tensors of Fashion-MNIST's shape instead of the data")
    p.add_argument("--torchrun", default=shutil.which("torchrun") or "/usr/bin/torchrun")
    p.add_argument("--smoke", action="store_true", help="one round of a few steps")
    p.add_argument("--hosts", type=int, default=0,
                   help="run the ranks on this many test hosts (network namespaces on one "
                        "bridge, tests/multihost/netns_hosts.py; root), one rank each; 0: all on "
                        "this machine's loopback")
    p.add_argument("--reps", type=int, default=0,
                   help="all-reduce repetitions per size (0: the binary's 50; 5 with --smoke "
                        "or --rate-mbit, where one of 16 MB takes seconds)")
    p.add_argument("--rate-mbit", type=float, default=0,
                   help="with --hosts: limit host1's link to this rate each way (tc tbf)")
    p.add_argument("--verbose", action="store_true", help="show every side's whole output")
    args = p.parse_args()
    if args.smoke:
        args.rounds, args.steps, args.warmup = 1, 4, 2
    if not args.reps and (args.smoke or args.rate_mbit):
        args.reps = 5
    for name in ("rounds", "steps", "warmup", "batch_size", "ranks", "threads"):
        if getattr(args, name) < (0 if name == "warmup" else 1):
            p.error(f"--{name.replace('_', '-')} must be positive")
    if args.hosts:
        if args.hosts < 2:
            p.error("--hosts must be at least 2 (or 0: one machine)")
        args.ranks = args.hosts
    elif args.rate_mbit:
        p.error("--rate-mbit needs --hosts")
    if args.batch_size % args.ranks != 0:
        p.error(f"--batch-size {args.batch_size} is not a multiple of --ranks {args.ranks}")
    args.binary = os.path.join(args.build, "bench", "trainpack_bench_distributed")
    if not os.access(args.binary, os.X_OK):
        p.error(f"{args.binary} not found: build it first (cmake --build {args.build} "
                "--target trainpack_bench_distributed) or pass --build")
    if not os.access(args.torchrun, os.X_OK):
        p.error("torchrun not found (Debian: apt-get install python3-torch) or pass --torchrun")
    return args


def environment(threads):
    env = dict(os.environ)
    env.update({
        "OMP_NUM_THREADS": str(threads),
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_WAIT_POLICY": "PASSIVE",
        "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
        "MALLOC_TRIM_THRESHOLD_": str(512 << 20),
    })
    return env


def torchrun(args):
    # --redirects/--tee: Debian's Python 3.11 crashes in Std.from_str without them (pytorch#92319).
    # --monitor_interval: the agent polls its workers every 5 s by default, which every launch
    # would wait for at its end.
    return [args.torchrun, "--standalone", "--nproc_per_node", str(args.ranks), "--redirects",
            "9:1", "--tee", "9:1", "--monitor_interval", "0.1"]


def common(args):
    out = ["--batch-size", str(args.batch_size), "--steps", str(args.steps), "--warmup",
           str(args.warmup)]
    return out + (["--random"] if args.random else [])


# With --hosts: the test hosts (netns_hosts.Hosts), and a counter for the rendezvous ids.
HOSTS = {"hosts": None, "launches": 0}
RDZV_PORT = 29400


class _Finished:
    def __init__(self, returncode, stdout):
        self.returncode, self.stdout = returncode, stdout


def _run_on_hosts(cmd, env):
    """`cmd` (torchrun's arguments after torchrun's own path, then the program) on every test
    host at once, one agent each with the c10d rendezvous on host0; the outputs joined, host0's
    first, and the worst exit status."""
    hosts = HOSTS["hosts"]
    HOSTS["launches"] += 1
    launch = [cmd[0], "--nnodes", str(hosts.count), "--nproc_per_node", "1", "--rdzv_backend",
              "c10d", "--rdzv_endpoint", f"{hosts.address(0)}:{RDZV_PORT}", "--rdzv_id",
              f"bench{HOSTS['launches']}"] + cmd[cmd.index("--redirects"):]
    env = dict(env, GLOO_SOCKET_IFNAME="eth0", USE_LIBUV="0")
    procs = [hosts.popen(k, launch, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True) for k in range(hosts.count)]
    outputs = [p.communicate()[0] for p in procs]
    return _Finished(max(p.returncode for p in procs), "".join(outputs))


def run(name, cmd, env, verbose):
    """Runs `cmd`; returns {side: {key: value}} from its `result side=...` lines."""
    for attempt in range(2):
        start = time.monotonic()
        if HOSTS["hosts"] is not None and cmd[1:2] == ["--standalone"]:
            proc = _run_on_hosts(cmd, env)
        else:
            proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True)
        seconds = time.monotonic() - start
        # torchrun's own rendezvous (before any worker starts) sometimes loses its store on a
        # loaded machine; that launch measured nothing, so it is tried once more.
        if proc.returncode == 0 or "RendezvousConnectionError" not in proc.stdout:
            break
        print(f"run.py: {name}: torchrun's rendezvous failed before the workers started; "
              "launching again", flush=True)
    if verbose or proc.returncode != 0:
        sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        sys.exit(f"run.py: {name} failed (exit status {proc.returncode}): {' '.join(cmd)}")
    results = {}
    for line in proc.stdout.splitlines():
        m = RESULT.search(line)
        if m:
            fields = dict(kv.split("=", 1) for kv in m.group(2).split())
            results.setdefault(m.group(1), []).append(fields)
    if not results:
        sys.stdout.write(proc.stdout)
        sys.exit(f"run.py: {name} printed no result line: {' '.join(cmd)}")
    return results, seconds


def main():
    args = parse_args()
    if not args.hosts:
        measure(args)
        return
    sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "multihost"))
    import netns_hosts
    why = netns_hosts.unavailable()
    if why:
        sys.exit(f"run.py: --hosts: {why}")
    with netns_hosts.Hosts(args.hosts) as hosts:
        HOSTS["hosts"] = hosts
        if args.rate_mbit:
            hosts.shape(1, args.rate_mbit)
        print(f"{args.hosts} test hosts, one rank each, Gloo over their interfaces"
              + (f"; host1's link limited to {args.rate_mbit:g} Mbit/s each way (tc tbf)"
                 if args.rate_mbit else "; no limit on the links"))
        measure(args)


def measure(args):
    per_rank = args.batch_size // args.ranks
    single_threads = args.ranks * args.threads
    print(f"trainpack_bench_distributed: global batch {args.batch_size} ({args.ranks} ranks x "
          f"{per_rank}, {args.threads} intra-op thread(s) per rank; single process "
          f"{single_threads} threads), {args.steps} timed steps after {args.warmup} per side, "
          f"{args.rounds} round(s), data: {'random' if args.random else 'Fashion-MNIST'}")
    print("load average at start: %.2f %.2f %.2f" % os.getloadavg(), flush=True)

    sides = {
        "trainpack": (torchrun(args) + ["--no_python", args.binary] + common(args) +
                      ["--threads", str(args.threads)], environment(args.threads)),
        "ddp": (torchrun(args) + [os.path.join(HERE, "ddp_reference.py")] + common(args) +
                ["--threads", str(args.threads)], environment(args.threads)),
        "single": ([args.binary, "--single"] + common(args) +
                   ["--threads", str(single_threads)], environment(single_threads)),
        "allreduce": (torchrun(args) + ["--no_python", args.binary, "--allreduce"] +
                      (["--reps", str(args.reps)] if args.reps else []),
                      environment(args.threads)),
    }
    # Across hosts the single process is no peer of anything: left out.
    order = ["trainpack", "ddp", "allreduce"] if args.hosts else ["trainpack", "ddp", "single",
                                                                  "allreduce"]
    steps = {"trainpack": [], "ddp": [], "single": []}
    cpu = {"trainpack": [], "ddp": [], "single": []}  # rank 0's CPU ms per step
    ratios = []
    allreduce = {}  # floats -> [median ms per round]
    allreduce_min = {}  # floats -> [min ms per round]
    vote = []  # the trainer's per-step stop vote alone, median ms per round
    for r in range(args.rounds):
        rotated = order[r % len(order):] + order[:r % len(order)]
        round_ms = {}
        for name in rotated:
            cmd, env = sides[name]
            results, seconds = run(name, cmd, env, args.verbose)
            if name == "allreduce":
                for fields in results["allreduce"]:
                    allreduce.setdefault(int(fields["floats"]), []).append(
                        float(fields["median_ms"]))
                    allreduce_min.setdefault(int(fields["floats"]), []).append(
                        float(fields["min_ms"]))
                vote.append(float(results["vote"][0]["median_ms"]))
                print(f"round {r}: allreduce " + ", ".join(
                    f"{f['floats']} floats {float(f['median_ms']):.3f} ms"
                    for f in results["allreduce"]) + f" ({seconds:.1f} s)", flush=True)
                continue
            fields = results[name][0]
            ms = float(fields["median_step_ms"])
            round_ms[name] = ms
            steps[name].append(ms)
            cpu[name].append(float(fields["cpu_ms_per_step"]))
            print(f"round {r}: {name:9s} median {ms:8.3f} ms/step, mean "
                  f"{float(fields['mean_step_ms']):8.3f}, CPU {cpu[name][-1]:8.3f} ms/step "
                  f"({seconds:.1f} s, load "
                  f"{os.getloadavg()[0]:.2f})", flush=True)
        ratios.append(round_ms["trainpack"] / round_ms["ddp"])

    med = {name: statistics.median(v) for name, v in steps.items() if v}
    print()
    print(f"{'side':34s} {'median ms/step':>15s} {'CPU ms/step':>12s} {'rounds (ms/step)':>30s}")
    labels = {"trainpack": f"trainpack DataParallel {args.ranks}x{per_rank}",
              "ddp": f"PyTorch DDP {args.ranks}x{per_rank}",
              "single": f"trainpack single process x{args.batch_size}"}
    for name in [n for n in ("trainpack", "ddp", "single") if n in med]:
        print(f"{labels[name]:34s} {med[name]:15.3f} {statistics.median(cpu[name]):12.3f} "
              f"{' '.join('%.3f' % v for v in steps[name]):>30s}")
    print("per-round trainpack/ddp: " + " ".join("%.4f" % v for v in ratios))

    sizes = sorted(allreduce)
    grad = sizes[0]  # the binary measures the gradient's size first and smallest
    ar = {n: statistics.median(v) for n, v in allreduce.items()}
    ar_min = {n: min(v) for n, v in allreduce_min.items()}
    for n in sizes:
        print(f"all-reduce {n:>9d} floats ({4 * n / 1e6:7.3f} MB): median {ar[n]:8.3f} ms, "
              f"min {ar_min[n]:8.3f} ms")
    if len(sizes) >= 2:
        lo, hi = sizes[-2], sizes[-1]
        for label, t in (("medians", ar), ("minima", ar_min)):
            per_mb = (t[hi] - t[lo]) / (4 * (hi - lo) / 1e6)
            print(f"all-reduce cost per byte (slope between the two largest sizes, {label}): "
                  f"{per_mb:.3f} ms/MB ({1e3 / per_mb:.0f} MB/s of tensor all-reduced)")
    vote_ms = statistics.median(vote)
    print(f"trainpack's per-step stop vote (all-reduce of {args.ranks} int64): median "
          f"{vote_ms:.3f} ms")
    # trainpack's step communicates the gradient and the vote; DDP's the gradient (and the
    # buffers' broadcast, as trainpack's).
    share = {"trainpack": (ar[grad] + vote_ms) / med["trainpack"], "ddp": ar[grad] / med["ddp"]}
    print(f"communication alone: gradient all-reduce ({grad} floats) {ar[grad]:.3f} ms + vote "
          f"{vote_ms:.3f} ms = {100 * share['trainpack']:.1f}% of trainpack's step; gradient "
          f"{100 * share['ddp']:.1f}% of DDP's")
    if "single" in med:
        print(f"single process over trainpack DataParallel (step time): "
              f"{med['single'] / med['trainpack']:.4f}")
    print("load average at end: %.2f %.2f %.2f" % os.getloadavg())
    print(f"comm_share={share['trainpack']:.4f}")
    if "single" in med:
        print(f"single_over_dp={med['single'] / med['trainpack']:.4f}")
    print(f"trainpack_over_ddp={statistics.median(ratios):.4f}")


if __name__ == "__main__":
    main()
