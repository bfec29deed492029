"""Node pools: groups of same-shaped nodes that an autoscaler adds and gives back (issue 34).

A `NodePool` says what one node of it looks like (GPUs, GPU model, CPUs, memory, labels), how
many nodes it may have (`min_nodes`..`max_nodes`), how long one takes to boot, what its GPUs
cost per hour, how long a node may sit idle before it is given back, and how long a request
for nodes may stay unfulfilled before it is withdrawn.

The nodes of a pool are in one of the `PoolNodeState`s; changes go through
`pool_node_transition()` only (anything else raises `IllegalTransition`). Requests for nodes
are `NodeRequest`s: open until the nodes came (fulfilled) or until they were withdrawn (the
scheduler no longer needs them, or they did not come within `request_timeout_seconds`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import StrEnum

from gpupool.domain.errors import IllegalTransition, ValidationError
from gpupool.domain.placement import check_engine_name, normalize_labels
from gpupool.domain.resources import GPU, MILLI_PER_GPU, Node

#: the label an engine's inventory puts on each node of a pool: its pool's name
POOL_LABEL = "gpupool.io/node-pool"

_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


class PoolNodeState(StrEnum):
    """Where one node of a pool is. Only `up` nodes run work; `requested` and `booting`
    nodes are on their way; `powered_down` nodes are reachable after the pool's boot time."""

    UP = "up"
    REQUESTED = "requested"
    BOOTING = "booting"
    POWERED_DOWN = "powered_down"


P = PoolNodeState

#: Allowed state changes of a pool's node. Anything else raises IllegalTransition.
POOL_NODE_TRANSITIONS: dict[PoolNodeState, frozenset[PoolNodeState]] = {
    # asked for (a request names it), or the engine started it by itself
    P.POWERED_DOWN: frozenset({P.REQUESTED, P.BOOTING, P.UP}),
    # the engine took the request and boots it; or it came up at once; or it was withdrawn
    P.REQUESTED: frozenset({P.BOOTING, P.UP, P.POWERED_DOWN}),
    # it joined; or it failed to boot / its request timed out
    P.BOOTING: frozenset({P.UP, P.POWERED_DOWN}),
    # given back (idle for the pool's idle_seconds) or lost
    P.UP: frozenset({P.POWERED_DOWN}),
}


def pool_node_transition(node: str, old: PoolNodeState, new: PoolNodeState) -> PoolNodeState:
    """Check that node `node` may go from `old` to `new`; return `new`."""
    if new not in POOL_NODE_TRANSITIONS[old]:
        allowed = ", ".join(sorted(POOL_NODE_TRANSITIONS[old])) or "nothing"
        raise IllegalTransition(
            f"pool node {node!r} cannot go from {old} to {new} (from {old}: {allowed})"
        )
    return new


class RequestState(StrEnum):
    """A request for nodes: `open` until its nodes came (`fulfilled`) or it was `withdrawn`."""

    OPEN = "open"
    FULFILLED = "fulfilled"
    WITHDRAWN = "withdrawn"


REQUEST_TRANSITIONS: dict[RequestState, frozenset[RequestState]] = {
    RequestState.OPEN: frozenset({RequestState.FULFILLED, RequestState.WITHDRAWN}),
    RequestState.FULFILLED: frozenset(),
    RequestState.WITHDRAWN: frozenset(),
}


def request_transition(request_id: str, old: RequestState, new: RequestState) -> RequestState:
    """Check that request `request_id` may go from `old` to `new`; return `new`."""
    if new not in REQUEST_TRANSITIONS[old]:
        raise IllegalTransition(f"node request {request_id!r} is {old}; it cannot become {new}")
    return new


