"""Whose is a GPU process, as far as its host can tell.

The workload marker (`GPUPOOL_WORKLOAD_ID`, followed up the parent processes) comes from
`gpupool.telemetry.Attributor`; the Slurm job id from `SLURM_JOB_ID` in the process
environment, else its cgroup; the pod UID from its cgroup. The server maps the workload id to
its user and tenant (the agent has no store).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gpupool.telemetry.attribution import Attributor, ProcReader
from gpupool.telemetry.cgroups import (
    pod_uid_from_cgroup,
    slurm_job_from_cgroup,
    slurm_job_from_environ,
)


@dataclass(frozen=True, slots=True)
class ProcessTags:
    """What the host knows about one process; every field may be unknown (None)."""

    pid: int
    workload_id: str | None = None
    slurm_job_id: str | None = None
    pod_uid: str | None = None
    unix_user: str | None = None
    command: str | None = None


class HostAttributor:
    """Tags GPU processes from `/proc` (its root injectable for tests)."""

    def __init__(self, proc_root: str | Path = "/proc", attributor: Attributor | None = None):
        self.root = Path(proc_root)
        self.proc = ProcReader(proc_root)
        self.attributor = attributor or Attributor(proc_root)

    def _cgroup(self, pid: int) -> str:
        try:
            return (self.root / str(pid) / "cgroup").read_text(errors="replace")
        except OSError:
            return ""

    def tag(self, pids: Iterable[int]) -> dict[int, ProcessTags]:
        """Tags for each pid; a vanished process gets an empty tag. Never raises."""
        owners = self.attributor.attribute_all(pids)
        out: dict[int, ProcessTags] = {}
        for pid, a in owners.items():
            cgroup = self._cgroup(pid)
            env = self.proc.environ(pid) or {}
            out[pid] = ProcessTags(
                pid=pid,
                workload_id=a.workload_id,
                slurm_job_id=slurm_job_from_environ(env) or slurm_job_from_cgroup(cgroup),
                pod_uid=pod_uid_from_cgroup(cgroup) or a.pod_uid,
                unix_user=a.unix_user,
                command=a.command,
            )
        return out


def host_facts() -> tuple[int, int]:
    """(CPU in milli-CPU, memory in MiB) of this host."""
    import psutil

    return (os.cpu_count() or 1) * 1000, psutil.virtual_memory().total // (1024 * 1024)
