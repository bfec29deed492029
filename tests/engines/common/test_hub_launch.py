"""HubLaunchExecutor: hub-launched notebooks hand-off, with real processes and a manual clock."""

from __future__ import annotations

import dataclasses
import os
import pwd
import stat
import subprocess
import sys

import pytest

from gpupool.clock import ManualClock
from gpupool.domain import Allocation, Enforcement, Request, Share, Workload, WorkloadKind
from gpupool.engines.common.executor import ExecState, StartError
from gpupool.engines.common.handoff import STOPPED_EXIT, LaunchDir, is_hub_launched
from gpupool.engines.common.hub_launch import HubLaunchExecutor
from gpupool.engines.fake.executor import FakeExecutor
from gpupool.engines.local.executor import LocalExecutor


def _notebook(wid: str = "w1") -> Workload:
    return Workload(
        id=wid, tenant="lab", owner="alice", kind=WorkloadKind.NOTEBOOK, request=Request(gpus=1)
    )


def _alloc(wid: str = "w1") -> Allocation:
    share = Share("n1", 0, "GPU-aaa", 1000, 40960, Enforcement.HARDWARE)
    return Allocation(wid, "n1", (share,), since=0.0)


def _proc(ignore_term: bool = False) -> subprocess.Popen:
    code = "import signal, time\n"
    if ignore_term:
        code += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    code += "print('ready', flush=True)\ntime.sleep(120)\n"
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return p


def _wait_dead(p: subprocess.Popen) -> int:
    return p.wait(timeout=20)  # bounded wait for a real process to end


@pytest.fixture
def setup(tmp_path):
    clock = ManualClock(1000.0)
    inner = FakeExecutor(clock)
    ex = HubLaunchExecutor(inner, tmp_path / "launch", clock=clock, launch_timeout_s=60)
    return clock, inner, ex, LaunchDir(tmp_path / "launch")


def test_only_commandless_notebooks_go_to_the_hub(setup):
    clock, inner, ex, _ = setup
    assert is_hub_launched(_notebook())
    job = Workload(id="j1", tenant="lab", owner="a", command=("python", "x.py"))
    ex.start(job, None)
    assert "j1" in inner.world.processes
    assert ex.poll("j1").state is ExecState.RUNNING


def test_grant_launch_run_and_user_stop(setup):
    clock, inner, ex, d = setup
    h = ex.start(_notebook(), _alloc())
    assert h.executor == "jupyterhub" and not inner.world.processes
    grant = d.grant("w1")
    assert grant.env["CUDA_VISIBLE_DEVICES"] == "GPU-aaa"
    assert grant.env["GPUPOOL_WORKLOAD_ID"] == "w1" and grant.env["GPUPOOL_GPU_MILLI"] == "1000"
    assert ex.poll("w1").state is ExecState.STARTING
    p = _proc()
    try:
        d.mark_launched("w1", p.pid, clock.now())
        assert ex.poll("w1").state is ExecState.RUNNING
        running = [r for r in ex.list_running() if r.workload_id == "w1"]
        assert running and p.pid in running[0].pids and running[0].gpu_uuids == ("GPU-aaa",)
        assert ex.process_map()[p.pid] == "w1"
    finally:
        p.kill()
        _wait_dead(p)
    d.mark_exited("w1", 0, clock.now())
    st = ex.poll("w1")
    assert st.state is ExecState.SUCCEEDED and st.exit_code == 0


def test_server_side_stop_terminates_then_kills(setup):
    clock, _, ex, d = setup
    ex.start(_notebook(), _alloc())
    p = _proc(ignore_term=True)
    try:
        d.mark_launched("w1", p.pid, clock.now())
        ex.stop("w1", "idle for 1 h", grace_s=30)
        assert d.stop_request("w1")["reason"] == "idle for 1 h"
        ex.tick()  # grace not over: the process ignores SIGTERM and lives on
        assert p.poll() is None
        clock.advance(31)
        ex.tick()
        assert _wait_dead(p) == -9
    finally:
        if p.poll() is None:
            p.kill()
    st = ex.poll("w1")
    assert st.state is ExecState.FAILED and st.exit_code == STOPPED_EXIT
    assert st.stop_reason == "idle for 1 h"


def test_stop_before_launch_and_launch_timeout(setup):
    clock, _, ex, d = setup
    ex.start(_notebook("w1"), _alloc("w1"))
    ex.stop("w1", "cancelled by alice")
    assert ex.poll("w1").state is ExecState.FAILED
    ex.start(_notebook("w2"), _alloc("w2"))
    clock.advance(61)
    st = ex.poll("w2")
    assert st.state is ExecState.FAILED and "did not start the notebook" in st.message


def test_a_reused_pid_is_not_the_notebook(setup, tmp_path):
    clock, _, ex, d = setup
    ex.start(_notebook(), _alloc())
    p = _proc()
    try:
        d.mark_launched("w1", p.pid, clock.now())
        info = d.launched("w1")
        info["pid_start"] -= 100  # as if the pid now belonged to a later process
        (tmp_path / "launch" / "w1" / "launched.json").write_text(__import__("json").dumps(info))
        assert ex.poll("w1").state is ExecState.SUCCEEDED
    finally:
        p.kill()
        _wait_dead(p)


def test_a_new_executor_over_the_same_dir_adopts(setup, tmp_path):
    clock, inner, ex, d = setup
    ex.start(_notebook(), _alloc())
    p = _proc()
    try:
        d.mark_launched("w1", p.pid, clock.now())
        again = HubLaunchExecutor(inner, tmp_path / "launch", clock=clock)
        assert [r.workload_id for r in again.list_running()] == ["w1"]
        assert again.poll("w1").state is ExecState.RUNNING
    finally:
        p.kill()
        _wait_dead(p)


