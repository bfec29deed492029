"""Compare scheduling policies on a real GPU-cluster trace (issue 7).

For each scope (the whole trace; a one-week window with the five largest teams), each
offered load (cluster sized by `gpupool.sim.trace.gpus_for_load`) and each policy, replay
the trace with `gpupool.sim` and record: average and p95 queueing delay, average JCT, GPU
utilization, per-tenant share vs fair share and guarantee attainment, Jain's index, the
replay's wall time and the scheduler's cycle times; plus a queueing-delay CDF and a
per-tenant allocation time series for the plots (bench/trace_plots.py).

    python bench/trace_compare.py --trace ../shared/data/philly/philly.csv \
        --out bench/results/trace_philly --jobs 2

Each run is written to OUT/<scope>-<load>-<policy>.json as soon as it finishes, so a
partial sweep keeps its results; `--summary` prints a Markdown table of what is in OUT.

Jobs wider than a node run across nodes (issue 19; `multi`). `--variants multi,same,single`
adds the same replay on the cluster sized without them (`same`: their effect on everyone
else, on the same nodes) and with them unschedulable as before (`single`); each run records
the wide jobs' waits beside everyone else's (`wide`, printed by `--summary`). The full-trace
sweep of docs/report-philly.md, 12 replays in parallel (a 16-core machine, 5-10 minutes):

    python bench/trace_compare.py --trace ../shared/data/philly/philly.csv \
        --out bench/results/trace_philly --scopes full --loads 0.8,1.2 \
        --policies fair,fifo --variants multi,same,single --jobs 12
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from gpupool.scheduler.types import Policy, SchedulerConfig
from gpupool.sim.burst import burst_jobs
from gpupool.sim.engine import simulate
from gpupool.sim.metrics import compute_metrics, percentile, waits
from gpupool.sim.trace import filter_jobs, read_trace, trace_scenario

WEEK = ("2017-10-23", "2017-10-30")  # a busy week; see report


#: the nine busy weeks of bench/trace_weeks.py (scope `weeks` = `w2017-10-02`, ...)
WEEKS = [str(datetime.date(2017, 10, 2) + datetime.timedelta(days=7 * k)) for k in range(9)]


#: `--trace burst`: the synthetic workload of gpupool.sim.burst (issue 32); scope `seeds`
#: stands for `seed1`..`seed5`, scope `full` is seed 1
BURST = "burst"
SEEDS = 5


def expand_scopes(which: list[str]) -> list[str]:
    """`weeks` stands for the nine scopes `w<monday>`, `seeds` for `seed1`..`seed5`."""
    out: list[str] = []
    for s in which:
        if s == "weeks":
            out += [f"w{d}" for d in WEEKS]
        elif s == "seeds":
            out += [f"seed{k}" for k in range(1, SEEDS + 1)]
        else:
            out.append(s)
    return out


def scope_jobs(trace: str, scope: str) -> list:
    """The jobs of `scope`: a window of the CSV trace, or (`--trace burst`) the synthetic
    workload of the scope's seed."""
    if trace == BURST:
        return burst_jobs(int(scope[4:]) if scope.startswith("seed") else 1)
    return scopes(read_trace(trace), [scope])[scope]


def scopes(jobs, which: list[str]) -> dict:
    out = {}
    if "full" in which:
        out["full"] = jobs
    if "week" in which:
        out["week"] = filter_jobs(jobs, WEEK[0], WEEK[1], "top:5")
    for s in which:
        if s.startswith("w2"):
            start = datetime.date.fromisoformat(s[1:])
            end = start + datetime.timedelta(days=7)
            out[s] = filter_jobs(jobs, str(start), str(end), "top:5")
    return out


def lost_gpu_hours(result) -> float:
    """GPU-hours of attempts that preemption threw away (run time beyond the job's duration;
    a job that restarts from scratch runs its whole duration again)."""
    lost = 0.0
    for rec in result.records.values():
        extra = rec.run_time - (rec.duration if rec.workload.state.value == "succeeded" else 0)
        if extra > 0:
            lost += extra * rec.workload.request.total_gpu_milli / 1000
    return lost / 3600


def wide_metrics(result) -> dict:
    """Waits of the multi-node (wide) jobs and of everyone else, and how many wide jobs ran
    (issue 19): count, succeeded, average and p95 wait in seconds."""
    w = waits(result)
    out = {}
    for name, wide in (("wide", True), ("narrow", False)):
        recs = [r for r in result.records.values() if (r.workload.request.nodes > 1) == wide]
        ws = sorted(w[r.workload.id] for r in recs if r.workload.id in w)
        out[name] = {
            "jobs": len(recs),
            "succeeded": len(ws),
            "avg_wait": round(sum(ws) / len(ws), 1) if ws else None,
            "p95_wait": round(percentile(ws, 95), 1) if ws else None,
            "gpu_hours": round(
                sum(r.run_time * r.workload.request.total_gpu_milli / 1000 for r in recs) / 3600,
                1,
            ),
        }
    return out


