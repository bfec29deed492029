"""Scheduler loop benchmark: the server's `SchedulerLoop.run_once()` over a real store, by phase.

bench/scheduler_scale.py times `cycle()` alone, handed the same objects every cycle; the server
reads its snapshot from the database each cycle and stores every why-pending afterwards. This
benchmark runs the loop itself: a SQLite file (or `--db URL`, e.g. PostgreSQL), `--nodes` x
`--gpus-per-node` simulated nodes and the tenants of the scale benchmark (its `build_nodes`,
`build_tenants`, `Workgen`), `--pending` workloads submitted through `WorkloadRepo.add`, the
fake executor and a ManualClock. Repeated cycles: `run_once()` (admissions start at once), the
clock moves `--step` seconds, the work whose time is up finishes (one write transaction, as the
reconciler would settle it), preempted work is settled (requeued), new work is submitted to keep
the queue at `--pending`, and cycle again.

Phases (wall and CPU ms, p50 over the steady cycles; the first, cold cycle apart): `snapshot`
(`SchedulerLoop._read`, older code's `snapshot`: the store read and the conversion to domain
objects), `cycle`
(`cycle_timed`), `admit` (`SchedulerLoop._admit_all`: commits and starts), `pending_info`
(the rest of `apply`: mostly storing the why-pending, its transaction included), of which
`set_pending_info` is the repository call alone, and `total` (`run_once`). The phases are timed
by wrapping those names, so the same harness times older code.

    python bench/scheduler_loop.py --nodes 500 --pending 5000 --cycles 20

`--baseline REV` runs the same scenario with the code of commit REV (a temporary git worktree,
removed afterwards) and with this checkout's, alternately, each in its own subprocess, `--rounds`
times each, and prints both and the ratio now / then per phase (the median of the rounds'
ratios) and whether they decided the same (a digest of each cycle's admissions, preemptions and
stored why-pending). `--baseline src:DIR` compares with the code in DIR. `--max-ratio R` (the
CI gate in scripts/test) exits 1 when `run_once`'s CPU time now / then (p50 of a run, the best
run of each side) is above R, or when this code decided differently in two rounds; it says
SKIPPED, and exits 0, when the baseline commit is not in the clone.
"""

from __future__ import annotations

import argparse
import contextlib
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

PHASES = ("snapshot", "cycle", "admit", "pending_info", "set_pending_info", "total")


class Timer:
    """Wall and CPU seconds per phase for the current cycle (nested phases are allowed)."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    def reset(self) -> None:
        self.wall = dict.fromkeys(PHASES, 0.0)
        self.cpu = dict.fromkeys(PHASES, 0.0)

    def wrap(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*a: Any, **kw: Any) -> Any:
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return fn(*a, **kw)
            finally:
                self.wall[phase] += time.perf_counter() - t0
                self.cpu[phase] += time.process_time() - c0

        return timed


def instrument(timer: Timer) -> Callable[[], None]:
    """Wrap the loop's phases (by name, so that older code is timed alike); returns what
    undoes it."""
    from gpupool.server.loops import scheduler as mod
    from gpupool.store import workloads

    loop = mod.SchedulerLoop
    repo = workloads.WorkloadRepo
    # the cycle's own read: `_read` (the MIG loop reads apart, `snapshot`); older code `snapshot`
    read = "_read" if hasattr(loop, "_read") else "snapshot"
    saved_read = getattr(loop, read)
    saved = (mod.cycle_timed, loop._admit_all, loop.apply, repo.set_pending_info)

    def restore() -> None:
        setattr(loop, read, saved_read)
        (
            mod.cycle_timed,
            loop._admit_all,  # type: ignore[method-assign]
            loop.apply,  # type: ignore[method-assign]
            repo.set_pending_info,  # type: ignore[method-assign]
        ) = saved

    setattr(loop, read, timer.wrap("snapshot", saved_read))
    mod.cycle_timed = timer.wrap("cycle", mod.cycle_timed)  # type: ignore[assignment]
    loop._admit_all = timer.wrap("admit", loop._admit_all)  # type: ignore[method-assign]
    loop.apply = timer.wrap("pending_info", loop.apply)  # type: ignore[method-assign]
    repo.set_pending_info = timer.wrap("set_pending_info", repo.set_pending_info)  # type: ignore[method-assign]
    return restore


def stored_digest(store: Any) -> str:
    """A digest of every pending workload's stored why-pending and positions."""
    from sqlalchemy import select

    from gpupool.store.rows import WorkloadRow

    q = (
        select(
            WorkloadRow.id,
            WorkloadRow.pending_reason,
            WorkloadRow.queue_position,
            WorkloadRow.tenant_position,
            WorkloadRow.pending_wait,
        )
        .where(WorkloadRow.state == "pending")
        .order_by(WorkloadRow.id)
    )
    h = hashlib.sha256()
    with store.read() as s:
        for row in s.execute(q):
            h.update(repr(tuple(row)).encode())
    return h.hexdigest()[:16]


