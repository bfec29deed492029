"""The local executor with real child processes: binding, exit codes, stop, adoption."""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gpupool.clock import ManualClock
from gpupool.domain import Allocation, Enforcement, Share, Workload
from gpupool.engines.common.executor import ExecState, StartError
from gpupool.engines.local.executor import LocalExecutor, UserMode
from tests.engines.conftest import end_all, mkfifo, release, wait_exit, wait_job, wait_ready

ME = pwd.getpwuid(os.geteuid()).pw_name


def wl(cmd: str, wid: str = "w1", owner: str = "alice") -> Workload:
    return Workload(id=wid, tenant="lab-a", owner=owner, command=("sh", "-c", cmd))


def alloc(wid: str = "w1", *shares: Share) -> Allocation:
    shares = shares or (
        Share("n1", 0, "GPU-aaa", 1000, 81920),
        Share("n1", 1, "GPU-bbb", 1000, 81920),
    )
    return Allocation(wid, "n1", shares, since=0.0)


@pytest.fixture
def ex(tmp_path: Path) -> Iterator[LocalExecutor]:
    executor = LocalExecutor(tmp_path / "jobs", clock=ManualClock(1000), user_mode="single-user")
    yield executor
    end_all(executor)


def test_job_sees_its_gpus_and_ids_and_no_secrets(ex, monkeypatch):
    monkeypatch.setenv("GPUPOOL_ADMIN_PASSWORD", "s3cret")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    h = ex.start(
        wl('echo "CVD=$CUDA_VISIBLE_DEVICES WID=$GPUPOOL_WORKLOAD_ID M=$GPUPOOL_GPU_MILLI"; env'),
        alloc(),
    )
    assert h.executor == "local" and int(h.ref) > 0 and h.started_at == 1000
    wait_job(ex, "w1")
    st = ex.poll("w1")
    assert st.state is ExecState.SUCCEEDED and st.exit_code == 0
    out = ex.logs("w1")
    assert "CVD=GPU-aaa,GPU-bbb WID=w1 M=2000" in out
    assert "s3cret" not in out


def test_cpu_only_job_sees_no_gpu(ex):
    ex.start(wl('echo "[$CUDA_VISIBLE_DEVICES]"'), None)
    wait_job(ex, "w1")
    assert ex.logs("w1").strip() == "[]"


def test_exit_codes_are_kept(ex):
    ex.start(wl("echo bad >&2; exit 7"), None)
    ex.start(Workload(id="w2", tenant="t", owner="a", command=("no-such-binary-xyz",)), None)
    wait_job(ex, "w1")
    wait_job(ex, "w2")
    st = ex.poll("w1")
    assert (st.state, st.exit_code) == (ExecState.FAILED, 7)
    assert "bad" in ex.logs("w1")
    st2 = ex.poll("w2")
    assert (st2.state, st2.exit_code) == (ExecState.FAILED, 127)
    assert "command not found" in ex.logs("w2")


def test_bad_input_is_a_clear_start_error(ex):
    with pytest.raises(StartError, match="no command") as e:
        ex.start(Workload(id="w1", tenant="t", owner="a"), None)
    assert e.value.permanent
    with pytest.raises(StartError, match="directory name"):
        ex.start(wl("true", wid="../evil"), None)
    assert ex.poll("w1").state is ExecState.UNKNOWN


def test_logs_tail(ex):
    ex.start(wl("for i in 1 2 3 4 5; do echo line$i; done"), None)
    wait_job(ex, "w1")
    assert ex.logs("w1", tail=2) == "line4\nline5\n"
    assert ex.logs("nope") == ""


