#!/usr/bin/env python3
"""The torchvision side of trainpack_bench_input --pipeline (bench/input/run.py runs both):
torchvision's ImageFolder read by a DataLoader, with the same augmentation as trainpack's side.

    python3 bench/input/torchvision_reference.py --root DIR [--workers N] [--batch 64]
        [--size 32] [--crop 28] [--grey] [--passes 2]

What runs, matched to trainpack's side:
- datasets.ImageFolder(DIR) (every file opened with PIL and converted to RGB by its default
  loader), transforms.Compose([Grayscale() with --grey, Resize(size) (PIL bilinear, which is
  antialiased), RandomCrop(crop), RandomHorizontalFlip(), ToTensor(), Normalize(mean 0.5,
  std 0.25 per channel)]);
- DataLoader(batch_size=batch, shuffle=True (a generator seeded with 1), num_workers=N,
  persistent_workers when N > 0, drop_last=False); DataLoader sets 1 intra-op thread in each
  worker, and this process sets 1 too (what trainpack's side sets), so --workers 0 (the main
  process decodes) runs on one thread;
- the main process only iterates: one whole pass untimed (the warm-up: the workers start, the
  files enter the page cache), then --passes timed passes (the workers persist between them).

Prints one JSON line:
  {"side": "torchvision", "threads": N, "images": n, "seconds": s, "images_per_s": n / s, ...}
Exit status: 0 measured; 2 bad flags; 3 torch or torchvision cannot be imported (the message says
which and how to install them: the comparison is skipped).
"""

import argparse
import json
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description="torchvision ImageFolder + DataLoader throughput")
    p.add_argument("--root", required=True, help="root/<class>/<image>")
    p.add_argument("--workers", type=int, default=1, help="DataLoader workers (0: this process)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=32, help="shorter side after resizing")
    p.add_argument("--crop", type=int, default=28, help="side of the square random crop")
    p.add_argument("--grey", action="store_true", help="one grey channel (default: RGB)")
    p.add_argument("--passes", type=int, default=2, help="timed passes after the warm-up pass")
    args = p.parse_args()
    if args.workers < 0:
        p.error("--workers must be >= 0")
    for name in ("batch", "size", "crop", "passes"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be positive")
    if args.crop > args.size:
        p.error("--crop is larger than --size")
    return args


def main():
    args = parse_args()
    try:
        import torch
        from torch.utils.data import DataLoader
        from torchvision import datasets, transforms
    except ImportError as e:
        print(f"torchvision_reference.py: skipped: {e} (Debian: apt-get install python3-torch "
              f"python3-torchvision; or run with a python3 that has them: {sys.executable} "
              "has not)", file=sys.stderr)
        sys.exit(3)

    torch.set_num_threads(1)
    channels = 1 if args.grey else 3
    interpolation = transforms.InterpolationMode.BILINEAR
    try:  # torchvision >= 0.13 takes antialias; on PIL images it is always antialiased
        resize = transforms.Resize(args.size, interpolation=interpolation, antialias=True)
    except TypeError:
        resize = transforms.Resize(args.size, interpolation=interpolation)
    steps = ([transforms.Grayscale()] if args.grey else []) + [
        resize,
        transforms.RandomCrop(args.crop),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize([0.5] * channels, [0.25] * channels),
    ]
    dataset = datasets.ImageFolder(args.root, transform=transforms.Compose(steps))
    generator = torch.Generator()
    generator.manual_seed(1)
    loader = DataLoader(dataset, batch_size=args.batch, shuffle=True, num_workers=args.workers,
                        persistent_workers=args.workers > 0, drop_last=False,
                        generator=generator)

    shape = []

    def one_pass():
        images = 0
        for image, _label in loader:
            if not shape:
                shape.extend(image.shape)
            images += image.shape[0]
        return images

    one_pass()  # warm-up
    images = 0
    start = time.perf_counter()
    for _ in range(args.passes):
        images += one_pass()
    seconds = time.perf_counter() - start
    print(json.dumps({
        "side": "torchvision", "threads": args.workers, "images": images,
        "seconds": round(seconds, 4), "images_per_s": round(images / seconds, 2),
        "passes": args.passes, "files": len(dataset), "batch": args.batch, "batch_shape": shape,
        "size": args.size, "crop": args.crop, "grey": args.grey,
        "torch": torch.__version__, "torchvision": __import__("torchvision").__version__,
    }), flush=True)


if __name__ == "__main__":
    main()
