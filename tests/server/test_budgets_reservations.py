"""Budgets, advance reservations and chargeback through the API and the scheduler loop
(issue 35 parts 2-4), over a real store (SQLite and PostgreSQL) and a ManualClock."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import func, select

from gpupool.server.loops.scheduler import SchedulerLoop
from gpupool.store import EventRepo, UsageRepo
from gpupool.store.rows import UsageRow

HOUR = 3600.0


def day(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d")


def use(world, tenant: str, user: str, gpu_hours: float, wid: str = "w-old", at=None) -> None:
    with world.ctx.store.write() as s:
        UsageRepo(s).add(
            workload_id=wid,
            tenant=tenant,
            user=user,
            day=day(at if at is not None else world.clock.now()),
            gpu_seconds_allocated=gpu_hours * HOUR,
            gpu_seconds_busy=gpu_hours * HOUR / 2,
            gpu_memory_mib_seconds=gpu_hours * HOUR * 1024,
        )


def state(world, wid: str) -> dict:
    return world.get("admin", f"/workloads/{wid}").json()


# -- bad input -----------------------------------------------------------------------------


def test_bad_budgets_and_reservations_get_a_clear_4xx(world):
    now = world.clock.now()
    r = world.put("admin", "/budgets", json={"tenant": "lab", "gpu_hours": -1})
    assert r.status_code == 422 and "gpu_hours" in r.text
    r = world.put("admin", "/budgets", json={"tenant": "nope", "gpu_hours": 1})
    assert r.status_code == 422 and "unknown tenant" in r.json()["detail"]
    r = world.put("tenant-admin", "/budgets", json={"tenant": "lab", "gpu_hours": 1})
    assert r.status_code == 403

    def book(role="admin", **kw):
        body = {"tenant": "lab", "gpus": 1, "start": now + HOUR, "end": now + 2 * HOUR, **kw}
        return world.post(role, "/reservations", json=body)

    r = book(start=now - 2 * HOUR, end=now + HOUR)
    assert r.status_code == 422 and "starts in the past" in r.json()["detail"]
    r = book(end=now + HOUR)
    assert r.status_code == 422 and "no length" in r.json()["detail"]
    r = book(gpus=3)  # lab's guarantee is 2 GPUs
    assert r.status_code == 422 and "guarantee" in r.json()["detail"]
    r = book(gpus=5)  # more than its limit or the pool
    assert r.status_code == 422
    r = book(model="A100")
    assert r.status_code == 422 and "A100" in r.json()["detail"]
    assert book("member").status_code == 403
    first = book("tenant-admin", gpus=2)
    assert first.status_code == 201, first.text
    assert first.json()["state"] == "upcoming" and len(first.json()["kept"]) == 2
    r = book(gpus=1, start=now + 1.5 * HOUR, end=now + 3 * HOUR)  # lab: 2 + 1 > guarantee
    assert r.status_code == 422 and "beside the 2 GPUs it has booked" in r.json()["detail"]
    # other asks for more GPUs than the pool has left in that window
    q = {"quota": {"guaranteed": 3, "limit": 4}}
    assert world.patch("admin", "/tenants/other", json=q).status_code == 200
    r = book(tenant="other", gpus=3, start=now + 1.5 * HOUR, end=now + 3 * HOUR)
    assert r.status_code == 409 and "overlaps" in r.json()["detail"], r.text
    later = book(tenant="other", gpus=3, start=now + 2 * HOUR, end=now + 3 * HOUR)
    assert later.status_code == 201, later.text  # back to back: no overlap
    rid = first.json()["id"]
    assert world.delete("outsider", f"/reservations/{rid}").status_code == 404
    assert world.delete("viewer", f"/reservations/{rid}").status_code == 403
    assert world.delete("tenant-admin", f"/reservations/{rid}").status_code == 204


# -- budgets -------------------------------------------------------------------------------


def test_hold_budget_holds_new_work_until_the_reset_across_a_restart(world):
    r = world.put("admin", "/budgets", json={"tenant": "lab", "gpu_hours": 10, "mode": "hold"})
    assert r.status_code == 200, r.text
    b = r.json()
    assert b["used_gpu_hours"] == 0 and not b["over"] and b["period_label"] == "2026-05"
    use(world, "lab", "ann", 12.5)
    wid = world.submit(gpus=1)["id"]
    world.scheduler.run_once()
    got = state(world, wid)
    assert got["state"] == "pending"
    why = got["pending"]["reason"]
    assert "used 12.5 of its 10 GPU-hours for 2026-05" in why
    assert "resets at 2026-06-01 00:00 UTC" in why
    (b,) = world.get("tenant-admin", "/budgets").json()
    assert b["over"] and b["used_gpu_hours"] == 12.5
    assert world.get("member", "/budgets").json() == []  # tenant-admins read them
    # other tenants' work is not held
    other = world.submit("outsider", tenant="other", gpus=1)["id"]
    world.scheduler.run_once()
    assert state(world, other)["state"] in ("admitted", "starting", "running")

    def spent_events():
        with world.ctx.store.read() as s:
            return [e for _, e in EventRepo(s).list(kind="budget.spent")]

    assert len(spent_events()) == 1
    # a restart (a new loop: nothing in memory) mid-period: still held, announced once
    loop = SchedulerLoop(world.ctx)
    loop.run_once()
    assert state(world, wid)["state"] == "pending" and len(spent_events()) == 1
    metrics = world.scrape()
    assert 'gpupool_budget_over{mode="hold",model="",period="month",tenant="lab"} 1.0' in metrics
    # the next month the budget resets: the work runs
    world.clock.set(datetime(2026, 6, 1, 0, 0, 5, tzinfo=UTC).timestamp())
    loop.run_once()
    assert state(world, wid)["state"] in ("admitted", "starting", "running")


def test_warn_budget_changes_nothing_but_says_so(world):
    world.put("admin", "/budgets", json={"tenant": "lab", "gpu_hours": 1, "mode": "warn"})
    use(world, "lab", "ann", 2)
    wid = world.submit(gpus=1)["id"]
    world.scheduler.run_once()
    assert state(world, wid)["state"] in ("admitted", "starting", "running")
    msgs = [e["message"] for e in world.get("admin", "/events?kind=budget.spent").json()]
    assert msgs and "its work runs as before" in msgs[0]


# -- reservations --------------------------------------------------------------------------


def test_reservation_keeps_gpus_across_a_restart_and_holders_get_them_at_the_start(world):
    now = world.clock.now()
    r = world.post(
        "admin",
        "/reservations",
        json={"tenant": "lab", "gpus": 1, "start": now + HOUR, "end": now + 3 * HOUR},
    )
    assert r.status_code == 201, r.text
    kept = r.json()["kept"]
    # other's work without a max runtime, not preemptible: it may not take the kept GPU
    ids = [
        world.submit("outsider", tenant="other", gpus=1, preemptible=False)["id"] for _ in range(4)
    ]
    world.scheduler.run_once()
    states = [state(world, i)["state"] for i in ids]
    assert states.count("pending") == 1, states
    (waiting,) = [i for i, s in zip(ids, states, strict=True) if s == "pending"]
    assert "kept for reservation" in state(world, waiting)["pending"]["reason"]
    # a restart mid-window: a new loop still keeps it, and the holder gets it at the start
    world.clock.set(now + HOUR + 1)
    loop = SchedulerLoop(world.ctx)
    holder = world.submit(gpus=1, preemptible=False)["id"]
    loop.run_once()
    got = state(world, holder)
    assert got["state"] in ("admitted", "starting", "running"), got
    assert {f"{s['node']}:{s['gpu_index']}" for s in got["allocation"]["shares"]} == set(kept)
    assert state(world, waiting)["state"] == "pending"
    listing = world.get("member", "/reservations").json()
    assert [x["state"] for x in listing] == ["active"]
    assert world.get("outsider", "/reservations").json() == []  # other sees only its own


# -- chargeback ----------------------------------------------------------------------------


def test_chargeback_sums_match_the_accounting_tables_exactly(world):
    t = world.clock.now()
    use(world, "lab", "ann", 1.25, "w1", at=t - 3 * 86400)
    use(world, "lab", "tina", 0.5, "w2", at=t - 86400)
    use(world, "other", "otto", 3.0, "w3", at=t)
    use(world, "lab", "ann", 2.0, "w1", at=t)
    with world.ctx.store.read() as s:
        alloc, busy, mem = s.execute(
            select(
                func.sum(UsageRow.gpu_seconds_allocated),
                func.sum(UsageRow.gpu_seconds_busy),
                func.sum(UsageRow.gpu_memory_mib_seconds),
            )
        ).one()
    for by in ("tenant", "user", "model"):
        rep = world.get("admin", f"/usage/chargeback?by={by}").json()
        assert sum(r["gpu_hours_allocated"] for r in rep["rows"]) * HOUR == alloc
        assert rep["total"]["gpu_hours_allocated"] * HOUR == alloc
        assert rep["total"]["gpu_hours_busy"] * HOUR == busy
        assert rep["total"]["gpu_memory_gib_hours"] * HOUR * 1024 == mem
        assert all(r["energy_kwh"] is None for r in rep["rows"])
    by_tenant = {r["key"]: r for r in world.get("admin", "/usage/chargeback").json()["rows"]}
    assert by_tenant["lab"]["gpu_hours_allocated"] == 3.75 and by_tenant["lab"]["workloads"] == 2
    rng = world.get("admin", f"/usage/chargeback?by=user&from={day(t - 86400)}&to={day(t)}")
    assert {r["key"]: r["gpu_hours_allocated"] for r in rng.json()["rows"]} == {
        "ann": 2.0,
        "otto": 3.0,
        "tina": 0.5,
    }
    mine = world.get("member", "/usage/chargeback").json()["rows"]
    assert [r["key"] for r in mine] == ["lab"]  # ann reads lab only
    csv = world.get("admin", "/usage/chargeback?format=csv")
    assert csv.headers["content-type"].startswith("text/csv")
    lines = csv.text.splitlines()
    assert lines[0].startswith("tenant,gpu_hours_allocated") and lines[-1].startswith("total,")
    assert lines[1].split(",")[5] == "n/a"
    bad = world.get("admin", "/usage/chargeback?from=2026-02-30")
    assert bad.status_code == 422


def test_chargeback_is_scoped_as_the_usage_report(world):
    """The same scope as GET /usage: a user with no tenant role sees only their own usage, a
    tenant one cannot read is refused, and days out of order are a 422."""
    from gpupool.domain import User
    from gpupool.server.services.accounts import issue_token
    from gpupool.store import UserRepo

    with world.ctx.store.write() as s:
        UserRepo(s).create(User("nora"), "x", world.clock.now())
    world.tokens["roleless"] = issue_token(world.ctx, "nora", "test", None).token
    use(world, "lab", "nora", 1.0, "w-nora")
    use(world, "lab", "ann", 2.0, "w-ann")
    for path in ("/usage/chargeback?by=user", "/usage?group_by=user"):
        rows = world.get("roleless", path).json()["rows"]
        assert [(r["key"], r["gpu_hours_allocated"]) for r in rows] == [("nora", 1.0)], path
        assert world.get("roleless", path + "&tenant=lab").status_code == 403, path
        bad = world.get("admin", path + "&from=2026-05-02&to=2026-05-01")
        assert bad.status_code == 422 and "swap them" in bad.text, path


def test_work_on_reserved_gpus_is_told_ahead_once_across_a_restart(world):
    now = world.clock.now()
    # other's preemptible work takes every whole GPU, then lab books 2 of them for later
    ids = [world.submit("outsider", tenant="other", gpus=1)["id"] for _ in range(3)]
    world.scheduler.run_once()
    r = world.post(
        "admin",
        "/reservations",
        json={"tenant": "lab", "gpus": 2, "start": now + HOUR, "end": now + 2 * HOUR},
    )
    assert r.status_code == 201, r.text
    kept = set(r.json()["kept"])
    on_kept = [
        i
        for i in ids
        if {f"{s['node']}:{s['gpu_index']}" for s in state(world, i)["allocation"]["shares"]} & kept
    ]

    def notices():
        return world.get("admin", "/events?kind=workload.reservation_notice").json()

    world.scheduler.run_once()
    assert notices() == []  # not within 10 minutes of the start yet
    world.clock.set(now + HOUR - 300)
    world.scheduler.run_once()
    SchedulerLoop(world.ctx).run_once()  # a restart: told once all the same
    got = notices()
    assert sorted(e["workload_id"] for e in got) == sorted(on_kept) and len(on_kept) >= 1
    assert "will be stopped at" in got[0]["message"] and "reservation" in got[0]["message"]
    # at the start they are preempted, with the reservation as the reason
    world.clock.set(now + HOUR + 1)
    world.submit(gpus=1)  # lab's work waits for its reservation
    rep = world.scheduler.run_once()
    assert sorted(rep.preempted) == sorted(on_kept)


def test_the_forecast_reads_budget_holds_and_reservations(world):
    from gpupool.server.loops.forecast import ForecastLoop

    world.clock.set(datetime(2026, 5, 31, 23, 0, tzinfo=UTC).timestamp())
    world.put("admin", "/budgets", json={"tenant": "lab", "gpu_hours": 1, "mode": "hold"})
    use(world, "lab", "ann", 2)
    wid = world.submit(gpus=1)["id"]
    world.scheduler.run_once()
    loop = world.ctx.loops.get("forecast")
    assert isinstance(loop, ForecastLoop)
    loop.run_once()
    f = state(world, wid)["pending"]["forecast"]
    reset = datetime(2026, 6, 1, tzinfo=UTC)
    assert f["expected"] is not None
    assert datetime.fromisoformat(f["expected"].replace("Z", "+00:00")) >= reset