def test_cpu_only_notebooks_see_no_gpu(setup):
    _, _, ex, d = setup
    w = Workload(id="c1", tenant="lab", owner="alice", kind=WorkloadKind.NOTEBOOK)
    h = ex.start(w, None)
    grant = d.grant("c1")
    assert grant.env["CUDA_VISIBLE_DEVICES"] == "" and grant.env["GPUPOOL_GPU_MILLI"] == "0"
    assert grant.gpu_uuids == () and dict(h.enforcement) == {}


def test_hand_off_files_survive_concurrent_writers(tmp_path):
    # the culler and the reconciler may both (re)send a stop for one notebook at once
    import json
    import threading

    from gpupool.engines.common.handoff import _write_json

    path = tmp_path / "stop.json"
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        try:
            for i in range(50):
                _write_json(path, {"writer": k, "i": i})
        except BaseException as e:  # noqa: BLE001 - collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert json.loads(path.read_text())["i"] == 49
    assert list(tmp_path.iterdir()) == [path]  # no temp file left behind


def test_the_wrapper_answers_the_whole_executor_contract_itself():
    """Every method of `Executor` is defined on HubLaunchExecutor (forwarded by name, not
    through __getattr__), so a capability added to the contract cannot be silently lost or
    reached by attribute probing."""
    from gpupool.engines.common.executor import Executor

    contract = {n for n, v in vars(Executor).items() if callable(v) and not n.startswith("_")}
    derived = {"logs"}  # text from `log_tail`/`log_chunks`, which are forwarded
    assert contract - derived - set(vars(HubLaunchExecutor)) == set()
    assert {"log_tail", "log_chunks"} <= set(vars(HubLaunchExecutor))
    assert "__getattr__" not in vars(HubLaunchExecutor)


def test_capabilities_of_plain_work_are_the_inner_executors(setup, tmp_path):
    clock, inner, ex, _ = setup
    job = Workload(id="j1", tenant="lab", owner="a", command=("python", "x.py"))
    share = Share("n1", 0, "GPU-bbb", 500, 1024, Enforcement.MPS)
    inner.downgrade["GPU-bbb"] = Enforcement.POLICED
    ex.start(job, Allocation("j1", "n1", (share,), since=0.0))
    assert ex.enforcement_of("j1") == {"GPU-bbb": Enforcement.POLICED}
    assert ex.mps_enforcement("GPU-bbb") is Enforcement.POLICED  # the fake has no MPS
    assert ex.mps_env(share) == {} and ex.prune(0.0) == [] and ex.adopts_work


# -- who notebooks run as -------------------------------------------------------------------
class _OneAccount(FakeExecutor):
    """An executor that runs every user's work as one Unix account (as the local one does in
    single-user mode without root)."""

    @property
    def one_account(self) -> bool:
        return True


def test_without_root_the_hub_serves_the_first_admin_only(tmp_path):
    clock = ManualClock(1000.0)
    ex = HubLaunchExecutor(_OneAccount(clock), tmp_path / "launch", clock=clock, only_owner="admin")
    member = _notebook("w1")  # alice's
    why = ex.refusal(member) or ""
    assert "serves only 'admin'" in why and "run gpupool as root" in why
    assert ex.refusal(dataclasses.replace(member, owner="admin")) is None
    job = Workload(id="j1", tenant="lab", owner="alice", command=("true",))
    assert ex.refusal(job) is None  # plain jobs: as before (docs: one person's machine)
    with pytest.raises(StartError, match="serves only 'admin'") as e:
        ex.start(member, _alloc())  # queued before the rule, or the API bypassed
    assert e.value.permanent and not LaunchDir(tmp_path / "launch").known("w1")
    ex.start(dataclasses.replace(member, id="w2", owner="admin"), _alloc("w2"))
    assert LaunchDir(tmp_path / "launch").grant("w2") is not None
    nobody = HubLaunchExecutor(_OneAccount(clock), tmp_path / "l2", clock=clock)
    assert "serves nobody" in (nobody.refusal(dataclasses.replace(member, owner="admin")) or "")


def test_the_local_executor_without_root_runs_all_as_one_account(tmp_path, monkeypatch):
    local = LocalExecutor(tmp_path / "jobs", user_mode="single-user")
    ex = HubLaunchExecutor(local, tmp_path / "launch", only_owner="admin")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # "am I root": no
    assert local.one_account and ex.one_account
    assert local.notebook_account("alice") is None  # the hub's own account
    assert "serves only 'admin'" in (ex.refusal(_notebook()) or "")


@pytest.mark.skipif(os.geteuid() != 0, reason="making Unix accounts needs root")
def test_as_root_the_grant_names_the_owners_own_account(tmp_path, user_accounts):
    local = LocalExecutor(tmp_path / "jobs", user_mode="single-user", jobs_account="nobody")
    ex = HubLaunchExecutor(local, tmp_path / "launch", only_owner="admin")
    assert not ex.one_account and ex.refusal(_notebook()) is None
    ex.start(_notebook("w1"), _alloc())
    grant = LaunchDir(tmp_path / "launch").grant("w1")
    assert grant is not None
    # never the shared jobs account: the owner's own, with its private home
    assert (grant.account, grant.home) == (
        user_accounts.name("alice"),
        str(user_accounts.home("alice")),
    )
    st = os.stat(grant.home)
    assert st.st_uid == pwd.getpwnam(grant.account).pw_uid != 0
    assert stat.S_IMODE(st.st_mode) == 0o700
