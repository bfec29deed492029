"""Usage that telemetry never measured is told from usage measured idle (issue 30, item 10):
the accounting loop records which GPU-seconds had a busy fraction, and the report gives no
efficiency where nothing was measured (the CLI then shows -, tests/cli/test_client.py)."""

from __future__ import annotations

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, text

from gpupool.server.loops.accounting import AccountingLoop
from gpupool.store import UsageRepo, open_store
from gpupool.store.db import MIGRATIONS
from tests.server.test_loops_culler_accounting import start
from tests.store.databases import DB_PARAMS, store_url


def test_unmeasured_usage_has_no_efficiency_and_measured_idle_has_zero(world):
    busy: dict[str, float | None] = {}
    acc = AccountingLoop(world.ctx, lambda a, since: busy.get(a.workload_id))
    idle = start(world, gpus=1)
    unknown = start(world, gpus=1)
    busy[idle] = 0.0  # measured: the GPU sat idle
    acc.run_once()
    world.clock.advance(100)
    acc.run_once()
    with world.ctx.store.read() as s:
        rows = {u.key: u for u in UsageRepo(s).rollup("workload")}
    assert rows[idle].gpu_seconds_measured == rows[idle].gpu_seconds_allocated > 0
    assert rows[idle].efficiency == 0.0
    assert rows[unknown].gpu_seconds_allocated > 0 and rows[unknown].gpu_seconds_measured == 0
    assert rows[unknown].efficiency is None
    report = world.get("admin", "/usage", params={"group_by": "user"}).json()
    (row,) = report["rows"]  # both are ann's: measured in part
    assert row["gpu_seconds_measured"] == rows[idle].gpu_seconds_measured
    assert row["efficiency"] == 0.0


@pytest.mark.parametrize("kind", DB_PARAMS)
def test_migration_0014_counts_earlier_busy_rows_as_measured(kind, tmp_path):
    url = store_url(kind, tmp_path)
    engine = create_engine(url)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with engine.connect() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0013")
        conn.commit()
        for wid, busy in (("w-busy", 50.0), ("w-zero", 0.0)):
            conn.execute(
                text(
                    'INSERT INTO usage (workload_id, tenant, "user", day, '
                    "gpu_seconds_allocated, gpu_seconds_busy, gpu_memory_mib_seconds, "
                    "gpu_memory_mib_max) VALUES (:w, 'lab', 'ann', '2026-05-01', 100, :b, 0, 0)"
                ),
                {"w": wid, "b": busy},
            )
        conn.commit()
        command.upgrade(cfg, "head")
        conn.commit()
    engine.dispose()
    store = open_store(url)
    try:
        with store.read() as s:
            rows = {u.key: u for u in UsageRepo(s).rollup("workload")}
    finally:
        store.close()
    assert rows["w-busy"].gpu_seconds_measured == 100 and rows["w-busy"].efficiency == 0.5
    assert rows["w-zero"].gpu_seconds_measured == 0 and rows["w-zero"].efficiency is None
