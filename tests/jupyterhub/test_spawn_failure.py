"""A notebook server that cannot be started is recorded as failed with the hub's reason
(issue 30, item 1): it was "cancelled by the user, exit 143" when its account could not run
jupyterhub-singleuser."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from gpupool.clock import ManualClock
from gpupool.domain import Workload, WorkloadKind
from gpupool.engines.common.executor import ExecState
from gpupool.engines.common.handoff import Grant, LaunchDir
from gpupool.engines.common.hub_launch import HubLaunchExecutor
from gpupool.engines.fake.executor import FakeExecutor
from gpupool.jupyterhub.spawner import GpupoolSpawner

SINGLEUSER = "/root/venv/bin/jupyterhub-singleuser"


def _spawner(launch_dir) -> GpupoolSpawner:
    user = SimpleNamespace(name="alice", url="/user/alice/")
    sp = GpupoolSpawner(user=user, gpupool_url="http://127.0.0.1:9", launch_dir=str(launch_dir))
    sp.workload_id = "w-nb1"
    sp.admission_poll_s = 0.0
    sp.failed_start_settle_s = 5.0
    return sp


def test_a_failed_start_is_recorded_as_failed_with_the_reason(tmp_path):
    launch = LaunchDir(tmp_path / "launch")
    hub = HubLaunchExecutor(FakeExecutor(ManualClock(0)), launch.path, clock=ManualClock(0))
    wl = Workload(id="w-nb1", tenant="lab", owner="alice", kind=WorkloadKind.NOTEBOOK)
    hub.start(wl, None)  # the grant gpupool writes at admission
    sp = _spawner(launch.path)
    sp._take(Grant("w-nb1", {}, (), {}, 0.0, account="gp-alice", home="/var/lib/x"))

    error = PermissionError(13, "Permission denied", SINGLEUSER)
    http = sp._start_failed(error)
    assert http.status_code == 500
    for said in (http.log_message, hub.poll("w-nb1").message):
        assert "as the Unix account gp-alice" in said and SINGLEUSER in said
        assert "Permission denied" in said
    st = hub.poll("w-nb1")
    assert (st.state, st.exit_code) == (ExecState.FAILED, 126)  # not a stop (143)


def test_stop_after_a_failed_start_lets_gpupool_record_the_failure(tmp_path, monkeypatch):
    launch = LaunchDir(tmp_path / "launch")
    launch.write_grant(Grant("w-nb1", {}, (), {}, 0.0))
    sp = _spawner(launch.path)
    sp._start_failed(FileNotFoundError(2, "No such file or directory", SINGLEUSER))
    states = iter(["starting", "failed"])  # gpupool's reconciler reads the failure
    cancelled: list[str] = []

    async def fetch(wid):
        return {"id": wid, "state": next(states)}

    async def cancel(wid):
        cancelled.append(wid)
        return True

    monkeypatch.setattr(sp, "_fetch_workload", fetch)
    monkeypatch.setattr(sp, "_cancel", cancel)
    asyncio.run(sp.stop())
    assert cancelled == []  # a cancel would have recorded "cancelled by alice"
    assert sp.workload_id == "" and launch.exited("w-nb1")["exit_code"] == 127


def test_stop_cancels_when_gpupool_does_not_record_the_failure(tmp_path, monkeypatch):
    launch = LaunchDir(tmp_path / "launch")
    launch.write_grant(Grant("w-nb1", {}, (), {}, 0.0))
    sp = _spawner(launch.path)
    sp.failed_start_settle_s = 0.0  # gpupool is down: free the GPUs the old way
    sp._start_failed(PermissionError(13, "Permission denied", SINGLEUSER))
    cancelled: list[str] = []

    async def cancel(wid):
        cancelled.append(wid)
        return True

    monkeypatch.setattr(sp, "_cancel", cancel)
    asyncio.run(sp.stop())
    assert set(cancelled) == {"w-nb1"}  # as before: the cancel frees the GPUs
