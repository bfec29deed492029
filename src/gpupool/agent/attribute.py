"""Whose is a GPU process, as far as its host can tell.

What decides is what the host observes, which the process cannot set: the containers it
runs in (`gpupool.telemetry.containers.observe`: from its cgroup, or the root-owned step
daemon above it). The workload marker (`GPUPOOL_WORKLOAD_ID`, followed up the parent
processes by `gpupool.telemetry.Attributor`) is reported as the process's claim only; the
server never attributes by it. The server asks its engines who owns those containers (the
agent has no store).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gpupool.telemetry.attribution import Attributor, ProcReader
from gpupool.telemetry.containers import observe


@dataclass(frozen=True, slots=True)
class ProcessTags:
    """What the host knows about one process; every field may be unknown (None)."""

    pid: int
    #: the process's own claim (its environment marker): reported, never trusted
    workload_id: str | None = None
    unix_user: str | None = None
    command: str | None = None
    #: container kind name -> the id of the container of that kind the process runs in
    #: (`gpupool.telemetry.containers.CONTAINER_KINDS`)
    containers: Mapping[str, str] = field(default_factory=dict)


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
            out[pid] = ProcessTags(
                pid=pid,
                workload_id=a.workload_id,
                unix_user=a.unix_user,
                command=a.command,
                containers=observe(self.proc, pid, self._cgroup(pid), a),
            )
        return out


def host_facts() -> tuple[int, int]:
    """(CPU in milli-CPU, memory in MiB) of this host."""
    import psutil

    return (os.cpu_count() or 1) * 1000, psutil.virtual_memory().total // (1024 * 1024)
