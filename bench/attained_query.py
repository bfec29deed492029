"""Cost of the kept attained service in the scheduler loop's snapshot (gpupool.store.attained).

A store (SQLite file, or PostgreSQL with `--url`) holds `--pending` pending workloads, of which
`--requeued` declare checkpointing and were preempted (1-3 earlier attempts each, some of them
starts that did not take), and `--history` ended workloads with one released allocation each
(a long-lived server's allocations table). Timed, `--runs` times each: `kept_service()` (the
new query, once per scheduling pass), and for scale the two reads the snapshot already did,
`WorkloadRepo.pending()` and `UsageRepo.attained_by_tenant()`. Prints the query plan.

    python bench/attained_query.py --json
    python bench/attained_query.py --url postgresql+psycopg://USER@HOST/DB --json
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import insert, text

from gpupool.store import UsageRepo, WorkloadRepo, kept_service, open_store
from gpupool.store.attained import SCHEDULED_STATES
from gpupool.store.rows import (
    AllocationRow,
    NodeRow,
    ShareRow,
    TenantRow,
    UserRow,
    WorkloadRow,
)

T0 = 1_780_000_000.0


def fill(store, pending: int, requeued: int, history: int, seed: int) -> None:
    rng = random.Random(seed)
    workloads: list[dict] = []
    allocs: list[dict] = []
    shares: list[dict] = []
    aid = 0

    def workload(wid: str, state: str, ckpt: bool, preemptions: int) -> None:
        workloads.append(
            dict(
                id=wid, tenant=f"t{rng.randrange(20)}", owner="ann", kind="job", state=state,
                gpus=2, gpu_milli=0, gpu_memory_mib=0, cpu_milli=0, memory_mib=0, nodes=1,
                priority=0, preemptible=True, requeue_on_preemption=True, checkpointing=ckpt,
                submitted_at=T0, command=["x"], preemptions=preemptions, start_attempts=0,
            )
        )  # fmt: skip

    def attempt(wid: str, since: float, end: float, released_as: str) -> None:
        nonlocal aid
        aid += 1
        allocs.append(
            dict(
                id=aid, workload_id=wid, node="n1", since=since, released_at=end,
                released_as=released_as, cpu_milli=0, memory_mib=0,
            )
        )  # fmt: skip
        for g in (0, 1):
            shares.append(
                dict(
                    allocation_id=aid, gpu_uuid=f"GPU-{g}", node="n1", gpu_index=g, milli=1000,
                    memory_mib=1, enforcement="policed",
                )
            )  # fmt: skip

    for i in range(pending):
        wid = f"w-p{i:08d}"
        if i < requeued:
            n = rng.randint(1, 3)
            workload(wid, "pending", True, n)
            t = T0
            for _ in range(n):
                attempt(wid, t, t + rng.uniform(300, 7200), "preempted")
                t += 10_000
            if rng.random() < 0.3:
                attempt(wid, t, t + 30, "pending")  # a start that did not take
        else:
            workload(wid, "pending", rng.random() < 0.3, 0)
    for i in range(history):
        wid = f"w-h{i:08d}"
        workload(wid, "succeeded", rng.random() < 0.3, 0)
        attempt(wid, T0, T0 + rng.uniform(60, 86400), "succeeded")
    with store.write() as s:
        s.execute(insert(NodeRow), [dict(name="n1", cpu_milli=0, memory_mib=0, labels={})])
        s.execute(
            insert(TenantRow),
            [dict(name=f"t{i}", guaranteed_milli=0, weight=1.0, guaranteed_by_model={})
             for i in range(20)],
        )  # fmt: skip
        s.execute(insert(UserRow), [dict(name="ann", admin=False, disabled=False)])
        for table, rows in ((WorkloadRow, workloads), (AllocationRow, allocs), (ShareRow, shares)):
            for i in range(0, len(rows), 5000):
                s.execute(insert(table), rows[i : i + 5000])
    if store.dialect == "postgresql":  # statistics, as autovacuum keeps them (gpupool never
        with store.engine.connect() as c:  # runs ANALYZE on SQLite: its planner goes without)
            c.execute(text("ANALYZE"))
            c.commit()


def timed(fn, runs: int) -> dict:
    ms = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ms.append((time.perf_counter() - t0) * 1000)
    ms.sort()
    return {
        "median_ms": round(statistics.median(ms), 2),
        "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 2),
    }


def plan(store) -> str:
    from sqlalchemy.dialects import postgresql, sqlite

    from gpupool.store import attained

    captured: list = []

    class Spy:
        def execute(self, q):
            captured.append(q)
            return []

    attained.kept_service(Spy())  # type: ignore[arg-type]
    q = captured[0]
    dialect = postgresql.dialect() if store.dialect == "postgresql" else sqlite.dialect()
    sql = str(q.compile(dialect=dialect, compile_kwargs={"literal_binds": True}))
    prefix = "EXPLAIN " if store.dialect == "postgresql" else "EXPLAIN QUERY PLAN "
    with store.engine.connect() as c:
        rows = c.execute(text(prefix + sql)).all()
    return "\n".join(" ".join(str(x) for x in r) for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="a PostgreSQL URL (an empty database); default SQLite file")
    ap.add_argument("--pending", type=int, default=10_000)
    ap.add_argument("--requeued", type=int, default=1_000)
    ap.add_argument("--history", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    tmp = tempfile.TemporaryDirectory()
    url = a.url or f"sqlite:///{Path(tmp.name) / 'bench.db'}"
    store = open_store(url)
    fill(store, a.pending, a.requeued, a.history, a.seed)
    with store.read() as s:
        kept = kept_service(s)
    assert len(kept) == a.requeued, (len(kept), a.requeued)

    def run(fn):
        def go():
            with store.read() as s:
                fn(s)

        return go

    out = {
        "database": store.dialect,
        "pending": a.pending,
        "requeued": a.requeued,
        "history": a.history,
        "runs": a.runs,
        "python": platform.python_version(),
        "machine": platform.node(),
        "kept_service": timed(run(lambda s: kept_service(s, states=SCHEDULED_STATES)), a.runs),
        "pending_read": timed(run(lambda s: WorkloadRepo(s).pending()), max(5, a.runs // 5)),
        "attained_by_tenant": timed(run(lambda s: UsageRepo(s).attained_by_tenant()), a.runs),
        "plan": plan(store),
    }
    store.close()
    if a.json:
        json.dump(out, sys.stdout, indent=2)
        print()
    else:
        for k, v in out.items():
            print(f"{k}: {v}")


if __name__ == "__main__":
    main()
