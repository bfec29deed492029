"""The containers a host observes GPU processes in, as node agents report them.

A process on a cluster node runs inside something the host itself records and the process
cannot fake: a pod (its UID in the process's cgroup path) or a batch job (its id in the
cgroup path, or in the title of the root-owned step daemon above the process). The agent
reports each process's container id in the report field of its kind; the server asks the
engine's executor who owns those containers (`ExecutorWithAttribution.owners(kind.name,
ids)`) without knowing any kind by name: it loops over `CONTAINER_KINDS`.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpupool.telemetry.attribution import Via


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
