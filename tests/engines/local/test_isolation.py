"""Jobs are kept in their place: never root, no server secrets, private files, no escapes."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pwd
import stat
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gpupool.clock import ManualClock
from gpupool.domain import Allocation, Share, Workload, WorkloadKind
from gpupool.engines.common.accounts import (
    UserMode,
    ensure_jobs_account,
    job_powers,
    server_account,
)
from gpupool.engines.common.executor import ExecState, StartError
from gpupool.engines.local.executor import LocalExecutor
from gpupool.engines.local.tracking import detect_cgroup_root
from tests.engines.conftest import end_all, mkfifo, release, wait_job, wait_ready

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="switching accounts needs root")


def wl(cmd: str, wid: str = "w1", owner: str = "alice") -> Workload:
    return Workload(id=wid, tenant="lab-a", owner=owner, command=("sh", "-c", cmd))


def gone(pid: int, timeout: float = 20.0) -> bool:
    """True once `pid` has exited (gone, or a zombie waiting for whoever adopted it)."""
    try:
        p = psutil.Process(pid)
        p.wait(timeout=timeout)
    except psutil.NoSuchProcess:
        return True
    except psutil.TimeoutExpired:
        with contextlib.suppress(psutil.NoSuchProcess):
            return p.status() == psutil.STATUS_ZOMBIE
    return True


@pytest.fixture
def account() -> Iterator[str]:
    """A fresh unprivileged Unix account, removed afterwards (root only)."""
    if os.geteuid() != 0:
        pytest.skip("creating Unix accounts needs root")
    name = f"gpt{uuid.uuid4().hex[:8]}"
    subprocess.run(["useradd", "--no-create-home", name], check=True, capture_output=True)
    yield name
    subprocess.run(["userdel", "-f", name], capture_output=True)


def make(tmp_path: Path, **kw) -> LocalExecutor:
    kw.setdefault("user_mode", "single-user")
    return LocalExecutor(tmp_path / "jobs", clock=ManualClock(1000), **kw)


@pytest.fixture
def executors(tmp_path: Path) -> Iterator[list[LocalExecutor]]:
    made: list[LocalExecutor] = []
    yield made
    for ex in made:
        end_all(ex)


# -- environment ------------------------------------------------------------------------------
def test_server_secrets_never_reach_the_job(tmp_path, executors, monkeypatch):
    monkeypatch.setenv("PGPASSWORD", "pg-s3cret")
    monkeypatch.setenv("GPUPOOL_DATABASE_URL", "postgresql://u:db-s3cret@h/db")
    monkeypatch.setenv("MY_RANDOM_SECRET", "rand-s3cret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-s3cret")
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("LC_TIME", "C")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy:3128")
    monkeypatch.setenv("GPUPOOL_JOB_ENV_PASS", "HTTP_PROXY,GPUPOOL_DATABASE_URL")
    ex = make(tmp_path)
    executors.append(ex)
    alloc = Allocation("w1", "n1", (Share("n1", 0, "GPU-aaa", 1000, 81920),), since=0.0)
    ex.start(
        wl("env"),
        alloc,
        env={"MY_SETTING": "declared", "CUDA_VISIBLE_DEVICES": "GPU-other"},
    )
    wait_job(ex, "w1")
    assert ex.poll("w1").state is ExecState.SUCCEEDED, ex.logs("w1")
    env = dict(line.split("=", 1) for line in ex.logs("w1").splitlines() if "=" in line)
    out = ex.logs("w1")
    for secret in ("pg-s3cret", "db-s3cret", "rand-s3cret", "aws-s3cret"):
        assert secret not in out
    assert "PGPASSWORD" not in env and "GPUPOOL_DATABASE_URL" not in env
    assert env["LANG"] == "C.UTF-8" and env["LC_TIME"] == "C"
    assert env["HTTP_PROXY"] == "http://proxy:3128"  # the admin let it through
    assert env["MY_SETTING"] == "declared"
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-aaa"  # declared env cannot widen the binding
    assert env["GPUPOOL_WORKLOAD_ID"] == "w1" and env["GPUPOOL_JOB_MARKER"].startswith("w1:")
    assert env["USER"] == env["LOGNAME"] == ex._account(wl("true"), None).name
    assert "PATH" in env


# -- who jobs run as --------------------------------------------------------------------------
@root_only
def test_single_user_mode_as_root_runs_jobs_as_the_jobs_account(tmp_path, executors, account):
    ex = make(tmp_path, jobs_account=account)
    executors.append(ex)
    ex.start(wl("id -u; id -un"), None)
    wait_job(ex, "w1")
    uid, name = ex.logs("w1").split()[:2]
    assert name == account and int(uid) == pwd.getpwnam(account).pw_uid != 0


@root_only
def test_single_user_mode_ignores_the_owners_unix_user(tmp_path, executors, account):
    ex = make(tmp_path, jobs_account=account)
    executors.append(ex)
    ex.start(wl("id -un"), None, unix_user="root")  # the scheduler passes the owner's mapping
    wait_job(ex, "w1")
    assert ex.logs("w1").split() == [account]


@root_only
def test_single_user_default_account_is_never_root(tmp_path, executors):
    ex = make(tmp_path)  # no jobs account named: the owner's own account
    executors.append(ex)
    ex.start(wl("id -u"), None)
    wait_job(ex, "w1")
    assert int(ex.logs("w1").split()[0]) != 0


@root_only
def test_single_user_mode_as_root_runs_each_users_jobs_as_their_own_account(
    tmp_path, executors, user_accounts
):
    ex = make(tmp_path)
    executors.append(ex)
    ex.start(wl("id -u; id -un", "wa", owner="alice"), None)
    ex.start(wl("id -u; id -un", "wb", owner="Bob.Lab@x"), None, unix_user="root")
    wait_job(ex, "wa")
    wait_job(ex, "wb")
    (ua, na), (ub, nb) = (ex.logs(w).split()[:2] for w in ("wa", "wb"))
    assert (na, nb) == (user_accounts.name("alice"), user_accounts.name("Bob.Lab@x"))
    assert int(ua) != int(ub) and 0 not in (int(ua), int(ub))
    # the notebooks of a user run as the same account, in its home
    nb = dataclasses.replace(wl("id -un; pwd", "wn", owner="alice"), kind=WorkloadKind.NOTEBOOK)
    ex.start(nb, None)
    wait_job(ex, "wn")
    assert ex.logs("wn").split() == [na, str(user_accounts.home("alice"))]


@root_only
def test_a_members_job_cannot_touch_another_users_notebook_home(tmp_path, executors, user_accounts):
    ex = make(tmp_path)
    executors.append(ex)
    account, home = user_accounts.name("admin"), str(user_accounts.ensure("admin").home)
    plant = (
        f"mkdir -p {home}/.jupyter && echo planted > {home}/.jupyter/jupyter_server_config.py; "
        f"ls {home}; echo rc=$?"
    )
    ex.start(wl(plant, "evil", owner="mallory"), None)
    wait_job(ex, "evil")
    assert not os.path.exists(f"{home}/.jupyter"), ex.logs("evil")
    assert "Permission denied" in ex.logs("evil") and "rc=2" in ex.logs("evil")
    # the admin's own job can write there
    ex.start(wl(f"touch {home}/mine && echo ok", "own", owner="admin"), None)
    wait_job(ex, "own")
    assert ex.logs("own").split() == ["ok"]
    assert os.stat(f"{home}/mine").st_uid == pwd.getpwnam(account).pw_uid


def test_gpupool_up_says_who_single_user_work_runs_as(monkeypatch, user_accounts):
    from gpupool.engines.local.isolation import isolation_lines

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: pwd.getpwnam("root"))
    own = " ".join(isolation_lines("single-user", None))
    assert "gpupool: single-user mode: each gpupool user's jobs and notebooks run as" in own
    assert f"home {user_accounts.home_base}/<account>" in own
    shared = " ".join(isolation_lines("single-user", "nobody"))
    assert "one unprivileged account 'nobody'" in shared and "another member's" in shared


def test_single_user_mode_as_root_needs_useradd(monkeypatch):
    from gpupool.engines.local.isolation import check_user_accounts
    from gpupool.engines.local.user_accounts import UserAccounts

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(UserAccounts, "cannot", lambda self: "useradd is not installed")
    why = check_user_accounts("single-user") or ""
    assert "useradd is not installed" in why and "--jobs-account" in why
    assert check_user_accounts("per-user") is None


@root_only
def test_no_account_mapping_can_make_a_job_root(tmp_path, executors):
    ex = make(tmp_path, jobs_account="root")
    executors.append(ex)
    with pytest.raises(StartError, match="never runs jobs as root") as e:
        ex.start(wl("true"), None)
    assert e.value.permanent
    per_user = make(tmp_path, user_mode=UserMode.PER_USER)
    executors.append(per_user)
    with pytest.raises(StartError, match="as root"):
        per_user.start(wl("true", owner="alice"), None, unix_user="root")
    with pytest.raises(StartError, match="as root"):
        per_user.start(wl("true", owner="root"), None)


@root_only
def test_gpupool_up_creates_the_jobs_account_once(account):
    subprocess.run(["userdel", "-f", account], capture_output=True, check=True)
    try:
        name, warning = ensure_jobs_account(account)
        assert (name, warning) == (account, None)
        pw = pwd.getpwnam(account)
        assert pw.pw_uid != 0 and pw.pw_dir == f"/var/lib/{account}"
        assert stat.S_IMODE(os.stat(pw.pw_dir).st_mode) == 0o700
        assert ensure_jobs_account(account) == (account, None)  # exists: kept
    finally:
        subprocess.run(["userdel", "-f", "-r", account], capture_output=True)


def test_job_powers_say_what_a_job_can_do():
    me = server_account()
    text = " ".join(job_powers("single-user", me, "gpupool-jobs"))
    own = " ".join(job_powers("single-user", me, None))
    if me.uid == 0:
        assert "gpupool-jobs" in text and "never as root" in text
        assert "cannot read or write gpupool's data directory" in text
        assert "can read, change and signal another member's running jobs" in text
        assert "their own" in own and "not other members' jobs, files or notebook homes" in own
    else:
        assert "CAN read and write gpupool's database" in text
    assert "never as root" in " ".join(job_powers("per-user", me, None))


# -- private files ----------------------------------------------------------------------------
@root_only
def test_job_files_are_private(tmp_path, executors, account):
    ex = make(tmp_path, jobs_account=account)
    executors.append(ex)
    ex.start(wl(f"cat {ex.state_dir}/w1/spec.json; echo rc=$?; echo x > {ex.state_dir}/w2"), None)
    wait_job(ex, "w1")
    d = ex.state_dir / "w1"
    assert stat.S_IMODE(ex.state_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    for name in ("spec.json", "pid", "exitcode"):
        st = (d / name).stat()
        assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == 0, name
    log = (d / "output.log").stat()
    assert stat.S_IMODE(log.st_mode) == 0o600
    assert log.st_uid == pwd.getpwnam(account).pw_uid  # the job's own user, nobody else
    assert not (d / "env.json").exists()  # read and deleted by the launcher
    out = ex.logs("w1")
    assert "rc=1" in out and "Permission denied" in out
    assert not (ex.state_dir / "w2").exists()


# -- escapes ----------------------------------------------------------------------------------
ESCAPE = "setsid sh -c 'echo $$ > {ready}; sleep 1000' & read x < {go}; exit 0"


def _escaping_job(ex: LocalExecutor, tmp: Path) -> tuple[Path, int]:
    ready, go = mkfifo(tmp / "ready"), mkfifo(tmp / "go")
    ex.start(wl(ESCAPE.format(ready=ready, go=go)), None)
    escaped = int(wait_ready(ready))
    assert os.getsid(escaped) == escaped  # it really left the job's session
    assert escaped in ex.job_pids("w1")
    return go, escaped


@pytest.mark.parametrize("cgroups", [False, True], ids=["marker", "cgroup"])
def test_setsid_child_is_gone_after_stop(tmp_path, executors, job_tmp, cgroups):
    ex = make(tmp_path, cgroups=cgroups)
    if cgroups and ex.cgroup_root is None:
        pytest.skip("this host delegates no writable cgroup v2 tree")
    executors.append(ex)
    _go, escaped = _escaping_job(ex, job_tmp)
    ex.stop("w1", "cancelled", grace_s=0)
    wait_job(ex, "w1")
    assert gone(escaped)
    assert ex.poll("w1").state is ExecState.FAILED
    assert ex.job_pids("w1") == set()


@pytest.mark.parametrize("cgroups", [False, True], ids=["marker", "cgroup"])
def test_setsid_child_is_gone_when_the_main_process_exits(tmp_path, executors, job_tmp, cgroups):
    ex = make(tmp_path, cgroups=cgroups)
    if cgroups and ex.cgroup_root is None:
        pytest.skip("this host delegates no writable cgroup v2 tree")
    executors.append(ex)
    go, escaped = _escaping_job(ex, job_tmp)
    release(go)
    wait_job(ex, "w1")
    assert gone(escaped)
    st = ex.poll("w1")
    assert (st.state, st.exit_code) == (ExecState.SUCCEEDED, 0)


def test_escape_is_caught_even_when_the_launcher_was_killed(tmp_path, executors, job_tmp):
    ex = make(tmp_path, cgroups=False)
    executors.append(ex)
    _go, escaped = _escaping_job(ex, job_tmp)
    launcher = ex._children["w1"]
    launcher.kill()  # e.g. the OOM killer: no exit code, no clean-up by the launcher
    launcher.wait(timeout=20)
    assert not gone(escaped, timeout=0.1)
    ex.poll("w1")  # the executor notices the end and sweeps what escaped
    assert gone(escaped)


def test_cleared_environment_escape_is_caught_by_the_cgroup(tmp_path, executors, job_tmp):
    ex = make(tmp_path)
    if ex.cgroup_root is None:
        pytest.skip("this host delegates no writable cgroup v2 tree")
    executors.append(ex)
    ready, go = mkfifo(job_tmp / "ready"), mkfifo(job_tmp / "go")
    cmd = f"env -i setsid sh -c 'echo $$ > {ready}; exec sleep 1000' & read x < {go}"
    ex.start(wl(cmd), None)
    escaped = int(wait_ready(ready))
    ex.stop("w1", "cancelled", grace_s=0)
    wait_job(ex, "w1")
    assert gone(escaped)
    assert ex.poll("w1").state is ExecState.FAILED  # the end is seen: the cgroup goes
    assert not Path(ex._read_json(ex.state_dir / "w1" / "spec.json")["cgroup"]).exists()


def test_cgroup_detection_needs_a_cgroup2_mount(tmp_path):
    fake = tmp_path / "self"
    fake.mkdir()
    (fake / "mountinfo").write_text("22 1 0:20 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n")
    (fake / "cgroup").write_text("1:cpu:/\n")
    assert detect_cgroup_root(fake) is None
    mnt = tmp_path / "cg2"
    mnt.mkdir()
    (fake / "mountinfo").write_text(f"30 1 0:26 / {mnt} rw - cgroup2 cgroup2 rw\n")
    (fake / "cgroup").write_text("0::/\n")
    # a plain directory is no cgroup: the probe finds no cgroup.procs to write
    assert detect_cgroup_root(fake) is None
