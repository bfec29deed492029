"""The local engine end to end on simulated MIG devices (`--simulate
1xH100-80GB:mig=all-3g.40gb,...`): the GPU found in MIG mode offers its instances, a MIG job
runs as a real process that sees only its MIG device (`CUDA_VISIBLE_DEVICES=MIG-…`), its
share is `hardware`, and `mig` sharing is refused on the GPU whose MIG mode is off."""

from __future__ import annotations

from fastapi.testclient import TestClient

from gpupool.clock import SystemClock
from gpupool.engines.local.engine import LocalEngine, LocalOptions
from gpupool.server.services.accounts import issue_token
from gpupool.server.settings import Settings
from gpupool.system import SystemSettings, build_system
from tests.support import wait_for

SPEC = "1xH100-80GB:mig=all-3g.40gb,1xH100-80GB"


def test_mig_job_sees_only_its_mig_device_and_mig_off_is_refused(tmp_path):
    data = tmp_path / "data"
    settings = SystemSettings(
        server=Settings(database_url=f"sqlite:///{tmp_path / 'g.db'}", start_loops=False),
        data_dir=data,
        admin="admin",
        admin_password="a long admin password",
    )
    options = LocalOptions(node="box", simulate=SPEC, user_mode="single-user", mps="off")
    engine = LocalEngine(options)
    system = build_system(settings, engine, clock=SystemClock())
    try:
        ctx = system.ctx
        ctx.loops.get("telemetry").run_once()  # a reading of both GPUs
        h = {"Authorization": f"Bearer {issue_token(ctx, 'admin', 't', None).token}"}
        c = TestClient(system.app)
        gpus = {g["index"]: g for g in c.get("/api/v1/gpus", headers=h).json()}
        assert gpus[0]["sharing"] == "mig" and gpus[0]["mig_layout"] == "all-3g.40gb"
        assert [i["start"] for i in gpus[0]["mig_instances"]] == [0, 4]
        assert gpus[1]["sharing"] == "exclusive"

        r = c.patch(f"/api/v1/gpus/{gpus[1]['uuid']}", headers=h, json={"sharing": "mig"})
        assert r.status_code == 409, r.text
        assert "nvidia-smi -i 1 -mig 1" in r.json()["detail"]

        cmd = 'echo "CVD=$CUDA_VISIBLE_DEVICES"'
        body = {"mig": "3g.40gb", "command": ["sh", "-c", cmd], "tenant": "default"}
        r = c.post("/api/v1/workloads", headers=h, json=body)
        assert r.status_code == 201, r.text
        wid = r.json()["id"]
        ctx.loops.get("scheduler").run_once()
        w = c.get(f"/api/v1/workloads/{wid}", headers=h).json()
        (share,) = w["allocation"]["shares"]
        assert share["enforcement"] == "hardware" and share["mig_profile"] == "3g.40gb"
        mig_uuid = engine.source.mig_uuid(0, share["mig_start"])  # type: ignore[union-attr]
        log = data / "jobs" / wid / "output.log"
        seen = wait_for(lambda: log.exists() and log.read_text().strip(), what="the job's output")
        assert seen == f"CVD={mig_uuid}" and mig_uuid.startswith("MIG-")
    finally:
        system.stop()
        engine.close()


def test_a_mig_share_whose_device_nvml_does_not_list_is_not_started(tmp_path):
    import pytest

    from gpupool.domain import Share
    from gpupool.engines.common.executor import StartError
    from gpupool.engines.local.executor import LocalExecutor

    ex = LocalExecutor(tmp_path / "jobs", user_mode="single-user", mig_uuid=lambda s: None)
    share = Share("box", 0, "GPU-x", 142, 9984, mig_profile="1g.10gb", mig_start=3)
    with pytest.raises(StartError, match=r"no 1g.10gb MIG device at start 3.*nvidia-smi mig"):
        ex.device_uuid(share)
    whole = Share("box", 1, "GPU-y", 1000, 81920)
    assert ex.device_uuid(whole) == "GPU-y"


def test_idle_relayout_cuts_a_simulated_gpu_for_a_waiting_profile(tmp_path):
    data = tmp_path / "data"
    settings = SystemSettings(
        server=Settings(
            database_url=f"sqlite:///{tmp_path / 'g.db'}", start_loops=False, mig_relayout=True
        ),
        data_dir=data,
        admin="admin",
        admin_password="a long admin password",
    )
    spec = "1xH100-80GB:mig=all-1g.10gb"
    engine = LocalEngine(LocalOptions(node="box", simulate=spec, user_mode="single-user"))
    system = build_system(settings, engine, clock=SystemClock())
    try:
        ctx = system.ctx
        h = {"Authorization": f"Bearer {issue_token(ctx, 'admin', 't', None).token}"}
        c = TestClient(system.app)
        body = {"mig": "3g.40gb", "command": ["true"], "tenant": "default"}
        wid = c.post("/api/v1/workloads", headers=h, json=body).json()["id"]
        ctx.loops.get("scheduler").run_once()
        w = c.get(f"/api/v1/workloads/{wid}", headers=h).json()
        assert w["state"] == "pending" and "no free 3g.40gb" in w["pending"]["reason"]
        (plan,) = ctx.loops.get("mig-relayout").run_once()
        assert plan.layout == "all-3g.40gb" and plan.for_workload == wid
        (g,) = c.get("/api/v1/gpus", headers=h).json()
        assert g["mig_layout"] == "all-3g.40gb"
        assert engine.source.snapshot().gpus[0].mig_layout() == "all-3g.40gb"  # type: ignore[union-attr]
        ctx.loops.get("scheduler").run_once()
        w = c.get(f"/api/v1/workloads/{wid}", headers=h).json()
        assert w["allocation"]["shares"][0]["mig_profile"] == "3g.40gb"
        events = c.get("/api/v1/events", headers=h, params={"kind": "gpu.mig_relayout"}).json()
        items = events["items"] if isinstance(events, dict) else events
        assert any(e["kind"] == "gpu.mig_relayout" for e in items)
        # the GPU now holds work: never re-laid again, whatever waits
        body["mig"] = "1g.10gb"
        c.post("/api/v1/workloads", headers=h, json=body)
        assert ctx.loops.get("mig-relayout").run_once() == []
    finally:
        system.stop()
        engine.close()


def test_relayout_is_off_by_default(tmp_path):
    settings = SystemSettings(
        server=Settings(database_url=f"sqlite:///{tmp_path / 'g.db'}", start_loops=False),
        data_dir=tmp_path / "data",
    )
    engine = LocalEngine(LocalOptions(node="box", simulate="H100", user_mode="single-user"))
    system = build_system(settings, engine, clock=SystemClock())
    try:
        assert "mig-relayout" not in [loop.name for loop in system.ctx.loops]
    finally:
        system.stop()
        engine.close()
