"""One burst replay as `bench/burst_sweep.py`'s `one` (same scenario and metrics), written to
a JSON file with its CPU and wall seconds, so that a batch of replays can run as separate
processes (xargs -P) and be summed up by `burst_summary.py` (session 18).

    PYTHONPATH=src python3 bench/results/burst/session18/burst_one.py VARIANT SEED GAP OUTDIR [TAG]

VARIANT is NAME or NAME:KEY=VALUE;KEY=VALUE as for burst_sweep.py; fifo is NAME `fifo`.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path.cwd() / "bench"))

from burst_sweep import one  # noqa: E402


def main() -> None:
    variant, seed, gap, out = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    tag = sys.argv[5] if len(sys.argv) > 5 else ""
    t0, c0 = time.perf_counter(), time.process_time()
    name, s, m = one(variant, seed, gap, 1.2)
    rec = {
        "variant": variant,
        "name": name,
        "seed": s,
        "gap": gap,
        "tag": tag,
        **m,
        "cpu_s": round(time.process_time() - c0, 2),
        "wall_s": round(time.perf_counter() - t0, 2),
        "machine": f"{platform.node()} ({os.cpu_count()} CPUs, {platform.python_version()})",
    }
    p = Path(out) / f"burst-gap{gap:g}-{name}{'-' + tag if tag else ''}-seed{seed}.json"
    p.write_text(json.dumps(rec))
    print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
