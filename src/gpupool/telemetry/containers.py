"""The containers a host observes GPU processes in, as node agents report them.

A process on a cluster node runs inside something the host itself records and the process
cannot fake: a pod (its UID in the process's cgroup path) or a batch job (its id in the
cgroup path, or in the title of the root-owned step daemon above the process). The agent
reports each process's container id in the report field of its kind; the server asks the
engine's executor who owns those containers (`ExecutorWithAttribution.owners(kind.name,
ids)`) without knowing any kind by name: it loops over `CONTAINER_KINDS`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpupool.telemetry.attribution import Attribution, ProcReader, Via
from gpupool.telemetry.cgroups import pod_uid_from_cgroup, slurm_job_from_cgroup

#: the process title of the batch system's step daemon: `slurmstepd: [1234.batch]`, `[1234.0]`
_STEPD = re.compile(r"^slurmstepd: \[(\d+)(?:\.[A-Za-z0-9_]+)?\]")


@dataclass(frozen=True, slots=True)
class ContainerKind:
    """One kind of container: what an executor is asked about and where a report has it."""

    #: the `container_kind` an executor's `owners` is asked with
    name: str
    #: the report's process field that holds the container's id
    field: str
    #: how a process found in a container gpupool started was attributed
    via: Via
    #: the process field that gets the container's readable name, if the kind has one
    name_field: str | None = None


POD = ContainerKind("pod", "pod_uid", Via.POD, name_field="pod")
SLURM_JOB = ContainerKind("slurm-job", "slurm_job_id", Via.SLURM)
#: every kind a node agent reports, in the order the server attributes by them
CONTAINER_KINDS: tuple[ContainerKind, ...] = (POD, SLURM_JOB)


def _step_daemon_job(proc: ProcReader, pid: int, max_depth: int = 64) -> str | None:
    """The job id of the nearest step daemon above `pid` that runs as root (a process can
    rewrite its own title and environment, not its parent's uid)."""
    st = proc.stat(pid)
    for _ in range(max_depth):
        if st is None or st[1] <= 1:
            return None
        parent = st[1]
        m = _STEPD.match(proc.cmdline(parent) or "")
        if m and proc.uid(parent) == 0:
            return m.group(1)
        st = proc.stat(parent)
    return None


def observe(proc: ProcReader, pid: int, cgroup: str, seen: Attribution) -> dict[str, str]:
    """Kind name -> id of each container the host sees process `pid` run in, from its
    `cgroup` text, the step daemons above it, and what the attributor `seen` found (a pod
    UID in an ancestor's cgroup). Kinds it is in none of are left out."""
    found = {
        POD.name: pod_uid_from_cgroup(cgroup) or seen.pod_uid,
        SLURM_JOB.name: slurm_job_from_cgroup(cgroup) or _step_daemon_job(proc, pid),
    }
    return {kind: cid for kind, cid in found.items() if cid}
