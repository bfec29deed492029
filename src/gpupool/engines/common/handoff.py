"""The hand-off directory between the gpupool server and JupyterHub's spawner (same host).

Both processes use it: the server's `gpupool.engines.common.hub_launch.HubLaunchExecutor` writes
grants and stop requests, the hub's `gpupool.jupyterhub.spawner.GpupoolSpawner` reads grants
and records launches and exits. One sub-directory per workload:

- ``grant.json``    written by the executor at admission: the environment the notebook must
                    run with (``CUDA_VISIBLE_DEVICES=<GPU UUIDs>``, ``GPUPOOL_WORKLOAD_ID``,
                    ``GPUPOOL_GPU_MILLI``, MPS variables for fractional shares under MPS)
                    and, when gpupool picks it, the Unix account and home the notebook
                    runs as (single-user mode under root: the owner's own account);
- ``launched.json`` written by the spawner once the notebook process runs (pid + start time);
- ``exited.json``   written by the spawner when it stopped the notebook itself, or could not
                    start it (then with the reason, which the workload's failure keeps);
- ``stop.json``     written by the executor when the server stops the notebook (cull,
                    preemption, cancel): it signals the process, the spawner notices.

Everything lives in files, so both the hub and the gpupool server may restart at any time.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from gpupool.domain import Workload, WorkloadKind
from gpupool.engines.common.files import write_atomic

GRANT = "grant.json"
LAUNCHED = "launched.json"
EXITED = "exited.json"
STOP = "stop.json"
#: Exit code recorded for a notebook the server stopped (128 + SIGTERM, as the shell does).
STOPPED_EXIT = 128 + signal.SIGTERM


def is_hub_launched(workload: Workload) -> bool:
    """True for workloads JupyterHub starts: notebooks submitted without a command."""
    return workload.kind is WorkloadKind.NOTEBOOK and not workload.command


def _write_json(path: Path, data: Mapping[str, object]) -> None:
    """Atomic and safe for concurrent writers (loops in several threads stop the same
    notebook): `gpupool.engines.common.files.write_atomic`."""
    write_atomic(path, json.dumps(data))


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
        return None


def process_start_time(pid: int) -> float | None:
    """The process's start time (epoch seconds), or None if it is gone (or a zombie)."""
    try:
        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return None
        return p.create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


@dataclass(frozen=True, slots=True)
class Grant:
    workload_id: str
    env: dict[str, str]
    gpu_uuids: tuple[str, ...]
    enforcement: dict[str, str]
    granted_at: float
    #: the Unix account and home the notebook runs as (None: the spawner's own choice)
    account: str | None = None
    home: str | None = None


class LaunchDir:
    """The shared hand-off directory (see the module docstring). Safe for concurrent use."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def _d(self, workload_id: str) -> Path:
        if not workload_id or "/" in workload_id or workload_id.startswith("."):
            raise ValueError(f"bad workload id {workload_id!r}")
        return self.path / workload_id

    def known(self, workload_id: str) -> bool:
        return (self._d(workload_id) / GRANT).exists()

    def ids(self) -> list[str]:
        if not self.path.is_dir():
            return []
        return sorted(p.name for p in self.path.iterdir() if (p / GRANT).exists())

    # -- executor side -------------------------------------------------------------------
    def write_grant(self, grant: Grant) -> None:
        d = self._d(grant.workload_id)
        d.mkdir(parents=True, exist_ok=True)
        _write_json(
            d / GRANT,
            {
                "workload_id": grant.workload_id,
                "env": grant.env,
                "gpu_uuids": list(grant.gpu_uuids),
                "enforcement": grant.enforcement,
                "granted_at": grant.granted_at,
                "account": grant.account,
                "home": grant.home,
            },
        )

    def ask_stop(self, workload_id: str, reason: str, at: float, grace_s: float) -> None:
        d = self._d(workload_id)
        if d.is_dir() and not (d / STOP).exists():
            _write_json(d / STOP, {"reason": reason, "at": at, "grace_s": grace_s})

    def stop_request(self, workload_id: str) -> dict | None:
        return _read_json(self._d(workload_id) / STOP)

    # -- spawner side --------------------------------------------------------------------
    def grant(self, workload_id: str) -> Grant | None:
        data = _read_json(self._d(workload_id) / GRANT)
        if data is None:
            return None
        return Grant(
            workload_id=data["workload_id"],
            env={str(k): str(v) for k, v in data.get("env", {}).items()},
            gpu_uuids=tuple(data.get("gpu_uuids", ())),
            enforcement=dict(data.get("enforcement", {})),
            granted_at=float(data.get("granted_at", 0.0)),
            account=data.get("account"),
            home=data.get("home"),
        )

    def mark_launched(self, workload_id: str, pid: int, at: float) -> None:
        d = self._d(workload_id)
        d.mkdir(parents=True, exist_ok=True)
        _write_json(d / LAUNCHED, {"pid": pid, "pid_start": process_start_time(pid), "at": at})

    def launched(self, workload_id: str) -> dict | None:
        return _read_json(self._d(workload_id) / LAUNCHED)

    def mark_exited(
        self, workload_id: str, exit_code: int, at: float, reason: str | None = None
    ) -> None:
        """The notebook ended (`reason`: why, when the spawner could not start it)."""
        d = self._d(workload_id)
        if d.is_dir():
            _write_json(d / EXITED, {"exit_code": exit_code, "at": at, "reason": reason})

    def exited(self, workload_id: str) -> dict | None:
        return _read_json(self._d(workload_id) / EXITED)

    def alive_pid(self, workload_id: str) -> int | None:
        """The notebook's pid if that very process still runs (not a reused pid)."""
        info = self.launched(workload_id)
        if not info:
            return None
        started = process_start_time(int(info["pid"]))
        if started is None:
            return None
        if info.get("pid_start") is not None and abs(started - float(info["pid_start"])) > 1.0:
            return None
        return int(info["pid"])
