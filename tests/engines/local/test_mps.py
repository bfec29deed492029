"""MPS daemon lifecycle against a stand-in control binary, limits, and the cross-user rule."""

from __future__ import annotations

import os
import signal
import stat
from pathlib import Path

import psutil
import pytest

from gpupool.domain import Allocation, Enforcement, Share, Workload, WorkloadKind
from gpupool.engines.local.executor import LocalExecutor
from gpupool.engines.local.mps import MPSError, MPSManager, limits_for, thread_percentage
from tests.engines.conftest import release, wait_exit, wait_job, wait_ready
from tests.support import open_to_others

GPU = "GPU-11111111-2222-3333-4444-555555555555"


def share(milli: int = 250, mem: int = 20480, enf: Enforcement = Enforcement.MPS) -> Share:
    return Share("n1", 0, GPU, milli, mem, enf)


@pytest.fixture(autouse=True)
def _reachable(tmp_path: Path) -> None:
    open_to_others(tmp_path)


@pytest.fixture
def mgr(tmp_path: Path, fake_mps_binary: str):
    events: list[tuple[str, str]] = []
    m = MPSManager(
        tmp_path / "mps", binary=fake_mps_binary, on_event=lambda k, msg, d: events.append((k, msg))
    )
    m.events = events  # type: ignore[attr-defined]
    yield m
    m.stop_all()


def test_limits_from_share():
    lim = limits_for(share(250, 20480))
    assert lim.pinned_mem_limit == "0=20480M"
    assert lim.active_thread_percentage == 25
    env = lim.env(Path("/p"), Path("/l"))
    assert env == {
        "CUDA_MPS_PIPE_DIRECTORY": "/p",
        "CUDA_MPS_LOG_DIRECTORY": "/l",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=20480M",
    }
    assert limits_for(share(500, 0)).pinned_mem_limit is None


@pytest.mark.parametrize(
    ("milli", "pct"), [(1, 1), (5, 1), (10, 1), (11, 2), (250, 25), (333, 34), (999, 100)]
)
def test_thread_percentage_rounds_up(milli, pct):
    assert thread_percentage(milli) == pct


def test_daemon_start_health_stop(mgr):
    assert not mgr.healthy(GPU)
    mgr.start(GPU)
    pid = mgr.daemon_pid(GPU)
    assert pid and mgr.healthy(GPU)
    assert (mgr.pipe_dir(GPU) / "control").exists()
    mgr.start(GPU)  # already healthy: no second daemon
    assert mgr.daemon_pid(GPU) == pid
    log = (mgr.log_dir(GPU) / "control.log").read_text()
    assert log.startswith(GPU)  # the daemon saw only its own GPU
    mgr.stop(GPU)
    assert not psutil.pid_exists(pid)  # stop() returns once the daemon has gone
    assert not mgr.healthy(GPU)
    kinds = [k for k, _ in mgr.events]
    assert kinds == ["mps.started", "mps.stopped"]


def test_crashed_daemon_is_restarted(mgr):
    assert mgr.ensure(GPU)
    pid = mgr.daemon_pid(GPU)
    os.kill(pid, signal.SIGKILL)
    wait_exit(pid)
    assert not mgr.healthy(GPU)
    assert mgr.ensure_all() == {GPU: True}
    assert mgr.daemon_pid(GPU) not in (None, pid)
    assert [s.restarts for s in mgr.status()] == [1]
    assert "mps.crashed" in [k for k, _ in mgr.events]


def test_missing_binary_is_a_clear_error_and_policed(tmp_path):
    m = MPSManager(tmp_path / "mps", binary=str(tmp_path / "nope"))
    with pytest.raises(MPSError, match="not found"):
        m.start(GPU)
    assert m.ensure(GPU) is False
    assert m.enforcement_for(GPU, "alice", [], healthy=False)[0] is Enforcement.POLICED


def test_cross_user_rule():
    m = MPSManager(Path("/unused"))
    assert m.enforcement_for(GPU, "alice", [], healthy=True)[0] is Enforcement.MPS
    assert m.enforcement_for(GPU, "alice", ["alice"], healthy=True)[0] is Enforcement.MPS
    enf, why = m.enforcement_for(GPU, "bob", ["alice", "alice"], healthy=True)
    assert enf is Enforcement.POLICED and "alice" in why and "one user per GPU" in why


def _wl(wid: str, cmd: str) -> Workload:
    return Workload(id=wid, tenant="t", owner="alice", command=("sh", "-c", cmd))


def test_fractional_job_gets_mps_env(tmp_path, mgr):
    ex = LocalExecutor(tmp_path / "jobs", user_mode="single-user", mps=mgr)
    a = Allocation("w1", "n1", (share(250, 20480),), since=0)
    h = ex.start(_wl("w1", "env | grep -E '^(CUDA_|GPUPOOL_GPU)' | sort"), a)
    assert h.enforcement == {GPU: Enforcement.MPS}
    wait_job(ex, "w1")
    out = ex.logs("w1")
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=20480M" in out
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25" in out
    assert f"CUDA_MPS_PIPE_DIRECTORY={mgr.pipe_dir(GPU)}" in out
    assert f"CUDA_VISIBLE_DEVICES={GPU}" in out
    assert "GPUPOOL_GPU_MILLI=250" in out
    assert ex.mps_enforcement(GPU) is Enforcement.MPS


