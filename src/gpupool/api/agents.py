"""Schemas for node agents: the report `gpupool agent` posts, node credentials, and the
telemetry a node shows in `GET /api/v1/nodes`.

Units as in `gpupool.telemetry.snapshots`: memory in bytes, utilization in percent, power in
watts, temperature in degrees C; None where NVML gives nothing.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gpupool.api.base import In, Out

_ID = Field(default=None, max_length=128)
_PCT = Field(default=None, ge=0, le=100)
_BYTES = Field(default=None, ge=0, le=1 << 50)


class ProcessReportIn(In):
    """A process on a GPU and what the agent found out about it on the host."""

    pid: int = Field(gt=0, le=1 << 32)
    gpu_uuid: str = Field(min_length=1, max_length=128)
    used_memory_bytes: int | None = _BYTES
    sm_util: float | None = _PCT
    kind: Literal["compute", "mps"] = "compute"
    mig_uuid: str | None = _ID
    command: str | None = Field(default=None, max_length=256)
    unix_user: str | None = _ID
    #: the process's own claim (GPUPOOL_WORKLOAD_ID in its environment or an ancestor's):
    #: accepted for older agents, never used (the pod or Slurm job decides)
    workload_id: str | None = Field(default=None, max_length=64)
    slurm_job_id: str | None = Field(default=None, max_length=32, pattern=r"^\d+$")
    pod_uid: str | None = Field(default=None, max_length=64)


class GpuReportIn(In):
    index: int = Field(ge=0, le=1024)
    uuid: str = Field(min_length=1, max_length=128)
    name: str = Field(min_length=1, max_length=128)
    healthy: bool = True
    memory_total_bytes: int | None = _BYTES
    memory_used_bytes: int | None = _BYTES
    memory_free_bytes: int | None = _BYTES
    util_gpu: float | None = _PCT
    util_memory: float | None = _PCT
    temperature_c: float | None = Field(default=None, ge=-100, le=300)
    power_w: float | None = Field(default=None, ge=0, le=10_000)
    power_limit_w: float | None = Field(default=None, ge=0, le=10_000)
    pci_bus_id: str | None = _ID
    mig_enabled: bool | None = None
    errors: list[str] = Field(default_factory=list, max_length=32)


class NodeReportIn(In):
    """One sample of a node's GPUs and processes, as `gpupool agent` posts it."""

    agent_version: str = Field(min_length=1, max_length=64)
    #: how often the agent reports (s): the server declares it lost after a few missed reports
    interval_s: float = Field(ge=0.1, le=3600)
    #: when the agent sampled (Unix time); refused unless within `skew_allowed_s` of the
    #: server's clock (services.agents.check_fresh)
    timestamp: float = Field(ge=0)
    hostname: str = Field(min_length=1, max_length=253)
    simulated: bool = False
    driver_version: str | None = _ID
    cuda_version: str | None = _ID
    cpu_milli: int = Field(default=0, ge=0, le=1 << 30)
    memory_mib: int = Field(default=0, ge=0, le=1 << 40)
    gpus: list[GpuReportIn] = Field(default_factory=list, max_length=64)
    processes: list[ProcessReportIn] = Field(default_factory=list, max_length=4096)
    errors: list[str] = Field(default_factory=list, max_length=32)

    @model_validator(mode="after")
    def _consistent(self) -> NodeReportIn:
        uuids = [g.uuid for g in self.gpus]
        if len(set(uuids)) != len(uuids):
            raise ValueError("gpus: a GPU UUID is listed twice")
        if len({g.index for g in self.gpus}) != len(self.gpus):
            raise ValueError("gpus: a GPU index is listed twice")
        unknown = {p.gpu_uuid for p in self.processes} - set(uuids)
        if unknown:
            raise ValueError(f"processes: on GPUs not in gpus: {', '.join(sorted(unknown))}")
        return self


class NodeReportAck(Out):
    """What the server answers an agent."""

    node: str
    state: str
    received_at: float
    gpus: int
    #: report again within this many seconds, or the node's state becomes `unknown`
    lost_after_s: float


class NodeTokenIn(In):
    name: str = Field(default="", max_length=128)


class NodeTokenOut(Out):
    id: str
    node: str
    created_at: float
    created_by: str
    revoked_at: float | None
    last_used_at: float | None


class NodeTokenCreated(NodeTokenOut):
    #: shown once; give it to the node's agent (`gpupool agent --token-file`)
    token: str


class ProcessTelemetryOut(Out):
    pid: int
    gpu_uuid: str
    memory_mib: float | None
    sm_util: float | None
    workload_id: str | None
    user: str | None
    tenant: str | None
    slurm_job_id: str | None
    pod_uid: str | None
    #: `namespace/name` of the pod, when the Kubernetes engine knows it; with no workload,
    #: the process runs in a pod gpupool did not create (outside gpupool)
    pod: str | None = None
    unix_user: str | None
    #: how the owner was found: env, slurm, pod, unix-user, none
    via: str


class GpuTelemetryOut(Out):
    uuid: str
    index: int
    healthy: bool
    util_gpu: float | None
    memory_used_mib: float | None
    memory_total_mib: float | None
    temperature_c: float | None
    power_w: float | None


class NodeTelemetryOut(Out):
    """The latest report of a node's agent. `lost` says the agent stopped reporting."""

    reported_at: float
    age_s: float
    interval_s: float
    lost: bool
    agent_version: str
    simulated: bool
    gpus: list[GpuTelemetryOut]
    processes: list[ProcessTelemetryOut]
