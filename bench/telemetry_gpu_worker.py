"""A small PyTorch GPU process for the real-GPU telemetry check (not a benchmark by itself).

Allocates `--mem-gib` GiB on the GPU, then runs bf16 matrix products for `--seconds`,
writing `--ready` once the memory is held and the first product ran.
"""

from __future__ import annotations

import argparse
import pathlib
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mem-gib", type=float, default=2.0)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--ready", required=True)
    args = ap.parse_args()
    hold = torch.empty(int(args.mem_gib * 2**30), dtype=torch.uint8, device="cuda")
    a = torch.randn(args.size, args.size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(args.size, args.size, device="cuda", dtype=torch.bfloat16)
    c = a @ b
    torch.cuda.synchronize()
    pathlib.Path(args.ready).write_text(str(hold.numel()))
    end = time.time() + args.seconds
    while time.time() < end:
        for _ in range(20):
            c = a @ b
        torch.cuda.synchronize()
    print(float(c[0, 0]))


if __name__ == "__main__":
    main()