def delivered_gpu_hours(result) -> float:
    """GPU-hours of all attempts (work kept and work thrown away)."""
    total = 0.0
    for rec in result.records.values():
        total += rec.run_time * rec.workload.request.total_gpu_milli / 1000
    return total / 3600


def config_overrides(pairs: list[str]) -> dict:
    """`key=value` pairs for SchedulerConfig fields, converted to each field's type."""
    base = SchedulerConfig()
    out = {}
    for pair in pairs:
        key, _, text = pair.partition("=")
        cur = getattr(base, key)  # AttributeError names an unknown field
        if isinstance(cur, bool):
            out[key] = text.lower() in ("1", "true", "yes", "on")
        elif isinstance(cur, tuple):  # e.g. service_levels_s=3600,36000
            out[key] = tuple(float(x) for x in text.split(",") if x)
        elif cur is None:
            out[key] = None if text in ("", "none") else int(text)
        else:
            out[key] = type(cur)(text)
    return out


def run_one(
    trace: str,
    scope: str,
    load: float,
    policy: str,
    out_dir: str,
    gap: float,
    window: int,
    overrides: dict | None = None,
    tag: str = "",
    multi_node: bool = True,
    same_cluster: bool = False,
    checkpointing: bool = False,
) -> dict:
    jobs = scope_jobs(trace, scope)
    scen = trace_scenario(
        jobs,
        policy=Policy(policy),
        load=load,
        multi_node=multi_node,
        size_for_wide=not same_cluster,
        checkpointing=checkpointing,
    )
    scen.min_cycle_gap_s = gap
    scen.pending_window = window or None
    if overrides:
        scen.config = dataclasses.replace(scen.config, **overrides)
    t0 = time.perf_counter()
    c0 = time.process_time()
    result = simulate(scen, sample_every_s=3600.0 if scope == "week" else 6 * 3600.0)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    m = compute_metrics(result)
    w = sorted(waits(result).values())
    cdf = [[q, percentile(w, q)] for q in [i / 2 for i in range(0, 201)]]
    series = {
        "t_hours": [round(s[0] / 3600, 3) for s in result.samples],
        "allocated_gpus": {
            t: [round(s[1].get(t, 0) / 1000, 3) for s in result.samples] for t in result.tenants
        },
        "fair_gpus": {
            t: [round(s[2].get(t, 0) / 1000, 3) for s in result.samples] for t in result.tenants
        },
        "pending": [s[3] for s in result.samples],
    }
    rec = {
        "scope": scope,
        "load": load,
        "policy": policy,
        "jobs": len(jobs),
        "gpus": scen.capacity_milli // 1000,
        "min_cycle_gap_s": gap,
        "pending_window": window or None,
        "scheduler_config": {
            k: (v.value if hasattr(v, "value") else v)
            for k, v in dataclasses.asdict(scen.config).items()
        },
        "tag": tag,
        "guarantees": {t.name: t.quota.guaranteed_milli / 1000 for t in scen.tenants},
        "replay_wall_s": round(wall, 2),
        "replay_cpu_s": round(cpu, 2),
        "metrics": m,
        "multi_node": multi_node,
        "same_cluster": same_cluster,
        "wide": wide_metrics(result),
        "lost_gpu_hours": round(lost_gpu_hours(result), 1),
        "delivered_gpu_hours": round(delivered_gpu_hours(result), 1),
        "checkpointing": checkpointing,
        "wait_cdf": cdf,
        "series": series,
        "machine": f"{platform.node()} ({os.cpu_count()} CPUs, {platform.python_version()})",
    }
    path = Path(out_dir) / f"{scope}-{load:g}-{policy}{'-' + tag if tag else ''}.json"
    path.write_text(json.dumps(rec))
    return rec


