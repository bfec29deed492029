"""What classification keeps between cycles: the queue entry (`Candidate`) and `Standing`,
the last cycle's classified pending work, held in the cache's memo (gpupool.scheduler.cache)
and brought up to date by the queues (gpupool.scheduler.queues). Pure data."""

from __future__ import annotations

from gpupool.domain import Workload
from gpupool.scheduler.capacity import Shape
from gpupool.scheduler.tails import LastKeys

#: (order key, workload, shape, GPU milli)
Candidate = tuple[tuple, Workload, Shape, int]


class Standing:
    """The classified pending work of the last cycle, kept in the cache's memo so that the
    next cycle applies only what changed (workloads gone and new, by object identity).

    Read-only for the cycle: queues that change are copied first, so a queue list handed to
    a cycle is never changed afterwards."""

    __slots__ = (
        "objs",
        "wids",
        "queues",
        "demand",
        "adjusted",
        "served",
        "sched",
        "unsched",
        "seen",
        "lasts",
    )

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget everything (the next cycle classifies afresh)."""
        #: id(workload) -> workload (holding it keeps its id from being reused); this and
        #: `sched` and `unsched` are in the order of the last cycle's `pending`
        self.objs: dict[int, Workload] = {}
        #: workload id -> id(workload), for every workload classified
        self.wids: dict[str, int] = {}
        self.queues: dict[str, list[Candidate]] = {}
        self.demand: dict[str, int] = {}
        #: workload ids whose filed entry carries attained service (LAS) or a level (fair)
        self.adjusted: set[str] = set()
        #: workload id -> the attained service (Snapshot.attained_service) its filed entry
        #: was keyed with: an entry whose value is the same next cycle is not keyed again
        self.served: dict[str, float] = {}
        #: id(workload) -> its queue entry as filed, for schedulable work; -> (workload id,
        #: why) otherwise
        self.sched: dict[int, Candidate] = {}
        self.unsched: dict[int, tuple[str, str]] = {}
        #: the cache's `calls` when this was brought up to date (SchedulerCache.started)
        self.seen = -1
        #: per tenant, the last entry's key per shape of its queue (read by the walk's Tail)
        self.lasts: dict[str, LastKeys] = {}
