"""Reading the main job's --trace-samples files (Python standard library only): which training
images each rank read, so that a test can check that every epoch's images, as read for the steps
the run kept, are the training set once each, across restarts and world-size changes.

Each process writes samples-rank<R>-pid<P>.txt: a header "# rank R world W started <unix ns>",
then "<pass> <position> <index>" for every image it read (position counts the rank's images in the
pass from 0; after a resume, from where it continues). The rank's images at positions
[k*b, (k+1)*b) of pass p (b its part of the global batch) are its part of global step
p * batches_per_pass + k + 1, where batches_per_pass is the training images over the global batch
(an epoch is one pass when --steps-per-epoch is that number).

A process reads ahead (the input queue), and a restarted group reads again from its checkpoint,
so several processes may have read for one step; the run kept the training of the latest
attempt that started at or before it (every later one resumed after it).
"""

import glob
import os


class TraceError(Exception):
    """A trace file or a set of them that cannot be read as described above."""


class Attempt:
    """The trace files (--trace-samples) of one start of the job's ranks: {rank: [(pass, position,
    index)]}, its world size, and when it started."""

    def __init__(self, world, started):
        self.world = world
        self.started = started
        self.rows = {}

    def first_step(self, batch, batches_per_pass):
        """The first global step this attempt read for (its resume step + 1)."""
        rank_batch = batch // self.world
        return min(p * batches_per_pass + pos // rank_batch + 1
                   for rows in self.rows.values() for p, pos, _ in rows)

    def batch_of(self, step, batch, batches_per_pass):
        """The indices the ranks of this attempt read for global step `step` (1-based), by rank."""
        rank_batch = batch // self.world
        p, k = divmod(step - 1, batches_per_pass)
        return {r: [i for q, pos, i in rows if q == p and pos // rank_batch == k]
                for r, rows in self.rows.items()}


def read_traces(trace_dir):
    """The attempts of a job's ranks, oldest first: each process's trace file, grouped by start (a
    new attempt begins when a rank repeats, the world size changes or 5 s separate the starts)."""
    files = []
    for path in glob.glob(os.path.join(trace_dir, "samples-rank*-pid*.txt")):
        with open(path, encoding="utf-8") as f:
            header = f.readline().split()
            if header[:2] != ["#", "rank"] or header[3] != "world" or header[5] != "started":
                raise TraceError(f"{path}: not a trace file (header {header})")
            rows = [tuple(int(x) for x in line.split()) for line in f if line.strip()]
        files.append((int(header[6]), int(header[2]), int(header[4]), rows, path))
    files.sort()
    attempts = []
    for started, rank, world, rows, path in files:
        current = attempts[-1] if attempts else None
        if (current is None or rank in current.rows or world != current.world or
                started - current.started > 5e9):
            current = Attempt(world, started)
            attempts.append(current)
        current.rows[rank] = rows
    for a in attempts:
        if sorted(a.rows) != list(range(a.world)):
            raise TraceError(f"an attempt of world size {a.world} has the trace files of ranks "
                             f"{sorted(a.rows)}: the starts could not be told apart")
    return attempts


def committed_batches(attempts, steps, batch, batches_per_pass):
    """For each global step 1..`steps`: the attempt whose training of it the run kept (the latest
    one that started before it: every later one resumed after it) and the indices its ranks read
    for it, by rank."""
    out = {}
    for step in range(1, steps + 1):
        kept = [a for a in attempts if a.first_step(batch, batches_per_pass) <= step]
        if not kept:
            raise TraceError(f"no attempt read the data of step {step}")
        out[step] = (kept[-1], kept[-1].batch_of(step, batch, batches_per_pass))
    return out


def read_run(trace_dir, steps, batch, batches_per_pass):
    """The attempts of `trace_dir` and, for each global step 1..`steps`, the kept one and what its
    ranks read (committed_batches)."""
    attempts = read_traces(trace_dir)
    return attempts, committed_batches(attempts, steps, batch, batches_per_pass)


def global_batches(kept):
    """{step: sorted indices of the step's global batch} of committed_batches' answer."""
    return {step: sorted(i for indices in by_rank.values() for i in indices)
            for step, (_, by_rank) in kept.items()}


def partition_problem(kept, batch, images, expected=None):
    """What is wrong with the steps the run kept (committed_batches' answer over whole passes), or
    None: each rank read its part of the global batch (batch / world images), no image twice in a
    step, each pass's images the set 0..images-1 once each, and, given `expected` ({step: sorted
    indices}, e.g. global_batches of an uninterrupted run), each step's global batch that one."""
    for step in sorted(kept):
        attempt, by_rank = kept[step]
        read_by = {}
        for rank, indices in sorted(by_rank.items()):
            if len(indices) != batch // attempt.world:
                return (f"step {step}: rank {rank} of {attempt.world} read {len(indices)} images, "
                        f"expected {batch // attempt.world}")
            for i in indices:
                if i in read_by:
                    return (f"step {step}: image {i} read by ranks {read_by[i]} and {rank} of "
                            f"{attempt.world}")
                read_by[i] = rank
        if expected is not None and sorted(read_by) != expected[step]:
            return (f"step {step} (world size {attempt.world}) read other images than the "
                    "uninterrupted run's step")
    batches_per_pass = images // batch
    for p in range(len(kept) // batches_per_pass):
        seen = [i for step in range(p * batches_per_pass + 1, (p + 1) * batches_per_pass + 1)
                for indices in kept[step][1].values() for i in indices]
        if sorted(seen) != list(range(images)):
            return (f"pass {p} (steps {p * batches_per_pass + 1}-{(p + 1) * batches_per_pass}): "
                    f"the ranks read {len(set(seen))} distinct images of {images} "
                    f"({len(seen) - len(set(seen))} more than once)")
    return None
