"""Whose pods the node agents see: gpupool's own (with their workload) and the others.

The agent reports each GPU process's pod UID (from its cgroup, `gpupool.telemetry.containers.
POD`); the executor answers `owners` and `container_names` from `PodRef`s: gpupool's pods
from `start` and its own list, the cluster's other pods from the inventory's list of every
namespace (`other_pods`), so a process in a pod gpupool did not create is shown as outside
gpupool, with the pod's name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpupool.engines.kubernetes import manifests as m


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
