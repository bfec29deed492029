"""`gpupool tenant budget`, `gpupool reservation` and `gpupool usage --export` (issue 35
parts 2-4) against a served app: tables within 80 columns, --json, clear refusals."""

from __future__ import annotations

import csv
import io
import json

from gpupool.store import UsageRepo
from tests.cli.test_logs_requeued import gp, served  # noqa: F401 - the fixture


def _fits(text: str) -> bool:
    return max(len(line) for line in text.splitlines()) <= 80


def test_budget_set_ls_rm(served):  # noqa: F811
    ctx, _ = served
    r = gp(ctx, "root", "tenant", "budget", "set", "lab", "100", "--mode", "hold")
    assert r.exit_code == 0, r.output
    assert "lab 100 GPU-hours per month (hold); used 0 in 2026-05" in r.output
    r = gp(ctx, "tina", "tenant", "budget", "ls")
    assert r.exit_code == 0 and "0/100 h" in r.output and "hold" in r.output and _fits(r.output)
    (b,) = json.loads(gp(ctx, "tina", "tenant", "budget", "ls", "--json").output)
    assert b["tenant"] == "lab" and b["resets_at"] > b["period_start"]
    r = gp(ctx, "tina", "tenant", "budget", "set", "lab", "5")
    assert r.exit_code == 1 and "only an admin may set budgets" in r.output
    r = gp(ctx, "root", "tenant", "budget", "set", "lab", "5", "--mode", "never")
    assert r.exit_code == 1 and "HTTP 422" in r.output
    r = gp(ctx, "root", "tenant", "budget", "rm", str(b["id"]))
    assert r.exit_code == 0 and "removed" in r.output
    assert "no budgets" in gp(ctx, "root", "tenant", "budget", "ls").output


def test_reservation_add_ls_rm(served):  # noqa: F811
    ctx, _ = served
    args = ["reservation", "add", "lab", "2", "--start", "2026-05-29 09:00", "--for", "3h"]
    r = gp(ctx, "tina", *args, "--name", "ml101")
    assert r.exit_code == 0, r.output
    assert "2 GPUs for lab from 2026-05-29 09:00 to 2026-05-29 12:00 UTC" in r.output
    r = gp(ctx, "ann", "reservation", "ls")
    assert r.exit_code == 0 and "upcoming" in r.output and _fits(r.output)
    (res,) = json.loads(gp(ctx, "ann", "reservation", "ls", "--json").output)
    assert res["name"] == "ml101" and len(res["kept"]) == 2
    r = gp(ctx, "root", "reservation", "add", "other", "1", "--start", "2020-01-01", "--for", "1h")
    assert r.exit_code == 1 and "starts in the past" in r.output
    r = gp(ctx, "root", "reservation", "add", "lab", "1", "--start", "tomorrow", "--for", "1h")
    assert r.exit_code == 2 and "give a time like" in r.output
    r = gp(ctx, "root", "reservation", "add", "lab", "1", "--start", "2026-05-29 09:00")
    assert r.exit_code == 2 and "give --end or --for" in r.output
    r = gp(ctx, "ann", "reservation", "rm", res["id"])
    assert r.exit_code == 1 and "HTTP 403" in r.output
    assert gp(ctx, "tina", "reservation", "rm", res["id"]).exit_code == 0
    assert "no reservations" in gp(ctx, "ann", "reservation", "ls").output


def test_usage_export_csv_and_json(served):  # noqa: F811
    ctx, _ = served
    with ctx.store.write() as s:
        for wid, tenant, user, h in (("w1", "lab", "ann", 2.0), ("w2", "other", "otto", 1.5)):
            UsageRepo(s).add(
                workload_id=wid,
                tenant=tenant,
                user=user,
                day="2026-05-20",
                gpu_seconds_allocated=h * 3600,
            )
    r = gp(ctx, "root", "usage", "--export", "csv", "--by", "user", "--from", "2026-05-01")
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [(x["user"], x["gpu_hours_allocated"], x["energy_kwh"]) for x in rows] == [
        ("ann", "2.000000", "n/a"),
        ("otto", "1.500000", "n/a"),
        ("total", "3.500000", "n/a"),
    ]
    rep = json.loads(gp(ctx, "root", "usage", "--export", "json", "--by", "model").stdout)
    assert rep["total"]["gpu_hours_allocated"] == 3.5
    assert [x["key"] for x in rep["rows"]] == ["unknown"]  # no such workloads: no model known
    r = gp(ctx, "root", "usage", "--export", "xml")
    assert r.exit_code == 2 and "give csv or json" in r.output


def test_the_python_clients_sync_and_async(served):  # noqa: F811
    import asyncio
    import os

    from gpupool.api.budgets import BudgetIn, ReservationIn
    from gpupool.client import AsyncClient, Client
    from gpupool.server.services.accounts import issue_token

    ctx, _ = served
    url = os.environ["GPUPOOL_URL"]
    token = issue_token(ctx, "root", "sdk", None).token
    now = ctx.clock.now()
    with Client(url, token) as c:
        b = c.set_budget(BudgetIn(tenant="lab", gpu_hours=10, mode="borrow-only"))
        assert c.budgets()[0].mode == "borrow-only"
        r = c.add_reservation(ReservationIn(tenant="lab", gpus=1, start=now + 60, end=now + 120))
        assert [x.id for x in c.reservations()] == [r.id]
        assert c.chargeback("user").total.gpu_hours_allocated == 0

    async def go() -> None:
        async with AsyncClient(url, token) as a:
            assert [x.id for x in await a.budgets("lab")] == [b.id]
            await a.delete_reservation(r.id)
            await a.delete_budget(b.id)
            assert await a.reservations() == [] and await a.budgets() == []
            assert (await a.chargeback("model")).rows == []

    asyncio.run(go())
