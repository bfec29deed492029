"""How much of fifo's wait a scheduler that knew every job's length could remove (issue #20).

Replays the Philly weeks twice per week and load: `fifo`, and `fair` where each job's
priority inside its team is its own length (shortest first, in bins of a factor of two,
from the trace's duration × GPUs). Nothing else changes: guarantees, fair share, reclaim
and service levels act as in the default `fair`. The scheduler never has this information
(a job's length is unknown until it ends), so this is a bound for the ratio of average
waits, not a policy: it says how far ordering by attained service is from ordering by
length.

    python bench/wait_bound.py --trace ../shared/data/philly/philly.csv --loads 0.8 \\
        [--gap 60] [--jobs 2] > bench/results/trace_philly/issue20_round5/bound.txt
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trace_compare import WEEKS, scopes  # noqa: E402

from gpupool.scheduler.types import Policy  # noqa: E402
from gpupool.sim.engine import simulate  # noqa: E402
from gpupool.sim.metrics import waits  # noqa: E402
from gpupool.sim.trace import read_trace, trace_scenario  # noqa: E402


def by_length(scen):
    """`scen` with each workload's priority = minus the log2 bin of its GPU-minutes."""
    out = []
    for sw in scen.workloads:
        gpu_s = sw.duration * sw.workload.request.total_gpu_milli / 1000
        prio = -min(30, int(math.log2(max(gpu_s, 60.0) / 60.0)))
        w = dataclasses.replace(sw.workload, priority=prio)
        out.append(dataclasses.replace(sw, workload=w))
    return dataclasses.replace(scen, workloads=out)


def one(trace: str, week: str, load: float, gap: float) -> tuple[str, float, float, float]:
    """(week, fifo, fair, fair knowing lengths): average waits in seconds."""
    jobs = scopes(read_trace(trace), [f"w{week}"])[f"w{week}"]
    out = []
    for policy, oracle in (("fifo", False), ("fair", False), ("fair", True)):
        scen = trace_scenario(jobs, policy=Policy(policy), load=load, checkpointing=True)
        scen.min_cycle_gap_s = gap
        w = waits(simulate(by_length(scen) if oracle else scen))
        out.append(sum(w.values()) / len(w))
    return (week, *out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", required=True)
    ap.add_argument("--loads", default="0.8")
    ap.add_argument("--gap", type=float, default=60.0)
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    for load in (float(x) for x in a.loads.split(",")):
        with ProcessPoolExecutor(a.jobs) as pool:
            n = len(WEEKS)
            rows = sorted(pool.map(one, [a.trace] * n, WEEKS, [load] * n, [a.gap] * n))
        print(f"load {load:g}, gap {a.gap:g} s: average wait, hours (÷ fifo)")
        print("| week | fifo | fair | fair knowing lengths |")
        print("|---|---|---|---|")
        logs = [0.0, 0.0]
        for week, fifo, fair, known in rows:
            logs[0] += math.log(fair / fifo)
            logs[1] += math.log(known / fifo)
            print(
                f"| {week} | {fifo / 3600:.2f} | {fair / 3600:.2f} ({fair / fifo:.2f}) "
                f"| {known / 3600:.2f} ({known / fifo:.2f}) |"
            )
        n = len(rows)
        print(
            f"| geometric mean | | **{math.exp(logs[0] / n):.3f}** "
            f"| **{math.exp(logs[1] / n):.3f}** |"
        )


if __name__ == "__main__":
    main()
