"""The one assembly (gpupool.system.build_system), with the fake engine on simulated
GPUs: what it registers, which loops it runs, what /metrics and the dashboard then show."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from gpupool.clock import ManualClock
from gpupool.engines.fake.engine import FakeEngine
from gpupool.server.services.accounts import issue_token
from gpupool.server.settings import Settings
from gpupool.store import NodeRepo, TenantRepo, UserRepo
from gpupool.system import SetupError, SystemSettings, build_system


def _settings(tmp_path, **kw) -> SystemSettings:
    db = f"sqlite:///{tmp_path / 'gpupool.db'}"
    return SystemSettings(server=Settings(database_url=db, start_loops=False), **kw)


def test_the_system_registers_the_engines_nodes_and_runs_every_loop(tmp_path):
    clock = ManualClock(1_780_000_000.0)
    engine = FakeEngine.simulated("2xH100-80GB", "box")
    system = build_system(_settings(tmp_path, admin="admin"), engine, clock=clock)
    try:
        ctx = system.ctx
        assert [loop.name for loop in ctx.loops] == [
            "scheduler",
            "autoscale",
            "forecast",
            "nodewatch",
            "checkpoint",
            "reconciler",
            "telemetry",
            "culler",
            "accounting",
            "history",
            "energy",
        ]
        with ctx.store.read() as s:
            (node,) = NodeRepo(s).list()
            assert UserRepo(s).get("admin").admin
            assert TenantRepo(s).exists("default")
        assert node.name == "box" and len(node.gpus) == 2
        assert node.last_heartbeat == clock.now()
        engine.sources[0].set_utilization(0, 55.0)
        ctx.loops.get("telemetry").run_once()
        # a client on the server's host: /metrics needs no scrape token then
        client = TestClient(system.app, client=("127.0.0.1", 50000))
        metrics = client.get("/metrics").text
        assert "DCGM_FI_DEV_GPU_UTIL{" in metrics and 'Hostname="box"' in metrics
        token = issue_token(ctx, "admin", "test", None).token
        cluster = client.get(
            "/api/v1/dashboard/cluster", headers={"Authorization": f"Bearer {token}"}
        ).json()
        assert [g["util"] for g in cluster["nodes"][0]["gpus"]][0] == 55.0
    finally:
        system.stop()


def test_a_second_system_on_the_same_data_dir_is_refused(tmp_path):
    first = build_system(_settings(tmp_path, data_dir=tmp_path / "data"), FakeEngine())
    try:
        with pytest.raises(SetupError, match="already running with the data directory"):
            build_system(_settings(tmp_path, data_dir=tmp_path / "data"), FakeEngine())
    finally:
        first.stop()
    build_system(_settings(tmp_path, data_dir=tmp_path / "data"), FakeEngine()).stop()


def test_without_telemetry_the_culler_and_accounting_have_no_readings(tmp_path):
    system = build_system(_settings(tmp_path), FakeEngine(), clock=ManualClock(0.0))
    try:
        names = [loop.name for loop in system.ctx.loops]
        assert "telemetry" not in names and {"culler", "accounting"} <= set(names)
        with system.ctx.store.read() as s:
            assert NodeRepo(s).list() == [] and UserRepo(s).list() == []
    finally:
        system.stop()
