#!/usr/bin/python3
"""PyTorch's own DistributedDataParallel on the model of examples/fashion_mnist: the reference
side of trainpack_bench_distributed (bench/distributed/run.py launches both).

Run under torchrun by Debian's python3-torch (Gloo on CPU), e.g.

    torchrun --standalone --nproc_per_node 2 --redirects 9:1 --tee 9:1 \
        bench/distributed/ddp_reference.py --steps 200

(`--redirects 9:1 --tee 9:1` works around torchrun's crash on Python 3.11, pytorch#92319.)

What it does, matched to trainpack's side (bench/distributed/main.cpp):
- the model of examples/fashion_mnist/model.h layer for layer: three blocks of conv 3x3 (no
  bias, padding 1) -> BatchNorm2d -> ReLU -> max-pool 2 (32, 64, 128 channels), then linear
  1152 -> 10; 104,426 parameters. Initial values differ (each library draws its own), shapes and
  flops do not;
- SGD with Nesterov momentum 0.9 and weight decay (the main job's defaults: lr 0.1, 1e-4), mean
  cross-entropy;
- DDP's defaults (25 MiB buckets, buffers broadcast from rank 0 at every forward);
- the data: the first `--batch-size * K` training images of Fashion-MNIST (or random tensors of
  its shape with --random), batched once in memory before anything is timed. Global batch i is
  images [i*G, (i+1)*G); rank r trains on its r-th part of G / WORLD_SIZE images;
- `--threads` intra-op threads per rank (torch.set_num_threads).

Timing: time.perf_counter() at the end of every step (after optimizer.step()); a step's time is
the difference to the previous step's end, so every step's whole loop (batch lookup, forward,
backward with DDP's all-reduce, update) is inside. The first `--warmup` steps are left out. Rank
0 prints, as its last line,
    result side=ddp ranks=<W> global_batch=<G> steps=<N> median_step_ms=<m> mean_step_ms=<a>
        cpu_ms_per_step=<c>
(on one line; cpu_ms_per_step: rank 0's process CPU time, every thread, over the timed steps,
per step: less sensitive than the wall time to other work on the machine).
"""

import argparse
import gzip
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"


class Net(nn.Module):
    """examples/fashion_mnist/model.h's NetImpl."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(64)
        self.conv3 = nn.Conv2d(64, 128, 3, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(128)
        self.fc = nn.Linear(128 * 3 * 3, 10)

    def forward(self, x):
        if x.dim() == 3:
            x = x.unsqueeze(1)
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        x = F.max_pool2d(F.relu(self.bn3(self.conv3(x))), 2)
        return self.fc(x.flatten(1))


def read_idx(path, header, count, item_bytes):
    """`count` items of `item_bytes` bytes after a `header`-byte header, as a uint8 tensor."""
    with gzip.open(path, "rb") as f:
        f.read(header)
        raw = f.read(count * item_bytes)
    if len(raw) != count * item_bytes:
        sys.exit(f"ddp_reference: {path} holds fewer than {count} items")
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8)


def load_images(args, count):
    """Images float [count, 28, 28] in [0, 1] and labels int64 [count]."""
    if args.random:
        g = torch.Generator().manual_seed(args.seed)
        return (torch.rand(count, 28, 28, generator=g),
                torch.randint(0, 10, (count,), generator=g))
    images = read_idx(os.path.join(args.data, "train-images-idx3-ubyte.gz"), 16, count, 784)
    labels = read_idx(os.path.join(args.data, "train-labels-idx1-ubyte.gz"), 8, count, 1)
    return images.view(count, 28, 28).float().div_(255), labels.long()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--batch-size", type=int, default=128, help="global batch (all ranks)")
    p.add_argument("--steps", type=int, default=200, help="timed steps")
    p.add_argument("--warmup", type=int, default=20, help="steps run before the timed ones")
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--data", default=FASHION_MNIST_DIR, help="Fashion-MNIST's .gz files")
    p.add_argument("--random", action="store_true", help="random tensors instead of the data")
    p.add_argument("--batches", type=int, default=64,
                   help="distinct global batches held in memory, cycled through")
    args = p.parse_args()

    for name in ("RANK", "WORLD_SIZE"):
        if name not in os.environ:
            sys.exit(f"ddp_reference: {name} is not set; run under torchrun")
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.batch_size % world != 0:
        sys.exit(f"ddp_reference: --batch-size {args.batch_size} is not a multiple of the "
                 f"{world} ranks")
    local = args.batch_size // world

    images, labels = load_images(args, args.batches * args.batch_size)
    batches = []
    for i in range(args.batches):
        start = i * args.batch_size + rank * local
        batches.append((images[start:start + local].contiguous(),
                        labels[start:start + local].contiguous()))
    del images, labels

    torch.manual_seed(args.seed)
    model = nn.parallel.DistributedDataParallel(Net())
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, nesterov=True,
                                weight_decay=args.weight_decay)
    model.train()

    total = args.warmup + args.steps
    ends = []
    dist.barrier()
    last = time.perf_counter()
    cpu_start = None
    for step in range(total):
        if step == args.warmup:
            cpu_start = time.process_time()
        x, y = batches[step % len(batches)]
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        now = time.perf_counter()
        ends.append(now - last)
        last = now
    cpu_ms = (time.process_time() - cpu_start) * 1e3 / args.steps
    times = ends[args.warmup:]
    dist.barrier()
    if rank == 0:
        median = statistics.median(times) * 1e3
        mean = statistics.fmean(times) * 1e3
        print(f"ddp_reference: {world} ranks x {local} images, {args.threads} intra-op "
              f"thread(s) per rank, {args.steps} timed steps after {args.warmup}; "
              f"last loss {loss.item():.4f}", flush=True)
        print(f"result side=ddp ranks={world} global_batch={args.batch_size} "
              f"steps={args.steps} median_step_ms={median:.3f} mean_step_ms={mean:.3f} "
              f"cpu_ms_per_step={cpu_ms:.3f}",
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
