"""Fixtures for executor tests: a stand-in MPS control binary and helpers to wait on jobs."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gpupool.executors.local import LocalExecutor
from gpupool.executors.tracking import kill_job, remove_cgroup

FAKE_MPS = Path(__file__).with_name("fake_mps_control.py")


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


@pytest.fixture(autouse=True)
def no_leftover_jobs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every LocalExecutor a test makes has its jobs ended and its cgroups removed after the
    test: nothing of a test is left on the host, and nothing of anyone else is touched."""
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
