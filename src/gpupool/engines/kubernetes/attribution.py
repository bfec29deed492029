"""Whose pods the node agents see: gpupool's own (with their workload) and the others.

The agent reports each GPU process's pod UID (from its cgroup, `gpupool.telemetry.containers.
POD`); the executor answers `owners` and `container_names` from `PodRef`s: gpupool's pods
from `start` and its own list, the cluster's other pods from the inventory's list of every
namespace (`other_pods`), so a process in a pod gpupool did not create is shown as outside
gpupool, with the pod's name. `PodDirectory` holds both, each map replaced whole (request
threads read them while the reconciler's and the inventory's threads write).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.engines.kubernetes import manifests as m
from gpupool.telemetry.containers import POD


@dataclass(frozen=True, slots=True)
class PodRef:
    """A pod the executor knows, by UID: `workload_id` None means a pod gpupool did not
    create (its processes are outside gpupool)."""

    namespace: str
    name: str
    workload_id: str | None = None

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


def other_pods(pods: Iterable[Mapping[str, Any]]) -> dict[str, PodRef]:
    """UID -> pod for the listed pods gpupool did not create (its own are mapped from its
    own list, with their workload)."""
    other: dict[str, PodRef] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        if (meta.get("labels") or {}).get(m.MANAGED_BY) == "gpupool":
            continue
        if meta.get("uid") and meta.get("name"):
            other[meta["uid"]] = PodRef(meta.get("namespace", ""), meta["name"])
    return other


class PodDirectory:
    """Pods by UID: gpupool's own (`own`, with their workload) over the others (`other`)."""

    def __init__(self) -> None:
        self.own: dict[str, PodRef] = {}
        self.other: dict[str, PodRef] = {}

    def add_own(self, workload_id: str, namespace: str, pods: Iterable[Mapping[str, Any]]) -> None:
        """`pods` were just made for `workload_id` in `namespace`: their UIDs are gpupool's."""
        own = dict(self.own)
        for p in pods:
            meta = p.get("metadata") or {}
            if meta.get("uid"):
                own[meta["uid"]] = PodRef(namespace, meta["name"], workload_id)
        self.own = own

    def of(self, container_kind: str, ids: Collection[str]) -> dict[str, PodRef]:
        """The pods among `ids` (none for another kind of container than `POD`)."""
        if container_kind != POD.name:
            return {}
        own, other = self.own, self.other
        return {i: own.get(i) or other[i] for i in ids if i in own or i in other}
