"""Session 19: the burst replays of a batch folder (or several) as one table: per variant, the
geometric mean over seeds of avg wait / fifo's (NAME's fifo: `fifo`, or `fifonw` for the
variants named *nw), the ratio of summed waits, per-seed ratios, the lowest guarantee kept of
any tenant on any seed, preemptions and GPU-hours lost over the seeds.

    python3 bench/results/burst/session19/summarize.py DIR [DIR...]
"""

from __future__ import annotations

import glob
import json
import statistics
import sys


def main() -> None:
    runs: dict[tuple[str, int], dict] = {}
    for d in sys.argv[1:]:
        for f in glob.glob(f"{d}/res/burst-*.json"):
            with open(f, encoding="utf-8") as fh:
                r = json.load(fh)
            runs[(r["name"], r["seed"])] = r
    names = sorted({n for n, _ in runs if not n.startswith("fifo")})
    for n in names:
        fifo = "fifonw" if n.endswith("nw") else "fifo"
        seeds = sorted(s for m, s in runs if m == n and (fifo, s) in runs)
        if not seeds:
            continue
        rs = [runs[(n, s)]["wait"] / runs[(fifo, s)]["wait"] for s in seeds]
        tot = sum(runs[(n, s)]["wait"] for s in seeds) / sum(runs[(fifo, s)]["wait"] for s in seeds)
        geo = statistics.geometric_mean(rs)
        print(
            f"{n:10s} seeds {seeds[0]}-{seeds[-1]}: wait/fifo geo {geo:.3f}"
            f" sum {tot:.3f} ({' '.join(f'{r:.2f}' for r in rs)}); lowest kept"
            f" {min(runs[(n, s)]['kept'] for s in seeds):.3f}; preemptions"
            f" {sum(runs[(n, s)]['pre'] for s in seeds)}; lost GPU-h"
            f" {sum(runs[(n, s)]['lost'] for s in seeds):.0f}; max CPU s"
            f" {max(runs[(n, s)]['cpu_s'] for s in seeds):.0f}"
        )


if __name__ == "__main__":
    main()
