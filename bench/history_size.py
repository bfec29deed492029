"""How big the GPU history gets: N GPUs x 90 days at the default retention, on SQLite and
PostgreSQL.

Fills `gpu_history` to its steady state through `HistoryRepo` (per-minute rows for the last two
days, hourly rows for 90 days: `Retention().rows_per_gpu` rows per GPU), then times one history
pass's store work (write a minute of every GPU, roll the last hour up, prune) and the queries
behind the dashboard's Usage chart (24 h of minutes, 30 days of hours, 120 slots per GPU), and
records the table's size on disk (indexes included).

    python bench/history_size.py --gpus 8,64,256 [--postgres URL] [--out FILE.md]

The PostgreSQL URL must point at a scratch database: its public schema is dropped first.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import create_engine, text

from gpupool.store import GpuPeriod, HistoryRepo, Retention, open_store

BATCH = 20_000


def _periods(uuids: list[str], starts: range, rnd: random.Random) -> list[GpuPeriod]:
    return [
        GpuPeriod(
            u,
            t,
            12,
            util=rnd.uniform(0, 100),
            util_max=100.0,
            memory_mib=rnd.uniform(0, 80_000),
            memory_mib_max=80_000.0,
            power_w=rnd.uniform(70, 700),
            temperature_c=rnd.uniform(30, 80),
            node=f"node-{i // 8}",
        )
        for i, u in enumerate(uuids)
        for t in starts
    ]


def fill(url: str, gpus: int, now: int) -> dict[str, float]:
    ret = Retention()
    store = open_store(url)
    rnd = random.Random(gpus)
    uuids = [f"GPU-{i:08x}-bench" for i in range(gpus)]
    t0 = time.perf_counter()
    fine_from = now - ret.fine_keep_s
    hours = range(now - ret.coarse_keep_s, now - now % ret.coarse_s, ret.coarse_s)
    minutes = range(fine_from, now - ret.fine_s, ret.fine_s)
    for res, starts in ((ret.coarse_s, hours), (ret.fine_s, minutes)):
        for i in range(0, len(starts), max(1, BATCH // gpus)):
            chunk = starts[i : i + max(1, BATCH // gpus)]
            with store.write() as s:
                HistoryRepo(s).add(_periods(uuids, chunk, rnd), res)
    fill_s = time.perf_counter() - t0
    # one pass of the history loop at the steady state
    t1 = time.perf_counter()
    with store.write() as s:
        repo = HistoryRepo(s)
        repo.add(_periods(uuids, range(now - ret.fine_s, now, ret.fine_s), rnd), ret.fine_s)
        repo.rollup(now - ret.coarse_s, now)
        repo.prune(now + ret.fine_s, ret)
    pass_s = time.perf_counter() - t1
    # what the dashboard's Usage chart reads (120 slots): 24 h of minutes, 30 d of hours
    chart = {}
    for name, range_s, res in (
        ("chart_24h_s", 86400, ret.fine_s),
        ("chart_30d_s", 30 * 86400, ret.coarse_s),
    ):
        t2 = time.perf_counter()
        with store.read() as s:
            got = HistoryRepo(s).buckets(
                uuids, start=now - range_s, width=range_s // 120, count=120, resolution_s=res
            )
        chart[name] = time.perf_counter() - t2
        assert len(got) == gpus
    with store.read() as s:
        per_gpu = HistoryRepo(s).rows_per_gpu()
    rows = sum(sum(v.values()) for v in per_gpu.values())
    most = max(sum(v.values()) for v in per_gpu.values())
    assert most <= ret.rows_per_gpu, (most, ret.rows_per_gpu)
    if store.dialect == "sqlite":
        with store.engine.connect() as c:
            c.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
            c.exec_driver_sql("ANALYZE")
            n = c.exec_driver_sql(
                "SELECT SUM(pgsize) FROM dbstat WHERE name IN "
                "('gpu_history', 'sqlite_autoindex_gpu_history_1', 'ix_gpu_history_resolution_t')"
            ).scalar()
        size = float(n or 0)
    else:
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
            c.execute(text("VACUUM ANALYZE gpu_history"))
            size = float(c.execute(text("SELECT pg_total_relation_size('gpu_history')")).scalar())
    store.close()
    return {
        "rows": rows,
        "rows_per_gpu": most,
        "bytes": size,
        "fill_s": fill_s,
        "pass_s": pass_s,
        **chart,
    }


def _reset_pg(url: str) -> None:
    eng = create_engine(url)
    with eng.begin() as c:
        c.execute(text("DROP SCHEMA IF EXISTS public CASCADE"))
        c.execute(text("CREATE SCHEMA public"))
    eng.dispose()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", default="8,64,256", help="GPU counts, comma-separated")
    ap.add_argument("--postgres", default=os.environ.get("GPUPOOL_TEST_POSTGRES_URL"))
    ap.add_argument("--out", type=Path, default=None, help="append a Markdown table here")
    args = ap.parse_args()
    counts = [int(x) for x in args.gpus.split(",")]
    now = int(time.time()) // 3600 * 3600
    lines = [
        f"### {time.strftime('%Y-%m-%d')} — {platform.node()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}",
        "",
        f"Retention: minutes 2 days, hours 90 days = {Retention().rows_per_gpu} rows per GPU "
        "at most. Size = table + primary key + index on disk.",
        "",
        "| database | GPUs | rows | rows/GPU | size | bytes/row | fill | one pass | chart 24 h "
        "| chart 30 d |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    dbs = [("SQLite", None)] + ([("PostgreSQL", args.postgres)] if args.postgres else [])
    for name, pg in dbs:
        for n in counts:
            with tempfile.TemporaryDirectory() as tmp:
                if pg:
                    _reset_pg(pg)
                url = pg or f"sqlite:///{tmp}/history.db"
                r = fill(url, n, now)
            row = (
                f"| {name} | {n} | {r['rows']:,.0f} | {r['rows_per_gpu']:,.0f} | "
                f"{r['bytes'] / 2**20:,.1f} MiB | {r['bytes'] / r['rows']:.0f} | "
                f"{r['fill_s']:.1f} s | {r['pass_s'] * 1000:.0f} ms | "
                f"{r['chart_24h_s'] * 1000:.0f} ms | {r['chart_30d_s'] * 1000:.0f} ms |"
            )
            print(row, flush=True)
            lines.append(row)
    report = "\n".join(lines) + "\n"
    if args.out:
        with args.out.open("a") as f:
            f.write("\n" + report)
    else:
        sys.stdout.write("\n" + report)


if __name__ == "__main__":
    main()
