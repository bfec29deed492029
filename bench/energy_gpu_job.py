"""The GPU-burning job of bench/energy_gpu_check.py: bf16 matrix products on the granted GPU
for --seconds, then one JSON line (tag "burn": products done, wall-clock start and end).

Without PyTorch or a GPU (the check's --dry-run) it sleeps for --seconds instead.
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--size", type=int, default=8192)
    a = ap.parse_args()
    t0 = time.time()
    done, err = 0, None
    try:
        import torch

        x = torch.randn(a.size, a.size, device="cuda", dtype=torch.bfloat16)
        y = torch.randn(a.size, a.size, device="cuda", dtype=torch.bfloat16)
        torch.cuda.synchronize()
        t0 = time.time()
        while time.time() - t0 < a.seconds:
            for _ in range(20):
                torch.mm(x, y)
            torch.cuda.synchronize()
            done += 20
    except Exception as e:  # noqa: BLE001 - no GPU here (dry run): sleep instead
        err = f"{type(e).__name__}: {e}"[:300]
        time.sleep(max(0.0, a.seconds - (time.time() - t0)))
    t1 = time.time()
    tflops = 2 * a.size**3 * done / max(t1 - t0, 1e-9) / 1e12
    print(
        json.dumps(
            {"tag": "burn", "products": done, "t0": t0, "t1": t1, "tflops": round(tflops, 1)}
            | ({"error": err} if err else {})
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