def summary(out_dir: Path) -> str:
    rows = []
    for p in sorted(out_dir.glob("*.json")):
        r = json.loads(p.read_text())
        m = r["metrics"]
        pt = m["per_tenant"]
        att = [v["guarantee_attainment"] for v in pt.values() if v["guarantee_attainment"]]
        kept = _worst_kept(pt)
        rows.append(
            f"| {r['scope']} | {r['load']:g} | {r['gpus']} | "
            f"{r['policy']}{' (' + r['tag'] + ')' if r.get('tag') else ''} | "
            f"{m['avg_wait'] / 3600:.2f} | {m['p95_wait'] / 3600:.2f} | "
            f"{m['avg_jct'] / 3600:.2f} | {100 * m['gpu_utilization']:.1f}% | "
            f"{m['jain_fairness']:.3f} | {100 * min(att) if att else float('nan'):.1f}% | "
            f"{kept} | {m['preemptions']} | {r.get('lost_gpu_hours', float('nan')):.0f} | "
            f"{m['states'].get('failed', 0)} | "
            f"{r.get('replay_cpu_s', 0):.0f} / {r['replay_wall_s']:.0f} | "
            f"{m['scheduler']['cycles']} | {m['scheduler']['p99_cycle_ms']:.1f} |"
        )
    head = (
        "| scope | load | GPUs | policy | avg wait h | p95 wait h | avg JCT h | GPU util | "
        "Jain | min guarantee met | min guarantee kept | preemptions | GPU-h lost | "
        "unschedulable | replay CPU / wall s | cycles | p99 cycle ms |\n|" + "---|" * 17
    )
    return head + "\n" + "\n".join(rows) + "\n\n" + wide_summary(out_dir) + "\n\n" + goals(out_dir)


def _worst_kept(per_tenant: dict) -> str:
    """The lowest `guarantee_kept` over the tenants ("–" in results made before it)."""
    kept = [v.get("guarantee_kept") for v in per_tenant.values()]
    kept = [x for x in kept if x]
    return f"{100 * min(kept):.1f}%" if kept else "–"


def _h(v) -> str:
    return "–" if v is None else f"{v / 3600:.2f}"


def wide_summary(out_dir: Path) -> str:
    """The multi-node (wide) jobs' waits beside everyone else's, per run (issue 19)."""
    rows = []
    for p in sorted(out_dir.glob("*.json")):
        r = json.loads(p.read_text())
        wd = r.get("wide")
        if not wd:
            continue
        w, n = wd["wide"], wd["narrow"]
        rows.append(
            f"| {r['scope']} | {r['load']:g} | "
            f"{r['policy']}{' (' + r['tag'] + ')' if r.get('tag') else ''} | "
            f"{w['jobs']} | {w['succeeded']} | {_h(w['avg_wait'])} | {_h(w['p95_wait'])} | "
            f"{w['gpu_hours']:.0f} | {_h(n['avg_wait'])} | {_h(n['p95_wait'])} |"
        )
    head = (
        "| scope | load | policy | wide jobs | wide ran | wide avg wait h | wide p95 wait h | "
        "wide GPU-h | others avg wait h | others p95 wait h |\n|" + "---|" * 10
    )
    return head + "\n" + "\n".join(rows)