def test_policed_share_and_no_daemon_get_no_mps_env(tmp_path):
    m = MPSManager(tmp_path / "mps", binary=str(tmp_path / "missing"))
    ex = LocalExecutor(tmp_path / "jobs", user_mode="single-user", mps=m)
    a = Allocation("w1", "n1", (share(),), since=0)
    h = ex.start(_wl("w1", "env"), a)
    assert h.enforcement == {GPU: Enforcement.POLICED}  # asked for mps, daemon unavailable
    b = Allocation("w2", "n1", (share(enf=Enforcement.POLICED),), since=0)
    h2 = ex.start(_wl("w2", "env"), b)
    assert h2.enforcement == {GPU: Enforcement.POLICED}
    wait_job(ex, "w1")
    wait_job(ex, "w2")
    assert "CUDA_MPS_" not in ex.logs("w1") + ex.logs("w2")


root_only = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")


@root_only
def test_second_unix_user_on_an_mps_gpu_is_policed(shared_tmp, mgr):
    tmp_path = shared_tmp
    accounts = {"alice": "nobody", "bob": "daemon"}
    ex = LocalExecutor(
        tmp_path / "jobs", user_mode="per-user", mps=mgr, resolve_unix_user=accounts.get
    )
    go, ready = tmp_path / "go", tmp_path / "ready"
    os.mkfifo(go)
    os.mkfifo(ready)
    os.chmod(go, 0o666)
    os.chmod(ready, 0o666)
    ha = ex.start(
        _wl("a", f"echo up > {ready}; read x < {go}"), Allocation("a", "n1", (share(),), 0)
    )
    wait_ready(ready)
    bob = Workload(id="b", tenant="t", owner="bob", command=("sh", "-c", "env"))
    hb = ex.start(bob, Allocation("b", "n1", (share(),), 0))
    assert ha.enforcement[GPU] is Enforcement.MPS
    assert hb.enforcement[GPU] is Enforcement.POLICED
    wait_job(ex, "b")
    assert "CUDA_MPS_" not in ex.logs("b")
    release(go)
    wait_job(ex, "a")
    # alice's clients are gone: bob now gets MPS
    hc = ex.start(
        Workload(id="c", tenant="t", owner="bob", command=("true",)),
        Allocation("c", "n1", (share(),), 0),
    )
    assert hc.enforcement[GPU] is Enforcement.MPS
    wait_job(ex, "c")


@root_only
def test_service_account_runs_every_shared_job_under_mps(shared_tmp, fake_mps_binary):
    tmp_path = shared_tmp
    m = MPSManager(tmp_path / "mps", binary=fake_mps_binary, service_account="nobody")
    ex = LocalExecutor(tmp_path / "jobs", user_mode="per-user", mps=m)
    try:
        h = ex.start(
            Workload(id="x", tenant="t", owner="zz-no-account", command=("id", "-un")),
            Allocation("x", "n1", (share(),), 0),
        )
        wait_job(ex, "x")
        assert h.enforcement[GPU] is Enforcement.MPS
        assert ex.logs("x").strip() == "nobody"
    finally:
        m.stop_all()


def test_concurrent_ensure_starts_one_daemon(mgr):
    import threading

    results: list[bool] = []
    threads = [threading.Thread(target=lambda: results.append(mgr.ensure(GPU))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == [True, True, True]
    assert [k for k, _ in mgr.events].count("mps.started") == 1


def test_pipe_directory_is_reachable_under_a_private_umask(tmp_path, fake_mps_binary):
    base = tmp_path / "mps"
    base.mkdir()
    base.chmod(0o755)
    m = MPSManager(base, binary=fake_mps_binary)
    old = os.umask(0o077)  # as gpupool up runs
    try:
        m.start("GPU-x")
    finally:
        os.umask(old)
    try:
        for d in (base / "GPU-x", m.pipe_dir("GPU-x"), m.log_dir("GPU-x")):
            assert stat.S_IMODE(d.stat().st_mode) & 0o005 == 0o005, d  # others may enter
    finally:
        m.stop_all()


@pytest.mark.skipif(os.geteuid() != 0, reason="the check applies when jobs run as other accounts")
def test_a_pipe_other_accounts_cannot_reach_is_refused(tmp_path, fake_mps_binary):
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    m = MPSManager(closed / "mps", binary=fake_mps_binary)
    with pytest.raises(MPSError, match="closed to other accounts"):
        m.start("GPU-x")  # a job as another account would run without MPS limits
    assert not m.healthy("GPU-x")


@root_only
def test_a_notebook_on_a_shared_gpu_keeps_its_owners_account(shared_tmp, fake_mps_binary):
    """--mps-service-account runs every shared *job* as one account; a notebook is its
    owner's session (issue 31: the local engine runs notebooks) and never runs as it: it
    keeps its owner's account, and MPS is decided for that account."""
    tmp_path = shared_tmp
    m = MPSManager(tmp_path / "mps", binary=fake_mps_binary, service_account="nobody")
    ex = LocalExecutor(tmp_path / "jobs", user_mode="per-user", mps=m)
    try:
        nb = Workload(
            id="n", tenant="t", owner="daemon", kind=WorkloadKind.NOTEBOOK, command=("id", "-un")
        )
        ex.start(nb, Allocation("n", "n1", (share(),), 0), unix_user="daemon")
        wait_job(ex, "n")
        assert ex.logs("n").strip() == "daemon"
    finally:
        m.stop_all()
