"""Fixtures for executor tests: a stand-in MPS control binary and helpers to wait on jobs."""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from pathlib import Path

import psutil
import pytest

from gpupool.executors.local import LocalExecutor

FAKE_MPS = Path(__file__).with_name("fake_mps_control.py")


@pytest.fixture
def fake_mps_binary(tmp_path: Path) -> str:
    """An executable that behaves like nvidia-cuda-mps-control."""
    path = tmp_path / "bin" / "nvidia-cuda-mps-control"
    path.parent.mkdir()
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_MPS}" "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


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


def release(fifo: Path) -> None:
    """Let a job blocked on `read < fifo` go on."""
    fd = os.open(fifo, os.O_WRONLY)
    os.write(fd, b"go\n")
    os.close(fd)


def wait_ready(fifo: Path) -> str:
    """Block until the job writes a line into `fifo` (it is then past its setup)."""
    with open(fifo) as f:
        return f.readline()
