"""Node pools what-if on a real trace (issue 34 part 4): how many GPU-hours of nodes keep the
average wait within a target, bought on demand, against a fixed cluster sized for the peak.

Every job of the window runs on nodes of one pool (8 GPUs each, as Philly's servers; wider
jobs across several, `wide_request`), replayed with `gpupool.sim.autoscale.replay_pools`:
the real scheduler cycle (`fair`, no quotas: each Philly VC a tenant of equal weight, no
preemption) and the real autoscaling plan. Policies:

- `fixed-N`: N nodes up all along (N = the peak, then smaller fractions of it);
- `demand-max-M-idle-I`: nodes asked for when work waits for capacity (boot `--boot` s),
  given back after I seconds idle, at most M nodes.

For each: GPU-hours bought (booting included), cost at `--price` per GPU-hour, the share
of them used, mean/p95/max wait, and the replay's wall time. The peak is the most GPUs the
window's jobs would hold at once if each started the moment it was submitted.

    nice python3 bench/autoscale_whatif.py --trace /work/shared/data/philly/philly.csv \
        --from 14d --to 28d --out bench/results/autoscale

writes OUT/whatif-<from>-<to>.json (one entry per policy, written as each finishes), then
OUT/whatif-<from>-<to>.md (the table) and OUT/whatif-<from>-<to>.png (the plot).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path

from gpupool.domain import Request, Tenant, TenantTree, Workload
from gpupool.domain.nodepools import NodePool
from gpupool.scheduler.types import Policy, SchedulerConfig
from gpupool.sim.autoscale import PoolPolicy, replay_pools
from gpupool.sim.scenario import Scenario, SimWorkload
from gpupool.sim.trace import filter_jobs, read_trace, wide_request

NODE_GPUS = 8


def workloads(jobs) -> list[SimWorkload]:
    out = []
    for i, j in enumerate(jobs):
        g = max(1, j.gpus)
        if g > NODE_GPUS:
            nodes, per = wide_request(g, NODE_GPUS)
            req = Request(gpus=nodes * per, nodes=nodes)
        else:
            req = Request(gpus=g)
        w = Workload(f"j{i}", j.tenant, "u", req, submitted_at=j.submit, preemptible=False)
        out.append(SimWorkload(w, max(1.0, j.duration)))
    return out


def peak_gpus(work: list[SimWorkload]) -> int:
    """The most GPUs held at once if every job started when submitted."""
    ev = sorted(
        [(sw.workload.submitted_at, sw.workload.request.gpus) for sw in work]
        + [(sw.workload.submitted_at + sw.duration, -sw.workload.request.gpus) for sw in work],
        key=lambda e: (e[0], e[1]),
    )
    held = peak = 0
    for _, d in ev:
        held += d
        peak = max(peak, held)
    return peak


def pool(max_nodes: int, boot: float, idle: float, price: float) -> NodePool:
    return NodePool(
        "philly-8gpu",
        gpus=NODE_GPUS,
        gpu_model="P100",
        cpu_milli=64_000,
        memory_mib=512 * 1024,
        max_nodes=max(1, max_nodes),
        boot_seconds=boot,
        cost_per_gpu_hour=price,
        idle_seconds=idle,
        request_timeout_seconds=max(1800.0, boot),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", default="/work/shared/data/philly/philly.csv")
    ap.add_argument("--from", dest="start", default="14d")
    ap.add_argument("--to", dest="end", default="28d")
    ap.add_argument("--out", default="bench/results/autoscale")
    ap.add_argument("--boot", type=float, default=300.0, help="node boot time, s")
    ap.add_argument("--price", type=float, default=2.0, help="cost per GPU-hour")
    ap.add_argument("--fixed", default="1,0.75,0.5,0.4", help="fixed sizes, fractions of peak")
    ap.add_argument("--maxima", default="1,0.5,0.4,0.3", help="on-demand maxima, of peak")
    ap.add_argument("--idle", default="0,600,3600", help="idle timeouts, s")
    ap.add_argument("--target", type=float, default=3600.0, help="mean wait target, s")
    ap.add_argument("--only", default="", help="comma-separated policy names to run")
    ap.add_argument("--report-only", action="store_true", help="redo the table and plot")
    args = ap.parse_args()
    if args.report_only:
        stem = Path(args.out) / f"whatif-{args.start}-{args.end}"
        doc = json.loads(stem.with_suffix(".json").read_text())
        report(doc, stem.with_suffix(".md"), stem.with_suffix(".png"), args.target)
        return

    jobs = filter_jobs(read_trace(args.trace), args.start, args.end)
    work = workloads(jobs)
    tenants = TenantTree([Tenant(t) for t in sorted({sw.workload.tenant for sw in work})])
    config = SchedulerConfig(policy=Policy.FAIR, preemption=False, service_levels_s=())
    scen = Scenario(nodes=(), tenants=tenants, workloads=work, config=config)
    peak = peak_gpus(work)
    # the window's end: what was paid for until then is the fair comparison (long jobs of
    # the window run on for weeks after it, on any cluster)
    until = max(sw.workload.submitted_at for sw in work)
    peak_nodes = math.ceil(peak / NODE_GPUS)
    policies: list[PoolPolicy] = []
    for f in (float(x) for x in args.fixed.split(",") if x):
        n = max(1, round(peak_nodes * f))
        policies.append(PoolPolicy(f"fixed-{n}", (pool(n, args.boot, 0, args.price),), True))
    for m in (float(x) for x in args.maxima.split(",") if x):
        n = max(1, round(peak_nodes * m))
        for idle in (float(x) for x in args.idle.split(",") if x):
            name = f"demand-max-{n}-idle-{idle:g}"
            policies.append(PoolPolicy(name, (pool(n, args.boot, idle, args.price),)))
    if args.only:
        keep = set(args.only.split(","))
        policies = [p for p in policies if p.name in keep]

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"whatif-{args.start}-{args.end}"
    path = out / f"{stem}.json"
    doc = json.loads(path.read_text()) if path.exists() else {}
    doc.update(
        trace=Path(args.trace).name,
        window=[args.start, args.end],
        jobs=len(work),
        gpu_hours_offered=sum(sw.workload.request.gpus * sw.duration for sw in work) / 3600,
        peak_gpus=peak,
        peak_nodes=peak_nodes,
        node_gpus=NODE_GPUS,
        boot_seconds=args.boot,
        price_per_gpu_hour=args.price,
        machine=f"{platform.node()} ({platform.processor() or platform.machine()})",
    )
    doc.setdefault("runs", {})
    print(f"{len(work)} jobs, peak {peak} GPUs = {peak_nodes} nodes of {NODE_GPUS}", flush=True)
    for pol in policies:
        t0 = time.perf_counter()
        r = replay_pools(scen, pol, until=until)
        wall = time.perf_counter() - t0
        p0 = pol.pools[0]
        doc["runs"][pol.name] = {
            **r.as_dict(),
            "wall_s": wall,
            "max_nodes": p0.max_nodes,
            "idle_seconds": p0.idle_seconds,
            "fixed": pol.fixed,
        }
        path.write_text(json.dumps(doc, indent=1))
        print(
            f"{pol.name:26} {r.gpu_hours_bought_until:9,.0f} GPU-h in the window "
            f"({r.gpu_hours_bought:9,.0f} in all)  "
            f"wait {r.mean_wait_s / 60:7.1f} min  p95 {r.p95_wait_s / 60:7.1f}  "
            f"({wall:.0f}s)",
            flush=True,
        )
    report(doc, out / f"{stem}.md", out / f"{stem}.png", args.target)


def report(doc: dict, md: Path, png: Path, target: float) -> None:
    runs = sorted(doc["runs"].items(), key=lambda kv: kv[1]["gpu_hours_bought_until"])
    lines = [
        "| policy | nodes (max) | idle (s) | GPU-hours bought in the window | cost in the "
        "window | GPU-hours bought in all | used of all | mean wait | p95 wait | max wait |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in runs:
        lines.append(
            f"| {name} | {r['max_nodes']} | {'-' if r['fixed'] else int(r['idle_seconds'])} | "
            f"{r['gpu_hours_bought_until']:,.0f} | "
            f"{r['gpu_hours_bought_until'] * doc['price_per_gpu_hour']:,.0f} | "
            f"{r['gpu_hours_bought']:,.0f} | {r['utilization']:.0%} | "
            f"{r['mean_wait_s'] / 60:,.1f} min | {r['p95_wait_s'] / 60:,.1f} min | "
            f"{r['max_wait_s'] / 3600:,.1f} h |"
        )
    ok = [(n, r) for n, r in runs if r["mean_wait_s"] <= target]
    fixed_peak = next(
        (r for n, r in runs if r["fixed"] and r["max_nodes"] == doc["peak_nodes"]), None
    )
    if ok:
        n, r = ok[0]
        lines.append("")
        lines.append(
            f"Cheapest policy with a mean wait within {target / 3600:g} h: **{n}**, "
            f"{r['gpu_hours_bought_until']:,.0f} GPU-hours in the window"
            + (
                f" ({r['gpu_hours_bought_until'] / fixed_peak['gpu_hours_bought_until']:.0%} "
                "of the fixed cluster sized for the peak, "
                f"{fixed_peak['gpu_hours_bought_until']:,.0f})"
                if fixed_peak
                else ""
            )
            + "."
        )
    md.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for fixed, marker, label in ((True, "s", "fixed size"), (False, "o", "on demand")):
        pts = [
            (r["gpu_hours_bought_until"], r["mean_wait_s"] / 60, n)
            for n, r in runs
            if r["fixed"] == fixed
        ]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=label)
            for x, y, n in pts:
                ax.annotate(n.replace("demand-", ""), (x, y), fontsize=6, xytext=(3, 3),
                            textcoords="offset points")  # fmt: skip
    ax.axhline(target / 60, color="grey", linestyle="--", linewidth=0.8)
    ax.set_yscale("symlog", linthresh=1)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("GPU-hours of nodes bought during the window")
    ax.set_ylabel("mean wait (minutes)")
    ax.set_title(f"Philly {doc['window'][0]}-{doc['window'][1]}: {doc['jobs']:,} jobs")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=120)


if __name__ == "__main__":
    main()
