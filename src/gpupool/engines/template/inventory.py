"""The template engine's inventory: where nodes and GPUs come from.

Fill in `read_nodes`: the engine's nodes as `gpupool.domain.Node`s, each with its GPUs
(index, UUID, model, memory; GPUs the engine cannot give gpupool marked `outside`), its CPUs
and memory. Called at start and, with `Engine.inventory_interval_s`, again on that interval.
"""

from __future__ import annotations

from gpupool.domain import Node


def read_nodes(endpoint: str | None) -> list[Node]:
    """The nodes the engine at `endpoint` offers now. The template has none."""
    return []
