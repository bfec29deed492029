"""Schemas for nodes and GPUs."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gpupool.api.agents import NodeTelemetryOut
from gpupool.api.base import INT32_MAX, In, Out

Sharing = Literal["exclusive", "shared", "mig"]


class HolderOut(Out):
    workload_id: str
    tenant: str
    user: str
    milli: int
    memory_mib: int
    enforcement: str
    mig_profile: str | None = None
    mig_start: int | None = None


class MigInstanceOut(Out):
    """One instance of a GPU's MIG layout and who holds it."""

    profile: str
    start: int
    memory_mib: int
    #: the workload that holds it; None: free
    workload_id: str | None = None


class OutsideOut(Out):
    """Who holds a GPU outside gpupool (work the engine runs that gpupool did not create)."""

    #: that work as people know it: "slurm job 4711", "pod team-x/train-0"
    ref: str
    #: its owner where the engine says ("" if not)
    user: str
    #: when it started (epoch seconds), where known
    since: float | None = None


class GpuOut(Out):
    uuid: str
    node: str
    index: int
    model: str
    memory_mib: int
    sharing: Sharing
    health: Literal["healthy", "unhealthy"]
    allocated_milli: int
    allocated_memory_mib: int
    holders: list[HolderOut]
    #: set while work gpupool did not create holds the GPU (it is then taken, not unhealthy)
    outside: OutsideOut | None = None
    #: the MIG layout of a `mig` GPU (None: handed out whole) and its instances
    mig_layout: str | None = None
    mig_instances: list[MigInstanceOut] = []


class NodeOut(Out):
    name: str
    #: `unknown`: its agent stopped reporting (see docs/telemetry.md, "gpupool agent")
    state: Literal["ready", "draining", "down", "unknown"]
    cpu_milli: int
    memory_mib: int
    labels: dict[str, str]
    last_heartbeat: float | None
    gpus: list[GpuOut]
    #: the latest report of the node's agent; None for nodes without one (the local engine's)
    telemetry: NodeTelemetryOut | None = None


class OutsideIn(In):
    ref: str = Field(min_length=1, max_length=256)
    user: str = Field(default="", max_length=128)
    since: float | None = Field(default=None, ge=0)


class GpuIn(In):
    index: int = Field(ge=0, le=1024)
    uuid: str = Field(min_length=1, max_length=128)
    model: str = Field(min_length=1, max_length=128)
    memory_mib: int = Field(gt=0, le=1 << 24)
    health: Literal["healthy", "unhealthy"] = "healthy"
    #: held by work gpupool did not create (nothing is placed on it while set)
    outside: OutsideIn | None = None


class NodeIn(In):
    cpu_milli: int = Field(default=0, ge=0, le=1 << 30)
    memory_mib: int = Field(default=0, ge=0, le=INT32_MAX)
    labels: dict[str, str] = Field(default_factory=dict, max_length=64)
    gpus: list[GpuIn] = Field(default_factory=list, max_length=64)
    state: Literal["ready", "draining", "down"] = "ready"


class NodeStateIn(In):
    state: Literal["ready", "draining", "down"]


class GpuUpdateIn(In):
    """Give `sharing`, `mig_layout` or both. `mig_layout`: a layout name (see docs/mig.md)
    for a GPU in `mig` mode; the empty string clears it."""

    sharing: Sharing | None = None
    mig_layout: str | None = Field(default=None, max_length=255)
