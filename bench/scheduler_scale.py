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
cycles and so how much work ends and is replaced per cycle. `p50_read_reasons_cpu_ms` is the
CPU time to read every reason after a cycle (outside the cycle's time: `Decisions.pending`
builds most of its entries on the first read).

    python bench/scheduler_scale.py --nodes 1000 --gpus-per-node 8 --pending 10000 --json

`--baseline REV` compares with an older commit in one run: REV is checked out into a temporary
git worktree (removed afterwards) and the same scenario (same seed and sizes) runs with the
old code and with this checkout's code alternately, each in its own subprocess (importing
that tree's `src`), `--rounds` times each. It prints p50/p99 cycle times (wall and CPU) and the
cold first cycle of each, the ratio now / then (the median over rounds of each round's ratio
of medians: a round runs both back to back, so machine noise mostly cancels), and whether the
decisions are the same: a digest per cycle of the admissions and preemptions, and one of the
reasons and positions of pending work. `--baseline merge-base` picks
`git merge-base HEAD origin/main`, or HEAD~1 where that is HEAD itself or there is no
origin/main (CI on main after landing). `--max-ratio R` exits 1 when the ratio of CPU time per
cycle (p50 of a run, the best run of each side: noise only adds time; wall time also counts the
time a process waits on a shared machine) is above R, or
when the same code gave different decisions in two rounds (the CI gate, scripts/test); it says
SKIPPED, and exits 0, when the baseline commit is not in the clone (shallow). `--profile PATH`
writes a cProfile of the steady-state cycle() calls.

    python bench/scheduler_scale.py --baseline cd1d351 --nodes 5000 --pending 50000 --cycles 20
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import hashlib
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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
    def __init__(self, rng: random.Random, tenants: list[str], checkpointing: float = 0.0):
        self.rng = rng
        self.tenants = tenants
        self.n = 0
        self.weights = [s[0] for s in SHAPES]
        #: the share of workloads that declare checkpointing (drawn only when above 0, so the
        #: default workload is the one of before)
        self.checkpointing = checkpointing

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
        d = r.expovariate(1 / 3600)
        if self.checkpointing > 0 and r.random() < self.checkpointing:
            w = dataclasses.replace(w, checkpointing=True)
        return w, d