@dataclass(frozen=True, slots=True)
class NodePool:
    """A group of same-shaped nodes that may be added (up to `max_nodes`) and given back
    (down to `min_nodes`). One node has `gpus` GPUs of `gpu_model` (each `gpu_memory_mib`;
    0: not stated, any request's GPU memory is taken to fit), `cpu_milli` milli-CPUs and
    `memory_mib` MiB, and carries `labels`. `engine` names the engine that adds its nodes
    (None: the only one). Times are seconds; cost is per GPU-hour (per node-hour for a pool
    without GPUs)."""

    name: str
    gpus: int
    gpu_model: str = ""
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_memory_mib: int = 0
    labels: tuple[tuple[str, str], ...] = ()
    engine: str | None = None
    min_nodes: int = 0
    max_nodes: int = 1
    boot_seconds: float = 300.0
    cost_per_gpu_hour: float = 0.0
    #: an `up` node with no work for this long is given back (above min_nodes)
    idle_seconds: float = 600.0
    #: a request not fulfilled within this long is withdrawn
    request_timeout_seconds: float = 1800.0

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValidationError(
                f"pool name {self.name!r}: use lowercase letters, digits and '-' (at most 63, "
                "starting and ending with a letter or digit), like gpu-h100",
                "name",
            )
        if self.engine is not None:
            check_engine_name(self.engine)
        if self.labels:
            labels = normalize_labels(self.labels, "labels")
            if labels != self.labels:
                object.__setattr__(self, "labels", labels)
        self._check_shape()
        self._check_counts()
        self._check_times()

    def _check_shape(self) -> None:
        if self.gpus < 0:
            raise ValidationError(f"pool {self.name}: gpus must be >= 0, got {self.gpus}", "gpus")
        if self.gpus and not self.gpu_model.strip():
            raise ValidationError(
                f"pool {self.name}: say which GPU model its nodes have (gpu_model, like H100); "
                "no GPU request could be matched to a node of unknown model",
                "gpu_model",
            )
        if not self.gpus and self.gpu_model:
            raise ValidationError(
                f"pool {self.name}: a gpu_model without gpus; give gpus (per node) >= 1",
                "gpus",
            )
        if self.cpu_milli <= 0 or self.memory_mib <= 0:
            raise ValidationError(
                f"pool {self.name}: a node with {self.cpu_milli / 1000:g} CPUs and "
                f"{self.memory_mib} MiB of memory could run no workload; give cpus > 0 and "
                "memory_mib > 0 (what one node of the pool has)",
                "cpus" if self.cpu_milli <= 0 else "memory_mib",
            )
        if self.gpu_memory_mib < 0:
            raise ValidationError(
                f"pool {self.name}: gpu_memory_mib must be >= 0", "gpu_memory_mib"
            )

    def _check_counts(self) -> None:
        if self.min_nodes < 0:
            raise ValidationError(
                f"pool {self.name}: min_nodes must be >= 0, got {self.min_nodes}", "min_nodes"
            )
        if self.max_nodes < 1:
            raise ValidationError(
                f"pool {self.name}: max_nodes must be >= 1, got {self.max_nodes}; "
                "delete the pool instead of allowing it no node",
                "max_nodes",
            )
        if self.max_nodes < self.min_nodes:
            raise ValidationError(
                f"pool {self.name}: max_nodes ({self.max_nodes}) is below min_nodes "
                f"({self.min_nodes}); raise max_nodes or lower min_nodes",
                "max_nodes",
            )

    def _check_times(self) -> None:
        if not math.isfinite(self.boot_seconds) or self.boot_seconds <= 0:
            raise ValidationError(
                f"pool {self.name}: boot_seconds must be above 0 (how long a node takes to "
                f"join once asked for), got {self.boot_seconds:g}",
                "boot_seconds",
            )
        if not math.isfinite(self.cost_per_gpu_hour) or self.cost_per_gpu_hour < 0:
            raise ValidationError(
                f"pool {self.name}: cost_per_gpu_hour must be >= 0, got {self.cost_per_gpu_hour:g}",
                "cost_per_gpu_hour",
            )
        if not math.isfinite(self.idle_seconds) or self.idle_seconds < 0:
            raise ValidationError(
                f"pool {self.name}: idle_seconds must be >= 0, got {self.idle_seconds:g}",
                "idle_seconds",
            )
        if not math.isfinite(self.request_timeout_seconds) or (
            self.request_timeout_seconds < self.boot_seconds
        ):
            raise ValidationError(
                f"pool {self.name}: request_timeout_seconds ({self.request_timeout_seconds:g}) "
                f"is shorter than boot_seconds ({self.boot_seconds:g}): every request would "
                "be withdrawn before its node could boot; give a longer timeout",
                "request_timeout_seconds",
            )

    @property
    def gpu_milli(self) -> int:
        """GPU milli of one node."""
        return self.gpus * MILLI_PER_GPU

    @property
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)

    def node(self, name: str, extra_labels: tuple[tuple[str, str], ...] = ()) -> Node:
        """A node of this pool's shape named `name`, labelled `POOL_LABEL=<pool>` (and
        `extra_labels`); GPUs of unstated memory get 80 GiB."""
        gpus = tuple(
            GPU(i, f"GPU-{name}-{i}", self.gpu_model, self.gpu_memory_mib or 81_920)
            for i in range(self.gpus)
        )
        labels = tuple(
            sorted({**self.label_map, POOL_LABEL: self.name, **dict(extra_labels)}.items())
        )
        return Node(name, gpus, self.cpu_milli, self.memory_mib, labels)

    def cost_per_node_hour(self) -> float:
        """What one node costs per hour (a pool without GPUs: cost_per_gpu_hour per node)."""
        return self.cost_per_gpu_hour * (self.gpus or 1)


@dataclass(frozen=True, slots=True)
class PoolNode:
    """A node of a pool and its state since `since` (seconds on the scheduler's clock).
    `idle_since`: when an `up` node last ran no gpupool work (None: it runs some)."""

    name: str
    pool: str
    state: PoolNodeState
    since: float = 0.0
    idle_since: float | None = None

    def moved(self, new: PoolNodeState, now: float) -> PoolNode:
        """This node in state `new` since `now` (checked by pool_node_transition)."""
        pool_node_transition(self.name, self.state, new)
        return PoolNode(self.name, self.pool, new, now, now if new is P.UP else None)


@dataclass(frozen=True, slots=True)
class NodeRequest:
    """A request to pool `pool` for `count` nodes, for the waiting workloads
    `for_workloads` (all at once when `atomic`: a gang). `engine_ref` is the engine's own id
    for it (returned by `ExecutorWithNodePools.request_nodes`)."""

    id: str
    pool: str
    count: int
    for_workloads: tuple[str, ...]
    requested_at: float
    state: RequestState = RequestState.OPEN
    atomic: bool = False
    engine_ref: str = ""
    #: why it ended (withdrawn: "not fulfilled within 30 min"; fulfilled: "")
    reason: str = ""
    ended_at: float | None = None

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValidationError(f"a node request asks for >= 1 node, got {self.count}", "count")

    def deadline(self, pool: NodePool) -> float:
        """When it is withdrawn unless fulfilled before."""
        return self.requested_at + pool.request_timeout_seconds
