"""Philly weeks: geometric mean over weeks of each tagged `fair` run's avg wait ÷ fifo's, and
the lowest guarantee kept, per load, from a `trace_compare.py --out` folder (issue 32).

    python3 bench/philly_ratio.py bench/results/trace_philly/issue32_quality/km
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def main() -> None:
    out = Path(sys.argv[1])
    runs = {}
    for f in sorted(out.glob("w*.json")):
        d = json.loads(f.read_text())
        week = d["scope"]
        runs[(week, d["load"], d["policy"], d.get("tag") or "")] = d["metrics"]
    ratios: dict[tuple[float, str], list[float]] = defaultdict(list)
    kept: dict[tuple[float, str], list[float]] = defaultdict(list)
    for (week, load, policy, tag), m in runs.items():
        fifo = runs.get((week, load, "fifo", ""))
        if policy == "fifo" or fifo is None:
            continue
        ratios[(load, tag)].append(m["avg_wait"] / fifo["avg_wait"])
        kept[(load, tag)].append(
            min(v["guarantee_kept"] for v in m["per_tenant"].values() if v["guarantee_kept"])
        )
    for (load, tag), rs in sorted(ratios.items()):
        print(
            f"load {load:g} {tag or 'base'}: weeks {len(rs)}, wait/fifo "
            f"{statistics.geometric_mean(rs):.3f}, lowest kept {min(kept[(load, tag)]):.3f}"
        )


if __name__ == "__main__":
    main()
