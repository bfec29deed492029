"""After a cycle: what its caller keeps about preemptions for the next cycles. The one home
that the server loop (gpupool.server.loops.scheduler), the simulator (gpupool.sim.engine)
and the test builders (tests/scheduler/builders.py) share.

* `Nominations`: per pending workload, the nodes where work was preempted for it (and per
  moved workload, the node it moves to): `Snapshot.nominated`, like Kubernetes'
  nominatedNodeName. Recorded from a cycle's preemptions; dropped once the workload is
  admitted, fails, or no longer waits.
* `requeued`: a preempted workload that asked for it (`requeue_on_preemption`) goes back to
  the queue with its submit time (so it keeps its place in line), and `requeue_reason` says
  whether it resumes from a checkpoint.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from gpupool.domain import Workload, WorkloadState, transition
from gpupool.scheduler.types import Decisions, Preemption, RunningWorkload


def nominations(
    preemptions: Iterable[Preemption], node_of: Mapping[str, str]
) -> dict[str, tuple[str, ...]]:
    """For `Snapshot.nominated`: per workload that work was preempted for in one cycle, the
    nodes (sorted, distinct) its victims ran on (`node_of`: victim workload id -> node); per
    workload moved (`Preemption.move_to`), the node it moves to."""
    out: dict[str, set[str]] = {}
    for p in preemptions:
        node = node_of.get(p.workload_id)
        if node is not None:
            out.setdefault(p.for_workload, set()).add(node)
        if p.move_to is not None:
            out.setdefault(p.workload_id, set()).add(p.move_to)
    return {w: tuple(sorted(nodes)) for w, nodes in out.items()}


class Nominations:
    """The nominations a caller keeps between cycles (in memory: a restart forgets them,
    which is harmless: the reclaimed capacity is merely not kept for its workload)."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[str, ...]] = {}

    def for_snapshot(self, waiting: Collection[str] | None = None) -> dict[str, tuple[str, ...]]:
        """`Snapshot.nominated` for the next cycle. `waiting`: the ids of the workloads
        that still wait (pending, or still stopping to be moved); the others' nominations
        are dropped first. None: keep all."""
        if waiting is not None:
            self.nodes = self.of(waiting)
        return dict(self.nodes)

    def of(self, waiting: Collection[str]) -> dict[str, tuple[str, ...]]:
        """The nominations of the workloads in `waiting`, dropping none (`for_snapshot`
        without its change: for a reader beside the one that keeps them, on another thread;
        read from a copy, taken at once, so the keeper's changes meanwhile do not break it)."""
        return {k: v for k, v in dict(self.nodes).items() if k in waiting}

    def record(self, d: Decisions, running: Iterable[RunningWorkload]) -> None:
        """After cycle `d` (run on a snapshot with `running`): nominate nodes for its
        preemptions; drop what it admitted or failed as unschedulable."""
        if d.preemptions:
            node_of = {rw.workload.id: rw.allocation.node for rw in running}
            self.nodes.update(nominations(d.preemptions, node_of))
        for a in d.admissions:
            self.nodes.pop(a.workload_id, None)
        for wid in d.unschedulable:
            self.nodes.pop(wid, None)

    def drop(self, workload_id: str) -> None:
        self.nodes.pop(workload_id, None)

    def __contains__(self, workload_id: object) -> bool:
        return workload_id in self.nodes

    def __getitem__(self, workload_id: str) -> tuple[str, ...]:
        return self.nodes[workload_id]

    def __len__(self) -> int:
        return len(self.nodes)


def requeue_reason(w: Workload) -> str:
    """The reason of a preempted workload's return to the queue."""
    how = "resumes from its checkpoint" if w.checkpointing else "restarts from scratch"
    return f"requeued after preemption; {how}"


def requeued(w: Workload, now: float) -> Workload | None:
    """`w` (preempted: state PREEMPTED) back in the queue at `now` with its submit time, or
    None if it did not ask to be requeued."""
    if not w.requeue_on_preemption:
        return None
    return transition(w, WorkloadState.PENDING, now, requeue_reason(w))[0]
