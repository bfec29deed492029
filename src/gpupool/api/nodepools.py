"""The API's node pool models (issue 34): `/api/v1/node-pools`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from gpupool.api.base import INT32_MAX, In, Out

PoolNodeStateName = Literal["up", "requested", "booting", "powered_down"]
NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"


# Each field's bounds, once: a pool's spec and a change to it accept the same values.
Gpus = Annotated[int, Field(ge=0, le=1024)]
GpuModel = Annotated[str, Field(max_length=128)]
GpuMemoryMib = Annotated[int, Field(ge=0, le=1 << 24)]
Cpus = Annotated[float, Field(ge=0, le=100_000)]
MemoryMib = Annotated[int, Field(ge=0, le=INT32_MAX)]
Labels = Annotated[dict[str, str], Field(max_length=32)]
EngineName = Annotated[str, Field(min_length=1, max_length=63)]
NodeCount = Annotated[int, Field(ge=0, le=100_000)]
BootSeconds = Annotated[float, Field(le=86_400)]
Cost = Annotated[float, Field(le=1_000_000)]
IdleSeconds = Annotated[float, Field(ge=0, le=30 * 86_400)]
TimeoutSeconds = Annotated[float, Field(gt=0, le=7 * 86_400)]


class NodePoolSpecIn(In):
    """One node's shape (`gpus` of `gpu_model`, `gpu_memory_mib` each (0: not stated),
    `cpus`, `memory_mib`, `labels`), the bounds, the times (seconds) and the cost."""

    gpus: Gpus
    gpu_model: GpuModel = ""
    gpu_memory_mib: GpuMemoryMib = 0
    cpus: Cpus
    memory_mib: MemoryMib
    labels: Labels = Field(default_factory=dict)
    #: the engine that adds its nodes; null: the only one
    engine: EngineName | None = None
    min_nodes: NodeCount = 0
    max_nodes: NodeCount = 1
    boot_seconds: BootSeconds = 300.0
    cost_per_gpu_hour: Cost = 0.0
    #: an up node with no work for this long is given back (above min_nodes)
    idle_seconds: IdleSeconds = 600.0
    #: a request not fulfilled within this long is withdrawn
    request_timeout_seconds: TimeoutSeconds = 1800.0


class NodePoolIn(NodePoolSpecIn):
    name: str = Field(min_length=1, max_length=63, pattern=NAME_PATTERN)


class NodePoolPatchIn(In):
    """The fields to change; the others keep their values."""

    gpus: Gpus | None = None
    gpu_model: GpuModel | None = None
    gpu_memory_mib: GpuMemoryMib | None = None
    cpus: Cpus | None = None
    memory_mib: MemoryMib | None = None
    labels: Labels | None = None
    engine: EngineName | None = None
    min_nodes: NodeCount | None = None
    max_nodes: NodeCount | None = None
    boot_seconds: BootSeconds | None = None
    cost_per_gpu_hour: Cost | None = None
    idle_seconds: IdleSeconds | None = None
    request_timeout_seconds: TimeoutSeconds | None = None


class PoolNodeOut(Out):
    name: str
    state: PoolNodeStateName
    since: float
    #: an up node: when it last ran no gpupool work (null: it runs some)
    idle_since: float | None = None


class NodeRequestOut(Out):
    id: str
    count: int
    requested_at: float
    #: when it is withdrawn unless its nodes came before
    deadline: float
    atomic: bool
    #: the waiting workloads it is for (admins see their ids; others see how many)
    for_workloads: list[str] = Field(default_factory=list)
    workload_count: int = 0


class NodePoolOut(Out):
    name: str
    gpus: int
    gpu_model: str
    gpu_memory_mib: int
    cpus: float
    memory_mib: int
    labels: dict[str, str]
    engine: str | None
    min_nodes: int
    max_nodes: int
    boot_seconds: float
    cost_per_gpu_hour: float
    idle_seconds: float
    request_timeout_seconds: float
    #: state -> how many of its nodes are in it (every state listed)
    counts: dict[str, int]
    nodes: list[PoolNodeOut]
    #: requests for nodes in flight
    requests: list[NodeRequestOut]
