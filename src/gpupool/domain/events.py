"""Events: the append-only record of every state change and decision, with its reason."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True, slots=True)
class Event:
    """One thing that happened.

    kind: a dotted name, e.g. `workload.admitted`, `workload.preempted`, `gpu.policed`.
    message: a human-readable sentence that says why.
    """

    at: float
    kind: str
    message: str
    workload_id: str | None = None
    tenant: str | None = None
    user: str | None = None
    #: any mapping is accepted and frozen into a MappingProxyType
    data: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if not isinstance(self.data, MappingProxyType):
            object.__setattr__(self, "data", MappingProxyType(dict(self.data)))
