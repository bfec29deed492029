"""One burst replay, as session 18's `burst_one.py` (same scenario and metrics), with one more
key in VARIANT: `window=none` replays with no pending window (every waiting workload passed to
each cycle, as the server does) and `window=N` with a window of N (session 19).

    PYTHONPATH=src python3 bench/results/burst/session19/burst_one.py VARIANT SEED GAP OUTDIR [TAG]
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path.cwd() / "bench"))

from trace_compare import config_overrides, lost_gpu_hours, wide_metrics  # noqa: E402

from gpupool.scheduler.types import Policy  # noqa: E402
from gpupool.sim.burst import burst_jobs  # noqa: E402
from gpupool.sim.engine import simulate  # noqa: E402
from gpupool.sim.metrics import compute_metrics  # noqa: E402
from gpupool.sim.trace import trace_scenario  # noqa: E402


def main() -> None:
    variant, seed, gap, out = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    tag = sys.argv[5] if len(sys.argv) > 5 else ""
    t0, c0 = time.perf_counter(), time.process_time()
    name, _, sets = variant.partition(":")
    pairs = [p for p in sets.split(";") if p]
    window = [p.partition("=")[2] for p in pairs if p.startswith("window=")]
    pairs = [p for p in pairs if not p.startswith("window=")]
    policy = Policy.FIFO if name.startswith("fifo") else Policy.FAIR
    scen = trace_scenario(burst_jobs(seed), policy=policy, load=1.2, checkpointing=True)
    scen.min_cycle_gap_s = gap
    if window:
        scen.pending_window = None if window[-1] == "none" else int(window[-1])
    if pairs:
        scen.config = dataclasses.replace(scen.config, **config_overrides(pairs))
    r = simulate(scen)
    m = compute_metrics(r)
    kept = [v["guarantee_kept"] for v in m["per_tenant"].values() if v["guarantee_kept"]]
    rec = {
        "variant": variant,
        "name": name,
        "seed": seed,
        "gap": gap,
        "tag": tag,
        "wait": m["avg_wait"],
        "kept": min(kept),
        "pre": m["preemptions"],
        "lost": lost_gpu_hours(r),
        "wide_wait": wide_metrics(r)["wide"]["avg_wait"] or 0.0,
        "pending_window": scen.pending_window,
        "cpu_s": round(time.process_time() - c0, 2),
        "wall_s": round(time.perf_counter() - t0, 2),
        "machine": f"{platform.node()} ({os.cpu_count()} CPUs, {platform.python_version()})",
    }
    p = Path(out) / f"burst-gap{gap:g}-{name}{'-' + tag if tag else ''}-seed{seed}.json"
    p.write_text(json.dumps(rec))
    print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