def goals(out_dir: Path) -> str:
    """Issue #20's goals for every run that is not fifo (policy and tag): its average wait ÷
    fifo's (untagged) per whole-trace load and as a geometric mean over the weeks; the worst
    tenant's guarantee attainment; GPU-hours thrown away by preemption ÷ GPU-hours delivered."""
    runs: dict[tuple[str, float, str, str], dict] = {}
    for p in sorted(out_dir.glob("*.json")):
        r = json.loads(p.read_text())
        runs[(r["scope"], r["load"], r["policy"], r.get("tag") or "")] = r
    lines = [
        "| scope | load | policy | ÷ fifo avg wait (goal ≤ 0.5) | min guarantee met | "
        "min guarantee kept (≥ 95%) | GPU-h lost ÷ delivered (≤ 5%) |",
        "|---|---|---|---|---|---|---|",
    ]
    # (kind, load, name): kind `weeks` (w<monday>) or `seeds` (burst seeds)
    week_ratios: dict[tuple[str, float, str], list[float]] = {}
    week_worst: dict[tuple[str, float, str], list[float]] = {}
    week_kept: dict[tuple[str, float, str], list[str]] = {}
    for (scope, load, pol, tag), r in sorted(runs.items()):
        if pol == "fifo" or (scope, load, "fifo", "") not in runs:
            continue
        name = pol + (f" ({tag})" if tag else "")
        f = runs[(scope, load, "fifo", "")]["metrics"]["avg_wait"]
        m = r["metrics"]
        ratio = m["avg_wait"] / f if f else float("nan")
        att = [v["guarantee_attainment"] for v in m["per_tenant"].values()]
        att = [x for x in att if x]
        lost = r.get("lost_gpu_hours", 0.0) / max(r.get("delivered_gpu_hours") or 1e-9, 1e-9)
        worst = 100 * min(att) if att else float("nan")
        kept = _worst_kept(m["per_tenant"])
        if scope.startswith(("w2", "seed")):
            key = ("seeds" if scope.startswith("seed") else "weeks", load, name)
            week_ratios.setdefault(key, []).append(ratio)
            week_worst.setdefault(key, []).append(worst)
            week_kept.setdefault(key, []).append(kept)
        lines.append(
            f"| {scope} | {load:g} | {name} | {ratio:.2f} | {worst:.1f}% | {kept} | "
            f"{100 * lost:.1f}% |"
        )
    for (kind, load, name), rs in sorted(week_ratios.items()):
        ok = [x for x in rs if x > 0 and x == x]
        if ok:
            lo = min(week_worst[(kind, load, name)])
            ks = [float(k[:-1]) for k in week_kept[(kind, load, name)] if k != "–"]
            lo_kept = f"lowest {min(ks):.1f}%" if ks else "–"
            lines.append(
                f"| {kind} (geometric mean of {len(ok)}) | {load:g} | {name} | "
                f"{statistics.geometric_mean(ok):.2f} | lowest {lo:.1f}% | {lo_kept} | |"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--trace",
        default="../shared/data/philly/philly.csv",
        help="a CSV trace, or `burst` (gpupool.sim.burst; scopes `seeds` or `seedN`)",
    )
    ap.add_argument("--out", default="bench/results/trace_philly")
    ap.add_argument("--scopes", default="week,full")
    ap.add_argument("--loads", default="0.8,1.2")
    ap.add_argument("--policies", default="fifo,fair,las")
    ap.add_argument("--gap", type=float, default=60.0, help="min_cycle_gap_s (trace default 60)")
    ap.add_argument("--window", type=int, default=64, help="pending window per tenant (0: all)")
    ap.add_argument("--jobs", type=int, default=1, help="runs in parallel (processes)")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a SchedulerConfig field (e.g. reclaim_after_s=0); repeatable",
    )
    ap.add_argument("--tag", default="", help="suffix of the result files (for ablations)")
    ap.add_argument(
        "--single-node",
        action="store_true",
        help="jobs wider than a node stay unschedulable (as before multi-node requests)",
    )
    ap.add_argument(
        "--variants",
        default="",
        help="comma-separated: multi (jobs wider than a node run across nodes; the default), "
        "same (multi on the cluster sized without the wide jobs, tag 'same'), single (wide "
        "jobs unschedulable, tag 'single'): all in one pool of --jobs processes",
    )
    ap.add_argument(
        "--same-cluster",
        action="store_true",
        help="size the cluster for the load without the wide jobs (the --single-node cluster), "
        "so their effect on everyone else is measured on the same nodes",
    )
    ap.add_argument(
        "--checkpointing",
        action="store_true",
        help="every job declares checkpointing (a preempted job resumes where it stopped)",
    )
    ap.add_argument("--summary", action="store_true", help="print the table of OUT and exit")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.summary:
        print(summary(out))
        return
    overrides = config_overrides(a.set)
    variants = [v for v in a.variants.split(",") if v] or [
        "single" if a.single_node else ("same" if a.same_cluster else "multi")
    ]
    settings = {  # variant -> (multi_node, same_cluster, tag)
        "multi": (True, False, a.tag),
        "same": (True, True, a.tag or "same"),
        "single": (False, False, a.tag or "single"),
    }
    if a.tag and len(variants) > 1:
        ap.error("--tag names one variant's files; leave it out with several --variants")
    runs = [
        (scope, float(load), policy, v)
        for scope in expand_scopes(a.scopes.split(","))
        for load in a.loads.split(",")
        for policy in a.policies.split(",")
        for v in variants
    ]
    with ProcessPoolExecutor(max_workers=a.jobs) as pool:
        futs = {}
        for s, ld, p, v in runs:
            multi, same, tag = settings[v]
            f = pool.submit(
                run_one,
                a.trace,
                s,
                ld,
                p,
                str(out),
                a.gap,
                a.window,
                overrides,
                tag,
                multi,
                same,
                a.checkpointing,
            )
            futs[f] = (s, ld, p, v)
        for f in as_completed(futs):
            s, ld, p, v = futs[f]
            try:
                r = f.result()
            except Exception as exc:  # report and go on with the other runs
                print(f"{s} {ld:g} {p} {v}: FAILED {exc!r}", file=sys.stderr, flush=True)
                continue
            m = r["metrics"]
            print(
                f"{s} load {ld:g} ({r['gpus']} GPUs) {p} {v}: avg wait {m['avg_wait']:.0f} s, "
                f"util {m['gpu_utilization']}, jain {m['jain_fairness']}, "
                f"replay {r['replay_wall_s']} s",
                flush=True,
            )
    print(summary(out))


if __name__ == "__main__":
    main()