def run(args: argparse.Namespace) -> dict:
    rng = random.Random(args.seed)
    nodes = tuple(build_nodes(args.nodes, args.gpus_per_node))
    cache = None if args.no_cache else SchedulerCache()
    tree, leaves = build_tenants(args.tenants, args.nodes * args.gpus_per_node)
    gen = Workgen(rng, leaves, args.checkpointing)
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
    reads: list[float] = []  # CPU seconds to read all of each cycle's reasons afterwards
    digests: list[tuple[str, str]] = []
    admitted = preempted = cold_admitted = 0
    prof = cProfile.Profile() if args.profile else None
    for c in range(args.cycles + 1):
        snap = Snapshot(nodes, tree, tuple(running.values()))
        pend = list(pending.values())
        if prof is not None and c > 0:
            prof.enable()
        t0 = time.perf_counter()
        c0 = time.process_time()
        d = cycle(snap, pend, now, config, cache)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        if prof is not None and c > 0:
            prof.disable()
        # reading every reason (as the server loop does when it stores them): the cycle
        # leaves most of them to be built on first read (PendingInfos), so this is timed apart
        r0 = time.process_time()
        len(dict(d.pending.items()))  # as the server loop reads them (set_pending_info)
        reads.append(time.process_time() - r0)
        if args.digest:
            digests.append(digest(d))
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
    if prof is not None:
        prof.dump_stats(args.profile)
    allocated = sum(rw.allocation.gpu_milli for rw in running.values())
    steady = sorted(times[1:])
    p99 = steady[min(len(steady) - 1, int(round(0.99 * (len(steady) - 1))))]
    total = sum(times[1:])
    extra = {"times": times, "cpu": cpu, "reads": reads, "digests": digests} if args.worker else {}
    return extra | {
        "nodes": args.nodes,
        "gpus": args.nodes * args.gpus_per_node,
        "pending": args.pending,
        "tenants": args.tenants,
        "policy": args.policy,
        "checkpointing": args.checkpointing,
        "cache": not args.no_cache,
        "cycles": args.cycles,
        "cold_cycle_ms": round(times[0] * 1000, 1),
        "p50_cycle_ms": round(statistics.median(steady) * 1000, 1),
        "p99_cycle_ms": round(p99 * 1000, 1),
        "p50_cycle_cpu_ms": round(statistics.median(cpu[1:]) * 1000, 1),
        "p99_cycle_cpu_ms": round(sorted(cpu[1:])[int(round(0.99 * (len(cpu) - 2)))] * 1000, 1),
        "max_cycle_ms": round(steady[-1] * 1000, 1),
        "p50_read_reasons_cpu_ms": round(statistics.median(reads[1:]) * 1000, 1),
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


def digest(d: object) -> tuple[str, str]:
    """(digest of the admissions and preemptions, digest of the pending reasons, positions
    and unschedulable reasons) of one cycle's Decisions, for comparing two versions."""
    acts = hashlib.sha256()
    for a in d.admissions:  # type: ignore[attr-defined]
        acts.update(repr(a).encode())
    for p in d.preemptions:  # type: ignore[attr-defined]
        acts.update(repr(p).encode())
    why = hashlib.sha256()
    for wid, pi in sorted(d.pending.items()):  # type: ignore[attr-defined]
        why.update(f"{wid}\0{pi!r}".encode())
    for wid, r in sorted(d.unschedulable.items()):  # type: ignore[attr-defined]
        why.update(f"{wid}\0{r}".encode())
    return acts.hexdigest()[:16], why.hexdigest()[:16]


# -- --baseline: the same scenario with an older commit, alternately -------------------------

ROOT = Path(__file__).resolve().parents[1]


def git(*argv: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *argv], check=True, capture_output=True, text=True
    ).stdout.strip()


class NoBaseline(Exception):
    """The baseline commit is not in this clone."""


def resolve_baseline(rev: str) -> str:
    """The commit to compare with. `merge-base`: `git merge-base HEAD origin/main`, or HEAD~1
    where there is no origin/main or it is HEAD itself (CI on main after landing)."""
    want = rev
    try:
        if rev != "merge-base":
            return git("rev-parse", "--verify", rev + "^{commit}")
        head = git("rev-parse", "HEAD")
        try:
            base = git("merge-base", "HEAD", "origin/main")
        except subprocess.CalledProcessError:
            base = head
        if base != head:
            return base
        want = "HEAD~1"
        return git("rev-parse", "--verify", "HEAD~1^{commit}")
    except subprocess.CalledProcessError:
        raise NoBaseline(
            f"{want} is not in this clone (a shallow clone? git fetch --unshallow)"
        ) from None


def worker(src: Path, args: argparse.Namespace, hash_seed: int) -> dict:
    """Run the scenario in a subprocess that imports gpupool from `src` (with
    PYTHONHASHSEED `hash_seed`: both sides of a round get the same one, so the layout of
    their dicts and sets, which moves timings by several percent, is alike)."""
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", "--json"]
    keys = ("nodes", "gpus_per_node", "pending", "tenants", "cycles", "step", "policy", "seed")
    for k in (*keys, "checkpointing"):
        argv += ["--" + k.replace("_", "-"), str(getattr(args, k))]
    env = dict(os.environ, PYTHONPATH=str(src), PYTHONHASHSEED=str(hash_seed))
    out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    if not r["gpupool"].startswith(str(src)):
        raise SystemExit(f"the worker imported {r['gpupool']}, not the code in {src}")
    return r


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def summary(runs: list[dict]) -> dict:
    """Cycle times over all rounds (steady cycles pooled), in ms."""
    wall = [t for r in runs for t in r["times"][1:]]
    cpu = [t for r in runs for t in r["cpu"][1:]]
    return {
        "p50_ms": round(1000 * statistics.median(wall), 1),
        "p99_ms": round(1000 * pct(wall, 0.99), 1),
        "p50_cpu_ms": round(1000 * statistics.median(cpu), 1),
        "p99_cpu_ms": round(1000 * pct(cpu, 0.99), 1),
        "cold_ms": round(1000 * statistics.median(r["times"][0] for r in runs), 1),
        # CPU time to read every reason after a steady cycle (outside the cycle's time)
        "p50_read_reasons_cpu_ms": round(
            1000 * statistics.median(t for r in runs for t in r.get("reads", [0.0])[1:]), 1
        ),
        "admissions": runs[0]["admissions"],
        "preemptions": runs[0]["preemptions"],
    }