def test_running_job_is_adopted_by_a_new_executor(ex, job_tmp, user_accounts):
    fifo = job_tmp / "go"
    mkfifo(fifo)
    ex.start(wl(f"read x < {fifo}; exit 3"), alloc())
    assert ex.poll("w1").state is ExecState.RUNNING
    launcher = ex._children["w1"]
    ex.close()  # the "server" goes away; the job keeps running

    ex2 = LocalExecutor(ex.state_dir, clock=ManualClock(2000), user_mode="single-user")
    running = ex2.list_running()
    assert [r.workload_id for r in running] == ["w1"]
    assert running[0].gpu_uuids == ("GPU-aaa", "GPU-bbb")
    # who single-user jobs run as: never root (as root, alice's own account)
    assert running[0].user == (ME if os.geteuid() != 0 else user_accounts.name("alice"))
    assert int(running[0].ref) in running[0].pids
    assert ex2.poll("w1").state is ExecState.RUNNING
    with pytest.raises(StartError, match="already running"):
        ex2.start(wl("true"), None)
    pid = int(running[0].ref)
    release(fifo)
    launcher.wait(timeout=20)  # the test process is still its parent
    st = ex2.poll("w1")
    assert (st.state, st.exit_code) == (ExecState.FAILED, 3)
    assert ex2.list_running() == []
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"


def test_job_that_ended_while_no_server_ran_gets_its_real_exit_code(ex):
    ex.start(wl("exit 0"), None)
    wait_job(ex, "w1")
    ex2 = LocalExecutor(ex.state_dir, user_mode="single-user")
    st = ex2.poll("w1")
    assert (st.state, st.exit_code) == (ExecState.SUCCEEDED, 0)
    assert st.finished_at is not None


def test_reused_pid_is_not_the_job(ex):
    d = ex.state_dir / "w9"
    d.mkdir()
    (d / "spec.json").write_text('{"workload_id": "w9", "started_at": 1}')
    (d / "pid").write_text(f"{os.getpid()} 1\n")  # a live pid with the wrong start time
    st = ex.poll("w9")
    assert st.state is ExecState.LOST
    assert "w9" not in [r.workload_id for r in ex.list_running()]


def test_stop_right_after_start_is_not_lost(ex):
    ex.start(wl("exec cat"), None)
    ex.stop("w1", "cancelled at once", grace_s=30)
    wait_job(ex, "w1")
    st = ex.poll("w1")
    assert (st.state, st.exit_code) == (ExecState.FAILED, 143)


def test_polite_stop_ends_with_sigterm(ex, job_tmp):
    fifo, ready = job_tmp / "go", job_tmp / "ready"
    mkfifo(fifo)
    mkfifo(ready)
    ex.start(wl(f"echo up > {ready}; read x < {fifo}"), None)
    wait_ready(ready)
    ex.stop("w1", "cancelled by alice", grace_s=30)
    wait_job(ex, "w1")
    st = ex.poll("w1")
    assert (st.state, st.exit_code) == (ExecState.FAILED, 143)
    assert st.stop_reason == "cancelled by alice"


def test_stop_escalates_to_sigkill_after_grace_on_the_clock(tmp_path, job_tmp):
    clock = ManualClock(1000)
    ex = LocalExecutor(tmp_path / "jobs", clock=clock, user_mode="single-user")
    fifo, ready = job_tmp / "go", job_tmp / "ready"
    mkfifo(fifo)
    mkfifo(ready)
    ex.start(wl(f"trap '' TERM; echo up > {ready}; read x < {fifo}"), None)
    wait_ready(ready)
    ex.stop("w1", "preempted for w7", grace_s=30)
    clock.advance(29)
    ex.tick()
    assert ex.poll("w1").state is ExecState.RUNNING  # TERM ignored, grace not over
    clock.advance(1)
    ex.tick()
    wait_job(ex, "w1")
    st = ex.poll("w1")
    assert (st.state, st.exit_code) == (ExecState.FAILED, 137)
    assert st.stop_reason == "preempted for w7"


def test_stop_of_unknown_or_finished_work_is_a_no_op(ex):
    ex.stop("nope", "x")
    ex.start(wl("exit 0"), None)
    wait_job(ex, "w1")
    ex.stop("w1", "late")
    assert ex.poll("w1").state is ExecState.SUCCEEDED


def test_leftover_background_processes_die_with_the_job(ex, job_tmp):
    bg = job_tmp / "bg.pid"
    ex.start(wl(f"sleep 1000 & echo $! > {bg}; exit 0"), None)
    wait_job(ex, "w1")
    wait_exit(int(bg.read_text()))
    assert ex.poll("w1").state is ExecState.SUCCEEDED


