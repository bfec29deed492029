"""The dashboard's data routes on the real app (no browser): auth, roles, bad input, and
telemetry found through the server's own telemetry loop."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from tests.web.seed import PASSWORD

pytest.importorskip("gpupool.server.app", reason="the server app is not built yet")


@pytest.fixture(scope="module")
def app_and_seed(tmp_path_factory):
    from tests.web.conftest import build_app

    db = tmp_path_factory.mktemp("webapi") / "gpupool.db"
    return build_app(f"sqlite:///{db}", time.time(), gpus=4, workloads=12)


@pytest.fixture(scope="module")
def client(app_and_seed):
    return TestClient(app_and_seed[0])


def _as(client: TestClient, user: str) -> dict[str, str]:
    r = client.post("/api/v1/auth/login", json={"username": user, "password": PASSWORD})
    assert r.status_code == 200, r.text
    return {"Authorization": f"Bearer {r.json()['token']}"}


@pytest.mark.parametrize(
    "path",
    ["/api/v1/dashboard/cluster", "/api/v1/dashboard/tenants", "/api/v1/dashboard/gpu-history"],
)
def test_routes_need_a_login(client, path):
    r = client.get(path)
    assert r.status_code == 401
    assert r.headers["content-type"].startswith("application/problem+json")


def test_bad_range_is_a_clear_4xx(client):
    r = client.get("/api/v1/dashboard/gpu-history?range_s=5", headers=_as(client, "ann"))
    assert 400 <= r.status_code < 500
    assert "3600" in r.json()["detail"]
    r = client.get("/api/v1/dashboard/gpu-history?range_s=abc", headers=_as(client, "ann"))
    assert 400 <= r.status_code < 500


def test_cluster_for_any_role_shows_holders_and_readings(client):
    v = client.get("/api/v1/dashboard/cluster", headers=_as(client, "vic")).json()
    gpus = v["nodes"][0]["gpus"]
    assert len(gpus) == 4 and v["simulated"] is True
    assert any(g["holders"] for g in gpus)
    assert all(g["util"] is not None for g in gpus)
    assert v["summary"]["gpus"] == 4


def test_tenant_numbers_follow_the_callers_roles(client):
    everyone = client.get("/api/v1/dashboard/tenants", headers=_as(client, "root")).json()
    assert set(everyone["tenants"]) == {"physics", "physics/lab-a", "physics/lab-b", "bio"}
    assert all(t["fair_share_milli"] is not None for t in everyone["tenants"].values())
    ann = client.get("/api/v1/dashboard/tenants", headers=_as(client, "ann")).json()
    assert set(ann["tenants"]) == {"physics/lab-a"}


def test_history_covers_the_seeded_telemetry(client):
    h = _as(client, "ann")
    hour = client.get("/api/v1/dashboard/gpu-history?range_s=3600", headers=h).json()
    assert len(hour["series"]) == 4 and len(hour["t"]) == 120
    assert all(any(u is not None for u in s["util"]) for s in hour["series"])
    week = client.get("/api/v1/dashboard/gpu-history?range_s=604800", headers=h).json()
    assert any(u is not None for u in week["series"][0]["util"])


def test_telemetry_is_found_through_the_servers_telemetry_loop(app_and_seed):
    """The server's telemetry loop puts its sampler where the dashboard reads frames."""
    from gpupool.server.loops.telemetry import TelemetryLoop

    app, seeded = app_and_seed
    ctx = app.state.ctx
    saved = list(ctx.samplers)
    ctx.samplers.clear()
    try:
        c = TestClient(app)
        h = _as(c, "root")
        before = c.get("/api/v1/dashboard/cluster", headers=h).json()
        assert all(g["util"] is None for g in before["nodes"][0]["gpus"])
        loop = TelemetryLoop(ctx, seeded.sources[0], node="sim-0")
        ctx.loops.add(loop)
        loop.sampler.sample_once()
        after = c.get("/api/v1/dashboard/cluster", headers=h).json()
        assert all(g["util"] is not None for g in after["nodes"][0]["gpus"])
    finally:
        ctx.samplers[:] = saved