def compare(args: argparse.Namespace) -> dict:
    """`--baseline`: alternate rounds of the old and the current code; see the docstring."""
    tmp = Path(tempfile.mkdtemp(prefix="gpupool-baseline-"))
    if args.baseline.startswith("src:"):  # a source tree as it is (e.g. another worktree)
        rev = args.baseline
        then_src = Path(args.baseline[4:]).resolve()
    else:
        rev = resolve_baseline(args.baseline)
        git("worktree", "add", "--detach", str(tmp / "tree"), rev)
        then_src = tmp / "tree" / "src"
    now_src = Path(args.current_src).resolve() if args.current_src else ROOT / "src"
    then_runs: list[dict] = []
    now_runs: list[dict] = []
    try:
        for i in range(args.rounds):
            # alternate who goes first, so a drift in the machine's speed cancels too
            order = [("then", then_src), ("now", now_src)]
            for name, src in order if i % 2 == 0 else order[::-1]:
                r = worker(src, args, hash_seed=i + 1)
                (then_runs if name == "then" else now_runs).append(r)
                print(
                    f"round {i + 1} {name:>4}: p50 {statistics.median(r['times'][1:]) * 1000:.1f} "
                    f"ms, cold {r['times'][0] * 1000:.0f} ms",
                    file=sys.stderr,
                )
    finally:
        if (tmp / "tree").exists():
            git("worktree", "remove", "--force", str(tmp / "tree"))
        tmp.rmdir()
    ratios = [
        statistics.median(b["times"][1:]) / statistics.median(a["times"][1:])
        for a, b in zip(then_runs, now_runs, strict=True)
    ]
    cpu_ratios = [
        statistics.median(b["cpu"][1:]) / statistics.median(a["cpu"][1:])
        for a, b in zip(then_runs, now_runs, strict=True)
    ]
    # noise only adds time: the best round of each side is the closest to the code's own cost
    best_cpu = min(statistics.median(b["cpu"][1:]) for b in now_runs) / min(
        statistics.median(a["cpu"][1:]) for a in then_runs
    )
    then_d, now_d = then_runs[0]["digests"], now_runs[0]["digests"]
    same = [a[0] == b[0] for a, b in zip(then_d, now_d, strict=True)]
    same_why = [a[1] == b[1] for a, b in zip(then_d, now_d, strict=True)]
    first_diff = same.index(False) if not all(same) else None
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {
        "baseline": rev,
        "current": str(args.current_src)
        if args.current_src
        else git("rev-parse", "HEAD")
        + ("" if not git("status", "--porcelain", "src") else "+dirty"),
        "scenario": {
            k: getattr(args, k)
            for k in (
                "nodes",
                "gpus_per_node",
                "pending",
                "tenants",
                "cycles",
                "step",
                "policy",
                "seed",
            )
        },
        "rounds": args.rounds,
        "then": summary(then_runs),
        "now": summary(now_runs),
        "ratio_p50": round(statistics.median(ratios), 3),
        "ratio_p50_cpu": round(statistics.median(cpu_ratios), 3),
        "ratio_best_cpu": round(best_cpu, 3),
        "ratio_p99": round(summary(now_runs)["p99_ms"] / summary(then_runs)["p99_ms"], 3),
        "ratio_cold": round(summary(now_runs)["cold_ms"] / summary(then_runs)["cold_ms"], 3),
        "round_ratios": [round(x, 3) for x in ratios],
        "same_decisions": all(same),
        "same_reasons": all(same_why),
        "first_different_cycle": first_diff,
        "deterministic": all(r["digests"] == then_d for r in then_runs)
        and all(r["digests"] == now_d for r in now_runs),
        "load_avg_1m_at_end": load,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "machine": f"{platform.node()}, {platform.machine()}, {platform.processor() or 'cpu'}",
    }


