"""Workloads: what users ask for, their request, their state machine, and their allocation.

State changes go through `transition()` only; it checks the table and returns the event
that records the change.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gpupool.domain.errors import IllegalTransition, ValidationError
from gpupool.domain.events import Event
from gpupool.domain.placement import check_engine_name, normalize_labels
from gpupool.domain.resources import MILLI_PER_GPU, Share


class WorkloadKind(StrEnum):
    NOTEBOOK = "notebook"
    JOB = "job"


class WorkloadState(StrEnum):
    PENDING = "pending"
    ADMITTED = "admitted"
    STARTING = "starting"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PREEMPTED = "preempted"
    CULLED = "culled"
    LOST = "lost"


S = WorkloadState

#: Allowed state changes. Anything else raises IllegalTransition.
TRANSITIONS: dict[WorkloadState, frozenset[WorkloadState]] = {
    S.PENDING: frozenset({S.ADMITTED, S.CANCELLED, S.FAILED}),
    # admitted -> pending: the executor could not start it; the admission is rolled back.
    S.ADMITTED: frozenset({S.STARTING, S.PENDING, S.CANCELLED, S.PREEMPTED, S.FAILED}),
    # starting -> pending: the engine gave up starting it (a pod that stayed Pending).
    S.STARTING: frozenset(
        {S.PENDING, S.RUNNING, S.SUCCEEDED, S.FAILED, S.CANCELLED, S.PREEMPTED, S.CULLED, S.LOST}
    ),
    S.RUNNING: frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED, S.PREEMPTED, S.CULLED, S.LOST}),
    # preempted work that allows requeue goes back to pending.
    S.PREEMPTED: frozenset({S.PENDING}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
    S.CULLED: frozenset(),
    S.LOST: frozenset(),
}

#: States in which a workload holds an allocation.
ACTIVE_STATES = frozenset({S.ADMITTED, S.STARTING, S.RUNNING})
#: States a workload never leaves (preempted is terminal unless requeued).
TERMINAL_STATES = frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED, S.CULLED, S.LOST})


@dataclass(frozen=True, slots=True)
class Request:
    """Resources a workload asks for.

    Either `gpus` whole GPUs (>= 1), or a fraction `gpu_milli` in 1..999 of one GPU, or
    neither (CPU only). `gpu_memory_mib` is the GPU memory a fractional share gets (and, for
    whole GPUs, the least memory each GPU must have). CPUs in milli-CPU, memory in MiB.

    A multi-node request (a gang) has `nodes` > 1: `gpus` whole GPUs in all, the same number
    (`gpus_per_node`) on each of `nodes` distinct nodes, all admitted at once or not at all;
    its `cpu_milli` and `memory_mib` are per node.

    Placement pins (gpupool.domain.placement): `engine` names the one engine whose nodes may
    run it (None: any); every (key, value) of `node_labels` must be among a node's labels
    (kept sorted by key). Nodes without an engine label match any engine.
    """

    gpus: int = 0
    gpu_milli: int = 0
    gpu_memory_mib: int = 0
    gpu_model: str | None = None
    cpu_milli: int = 0
    memory_mib: int = 0
    #: a MIG profile (`1g.10gb`): one instance of it on a GPU in `mig` mode
    mig: str | None = None
    #: nodes a multi-node request spans (1: one node)
    nodes: int = 1
    #: the engine whose nodes may run it (None: the scheduler chooses)
    engine: str | None = None
    #: labels a node must have, sorted by key
    node_labels: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.engine is not None:
            check_engine_name(self.engine)
        if self.node_labels:
            labels = normalize_labels(self.node_labels)
            if labels != self.node_labels:
                object.__setattr__(self, "node_labels", labels)
        if self.mig is not None:
            if not re.match(r"^[0-9]g\.[0-9]+gb$", self.mig):
                raise ValidationError(
                    f"mig {self.mig!r} is not a MIG profile: write it like 1g.10gb or 3g.40gb",
                    "mig",
                )
            if self.gpus or self.gpu_milli:
                raise ValidationError(
                    "ask for either a MIG instance (mig) or GPUs (gpus, gpu_fraction), not both",
                    "mig",
                )
        if self.nodes < 1:
            raise ValidationError(f"nodes must be >= 1, got {self.nodes}", "nodes")
        if self.nodes > 1 and (self.gpu_milli or self.gpus < self.nodes or self.gpus % self.nodes):
            raise ValidationError(
                f"a request across {self.nodes} nodes needs the same number of whole GPUs on "
                "each node: give gpus_per_node >= 1 (fractions and CPU-only work run on one node)",
                "gpus_per_node",
            )
        if self.mig is not None and self.nodes > 1:
            raise ValidationError("a MIG instance is on one node: leave out nodes", "nodes")
        if self.gpus < 0:
            raise ValidationError(f"gpus must be >= 0, got {self.gpus}", "gpus")
        if self.gpus and self.gpu_milli:
            raise ValidationError(
                "ask for either whole GPUs (gpus) or a fraction of one (gpu_fraction), not both",
                "gpu_fraction",
            )
        if not 0 <= self.gpu_milli < MILLI_PER_GPU:
            raise ValidationError(
                f"gpu_fraction must be above 0 and below 1, got {self.gpu_milli / 1000:g}; "
                "for a whole GPU use gpus: 1",
                "gpu_fraction",
            )
        for name in ("gpu_memory_mib", "cpu_milli", "memory_mib"):
            if getattr(self, name) < 0:
                raise ValidationError(f"{name} must be >= 0", name)

    @property
    def gpus_per_node(self) -> int:
        """Whole GPUs on each node (all of `gpus` for a one-node request)."""
        return self.gpus // self.nodes

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1

    @property
    def fractional(self) -> bool:
        return self.gpu_milli > 0

    @property
    def total_gpu_milli(self) -> int:
        """GPU demand in milli: gpus * 1000, the fraction, or a MIG instance's compute
        slices of 7."""
        if self.mig:
            return int(self.mig.split("g", 1)[0]) * MILLI_PER_GPU // 7
        return self.gpus * MILLI_PER_GPU if self.gpus else self.gpu_milli

    @property
    def wants_gpu(self) -> bool:
        return self.total_gpu_milli > 0

    def describe(self) -> str:
        if self.nodes > 1:
            per = self.gpus_per_node
            what = f"{self.nodes} nodes x {per} {self.gpu_model or ''} GPU{'s' if per > 1 else ''}"
            return " ".join(what.split())
        if self.mig:
            of = f" of a {self.gpu_model}" if self.gpu_model else ""
            return f"a {self.mig} MIG instance{of}"
        if self.gpus:
            what = f"{self.gpus} {self.gpu_model or ''} GPU{'s' if self.gpus > 1 else ''}"
        elif self.gpu_milli:
            what = f"{self.gpu_milli / 1000:g} of a {self.gpu_model or ''} GPU".replace("  ", " ")
            if self.gpu_memory_mib:
                what += f" with {self.gpu_memory_mib / 1024:g} GiB"
        else:
            what = "CPU only"
        return " ".join(what.split())


@dataclass(frozen=True, slots=True)
class Allocation:
    """The shares a workload holds, since `since`: on one node, or for a multi-node request
    on several. Each share names its node; `node` is the first (rank 0, the gang's head),
    `nodes` all of them in rank order; `cpu_milli` and `memory_mib` are per node."""

    workload_id: str
    node: str
    shares: tuple[Share, ...]
    since: float
    cpu_milli: int = 0
    memory_mib: int = 0

    @property
    def gpu_milli(self) -> int:
        return sum(s.milli for s in self.shares)

    @property
    def gpu_uuids(self) -> tuple[str, ...]:
        return tuple(s.gpu_uuid for s in self.shares)

    @property
    def nodes(self) -> tuple[str, ...]:
        """The nodes it spans in rank order: `node` (rank 0) first, then the others by name
        (so the order never depends on how the shares were stored)."""
        return (self.node,) + tuple(sorted({s.node for s in self.shares} - {self.node}))

    @property
    def multi_node(self) -> bool:
        return any(s.node != self.node for s in self.shares)

    def on_node(self, node: str) -> tuple[Share, ...]:
        """Its shares on `node`."""
        return tuple(s for s in self.shares if s.node == node)


@dataclass(frozen=True, slots=True)
class Workload:
    """A user's request to run a notebook or a job, and where it stands."""

    id: str
    tenant: str
    owner: str
    request: Request = Request()
    kind: WorkloadKind = WorkloadKind.JOB
    priority: int = 0
    preemptible: bool = True
    requeue_on_preemption: bool = True
    #: it saves its progress when stopped and resumes from there: cheap to preempt, and it
    #: keeps its attained service when requeued (gpupool.scheduler.levels)
    checkpointing: bool = False
    max_runtime_s: float | None = None
    submitted_at: float = 0.0
    state: WorkloadState = WorkloadState.PENDING
    command: tuple[str, ...] = ()
    profile: str | None = None
    admitted_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    reason: str | None = None
    preemptions: int = 0
    #: failed starts in a row (reset once it starts); see `domain.retries`
    start_attempts: int = 0
    #: pending work whose start failed is not considered before this time
    retry_at: float | None = None

    def __post_init__(self) -> None:
        if not self.id:
            raise ValidationError("a workload needs an id", "id")
        if self.max_runtime_s is not None and self.max_runtime_s <= 0:
            raise ValidationError("max_runtime must be > 0 seconds", "max_runtime")

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES


def transition(
    workload: Workload,
    to: WorkloadState,
    now: float,
    reason: str,
    *,
    exit_code: int | None = None,
) -> tuple[Workload, Event]:
    """Move `workload` to state `to`; return the new workload and the event recording it.

    Raises IllegalTransition if the table does not allow the change. Timestamps follow the
    state: admitted_at, started_at, finished_at; preemption counts up; a requeue clears the
    admission and start times. Starting clears the failed-start count and the retry time, and
    so does a requeue after preemption (a fresh try).
    """
    frm = workload.state
    if to not in TRANSITIONS[frm]:
        raise IllegalTransition(
            f"workload {workload.id} cannot go from {frm} to {to}"
            + (f" (allowed: {', '.join(sorted(TRANSITIONS[frm]))})" if TRANSITIONS[frm] else "")
        )
    changes: dict[str, Any] = {"state": to, "reason": reason}
    if to is S.ADMITTED:
        changes["admitted_at"] = now
    elif to is S.STARTING:
        changes.update(start_attempts=0, retry_at=None)
    elif to is S.RUNNING:
        changes["started_at"] = workload.started_at if workload.started_at is not None else now
    elif to is S.PENDING:
        changes.update(admitted_at=None, started_at=None)
    elif to is S.PREEMPTED:
        changes["preemptions"] = workload.preemptions + 1
        changes["finished_at"] = now
    if to in TERMINAL_STATES:
        changes["finished_at"] = now
        if exit_code is not None:
            changes["exit_code"] = exit_code
    if to is S.PENDING and frm is S.PREEMPTED:
        changes.update(finished_at=None, start_attempts=0, retry_at=None)
    new = dataclasses.replace(workload, **changes)
    event = Event(
        at=now,
        kind=f"workload.{to}",
        message=reason,
        workload_id=workload.id,
        tenant=workload.tenant,
        user=workload.owner,
        data={"from": str(frm), "to": str(to)}
        | ({"exit_code": exit_code} if exit_code is not None else {}),
    )
    return new, event
