"""gpupool's GPU-hours per tenant against `sacct`'s on a real Slurm: the same jobs, gres/gpu
(and gres/shard) TRES x Elapsed from Slurm's accounting database as the truth."""

from __future__ import annotations

import time

import pytest

from tests.slurm.conftest import sacct

pytestmark = pytest.mark.slurm
#: Slurm records times in whole seconds; gpupool takes Slurm's own start and end, so the two
#: agree to the second: allow one second per job and GPU (rounding of the clock's reads)
TOLERANCE_S_PER_JOB_GPU = 1.0


def gpu_seconds(job: dict) -> float:
    """gres/gpu TRES x Elapsed of one sacct record."""
    gpus = sum(
        t["count"] for t in job["tres"]["allocated"] if t["type"] == "gres" and t["name"] == "gpu"
    )
    return gpus * job["time"]["elapsed"]


def follow(w, ahead: float = 0.0) -> None:  # noqa: ANN001
    """Move gpupool's clock to the wall clock (+ `ahead`): accounting reads it."""
    w.clock.set(max(w.clock.now(), time.time() + ahead))


def test_gpu_hours_per_tenant_agree_with_sacct(make_world):
    w = make_world()
    accounting = w.ctx.loops.get("accounting")
    jobs = [
        ("slann", 1, "sleep 3"),
        ("slann", 1, "sleep 1"),
        ("slbob", 2, "sleep 2"),
    ]
    ids = {}
    for user, gpus, cmd in jobs:
        wid = w.submit(user, gpus=gpus, command=["sh", "-c", cmd])["id"]
        ids[wid] = user
    follow(w)
    w.schedule()
    for wid, user in ids.items():
        w.settle(wid, {"running", "succeeded"}, user=user)
    follow(w)
    accounting.run_once()  # while they run: counted from Slurm's start
    for wid, user in ids.items():
        assert w.settle(wid, {"succeeded", "failed", "lost"}, user=user)["state"] == "succeeded"
    follow(w, ahead=5)  # gpupool notices later than Slurm ended them
    accounting.run_once()
    usage = w.client.get("/api/v1/usage?group_by=tenant", headers=w.h("root")).json()["rows"]
    ours = {r["key"]: r["gpu_seconds_allocated"] for r in usage}
    theirs: dict[str, float] = {}
    gpus_jobs: dict[str, int] = {}
    for wid in ids:
        rec = sacct(w.job_id(wid))
        tenant = rec["account"].removeprefix("gp.")
        theirs[tenant] = theirs.get(tenant, 0.0) + gpu_seconds(rec)
        gpus_jobs[tenant] = gpus_jobs.get(tenant, 0) + sum(
            t["count"] for t in rec["tres"]["allocated"] if t["name"] == "gpu"
        )
    assert set(theirs) == {"lab", "other"}
    assert theirs["lab"] >= 3 and theirs["other"] >= 4  # the jobs really ran that long
    for tenant, seconds in theirs.items():
        tol = TOLERANCE_S_PER_JOB_GPU * gpus_jobs[tenant]
        assert abs(ours.get(tenant, 0.0) - seconds) <= tol, (tenant, ours, theirs)


def test_fractions_run_on_shards_labelled_unenforced_and_are_accounted(make_world):
    w = make_world()
    with w.ctx.store.read() as s:
        from gpupool.store import NodeRepo

        node = NodeRepo(s).list()[0]
    assert dict(node.labels).get("slurm.shards-per-gpu") == "4"  # 16 shards over 4 GPUs
    uuid = node.gpus[3].uuid
    r = w.client.patch(f"/api/v1/gpus/{uuid}", json={"sharing": "shared"}, headers=w.h("root"))
    assert r.status_code == 200, r.text
    wid = w.submit(
        "slann",
        gpu_fraction=0.5,
        gpu_memory_mib=1024,
        command=[
            "sh",
            "-c",
            'echo "CVD=$CUDA_VISIBLE_DEVICES SHARDS=$SLURM_SHARDS_ON_NODE"; sleep 2',
        ],
    )["id"]
    w.schedule()
    done = w.settle(wid, {"succeeded", "failed", "lost"})
    assert done["state"] == "succeeded", done
    rec = sacct(w.job_id(wid))
    shards = [t for t in rec["tres"]["allocated"] if t["name"] == "shard"]
    assert shards and shards[0]["count"] == 2  # half a GPU of 4 shards
    assert not [t for t in rec["tres"]["allocated"] if t["name"] == "gpu"]
    log = w.engine.executor.logs(wid)
    assert "SHARDS=2" in log and "CVD=" in log and log.split("CVD=")[1][0].isdigit(), log
    alloc = w.get("slann", wid)["allocation"]
    assert [s["enforcement"] for s in alloc["shares"]] == ["none"]  # Slurm only counts
    # accounted as half a GPU for Slurm's elapsed time (shards / shards per GPU)
    follow(w, ahead=5)
    w.ctx.loops.get("accounting").run_once()
    usage = w.client.get("/api/v1/usage?group_by=tenant", headers=w.h("root")).json()["rows"]
    ours = {r["key"]: r["gpu_seconds_allocated"] for r in usage}
    assert rec["time"]["elapsed"] >= 2
    assert ours.get("lab", 0.0) == pytest.approx(2 / 4 * rec["time"]["elapsed"], abs=0.5)
