"""Wait breakdown of diag_jobs.py outputs (session18/diag_seed1.md).

    python3 bench/results/burst/session18/diag_breakdown.py DIR SEED VARIANT [VARIANT...]

Wait of a job = finished - submit - run_time (gpupool.sim.metrics.waits), split into
before its first start (first_start - submit) and after (requeues: finished - first_start -
run_time). Totals in job-hours and as a share of the mean over all jobs (s per job).
"""

from __future__ import annotations

import gzip
import json
import random
import sys
from collections import defaultdict
from pathlib import Path

from gpupool.sim.burst import BurstShape


def storms(seed: int) -> list[tuple[float, float]]:
    """The busy periods of burst_jobs(seed): the same rng draws as gpupool.sim.burst."""
    s = BurstShape()
    rng = random.Random(seed)
    span = s.hours * 3600.0
    tenant_w = [1.0 / (k + 1) for k in range(s.tenants)]
    for _ in range(s.users):
        rng.choices(range(s.tenants), weights=tenant_w)
        rng.paretovariate(1.2)
    st = sorted(rng.uniform(0, span - s.storm_s) for _ in range(s.storms))
    return [(a, a + s.storm_s) for a in st]


def load(d: str, name: str, seed: int) -> dict:
    with gzip.open(Path(d) / f"{name}-seed{seed}-gap2.json.gz", "rt") as f:
        res = json.load(f)
    cols = res["cols"]
    res["jobs"] = [dict(zip(cols, r, strict=True)) for r in res["rows"]]
    for j in res["jobs"]:
        if j["state"] != "succeeded" or j["finished"] is None:
            j["wait"] = None
            continue
        j["wait"] = max(0.0, j["finished"] - j["submit"] - j["run_time"])
        j["pre_wait"] = j["first_start"] - j["submit"]
        j["post_wait"] = j["wait"] - j["pre_wait"]
    return res


def len_class(j: dict) -> str:
    d = j["duration"]
    return "<2m" if d < 120 else "2-10m" if d < 600 else "10-60m" if d < 3600 else ">60m"


def gpu_class(j: dict) -> str:
    g = j["gpus"] or 0
    return "1" if g <= 1 else "2-8" if g <= 8 else "16-64 (gang)"


def period_class(st):
    def f(j: dict) -> str:
        for a, b in st:
            if a <= j["submit"] < b:
                return "busy"
        return "rest"

    return f


def table(runs: dict[str, dict], key, title: str, order=None) -> None:
    names = list(runs)
    base = names[0]
    n_all = {v: sum(1 for j in r["jobs"] if j["wait"] is not None) for v, r in runs.items()}
    agg = {v: defaultdict(lambda: [0, 0.0, 0.0, 0.0, 0]) for v in names}
    for v, r in runs.items():
        for j in r["jobs"]:
            if j["wait"] is None:
                continue
            a = agg[v][key(j)]
            a[0] += 1
            a[1] += j["wait"]
            a[2] += j["pre_wait"]
            a[3] += j["post_wait"]
            a[4] += j["preemptions"]
    keys = order or sorted(set().union(*[agg[v].keys() for v in names]))
    print(f"\n{title}")
    hdr = "| class | jobs | " + " | ".join(
        f"{v}: s/job of mean (before+after first start) | {v} preempt." for v in names
    )
    print(hdr + " | " + " | ".join(f"{v} ÷ {base}" for v in names[1:]) + " |")
    print("|---" * (2 + 2 * len(names) + len(names) - 1) + "|")
    tot = {v: [0.0, 0.0, 0.0, 0] for v in names}
    for k in keys:
        if k not in agg[base]:
            continue
        cells = [k, str(agg[base][k][0])]
        for v in names:
            n, w, pre, post, p = agg[v][k]
            N = n_all[v]
            cells.append(
                f"{w / N:.0f} ({pre / N:.0f}+{post / N:.0f}), avg {w / max(n, 1) / 60:.1f} min"
            )
            cells.append(str(p))
            tot[v][0] += w / N
            tot[v][1] += pre / N
            tot[v][2] += post / N
            tot[v][3] += p
        for v in names[1:]:
            cells.append(f"{agg[v][k][1] / max(agg[base][k][1], 1e-9):.2f}")
        print("| " + " | ".join(cells) + " |")
    cells = ["all", str(n_all[base])]
    for v in names:
        cells.append(f"**{tot[v][0]:.0f}** ({tot[v][1]:.0f}+{tot[v][2]:.0f})")
        cells.append(str(tot[v][3]))
    for v in names[1:]:
        cells.append(f"**{tot[v][0] / tot[base][0]:.3f}**")
    print("| " + " | ".join(cells) + " |")


def main() -> None:
    d, seed, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    runs = {v: load(d, v, seed) for v in names}
    st = storms(seed)
    print(f"seed {seed}: busy periods (submit, s) " + ", ".join(f"{a:.0f}-{b:.0f}" for a, b in st))
    for v, r in runs.items():
        print(
            f"  {v}: avg wait {r['avg_wait']:.0f} s, preemptions {r['preemptions']}, cpu {r['cpu_s']} s"  # noqa: E501
        )
    table(runs, len_class, "By run length (duration)", ["<2m", "2-10m", "10-60m", ">60m"])
    table(runs, gpu_class, "By GPUs", ["1", "2-8", "16-64 (gang)"])
    table(runs, lambda j: j["tenant"], "By tenant")
    table(runs, period_class(st), "By submit period", ["busy", "rest"])
    table(
        runs,
        lambda j: f"{period_class(st)(j)} {len_class(j)}",
        "Period x length",
        [f"{p} {c}" for p in ("busy", "rest") for c in ("<2m", "2-10m", "10-60m", ">60m")],
    )
    # time series: wait accrued per 10-min bucket of submit time
    print("\nWait by submit time (10-min buckets, s/job of the mean)")
    print("| from (min) | jobs | busy | " + " | ".join(names) + " |")
    print("|---" * (3 + len(names)) + "|")
    for b in range(0, 26):
        lo, hi = b * 600, (b + 1) * 600
        row = [str(b * 10)]
        jb = [j for j in runs[names[0]]["jobs"] if lo <= j["submit"] < hi and j["wait"] is not None]
        if not jb:
            continue
        row.append(str(len(jb)))
        row.append("*" if any(a < hi and lo < e for a, e in st) else "")
        for v in names:
            N = sum(1 for j in runs[v]["jobs"] if j["wait"] is not None)
            w = sum(
                j["wait"]
                for j in runs[v]["jobs"]
                if lo <= j["submit"] < hi and j["wait"] is not None
            )
            row.append(f"{w / N:.0f}")
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