def run(args: argparse.Namespace) -> dict:
    from scheduler_scale import Workgen, build_nodes, build_tenants
    from sqlalchemy import func, select

    from gpupool.clock import ManualClock
    from gpupool.domain import ACTIVE_STATES, User, WorkloadState
    from gpupool.engines.fake.engine import FakeEngine
    from gpupool.engines.fake.executor import FakeExecutor
    from gpupool.scheduler import Policy, SchedulerConfig
    from gpupool.server.loops.scheduler import SchedulerLoop
    from gpupool.server.services import lifecycle
    from gpupool.server.settings import Settings
    from gpupool.store import NodeRepo, TenantRepo, UserRepo, WorkloadRepo, open_store
    from gpupool.store.rows import WorkloadRow
    from gpupool.system import SystemSettings, build_system

    timer = Timer()
    restore = instrument(timer)
    tmp = Path(tempfile.mkdtemp(prefix="gpupool-loop-bench-"))
    url = args.db or f"sqlite:///{tmp / 'gpupool.db'}"
    store = open_store(url)
    clock = ManualClock(1_780_000_000.0)
    executor = FakeExecutor(clock)
    settings = Settings(
        database_url=store.url,
        start_loops=False,
        scheduler=SchedulerConfig(policy=Policy(args.policy), min_runtime_s=60),
    )
    system = build_system(
        SystemSettings(server=settings), FakeEngine(executor), clock=clock, store=store
    )
    ctx = system.app.state.ctx
    rng = random.Random(args.seed)
    nodes = build_nodes(args.nodes, args.gpus_per_node)
    tree, leaves = build_tenants(args.tenants, args.nodes * args.gpus_per_node)
    gen = Workgen(rng, leaves)
    t_start = clock.now()
    with store.write() as s:
        for n in nodes:
            NodeRepo(s).upsert(n)
        for t in tree:
            TenantRepo(s).save(t, t_start)
        for u in range(10):
            UserRepo(s).create(User(f"u{u}"), None, t_start)
    durations: dict[str, float] = {}

    def submit(count: int) -> None:
        with store.write() as s:
            repo = WorkloadRepo(s)
            for _ in range(count):
                w, d = gen.make(clock.now())
                repo.add(dataclasses.replace(w, command=("train",)))
                durations[w.id] = d

    def pending_count() -> int:
        with store.read() as s:
            q = select(func.count()).where(WorkloadRow.state == str(WorkloadState.PENDING))
            return int(s.scalar(q) or 0)

    for i in range(0, args.pending, 2000):
        submit(min(2000, args.pending - i))
    loop = SchedulerLoop(ctx)
    ends: dict[str, float] = {}
    per_cycle: list[dict[str, Any]] = []
    admitted = preempted = 0
    for c in range(args.cycles + 1):
        timer.reset()
        t0, c0 = time.perf_counter(), time.process_time()
        report = loop.run_once()
        timer.wall["total"] = time.perf_counter() - t0
        timer.cpu["total"] = time.process_time() - c0
        timer.wall["pending_info"] -= timer.wall["admit"]
        timer.cpu["pending_info"] -= timer.cpu["admit"]
        digest = None
        if args.digest:
            acts = hashlib.sha256(repr((report.admitted, report.preempted, report.failed)).encode())
            digest = (acts.hexdigest()[:16], stored_digest(store))
        per_cycle.append(
            {
                "wall": dict(timer.wall),
                "cpu": dict(timer.cpu),
                "admitted": len(report.admitted),
                "preempted": len(report.preempted),
                "pending": report.pending,
                "digest": digest,
            }
        )
        if c > 0:
            admitted += len(report.admitted)
            preempted += len(report.preempted)
        now = clock.now()
        for wid in report.started:
            ends[wid] = now + durations.get(wid, 3600.0)
        for wid in report.preempted:  # the fake executor stopped it: settle it (requeued)
            ends.pop(wid, None)
            lifecycle.settle(ctx, wid)
        clock.advance(args.step)
        now = clock.now()
        done = sorted(w for w, e in ends.items() if e <= now)
        if done:
            with store.write() as s:
                repo = WorkloadRepo(s)
                for wid in done:
                    repo.change_state(
                        wid, WorkloadState.SUCCEEDED, now, "done", expect=ACTIVE_STATES
                    )
                    ends.pop(wid)
            for wid in done:
                executor.finish(wid, 0)
        missing = args.pending - pending_count()
        if missing > 0:
            submit(missing)
    restore()
    store.close()
    for f in tmp.iterdir():
        f.unlink()
    tmp.rmdir()
    steady = per_cycle[1:]
    out: dict[str, Any] = {
        "nodes": args.nodes,
        "gpus": args.nodes * args.gpus_per_node,
        "pending": args.pending,
        "cycles": args.cycles,
        "step": args.step,
        "db": url.split(":")[0],
        "admissions_per_cycle": round(admitted / max(1, args.cycles), 1),
        "preemptions": preempted,
        "cold_total_ms": round(per_cycle[0]["wall"]["total"] * 1000, 1),
    }
    for kind in ("wall", "cpu"):
        out[f"p50_{kind}_ms"] = {
            p: round(1000 * statistics.median(x[kind][p] for x in steady), 1) for p in PHASES
        }
    if args.worker:
        out["per_cycle"] = per_cycle
    return out


