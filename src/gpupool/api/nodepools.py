"""The API's node pool models (issue 34): `/api/v1/node-pools`."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gpupool.api.base import INT32_MAX, In, Out

PoolNodeStateName = Literal["up", "requested", "booting", "powered_down"]
NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"


class NodePoolSpecIn(In):
    """One node's shape (`gpus` of `gpu_model`, `gpu_memory_mib` each (0: not stated),
    `cpus`, `memory_mib`, `labels`), the bounds, the times (seconds) and the cost."""

    gpus: int = Field(ge=0, le=1024)
    gpu_model: str = Field(default="", max_length=128)
    gpu_memory_mib: int = Field(default=0, ge=0, le=1 << 24)
    cpus: float = Field(ge=0, le=100_000)
    memory_mib: int = Field(ge=0, le=INT32_MAX)
    labels: dict[str, str] = Field(default_factory=dict, max_length=32)
    #: the engine that adds its nodes; null: the only one
    engine: str | None = Field(default=None, min_length=1, max_length=63)
    min_nodes: int = Field(default=0, ge=0, le=100_000)
    max_nodes: int = Field(default=1, ge=0, le=100_000)
    boot_seconds: float = Field(default=300.0, le=86_400)
    cost_per_gpu_hour: float = Field(default=0.0, le=1_000_000)
    #: an up node with no work for this long is given back (above min_nodes)
    idle_seconds: float = Field(default=600.0, ge=0, le=30 * 86_400)
    #: a request not fulfilled within this long is withdrawn
    request_timeout_seconds: float = Field(default=1800.0, gt=0, le=7 * 86_400)


class NodePoolIn(NodePoolSpecIn):
    name: str = Field(min_length=1, max_length=63, pattern=NAME_PATTERN)


class NodePoolPatchIn(In):
    """The fields to change; the others keep their values."""

    gpus: int | None = Field(default=None, ge=0, le=1024)
    gpu_model: str | None = Field(default=None, max_length=128)
    gpu_memory_mib: int | None = Field(default=None, ge=0, le=1 << 24)
    cpus: float | None = Field(default=None, ge=0, le=100_000)
    memory_mib: int | None = Field(default=None, ge=0, le=INT32_MAX)
    labels: dict[str, str] | None = Field(default=None, max_length=32)
    engine: str | None = Field(default=None, min_length=1, max_length=63)
    min_nodes: int | None = Field(default=None, ge=0, le=100_000)
    max_nodes: int | None = Field(default=None, ge=0, le=100_000)
    boot_seconds: float | None = Field(default=None, le=86_400)
    cost_per_gpu_hour: float | None = Field(default=None, le=1_000_000)
    idle_seconds: float | None = Field(default=None, ge=0, le=30 * 86_400)
    request_timeout_seconds: float | None = Field(default=None, gt=0, le=7 * 86_400)


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
