#!/usr/bin/env python3
"""Prints what Python's torch.load reads from a trainpack checkpoint, in the form of
trainpack_checkpoint_digest (tests/tools/checkpoint_digest.cpp): one line per entry, sorted by
name, "<name> <dtype> [<shape>] <bytes> crc32=<hex>" (zlib's CRC-32 of the elements in row-major
order), so that the two can be compared as text. It loads with weights_only=True, the loader
that refuses anything but tensors and plain containers (the default from PyTorch 2.6 on).

    python3 torch_load_digest.py DIR/model-600.data
"""
import sys
import zlib

import torch


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    state = torch.load(sys.argv[1], weights_only=True)
    if not isinstance(state, dict):
        print(f"{sys.argv[1]}: torch.load gave a {type(state).__name__}, not a dict", file=sys.stderr)
        return 1
    for name in sorted(state):
        t = state[name].contiguous().reshape(-1)
        data = bytes(t.view(torch.uint8).tolist()) if t.numel() else b""
        dtype = str(state[name].dtype).replace("torch.", "")
        shape = ", ".join(str(d) for d in state[name].shape)
        print(f"{name} {dtype} [{shape}] {len(data)} crc32={zlib.crc32(data) & 0xffffffff:08x}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