def test_restarted_job_gets_fresh_state(ex):
    ex.start(wl("exit 5"), None)
    wait_job(ex, "w1")
    assert ex.poll("w1").exit_code == 5
    ex.start(wl("exit 0"), None)  # requeued after preemption: same id, new run
    wait_job(ex, "w1")
    assert ex.poll("w1").exit_code == 0


def test_process_map_attributes_pids(ex, job_tmp):
    fifo, ready = job_tmp / "go", job_tmp / "ready"
    mkfifo(fifo)
    mkfifo(ready)
    ex.start(wl(f"echo up > {ready}; read x < {fifo}"), None)
    wait_ready(ready)
    pmap = ex.process_map()
    assert set(pmap.values()) == {"w1"} and len(pmap) >= 2  # launcher + sh
    release(fifo)
    wait_job(ex, "w1")


root_only = pytest.mark.skipif(os.geteuid() != 0, reason="per-user mode needs root")


@root_only
def test_per_user_mode_runs_as_the_owner(shared_tmp):
    jobs = shared_tmp / "jobs"
    ex = LocalExecutor(
        jobs,
        user_mode=UserMode.PER_USER,
        resolve_unix_user=lambda owner: {"alice": "nobody"}.get(owner),
    )
    ex.start(wl('id -un; echo "HOME=$HOME"'), None)
    wait_job(ex, "w1")
    st = ex.poll("w1")
    assert st.state is ExecState.SUCCEEDED, ex.logs("w1")
    out = ex.logs("w1")
    assert out.splitlines()[0] == "nobody"
    assert f"HOME={pwd.getpwnam('nobody').pw_dir}" in out


@root_only
def test_per_user_mode_refuses_unknown_and_root_accounts(tmp_path):
    ex = LocalExecutor(tmp_path / "jobs", user_mode=UserMode.PER_USER)
    with pytest.raises(StartError, match="no Unix account 'zz-no-such-user'") as e:
        ex.start(wl("true", owner="zz-no-such-user"), None)
    assert e.value.permanent
    with pytest.raises(StartError, match="as root"):
        ex.start(wl("true", owner="root"), None)


def test_per_user_mode_needs_root(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("running as root")
    with pytest.raises(StartError, match="root"):
        LocalExecutor(tmp_path, user_mode=UserMode.PER_USER)


def test_whole_gpu_keeps_scheduler_enforcement(ex):
    h = ex.start(wl("true"), alloc())
    assert h.enforcement == {"GPU-aaa": Enforcement.HARDWARE, "GPU-bbb": Enforcement.HARDWARE}
    wait_job(ex, "w1")


def test_spec_without_a_launched_process_reads_as_unknown(ex):
    # the server died after writing the spec and before the launcher registered
    d = ex.state_dir / "w8"
    d.mkdir()
    (d / "spec.json").write_text('{"workload_id": "w8", "started_at": 1}')
    assert ex.poll("w8").state is ExecState.UNKNOWN
    assert ex.list_running() == []


def test_many_finished_jobs_are_not_rescanned(ex):
    for i in range(5):
        ex.start(wl("exit 0", wid=f"f{i}"), None)
    for i in range(5):
        wait_job(ex, f"f{i}")
    assert ex.list_running() == []
    assert set(ex._final) == {f"f{i}" for i in range(5)}
    assert ex._live_candidates() == []


def test_prune_removes_only_old_finished_jobs(ex, job_tmp):
    import time

    fifo, ready = job_tmp / "go", job_tmp / "ready"
    mkfifo(fifo)
    mkfifo(ready)
    ex.start(wl("exit 0", wid="old"), None)
    ex.start(wl(f"echo up > {ready}; read x < {fifo}", wid="live"), None)
    wait_job(ex, "old")
    wait_ready(ready)
    assert ex.prune(3600) == []  # just ended: kept
    assert ex.prune(3600, now=time.time() + 7200) == ["old"]
    assert not (ex.state_dir / "old").exists()
    assert ex.poll("old").state is ExecState.UNKNOWN
    assert ex.poll("live").state is ExecState.RUNNING
    release(fifo)
    wait_job(ex, "live")
