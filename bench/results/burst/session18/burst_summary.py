"""Sum up `burst_one.py`'s JSON files as `bench/burst_sweep.py` prints them: per (gap,
variant) the geometric mean over seeds of avg wait ÷ fifo's (fifo of the same gap, untagged),
the lowest guarantee kept (each seed's), preemptions, GPU-h lost, wide wait, and CPU seconds.

    python3 bench/results/burst/session18/burst_summary.py DIR
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def main() -> None:
    runs = {}
    for p in sorted(Path(sys.argv[1]).glob("burst-*.json")):
        d = json.loads(p.read_text())
        key = d["name"] + ("-" + d["tag"] if d["tag"] else "")
        runs[(d["gap"], key, d["seed"])] = d
    groups = defaultdict(list)
    for gap, key, seed in runs:
        groups[(gap, key)].append(seed)
    for (gap, key), seeds in sorted(groups.items()):
        seeds = sorted(seeds)
        rs = [runs[(gap, key, s)] for s in seeds]
        fifo = [runs.get((gap, "fifo", s)) for s in seeds]
        ratio = ""
        if all(fifo):
            r = [a["wait"] / f["wait"] for a, f in zip(rs, fifo, strict=True)]
            ratio = (
                f"wait/fifo {statistics.geometric_mean(r):.3f} "
                f"({', '.join(f'{x:.2f}' for x in r)}), "
            )
        kept = ", ".join(f"{x['kept']:.3f}" for x in rs)
        cpu = ", ".join(f"{x['cpu_s']:.0f}" for x in rs)
        print(
            f"gap {gap:g} {key} seeds {','.join(map(str, seeds))}: {ratio}kept "
            f"{min(x['kept'] for x in rs):.3f} ({kept}), "
            f"preemptions {sum(x['pre'] for x in rs)}, lost GPU-h "
            f"{sum(x['lost'] for x in rs):.0f}, wide wait h "
            f"{statistics.mean(x['wide_wait'] for x in rs) / 3600:.2f}, avg wait s "
            f"{statistics.mean(x['wait'] for x in rs):.0f}, CPU s "
            f"{cpu}"
        )


if __name__ == "__main__":
    main()
