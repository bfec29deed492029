"""A workload's declared environment (write-only, passed to the executor, gone when the work
ends) and its endpoint (reported by the executor, shown while the work lives)."""

from __future__ import annotations

from gpupool.domain import WorkloadState
from gpupool.server.loops.reconciler import ReconcilerLoop
from gpupool.server.services import lifecycle
from gpupool.store import WorkloadRepo


def test_declared_env_reaches_the_executor_and_is_never_returned(world):
    w = world.submit(gpus=1, env={"HF_TOKEN": "s3cret", "MY_FLAG": "1"})
    assert "env" not in w and "s3cret" not in str(w)
    world.scheduler.run_once()
    p = world.executor.process(w["id"])
    assert p.env["HF_TOKEN"] == "s3cret" and p.env["MY_FLAG"] == "1"
    assert p.env["GPUPOOL_WORKLOAD_ID"] == w["id"]  # gpupool's own variables still set
    for path in (f"/workloads/{w['id']}", "/workloads", "/queue", "/events"):
        assert "s3cret" not in world.get("admin", path).text


def test_declared_env_is_deleted_when_the_workload_ends(world):
    w = world.submit(gpus=1, env={"HF_TOKEN": "s3cret"})
    with world.ctx.store.read() as s:
        assert WorkloadRepo(s).env_of(w["id"]) == {"HF_TOKEN": "s3cret"}
    world.scheduler.run_once()
    world.executor.finish(w["id"], 0)
    ReconcilerLoop(world.ctx).run_once()
    assert world.get("member", f"/workloads/{w['id']}").json()["state"] == "succeeded"
    with world.ctx.store.read() as s:
        assert WorkloadRepo(s).env_of(w["id"]) == {}


def test_env_survives_a_requeue_after_preemption(world):
    """Preempted work that requeues starts again with the environment it declared."""
    w = world.submit(gpus=1, env={"TOKEN": "t1"})
    world.scheduler.run_once()
    lifecycle.request_stop(world.ctx, w["id"], WorkloadState.PREEMPTED, "reclaimed")
    ReconcilerLoop(world.ctx).run_once()
    assert world.get("member", f"/workloads/{w['id']}").json()["state"] == "pending"
    world.scheduler.run_once()
    assert world.executor.process(w["id"]).env["TOKEN"] == "t1"


def test_bad_env_is_refused_with_what_to_do(world):
    cases = {
        "CUDA_VISIBLE_DEVICES": "0",
        "GPUPOOL_WORKLOAD_ID": "x",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=80G",
        "1BAD": "x",
        "A-B": "x",
    }
    for name, value in cases.items():
        r = world.post(
            "member", "/workloads", json={"gpus": 1, "command": ["x"], "env": {name: value}}
        )
        assert r.status_code == 422, (name, r.text)
        assert "env" in r.text
    too_many = {f"V{i}": "x" for i in range(65)}
    r = world.post("member", "/workloads", json={"gpus": 1, "command": ["x"], "env": too_many})
    assert r.status_code == 422
    assert world.get("admin", "/workloads").json() == []  # nothing half-made


def test_endpoint_is_recorded_while_alive_and_cleared_at_the_end(world):
    rec = ReconcilerLoop(world.ctx)
    w = world.submit(kind="notebook", gpus=1, command=["jupyterhub-singleuser"])
    world.scheduler.run_once()
    assert world.get("member", f"/workloads/{w['id']}").json()["endpoint"] is None
    world.executor.process(w["id"]).endpoint = "http://10.0.0.7:8888"
    rec.run_once()
    got = world.get("member", f"/workloads/{w['id']}").json()
    assert got["endpoint"] == "http://10.0.0.7:8888"
    listed = {x["id"]: x for x in world.get("member", "/workloads").json()}
    assert listed[w["id"]]["endpoint"] == "http://10.0.0.7:8888"
    world.executor.finish(w["id"], 0)
    rec.run_once()
    assert world.get("member", f"/workloads/{w['id']}").json()["endpoint"] is None