# -- --baseline: the same scenario with other code, alternately -------------------------------

ROOT = Path(__file__).resolve().parents[1]
ARGS = ("nodes", "gpus_per_node", "pending", "tenants", "cycles", "step", "policy", "seed")


def worker(src: Path, args: argparse.Namespace, hash_seed: int) -> dict:
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", "--json"]
    for k in ARGS:
        argv += ["--" + k.replace("_", "-"), str(getattr(args, k))]
    if args.db:
        argv += ["--db", args.db]
    env = dict(os.environ, PYTHONPATH=str(src), PYTHONHASHSEED=str(hash_seed))
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(proc.stderr)
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    if not r["gpupool"].startswith(str(src)):
        raise SystemExit(f"the worker imported {r['gpupool']}, not the code in {src}")
    return r


def _run_p50(r: dict, kind: str, phase: str) -> float:
    """One run's p50 of `phase` (`kind`: wall or cpu) over its steady cycles."""
    return statistics.median(x[kind][phase] for x in r["per_cycle"][1:])


def gate(result: dict, max_ratio: float | None) -> int:
    """The CI gate (scripts/test): 1 when run_once got slower than `max_ratio` (in the best
    run of each side and in the median of the rounds' ratios: `scheduler_scale.slowdown`) or
    this code decided differently in two rounds."""
    if max_ratio is None:
        return 0
    from scheduler_scale import slowdown

    ratio = slowdown(result["ratio_best_cpu_total"], result["ratio_cpu"]["total"])
    if not result["deterministic"]:
        print("FAILED: the same code decided differently in two rounds", file=sys.stderr)
        return 1
    if ratio > max_ratio:
        print(
            f"FAILED: run_once takes {ratio:.2f}x the CPU time of the baseline (limit {max_ratio})",
            file=sys.stderr,
        )
        return 1
    print(f"ok: run_once {ratio:.2f}x the baseline's CPU time (limit {max_ratio})", file=sys.stderr)
    return 0


