"""Whose is a GPU process, as far as its host can tell.

What decides is what the host observes, which the process cannot set: the pod UID from its
cgroup; the Slurm job id from its cgroup, else from the root-owned `slurmstepd: [JOB.STEP]`
above it (a process can rewrite its own command line and environment, not its parent's uid).
The workload marker (`GPUPOOL_WORKLOAD_ID`, followed up the parent processes by
`gpupool.telemetry.Attributor`) is reported as the process's claim only; the server never
attributes by it. The server maps pods and jobs to workloads (the agent has no store).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gpupool.telemetry.attribution import Attributor, ProcReader
from gpupool.telemetry.cgroups import pod_uid_from_cgroup, slurm_job_from_cgroup

#: the process title slurmd's step daemon sets: `slurmstepd: [1234.batch]`, `[1234.0]`
_STEPD = re.compile(r"^slurmstepd: \[(\d+)(?:\.[A-Za-z0-9_]+)?\]")


@dataclass(frozen=True, slots=True)
class ProcessTags:
    """What the host knows about one process; every field may be unknown (None)."""

    pid: int
    #: the process's own claim (its environment marker): reported, never trusted
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

    def _slurm_step_job(self, pid: int, max_depth: int = 64) -> str | None:
        """The job id of the nearest `slurmstepd` above `pid` that runs as root."""
        st = self.proc.stat(pid)
        for _ in range(max_depth):
            if st is None or st[1] <= 1:
                return None
            parent = st[1]
            m = _STEPD.match(self.proc.cmdline(parent) or "")
            if m and self.proc.uid(parent) == 0:
                return m.group(1)
            st = self.proc.stat(parent)
        return None

    def tag(self, pids: Iterable[int]) -> dict[int, ProcessTags]:
        """Tags for each pid; a vanished process gets an empty tag. Never raises."""
        owners = self.attributor.attribute_all(pids)
        out: dict[int, ProcessTags] = {}
        for pid, a in owners.items():
            cgroup = self._cgroup(pid)
            out[pid] = ProcessTags(
                pid=pid,
                workload_id=a.workload_id,
                slurm_job_id=slurm_job_from_cgroup(cgroup) or self._slurm_step_job(pid),
                pod_uid=pod_uid_from_cgroup(cgroup) or a.pod_uid,
                unix_user=a.unix_user,
                command=a.command,
            )
        return out


def host_facts() -> tuple[int, int]:
    """(CPU in milli-CPU, memory in MiB) of this host."""
    import psutil

    return (os.cpu_count() or 1) * 1000, psutil.virtual_memory().total // (1024 * 1024)
