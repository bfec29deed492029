"""Nodes, GPUs and shares.

GPU quantities are integers in *milli*: 1000 milli is one whole GPU. Memory is in MiB.
A whole-GPU share is 1000 milli and all of the GPU's memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from gpupool.domain.errors import ValidationError

MILLI_PER_GPU = 1000


class SharingMode(StrEnum):
    """How an admin lets a GPU be shared."""

    EXCLUSIVE = "exclusive"  # whole GPUs only
    SHARED = "shared"  # fractional shares (MPS or policed time-slicing)
    MIG = "mig"  # hardware slices


class Enforcement(StrEnum):
    """How strongly a share's limits hold. Never claim more than is enforced."""

    HARDWARE = "hardware"  # MIG: memory and compute isolated by the GPU
    MPS = "mps"  # CUDA MPS pinned memory limit and thread percentage
    POLICED = "policed"  # time-slicing; the agent watches memory and acts
    NONE = "none"  # nothing stops a process from exceeding its share


class NodeState(StrEnum):
    READY = "ready"
    DRAINING = "draining"
    DOWN = "down"
    #: its agent stopped reporting (see gpupool.server.loops.nodewatch); back to the state it
    #: had when the agent reports again
    UNKNOWN = "unknown"


class GPUHealth(StrEnum):
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"


@dataclass(frozen=True, slots=True)
class OutsideUse:
    """Who holds a GPU outside gpupool: work the engine runs that gpupool did not create.

    `ref` names that work as people know it ("slurm job 4711", "pod team-x/train-0"; several
    pods joined by ", "), `user` its owner where the engine says ("" if not), `since` when it
    started (epoch seconds) where known. The GPU stays healthy; it is just taken.
    """

    ref: str
    user: str = ""
    since: float | None = None

    def __post_init__(self) -> None:
        if not self.ref:
            raise ValidationError("an outside use needs a ref naming the work", "ref")

    @property
    def text(self) -> str:
        """'slurm job 4711 (bob)' or 'pod team-x/train-0'."""
        return f"{self.ref} ({self.user})" if self.user else self.ref


@dataclass(frozen=True, slots=True)
class GPU:
    """One physical GPU on a node."""

    index: int
    uuid: str
    model: str
    memory_mib: int
    sharing: SharingMode = SharingMode.EXCLUSIVE
    health: GPUHealth = GPUHealth.HEALTHY
    #: held by work gpupool did not create (None: not); such a GPU is taken, not unhealthy
    outside: OutsideUse | None = None
    #: the MIG layout's name (gpupool.domain.mig) of a `mig` GPU: its fixed instances are
    #: scheduled one by one. None: a `mig` GPU is handed out whole.
    mig_layout: str | None = None

    def __post_init__(self) -> None:
        if self.index < 0:
            raise ValidationError(f"GPU index must be >= 0, got {self.index}", "index")
        if self.memory_mib <= 0:
            raise ValidationError(
                f"GPU {self.uuid}: memory_mib must be positive, got {self.memory_mib}",
                "memory_mib",
            )

    @property
    def schedulable(self) -> bool:
        """Healthy and not used outside gpupool: gpupool may place work here."""
        return self.health is GPUHealth.HEALTHY and self.outside is None


@dataclass(frozen=True, slots=True)
class Node:
    """A host with GPUs, CPUs (in milli-CPU) and memory (MiB)."""

    name: str
    gpus: tuple[GPU, ...] = ()
    cpu_milli: int = 0
    memory_mib: int = 0
    labels: tuple[tuple[str, str], ...] = ()
    state: NodeState = NodeState.READY
    last_heartbeat: float | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ValidationError("a node needs a name", "name")
        if self.cpu_milli < 0 or self.memory_mib < 0:
            raise ValidationError(f"node {self.name}: cpus and memory must be >= 0", "cpus")
        indexes = [g.index for g in self.gpus]
        if len(set(indexes)) != len(indexes):
            raise ValidationError(f"node {self.name}: duplicate GPU index", "gpus")

    @property
    def schedulable(self) -> bool:
        return self.state is NodeState.READY

    @property
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)

    def gpu(self, index: int) -> GPU:
        for g in self.gpus:
            if g.index == index:
                return g
        raise KeyError(f"node {self.name} has no GPU {index}")


@dataclass(frozen=True, slots=True)
class Share:
    """The unit of allocation on one GPU: `milli` of its compute and `memory_mib` of its memory."""

    node: str
    gpu_index: int
    gpu_uuid: str
    milli: int
    memory_mib: int
    enforcement: Enforcement = Enforcement.HARDWARE
    #: a MIG instance of the GPU's layout: its profile and start slot (None: not MIG)
    mig_profile: str | None = None
    mig_start: int | None = None

    def __post_init__(self) -> None:
        if not 0 < self.milli <= MILLI_PER_GPU:
            raise ValidationError(f"share milli must be in 1..1000, got {self.milli}", "milli")
        if self.memory_mib < 0:
            raise ValidationError("share memory_mib must be >= 0", "memory_mib")

    @property
    def whole(self) -> bool:
        return self.milli == MILLI_PER_GPU


@dataclass(frozen=True, slots=True)
class Capacity:
    """Totals of a set of nodes, for reporting and fair-share computation."""

    gpu_milli: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0
    by_model: dict[str, int] = field(default_factory=dict)

    @staticmethod
    def of(nodes: tuple[Node, ...] | list[Node]) -> Capacity:
        by_model: dict[str, int] = {}
        gpu = cpu = mem = 0
        for n in nodes:
            if not n.schedulable:
                continue
            cpu += n.cpu_milli
            mem += n.memory_mib
            for g in n.gpus:
                if g.schedulable:
                    gpu += MILLI_PER_GPU
                    by_model[g.model] = by_model.get(g.model, 0) + MILLI_PER_GPU
        return Capacity(gpu, cpu, mem, by_model)