def compare(args: argparse.Namespace) -> dict:
    from scheduler_scale import git, resolve_baseline

    tmp = Path(tempfile.mkdtemp(prefix="gpupool-baseline-"))
    if args.baseline.startswith("src:"):
        rev, then_src = args.baseline, Path(args.baseline[4:]).resolve()
    else:
        rev = resolve_baseline(args.baseline)
        git("worktree", "add", "--detach", str(tmp / "tree"), rev)
        then_src = tmp / "tree" / "src"
    now_src = ROOT / "src"
    runs: dict[str, list[dict]] = {"then": [], "now": []}
    try:
        for i in range(args.rounds):
            order = [("then", then_src), ("now", now_src)]
            for name, src in order if i % 2 == 0 else order[::-1]:
                r = worker(src, args, hash_seed=i + 1)
                runs[name].append(r)
                print(f"round {i + 1} {name:>4}: {r['p50_wall_ms']}", file=sys.stderr)
    finally:
        if (tmp / "tree").exists():
            git("worktree", "remove", "--force", str(tmp / "tree"))
        tmp.rmdir()

    def p50(rs: list[dict], kind: str, phase: str) -> float:
        return statistics.median(x[kind][phase] for r in rs for x in r["per_cycle"][1:])

    out: dict[str, Any] = {"baseline": rev, "scenario": {k: getattr(args, k) for k in ARGS}}
    for kind in ("wall", "cpu"):
        for side in ("then", "now"):
            out[f"{side}_p50_{kind}_ms"] = {
                p: round(1000 * p50(runs[side], kind, p), 1) for p in PHASES
            }
        out[f"ratio_{kind}"] = {
            p: round(
                statistics.median(
                    statistics.median(x[kind][p] for x in b["per_cycle"][1:])
                    / max(1e-9, statistics.median(x[kind][p] for x in a["per_cycle"][1:]))
                    for a, b in zip(runs["then"], runs["now"], strict=True)
                ),
                3,
            )
            for p in PHASES
        }
    best = {s: min(_run_p50(r, "cpu", "total") for r in runs[s]) for s in runs}
    out["ratio_best_cpu_total"] = round(best["now"] / max(1e-9, best["then"]), 3)
    digests = [[x["digest"] for x in r["per_cycle"]] for r in runs["now"]]
    out["deterministic"] = all(d == digests[0] for d in digests)
    out["cold_total_ms"] = {s: runs[s][0]["cold_total_ms"] for s in runs}
    then_d = [x["digest"] for x in runs["then"][0]["per_cycle"]]
    now_d = [x["digest"] for x in runs["now"][0]["per_cycle"]]
    out["same_decisions"] = [a[0] for a in then_d] == [b[0] for b in now_d]
    out["same_stored_reasons"] = [a[1] for a in then_d] == [b[1] for b in now_d]
    out["admissions_per_cycle"] = runs["now"][0]["admissions_per_cycle"]
    out["cpus"] = os.cpu_count()
    out["python"] = platform.python_version()
    with contextlib.suppress(OSError):
        out["load_avg_1m_at_end"] = os.getloadavg()[0]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=500)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--pending", type=int, default=5000)
    p.add_argument("--tenants", type=int, default=20)
    p.add_argument("--cycles", type=int, default=20)
    p.add_argument("--step", type=float, default=60.0, help="virtual seconds between cycles")
    p.add_argument("--policy", default="fair")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--db", help="database URL (default: a SQLite file in a temp dir)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--baseline", metavar="REV", help="compare with commit REV or src:DIR")
    p.add_argument("--rounds", type=int, default=2, help="with --baseline: runs of each")
    p.add_argument(
        "--max-ratio",
        type=float,
        metavar="R",
        help="with --baseline: exit 1 when run_once's CPU time (p50 of a run, the best run of "
        "each side) now / then is above R, or the same code decided differently in two rounds",
    )
    p.add_argument("--digest", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.baseline:
        from scheduler_scale import NoBaseline

        try:
            result = compare(args)
        except NoBaseline as e:
            print(f"SKIPPED: {e}", file=sys.stderr)
            return 0
        print(json.dumps(result) if args.json else json.dumps(result, indent=1))
        return gate(result, args.max_ratio)
    if args.worker:
        args.digest = True
    result = run(args)
    if args.worker:
        import gpupool

        result["gpupool"] = str(Path(gpupool.__file__).resolve())
    print(json.dumps(result) if args.json else json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