def slowdown(best: float, paired: float) -> float:
    """The ratio the gates judge (here and scheduler_loop.py): the lesser of the best-round
    ratio and the median of the rounds' ratios, in CPU time. A slower code shows in both; a
    machine that is quieter for one round of one side (a session beside it pausing) moves
    only the first, and busier for a while only the second, as seen in an A/A run (best 1.36,
    median 0.99: one round of the baseline ran a third faster than every other round)."""
    return round(min(best, paired), 3)


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
        "--checkpointing",
        type=float,
        default=0.0,
        help="share of workloads that declare checkpointing (service levels, siblings' "
        "levels and reclaim by service come into play); default 0",
    )
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="call cycle() without a SchedulerCache (everything worked out afresh each cycle)",
    )
    p.add_argument("--json", action="store_true")
    p.add_argument("--profile", metavar="PATH", help="write a cProfile of the steady cycles")
    p.add_argument(
        "--baseline",
        metavar="REV",
        help="compare with commit REV ('merge-base': see above; 'src:DIR': the code in DIR) in "
        "alternating subprocesses",
    )
    p.add_argument(
        "--current-src",
        metavar="DIR",
        help="with --baseline: the current code's source directory (default: this checkout's src)",
    )
    p.add_argument("--rounds", type=int, default=3, help="with --baseline: runs of each")
    p.add_argument(
        "--max-ratio",
        type=float,
        help="with --baseline: exit 1 if now / then (CPU p50, best round of each) is above this",
    )
    p.add_argument("--digest", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if min(args.nodes, args.gpus_per_node, args.pending, args.tenants, args.cycles) <= 0:
        p.error("--nodes, --gpus-per-node, --pending, --tenants and --cycles must be positive")
    if args.baseline:
        if args.rounds <= 0:
            p.error("--rounds must be positive")
        try:
            result = compare(args)
        except NoBaseline as e:
            # a clone without the history (shallow): nothing to compare with, said loudly
            print(f"scheduler speed gate: SKIPPED: {e}")
            return 0
        except subprocess.CalledProcessError as e:
            print(e.stderr, file=sys.stderr)
            raise
        print(json.dumps(result) if args.json else json.dumps(result, indent=1))
        if args.max_ratio is not None:
            ratio = slowdown(result["ratio_best_cpu"], result["ratio_p50_cpu"])
            ok = ratio <= args.max_ratio
            print(
                f"scheduler speed gate: now / then = {ratio} (CPU time per cycle, p50: the "
                f"lesser of the best of {args.rounds} alternating rounds each, "
                f"{result['ratio_best_cpu']}, and the median of the rounds' ratios, "
                f"{result['ratio_p50_cpu']}; wall {result['ratio_p50']}) against "
                f"{result['baseline'][:12]}: then {result['then']['p50_cpu_ms']} ms, now "
                f"{result['now']['p50_cpu_ms']} ms; limit {args.max_ratio}: "
                + ("ok" if ok else "FAIL: the scheduler got slower")
            )
            if not result["deterministic"]:
                print("scheduler speed gate: FAIL: the same code gave different decisions")
                return 1
            return 0 if ok else 1
        return 0
    if args.worker:
        args.digest = True
    result = run(args)
    if args.worker:
        import gpupool

        result["gpupool"] = str(Path(gpupool.__file__).resolve())
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:>22}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
