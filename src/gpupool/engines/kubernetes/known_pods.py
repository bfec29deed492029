"""What the kubernetes executor (`executor.py`) remembers of each pod it created or adopted
(`Known`: one per workload, a gang's pods together) and of each stop it asked for (`Stop`),
and what follows from that record alone, without asking the API server: the state of a pod
that vanished, the enforcement its annotation records, the GPUs its pods hold."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gpupool.domain import Enforcement
from gpupool.engines.common.executor import ExecState, ExecStatus
from gpupool.engines.kubernetes import manifests as m
from gpupool.engines.kubernetes.podstatus import node_of, status_of


@dataclass
class Stop:
    """A stop asked for: why, when its grace ends, and whether the pod was force-deleted."""

    reason: str
    due_at: float
    forced: bool = False


def _annotations(pod: dict[str, Any] | None) -> dict[str, str]:
    return ((pod or {}).get("metadata") or {}).get("annotations") or {}


@dataclass
class Known:
    """A pod this executor created or adopted."""

    namespace: str
    name: str
    started_at: float
    node: str | None = None
    pod: dict[str, Any] | None = None
    finished_at: float | None = None
    final: ExecStatus | None = None
    enforcement: dict[str, Enforcement] = field(default_factory=dict)
    #: a gang: its pods' names in rank order (`name` is rank 0) and their last listed pods;
    #: `pod` is then the pod standing for the whole gang (gang.gang_view)
    members: tuple[str, ...] = ()
    member_pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    service: str = ""
    #: the Secret holding its env ("": none, or deleted already)
    secret: str = ""

    def pods(self) -> list[tuple[str, dict[str, Any] | None]]:
        """(name, last listed pod) of each of its pods."""
        if not self.members:
            return [(self.name, self.pod)]
        return [(n, self.member_pods.get(n)) for n in self.members]

    def vanished(self, wid: str, stop: Stop | None) -> ExecStatus:
        """The final state of workload `wid` whose pod is gone: its last listed state when
        that had ended, failed when gpupool deleted it (`stop`: 143, 137 when forced), else
        lost (deleted outside gpupool)."""
        last = status_of(wid, self.pod or {})
        if last.state.finished:
            return last
        if stop is not None:
            code = 137 if stop.forced else 143
            return ExecStatus(
                wid,
                ExecState.FAILED,
                exit_code=code,
                message="the pod was deleted",
                stop_reason=stop.reason,
            )
        return ExecStatus(
            wid,
            ExecState.LOST,
            message=f"the pod {self.namespace}/{self.name} was deleted outside gpupool",
        )

    def recorded_enforcement(self) -> dict[str, Enforcement]:
        """What the pod gets per GPU: recorded at start, else (an adopted pod) read back
        from its annotation and kept."""
        if not self.enforcement and self.pod is not None:
            for item in filter(None, _annotations(self.pod).get(m.ENFORCEMENT, "").split(",")):
                uuid, _, value = item.rpartition("=")
                if uuid and value in set(Enforcement):
                    self.enforcement[uuid] = Enforcement(value)
        return dict(self.enforcement)

    def gpu_uuids(self) -> tuple[str, ...]:
        """The UUIDs of the GPUs its pods hold, as their annotations say."""
        return tuple(
            u for _, pod in self.pods() for u in _annotations(pod).get(m.UUIDS, "").split(",") if u
        )

    def gpu_indexes(self) -> Iterator[tuple[str, set[int]]]:
        """(node, the GPU indexes its pod there holds) per listed pod; nothing while its node
        is not known."""
        if not self.node:
            return
        for _, pod in self.pods():
            node = self.node if not self.members else (node_of(pod) if pod else None)
            if pod is None or not node:
                continue
            raw = _annotations(pod).get(m.GPUS, "")
            yield node, {int(i) for i in raw.split(",") if i.strip().isdigit()}
