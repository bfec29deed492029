"""GPUs used outside gpupool through the API (SQLite and PostgreSQL): an admin registers a GPU
held outside gpupool, everyone sees who holds it, nothing is placed on it, the why-pending
names it; bad input is a clear 422 and changes nothing."""

from __future__ import annotations

from tests.server.conftest import API


def _body(outside: dict | None) -> dict:
    gpu = {"index": 0, "uuid": "GPU-n2-0", "model": "A100", "memory_mib": 40960}
    return {
        "cpu_milli": 8000,
        "memory_mib": 64000,
        "gpus": [gpu | ({"outside": outside} if outside is not None else {})],
    }


def test_outside_gpu_is_served_taken_and_named_in_the_reason(world):
    r = world.put("admin", "/nodes/n2", json=_body({"ref": "slurm job 4711", "user": "bob"}))
    assert r.status_code == 200, r.text
    (g,) = r.json()["gpus"]
    assert g["outside"] == {"ref": "slurm job 4711", "user": "bob", "since": None}
    assert g["health"] == "healthy"
    seen = world.get("member", "/gpus/GPU-n2-0").json()
    assert seen["outside"]["ref"] == "slurm job 4711"
    others = [g for g in world.get("viewer", "/gpus").json() if g["node"] == "n1"]
    assert all(g["outside"] is None for g in others)  # a new optional field: null
    wid = world.submit("member", gpus=1, gpu_model="A100")["id"]
    world.scheduler.run_once()
    w = world.get("member", f"/workloads/{wid}").json()
    assert w["state"] == "pending"
    assert "GPU 0 on n2 is used outside gpupool by slurm job 4711 (bob)" in w["pending"]["reason"]
    # released: the next registration without `outside` frees it, and the work runs there
    assert world.put("admin", "/nodes/n2", json=_body(None)).status_code == 200
    world.scheduler.run_once()
    assert world.get("member", f"/workloads/{wid}").json()["state"] in (
        "admitted",
        "starting",
        "running",
    )


def test_bad_outside_is_a_clear_422_and_changes_nothing(world):
    for bad in ({"ref": ""}, {"ref": "   "}, {"user": "bob"}, {"ref": "x", "since": -1}):
        r = world.put("admin", "/nodes/n2", json=_body(bad))
        assert r.status_code == 422, (bad, r.text)
        assert r.headers["content-type"].startswith("application/problem+json")
        assert "outside" in r.text
    assert world.client.get(API + "/nodes/n2", headers=world.h("admin")).status_code == 404
