"""fifo vs fair on every busy week of the Philly trace, not just one (issue 7).

One week decides little: the replay of a busy week is chaotic (a small change in one cycle
moves which jobs wait), so a single week can flatter or wrong a policy. This replays each
week from 2017-10-02 (the five largest teams of that week, cluster sized for the given
offered load, the trace defaults otherwise) under each policy and prints a Markdown table:
average wait, the lowest guarantee attainment over the teams, preemptions and GPU
utilization, plus the geometric mean over the weeks of fifo's average wait ÷ each policy's.

    python bench/trace_weeks.py --trace ../shared/data/philly/philly.csv --load 1.2

`--set KEY=VALUE` overrides SchedulerConfig fields of the non-fifo policies (as in
bench/trace_compare.py); `--checkpointing` makes every job declare checkpointing (a
preempted job resumes where it stopped; issue #20). To compare with an older scheduler,
run the same command with PYTHONPATH pointing at a worktree of that commit.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import statistics
import time

from trace_compare import config_overrides

from gpupool.scheduler.types import Policy
from gpupool.sim.engine import simulate
from gpupool.sim.metrics import compute_metrics
from gpupool.sim.trace import filter_jobs, read_trace, trace_scenario

FIRST = datetime.date(2017, 10, 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default="../shared/data/philly/philly.csv")
    ap.add_argument("--load", type=float, default=1.2)
    ap.add_argument("--weeks", type=int, default=9)
    ap.add_argument("--policies", default="fifo,fair")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--checkpointing", action="store_true", help="every job declares checkpointing")
    a = ap.parse_args()
    overrides = config_overrides(a.set)
    pols = a.policies.split(",")
    jobs = read_trace(a.trace)
    ratios: dict[str, list[float]] = {p: [] for p in pols if p != "fifo"}
    cols = " | ".join(f"{p} avg wait h | {p} min guarantee | {p} preemptions" for p in pols)
    print(f"| week | GPUs | {cols} |\n|" + "---|" * (2 + 3 * len(pols)))
    c0 = time.process_time()
    for k in range(a.weeks):
        start = FIRST + datetime.timedelta(days=7 * k)
        week = filter_jobs(jobs, str(start), str(start + datetime.timedelta(days=7)), "top:5")
        cells, avg, gpus = [], {}, 0
        for pol in pols:
            scen = trace_scenario(
                week, policy=Policy(pol), load=a.load, checkpointing=a.checkpointing
            )
            if overrides and pol != "fifo":
                scen.config = dataclasses.replace(scen.config, **overrides)
            gpus = scen.capacity_milli // 1000
            m = compute_metrics(simulate(scen))
            att = [v["guarantee_attainment"] for v in m["per_tenant"].values()]
            att = [x for x in att if x]
            avg[pol] = m["avg_wait"] / 3600
            cells.append(
                f"{avg[pol]:.2f} | {100 * min(att):.1f}% | {m['preemptions']}"
                if att
                else f"{avg[pol]:.2f} | – | {m['preemptions']}"
            )
        for p in ratios:
            if "fifo" in avg and avg[p] > 0:
                ratios[p].append(avg["fifo"] / avg[p])
        print(f"| {start} | {gpus} | " + " | ".join(cells) + " |", flush=True)
    for p, r in ratios.items():
        if r:
            g = statistics.geometric_mean(r)
            print(f"\ngeometric mean of fifo avg wait ÷ {p} avg wait: {g:.2f}")
    print(f"\nCPU {time.process_time() - c0:.0f} s")


if __name__ == "__main__":
    main()
