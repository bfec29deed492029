"""The history loop over a real store (SQLite and PostgreSQL) and a ManualClock: telemetry
samples become per-minute rows, hours are rolled up, old rows pruned; a new app on the same
database still shows the history on the dashboard's 30-day chart."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from gpupool.domain import Node
from gpupool.engines.fake.engine import FakeEngine
from gpupool.server.loops.history import HistoryLoop
from gpupool.server.settings import Settings
from gpupool.store import GpuPeriod, HistoryRepo, NodeRepo, Retention, open_store
from gpupool.system import SystemSettings, build_system
from gpupool.telemetry import Sampler, SimulatedSource

H = 3600


def gpu_world(world, spec: str = "2xH100"):
    """A simulated host registered as node `sim` in the store, sampled by a Sampler."""
    src = SimulatedSource(spec, clock=world.clock, hostname="sim")
    snap = src.snapshot()
    with world.ctx.store.write() as s:
        NodeRepo(s).upsert(Node("sim", tuple(g.to_domain() for g in snap.gpus), 64000, 512000))
    return src, Sampler(src, clock=world.clock, interval_s=10)


def to_hour(world) -> None:
    """Move the clock to the start of the next hour."""
    now = world.clock.now()
    world.clock.set(now - now % H + H)


def test_samples_become_minutes_and_hours_with_exact_means(world):
    src, sampler = gpu_world(world)
    loop = HistoryLoop(world.ctx, [sampler])
    to_hour(world)
    start = int(world.clock.now())
    utils: list[float] = []
    for i in range(2 * 360 + 12):  # two hours and two minutes of samples, every 10 s
        u = float((i * 7) % 101)
        src.set_utilization(0, u)
        sampler.sample_once()
        if world.clock.now() < start + H:
            utils.append(u)
        world.clock.advance(10)
        if i % 30 == 29:  # a pass every five minutes
            loop.run_once()
    report = loop.run_once()
    assert report.pruned == 0
    uuid = src.uuid(0)
    with world.ctx.store.read() as s:
        repo = HistoryRepo(s)
        minutes = repo.periods(uuid, 60)
        hours = repo.periods(uuid, H)
    assert [m.t for m in minutes[:2]] == [start, start + 60]
    assert minutes[0].samples == 6 and minutes[0].util == pytest.approx(sum(utils[:6]) / 6)
    assert minutes[0].util_max == max(utils[:6])
    assert len(minutes) == 122  # every ended minute, none twice
    assert [h.t for h in hours] == [start, start + H]  # the second hour ended over a minute ago
    assert hours[0].samples == 360 and hours[0].util == pytest.approx(sum(utils) / 360)
    assert hours[0].util_max == max(utils)
    assert hours[0].power_w is not None and hours[0].memory_mib is not None


def test_the_minute_in_progress_is_written_once_it_ends(world):
    src, sampler = gpu_world(world, "H100")
    loop = HistoryLoop(world.ctx, [sampler])
    to_hour(world)
    sampler.sample_once()
    world.clock.advance(30)
    assert loop.run_once().written == 0
    world.clock.advance(30)
    assert loop.run_once().written == 1
    assert loop.run_once().written == 0


def test_rows_per_gpu_stay_within_the_retention_bound(world):
    ret = Retention(fine_keep_s=2 * H, coarse_keep_s=12 * H)
    src, sampler = gpu_world(world, "H100")
    loop = HistoryLoop(world.ctx, [sampler], retention=ret)
    most = 0
    for i in range(36 * 60):  # a day and a half, a sample a minute, a pass every 10 min
        sampler.sample_once()
        world.clock.advance(60)
        if i % 10 == 9:
            loop.run_once()
            with world.ctx.store.read() as s:
                rows = HistoryRepo(s).rows_per_gpu()[src.uuid(0)]
            most = max(most, sum(rows.values()))
            assert sum(rows.values()) <= ret.rows_per_gpu, rows
    assert rows[60] == pytest.approx(120, abs=10) and rows[H] == 12
    assert most > ret.rows_per_gpu - 12  # the bound is nearly reached, not loose


def test_a_restarted_server_still_shows_30_days(world):
    src, sampler = gpu_world(world, "H100")
    uuid = src.uuid(0)
    to_hour(world)
    now = int(world.clock.now())
    # 25 days ago, as hourly rows (what the loop leaves after two days); the last hour live
    with world.ctx.store.write() as s:
        HistoryRepo(s).add(
            [GpuPeriod(uuid, now - 25 * 86400 + k * H, 360, util=80.0) for k in range(24)],
            resolution_s=H,
        )
    loop = HistoryLoop(world.ctx, [sampler])
    src.set_utilization(0, 30.0)
    for _ in range(6 * 20):
        sampler.sample_once()
        world.clock.advance(10)
    loop.run_once()
    world.ctx.store.close()

    store = open_store(world.ctx.store.url)  # a new process on the same database
    try:
        settings = Settings(database_url=store.url, start_loops=False)
        app = build_system(
            SystemSettings(server=settings), FakeEngine(), clock=world.clock, store=store
        ).app  # a new server process: the system gpupool up builds, dashboard included
        with TestClient(app) as c:
            r = c.get("/api/v1/dashboard/gpu-history?range_s=2592000", headers=world.h("viewer"))
            assert r.status_code == 200, r.text
            body = r.json()
            (series,) = [x for x in body["series"] if x["uuid"] == uuid]
            util = [u for u in series["util"] if u is not None]
            assert body["covered_from"] == pytest.approx(now - 25 * 86400, abs=21600)
            assert util[0] == 80.0 and util[-1] == 30.0
            day = c.get("/api/v1/dashboard/gpu-history?range_s=86400", headers=world.h("viewer"))
            (series,) = [x for x in day.json()["series"] if x["uuid"] == uuid]
            assert [u for u in series["util"] if u is not None] == [30.0, 30.0]
    finally:
        store.close()


def test_the_last_hour_keeps_every_sample_the_sampler_holds(world):
    """Where the sampler's memory reaches, the chart uses it (a point every 10 s), not the
    store's minutes: the hour's 30-second slots have no every-other-slot gaps."""
    src, sampler = gpu_world(world, "H100")
    loop = HistoryLoop(world.ctx, [sampler])
    src.set_utilization(0, 50.0)
    for i in range(360):
        sampler.sample_once()
        world.clock.advance(10)
        if i % 30 == 29:
            loop.run_once()
    world.ctx.samplers.append(sampler)
    r = world.client.get("/api/v1/dashboard/gpu-history?range_s=3600", headers=world.h("member"))
    (series,) = [x for x in r.json()["series"] if x["uuid"] == src.uuid(0)]
    assert sum(u is not None for u in series["util"]) >= 119


def test_the_chart_shows_each_new_minute_the_loop_writes(world):
    """The chart's store points are cached per range, but never past a newer stored minute,
    and each lands in the chart's slot of its own time."""
    src, sampler = gpu_world(world, "H100")
    loop = HistoryLoop(world.ctx, [sampler])
    to_hour(world)

    def utils() -> list[float]:
        r = world.client.get(
            "/api/v1/dashboard/gpu-history?range_s=86400", headers=world.h("member")
        )
        (series,) = [x for x in r.json()["series"] if x["uuid"] == src.uuid(0)]
        return [u for u in series["util"] if u is not None]

    src.set_utilization(0, 10.0)
    sampler.sample_once()
    world.clock.advance(60)
    loop.run_once()
    assert utils() == [10.0]
    world.clock.advance(660)  # the next 12-minute slot of the 24 h chart
    src.set_utilization(0, 90.0)
    sampler.sample_once()
    world.clock.advance(60)
    loop.run_once()
    assert utils() == [10.0, 90.0]


