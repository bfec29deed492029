"""Where a real NVML sample spends its CPU: per pynvml function, mean CPU and wall microseconds.

    python bench/telemetry_nvml_calls.py --samples 200 [--json out.json]

Wraps every `nvml*` function of pynvml with timers, then takes `--samples` snapshots
through `NVMLSource` (the same calls the sampler makes), as at 1 Hz (a manual clock moves
1 s per snapshot, so the source's rate limits apply; the snapshots run back to back).
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections import defaultdict
from pathlib import Path

import pynvml

from gpupool.clock import ManualClock
from gpupool.telemetry.nvml import NVMLSource


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=200)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    cpu: dict[str, float] = defaultdict(float)
    wall: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)

    def timed(name, fn):
        @functools.wraps(fn)
        def wrapper(*a, **kw):
            c0, w0 = time.process_time(), time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                cpu[name] += time.process_time() - c0
                wall[name] += time.perf_counter() - w0
                calls[name] += 1

        return wrapper

    for name in dir(pynvml):
        if name.startswith("nvml") and callable(getattr(pynvml, name)):
            setattr(pynvml, name, timed(name, getattr(pynvml, name)))
    clock = ManualClock(time.time())  # moved 1 s per snapshot: the source's rate limits as at 1 Hz
    src = NVMLSource.open(module=pynvml, clock=clock)
    snap = src.snapshot()
    cpu.clear(), wall.clear(), calls.clear()
    c0 = time.process_time()
    for _ in range(args.samples):
        clock.advance(1.0)
        src.snapshot()
    total = time.process_time() - c0
    src.close()
    n = args.samples
    rows = sorted(
        (
            {
                "function": k,
                "calls_per_sample": round(calls[k] / n, 2),
                "cpu_us_per_sample": round(cpu[k] / n * 1e6, 1),
                "wall_us_per_sample": round(wall[k] / n * 1e6, 1),
            }
            for k in calls
        ),
        key=lambda r: -r["cpu_us_per_sample"],
    )
    result = {
        "gpus": len(snap.gpus),
        "processes": len(snap.processes),
        "samples": n,
        "cpu_ms_per_snapshot": round(total / n * 1e3, 3),
        "functions": rows,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
