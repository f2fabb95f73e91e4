#!/usr/bin/env python3
"""The Python side of trainpack_bench_gpu (bench/gpu/main.cpp describes the benchmark; run.py
runs both sides): the main job's model in PyTorch, trained by hand and by Lightning.

    python3 bench/gpu/python_loops.py [--device cuda|cpu] [--steps 600] [--warmup 100] [--runs 2]
        [--forms python_bare,lightning] [--batches 64] [--batch-size 128] [--threads T]

Forms:
  python_bare  the loop a user writes: forward, F.cross_entropy, zero_grad, backward, step;
  lightning    Lightning 2.x with its defaults: a LightningModule whose training_step returns the
               loss and calls self.log("loss", loss, prog_bar=True), Trainer(max_steps=...) with
               nothing else changed (progress bar, logger, checkpointing, model summary on),
               except default_root_dir, a scratch directory. Skipped, with a `skip` line, when
               neither `lightning` nor `pytorch_lightning` can be imported.
The model is examples/fashion_mnist/model.h's NetImpl (the same layers, the same channels-last
activations); the initial weights are PyTorch's own (same shapes, not the same values as the C++
side). The optimizer: torch.optim.SGD(lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-4)
with PyTorch's defaults (on CUDA its multi-tensor `foreach` implementation).

The data and the timing are the C++ side's: the same random batches (generated with the same
seed by the same generator on the CPU, then moved to the device) cycled through; the clock runs
around the steps warmup+1 .. warmup+steps after torch.cuda.synchronize() at both ends. Lightning:
one epoch of warmup+steps batches (a dataset that cycles the batches), the clock started and
stopped by a callback's on_train_batch_end (after the optimizer step), so the epoch's start and
end (checkpoint, logger flush) are outside. Output lines, as the C++ side's:
    result form=<form> run=<k> ms_per_step=<ms> steps=<N> warmup=<W> device=<d> final_loss=<l>
    skip form=<form> reason=<why>
    error form=<form> run=<k> reason=<what>          (and exit status 1)
"""

import argparse
import os
import sys
import tempfile
import time
import traceback