def test_the_chart_query_runs_once_per_new_minute(world, monkeypatch):
    import gpupool.web.api as api

    calls: list[float] = []
    real = api._stored_history

    def counting(*a, **kw):
        calls.append(kw["now"])
        return real(*a, **kw)

    monkeypatch.setattr(api, "_stored_history", counting)
    src, sampler = gpu_world(world, "H100")
    loop = HistoryLoop(world.ctx, [sampler])
    sampler.sample_once()
    world.clock.advance(60)
    loop.run_once()
    url = "/api/v1/dashboard/gpu-history?range_s=86400"
    # three viewers within a slot: one query (a server this young draws its first 10 min,
    # in 5 s slots: page_data.chart_window)
    for _ in range(3):
        assert world.client.get(url, headers=world.h("member")).status_code == 200
        world.clock.advance(1)
    assert len(calls) == 1
    sampler.sample_once()
    world.clock.advance(60)
    loop.run_once()  # a new minute in the store: asked again
    world.client.get(url, headers=world.h("member"))
    assert len(calls) == 2


def test_stopping_writes_the_minute_in_progress_and_a_restart_adds_to_it(world):
    import asyncio

    src, sampler = gpu_world(world, "H100")
    loop = HistoryLoop(world.ctx, [sampler])
    to_hour(world)
    start = int(world.clock.now())
    src.set_utilization(0, 20.0)
    sampler.sample_once()
    world.clock.advance(10)
    sampler.sample_once()
    asyncio.run(loop.stop())  # the server shuts down 20 s into the minute
    with world.ctx.store.read() as s:
        (m,) = HistoryRepo(s).periods(src.uuid(0), 60)
    assert (m.t, m.samples, m.util) == (start, 2, 20.0)
    again = HistoryLoop(world.ctx, [sampler])  # started again within the same minute
    world.clock.advance(20)
    src.set_utilization(0, 80.0)
    sampler.sample_once()
    world.clock.advance(30)
    again.run_once()
    with world.ctx.store.read() as s:
        (m,) = HistoryRepo(s).periods(src.uuid(0), 60)
    assert (m.samples, m.util, m.util_max) == (3, 40.0, 80.0)
