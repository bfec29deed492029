"""Scheduler scale benchmark: p99 cycle time and admissions per second.

A synthetic cluster (`--nodes` x `--gpus-per-node`, H100 and A100 nodes, one node in ten with
`shared` GPUs) and `--tenants` tenants (in groups of five under a parent) with guarantees adding
up to ~80% of the GPUs. A mixed workload keeps `--pending` workloads waiting: whole GPUs (1, 2),
multi-GPU (4, 8) and fractions (0.25, 0.5 with GPU memory), priorities 0/10, some pinned to a
GPU model, some non-preemptible.

Repeated cycles: run `cycle()`, apply its decisions (admissions start, preempted work is
requeued), advance the virtual clock, finish the work whose time is up, submit new work to keep
the queue full, and cycle again (with one `SchedulerCache` kept throughout, as the server
does; `--no-cache` to compare). Only the `cycle()` call is timed. The first cycle (empty
cluster, thousands of admissions at once) is reported on its own (`cold_*`); `p99_cycle_ms`
and `admissions_per_s` (admissions / time spent in `cycle()`) are over the steady-state cycles
that follow. Work lasts 1 h on average (exponential); `--step` sets the virtual time between
cycles and so how much work ends and is replaced per cycle.

    python bench/scheduler_scale.py --nodes 1000 --gpus-per-node 8 --pending 10000 --json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import random
import statistics
import sys
import time

from gpupool.domain import (
    GPU,
    Node,
    Quota,
    Request,
    SharingMode,
    Tenant,
    TenantTree,
    Workload,
    WorkloadState,
)
from gpupool.scheduler import (
    Policy,
    RunningWorkload,
    SchedulerCache,
    SchedulerConfig,
    Snapshot,
    cycle,
)

GIB = 1024


def build_nodes(count: int, gpus: int) -> list[Node]:
    out = []
    for i in range(count):
        model, mem = ("H100", 80) if i % 3 else ("A100", 40)
        sharing = SharingMode.SHARED if i % 10 == 9 else SharingMode.EXCLUSIVE
        out.append(
            Node(
                name=f"n{i:05d}",
                gpus=tuple(
                    GPU(j, f"n{i:05d}-g{j}", model, mem * GIB, sharing) for j in range(gpus)
                ),
                cpu_milli=gpus * 16_000,
                memory_mib=gpus * 128 * GIB,
            )
        )
    return out


def build_tenants(count: int, total_gpus: int) -> tuple[TenantTree, list[str]]:
    guaranteed = int(total_gpus * 0.8 / count)
    tenants, leaves = [], []
    for i in range(count):
        name = f"dept{i // 5}/lab{i}"
        leaves.append(name)
        tenants.append(
            Tenant(
                name,
                Quota.gpus(
                    guaranteed=guaranteed,
                    limit=guaranteed * 3,
                    weight=1 + i % 3,
                    max_per_user=max(8, guaranteed // 2),
                ),
            )
        )
    return TenantTree(tenants), leaves


SHAPES = [
    # (weight, gpus, fraction, gpu_gib)
    (35, 1, 0, 0),
    (15, 2, 0, 0),
    (10, 4, 0, 0),
    (5, 8, 0, 0),
    (20, 0, 0.25, 10),
    (15, 0, 0.5, 20),
]


class Workgen:
    def __init__(self, rng: random.Random, tenants: list[str]):
        self.rng = rng
        self.tenants = tenants
        self.n = 0
        self.weights = [s[0] for s in SHAPES]

    def make(self, now: float) -> tuple[Workload, float]:
        r = self.rng
        self.n += 1
        _, gpus, frac, gib = r.choices(SHAPES, self.weights)[0]
        tenant = r.choice(self.tenants)
        model = r.choice([None, None, "H100", "A100"]) if gpus else "A100"
        w = Workload(
            id=f"w{self.n:07d}",
            tenant=tenant,
            owner=f"u{r.randrange(10)}",
            request=Request(
                gpus=gpus,
                gpu_milli=int(frac * 1000),
                gpu_memory_mib=gib * GIB,
                gpu_model=model,
                cpu_milli=max(1, gpus) * 4000,
                memory_mib=max(1, gpus) * 32 * GIB,
            ),
            priority=10 if r.random() < 0.1 else 0,
            preemptible=r.random() > 0.1,
            submitted_at=now,
        )
        return w, r.expovariate(1 / 3600)


def run(args: argparse.Namespace) -> dict:
    rng = random.Random(args.seed)
    nodes = tuple(build_nodes(args.nodes, args.gpus_per_node))
    cache = None if args.no_cache else SchedulerCache()
    tree, leaves = build_tenants(args.tenants, args.nodes * args.gpus_per_node)
    gen = Workgen(rng, leaves)
    config = SchedulerConfig(policy=Policy(args.policy), min_runtime_s=60)
    now = 0.0
    pending: dict[str, Workload] = {}
    durations: dict[str, float] = {}
    for _ in range(args.pending):
        w, d = gen.make(now)
        pending[w.id] = w
        durations[w.id] = d
    running: dict[str, RunningWorkload] = {}
    ends: dict[str, float] = {}
    times: list[float] = []
    cpu: list[float] = []  # CPU seconds of each cycle (the machine may be shared)
    admitted = preempted = cold_admitted = 0
    for c in range(args.cycles + 1):
        snap = Snapshot(nodes, tree, tuple(running.values()))
        t0 = time.perf_counter()
        c0 = time.process_time()
        d = cycle(snap, list(pending.values()), now, config, cache)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        if c > 0:
            admitted += len(d.admissions)
            preempted += len(d.preemptions)
        else:
            cold_admitted = len(d.admissions)
        for p in d.preemptions:
            rw = running.pop(p.workload_id)
            ends.pop(p.workload_id)
            pending[p.workload_id] = dataclasses.replace(
                rw.workload, state=WorkloadState.PENDING, admitted_at=None, started_at=None
            )
        for a in d.admissions:
            w = dataclasses.replace(
                pending.pop(a.workload_id), state=WorkloadState.RUNNING, started_at=now
            )
            running[w.id] = RunningWorkload(w, a.allocation)
            ends[w.id] = now + durations[w.id]
        for wid in d.unschedulable:
            pending.pop(wid)
        now += args.step
        for wid in [w for w, e in ends.items() if e <= now]:
            running.pop(wid)
            ends.pop(wid)
        while len(pending) < args.pending:
            w, dur = gen.make(now)
            pending[w.id] = w
            durations[w.id] = dur
    allocated = sum(rw.allocation.gpu_milli for rw in running.values())
    steady = sorted(times[1:])
    p99 = steady[min(len(steady) - 1, int(round(0.99 * (len(steady) - 1))))]
    total = sum(times[1:])
    return {
        "nodes": args.nodes,
        "gpus": args.nodes * args.gpus_per_node,
        "pending": args.pending,
        "tenants": args.tenants,
        "policy": args.policy,
        "cache": not args.no_cache,
        "cycles": args.cycles,
        "cold_cycle_ms": round(times[0] * 1000, 1),
        "p50_cycle_ms": round(statistics.median(steady) * 1000, 1),
        "p99_cycle_ms": round(p99 * 1000, 1),
        "p50_cycle_cpu_ms": round(statistics.median(cpu[1:]) * 1000, 1),
        "p99_cycle_cpu_ms": round(sorted(cpu[1:])[int(round(0.99 * (len(cpu) - 2)))] * 1000, 1),
        "max_cycle_ms": round(steady[-1] * 1000, 1),
        "admissions": admitted,
        "admissions_per_cycle": round(admitted / max(1, args.cycles), 1),
        "admissions_per_s": round(admitted / total, 1) if total else None,
        "preemptions": preempted,
        "cold_admissions": cold_admitted,
        "cold_admissions_per_s": round(cold_admitted / times[0], 1),
        "running_at_end": len(running),
        "gpu_allocation_at_end": round(allocated / (1000 * len(nodes) * args.gpus_per_node), 3),
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}",
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--pending", type=int, default=10_000)
    p.add_argument("--tenants", type=int, default=20)
    p.add_argument("--cycles", type=int, default=60)
    p.add_argument(
        "--step",
        type=float,
        default=300.0,
        help="virtual seconds between cycles (work lasts 1 h on average, so 300 s lets ~8%% "
        "of the running work end, and be replaced, between cycles)",
    )
    p.add_argument("--policy", choices=[x.value for x in Policy], default="fair")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="call cycle() without a SchedulerCache (everything worked out afresh each cycle)",
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if min(args.nodes, args.gpus_per_node, args.pending, args.tenants, args.cycles) <= 0:
        p.error("--nodes, --gpus-per-node, --pending, --tenants and --cycles must be positive")
    result = run(args)
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:>22}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