FORMS = ("python_bare", "lightning")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--forms", default=",".join(FORMS))
    p.add_argument("--batches", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--threads", type=int, default=0,
                   help="intra-op threads (0: one per hardware thread, as the C++ side)")
    args = p.parse_args()
    args.forms = args.forms.split(",")
    for form in args.forms:
        if form not in FORMS:
            p.error(f"--forms: unknown form {form!r} (known: {', '.join(FORMS)})")
    for name in ("steps", "runs", "batches", "batch_size"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if args.warmup < 0 or args.threads < 0:
        p.error("--warmup and --threads must not be negative")
    return args


def emit(line):
    print(line, flush=True)


def one_line(text):
    return " ".join(str(text).split())


def build(torch):
    nn, F = torch.nn, torch.nn.functional

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

        @staticmethod
        def channels_last_images(x):
            # The C++ model's trick: one channel, so the same bytes with channels-last strides.
            n, h, w = x.shape[0], x.shape[-2], x.shape[-1]
            return x.reshape(n, 1, h, w).contiguous().as_strided((n, 1, h, w), (h * w, 1, w, 1))

        def forward(self, x):
            x = self.conv1(self.channels_last_images(x))
            x = F.max_pool2d(F.relu(self.bn1(x)), 2)
            x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
            x = F.max_pool2d(F.relu(self.bn3(self.conv3(x))), 2)
            return self.fc(x.flatten(1))

    return Net


def make_optimizer(torch, params):
    return torch.optim.SGD(params, lr=0.01, momentum=0.9, nesterov=True, weight_decay=1e-4)


def make_batches(torch, args, device):
    # main.cpp's make_batches: the same generator, seed and draws, on the CPU.
    torch.manual_seed(1234)
    images = torch.rand(args.batches, args.batch_size, 28, 28)
    labels = torch.randint(10, (args.batches, args.batch_size), dtype=torch.long)
    return [(images[i].to(device), labels[i].to(device)) for i in range(args.batches)]


def synchronize(torch, device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_python_bare(torch, Net, args, device, batches):
    F = torch.nn.functional
    torch.manual_seed(42)
    net = Net().to(device)
    net.train()
    opt = make_optimizer(torch, net.parameters())
    loss = None

    def step(i):
        nonlocal loss
        x, y = batches[i % len(batches)]
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    for i in range(args.warmup):
        step(i)
    synchronize(torch, device)
    start = time.perf_counter()
    for i in range(args.warmup, args.warmup + args.steps):
        step(i)
    synchronize(torch, device)
    seconds = time.perf_counter() - start
    return 1e3 * seconds / args.steps, float(loss.item())


def import_lightning():
    """(module, None) or (None, why not)."""
    errors = []
    for name in ("lightning", "pytorch_lightning"):
        try:
            return __import__(name), None
        except Exception as e:  # an ImportError, or a broken install
            errors.append(f"{name}: {one_line(e)}")
    return None, "neither lightning nor pytorch_lightning can be imported (" + "; ".join(
        errors) + ")"


def run_lightning(torch, L, Net, args, device, batches):
    F = torch.nn.functional
    total = args.warmup + args.steps

    class Batches(torch.utils.data.Dataset):
        """One epoch of `total` batches cycling through the device batches."""

        def __len__(self):
            return total

        def __getitem__(self, i):
            return batches[i % len(batches)]

    class LitNet(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = Net()

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = F.cross_entropy(self.net(x), y)
            self.log("loss", loss, prog_bar=True)
            return loss

        def configure_optimizers(self):
            return make_optimizer(torch, self.parameters())

    class Window(L.Callback):
        """The clock around batches warmup+1 .. warmup+steps (after their optimizer step)."""

        def __init__(self):
            self.done = 0
            self.start = self.seconds = None
            self.loss = float("nan")

        def _start(self):
            synchronize(torch, device)
            self.start = time.perf_counter()

        def on_train_epoch_start(self, trainer, pl_module):
            if args.warmup == 0:
                self._start()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self.done += 1
            if self.done == args.warmup:
                self._start()
            if self.done == total:
                synchronize(torch, device)
                self.seconds = time.perf_counter() - self.start
                loss = outputs["loss"] if isinstance(outputs, dict) else outputs
                self.loss = float(loss.item())

    torch.manual_seed(42)
    window = Window()
    with tempfile.TemporaryDirectory(prefix="trainpack_bench_gpu_lightning.") as root:
        trainer = L.Trainer(accelerator="gpu" if device.type == "cuda" else "cpu", devices=1,
                            max_steps=total, callbacks=[window],
                            default_root_dir=root)
        loader = torch.utils.data.DataLoader(Batches(), batch_size=None, shuffle=False)
        trainer.fit(LitNet(), train_dataloaders=loader)
    if window.seconds is None:
        raise RuntimeError(f"training ended after {window.done} of the {total} batches")
    return 1e3 * window.seconds / args.steps, window.loss


def main():
    args = parse_args()
    try:
        import torch
    except Exception as e:
        for form in args.forms:
            emit(f"skip form={form} reason=Python's torch cannot be imported by "
                 f"{sys.executable} ({one_line(e)})")
        return 0
    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("python_loops.py: --device cuda: torch.cuda.is_available() is false; use --device "
              "cpu", file=sys.stderr)
        return 2
    device = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")
    Net = build(torch)
    batches = make_batches(torch, args, device)
    emit(f"info side=python device={device} torch={torch.__version__} "
         f"intra_op_threads={torch.get_num_threads()}")

    L = None
    if "lightning" in args.forms:
        L, why_not = import_lightning()
        if L is None:
            emit(f"skip form=lightning reason={why_not}")
            args.forms = [f for f in args.forms if f != "lightning"]
        else:
            emit(f"info side=lightning module={L.__name__} version={L.__version__}")

    status = 0
    for run in range(1, args.runs + 1):
        for form in args.forms:
            try:
                if form == "python_bare":
                    ms, loss = run_python_bare(torch, Net, args, device, batches)
                else:
                    ms, loss = run_lightning(torch, L, Net, args, device, batches)
                emit(f"result form={form} run={run} ms_per_step={ms:.4f} steps={args.steps} "
                     f"warmup={args.warmup} device={device} final_loss={loss:.4f}")
            except Exception as e:
                traceback.print_exc(file=sys.stdout)
                emit(f"error form={form} run={run} reason={one_line(repr(e))}")
                status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
