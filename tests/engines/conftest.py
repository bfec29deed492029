"""Fixtures for executor tests: a stand-in MPS control binary, helpers to wait on jobs, and
throwaway accounts for single-user mode under root (`user_accounts`)."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gpupool.engines.local import user_accounts as ua
from gpupool.engines.local.executor import LocalExecutor
from gpupool.engines.local.tracking import kill_job, remove_cgroup
from gpupool.engines.local.user_accounts import UserAccounts

FAKE_MPS = Path(__file__).parent / "local" / "fake_mps_control.py"


def make_fake_mps_binary(directory: Path) -> str:
    """Write an executable that behaves like nvidia-cuda-mps-control into `directory`."""
    path = directory / "nvidia-cuda-mps-control"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_MPS}" "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


@pytest.fixture
def fake_mps_binary(tmp_path: Path) -> str:
    """An executable that behaves like nvidia-cuda-mps-control."""
    return make_fake_mps_binary(tmp_path / "bin")


def wait_exit(pid: int, timeout: float = 20.0) -> None:
    """Block until process `pid` has exited (bounded wait on exit, not a timing assumption)."""
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(pid).wait(timeout=timeout)


def wait_job(ex: LocalExecutor, workload_id: str, timeout: float = 20.0) -> None:
    """Block until the job's launcher has exited."""
    child = ex._children.get(workload_id)
    if child is not None:
        child.wait(timeout=timeout)
        return
    pid = int((ex.state_dir / workload_id / "pid").read_text().split()[0])
    wait_exit(pid, timeout)


def _open_fifo(fifo: Path, flags: int, timeout: float) -> int:
    """Open one end of `fifo`, waiting at most `timeout` seconds for the other end.

    On timeout the other end is opened by us to unblock the waiting thread, and the test fails
    instead of hanging.
    """
    result: list[int] = []
    t = threading.Thread(target=lambda: result.append(os.open(fifo, flags)), daemon=True)
    t.start()
    t.join(timeout)
    if not result:
        other = os.O_RDONLY if flags == os.O_WRONLY else os.O_WRONLY
        unblock = os.open(fifo, other | os.O_NONBLOCK)
        t.join(5)
        os.close(unblock)
        for fd in result:
            os.close(fd)
        raise TimeoutError(f"no job opened {fifo} within {timeout:g}s; see its log")
    return result[0]


def release(fifo: Path, timeout: float = 20.0) -> None:
    """Let a job blocked on `read < fifo` go on."""
    fd = _open_fifo(fifo, os.O_WRONLY, timeout)
    os.write(fd, b"go\n")
    os.close(fd)


def wait_ready(fifo: Path, timeout: float = 20.0) -> str:
    """Block until the job writes a line into `fifo` (it is then past its setup)."""
    fd = _open_fifo(fifo, os.O_RDONLY, timeout)
    with os.fdopen(fd) as f:
        return f.readline()


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A temp dir that other Unix accounts (nobody) can reach, for per-user-mode tests."""
    d = Path(tempfile.mkdtemp(prefix="gpupool-exec-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def mkfifo(path: Path) -> Path:
    """A FIFO any job's account can open (os.mkfifo honours the umask)."""
    os.mkfifo(path)
    path.chmod(0o666)
    return path


def end_all(ex: LocalExecutor) -> None:
    """Teardown: kill what is left of every job of `ex` and remove their cgroups, so no test
    leaves processes or cgroups behind."""
    for wid in ex._workload_ids():
        ex._sweep(wid)
    if ex.cgroup_root is not None and ex.cgroup_root.is_dir():  # its state dir may be gone
        for cg in ex.cgroup_root.iterdir():
            if cg.is_dir():
                kill_job(None, None, cg)
                remove_cgroup(cg)


def remove_accounts(prefix: str) -> None:
    """Delete every account named with the (unique, test-only) `prefix`: those gpupool made
    and those a test made in their way (their groups go with them)."""
    for pw in pwd.getpwall():
        if pw.pw_name.startswith(prefix):
            subprocess.run(["userdel", "-f", pw.pw_name], capture_output=True, check=False)


@contextlib.contextmanager
def throwaway_accounts(monkeypatch: pytest.MonkeyPatch) -> Iterator[UserAccounts]:
    """The accounts single-user mode makes under root get a test prefix and homes in a temp
    dir (`UserAccounts.default()` reads both), and are all deleted afterwards."""
    prefix = f"gpt{uuid.uuid4().hex[:6]}-"
    base = Path(tempfile.mkdtemp(prefix="gpupool-users-", dir="/tmp"))
    base.chmod(0o755)
    monkeypatch.setattr(ua, "ACCOUNT_PREFIX", prefix)
    monkeypatch.setattr(ua, "ACCOUNTS_HOME", base / "homes")
    try:
        yield UserAccounts(prefix, base / "homes")
    finally:
        remove_accounts(prefix)
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(autouse=True)
def user_accounts(monkeypatch: pytest.MonkeyPatch) -> Iterator[UserAccounts]:
    """Every test here: accounts made for gpupool users are throwaway ones."""
    with throwaway_accounts(monkeypatch) as accounts:
        yield accounts


@pytest.fixture(autouse=True)
def no_leftover_jobs(
    monkeypatch: pytest.MonkeyPatch, user_accounts: UserAccounts
) -> Iterator[None]:
    """Every LocalExecutor a test makes has its jobs ended and its cgroups removed after the
    test: nothing of a test is left on the host, and nothing of anyone else is touched.
    (Before the test's accounts are deleted: this fixture depends on `user_accounts`.)"""
    made: list[LocalExecutor] = []
    init = LocalExecutor.__init__

    def tracked(self: LocalExecutor, *args: object, **kwargs: object) -> None:
        init(self, *args, **kwargs)  # type: ignore[arg-type]
        made.append(self)

    monkeypatch.setattr(LocalExecutor, "__init__", tracked)
    yield
    for ex in made:
        end_all(ex)
        remove_cgroup(ex.cgroup_root, wait_s=0)
