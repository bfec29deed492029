"""Node pools for tests: one shape of pool, each test stating what it changes."""

from __future__ import annotations

from typing import Any

from gpupool.domain.nodepools import NodePool


def h100_pool(**changes: Any) -> NodePool:
    """Pool `gpu-h100`: nodes of 8 H100 GPUs, 64 CPUs and 500 GiB, at most 4 of them, 240 s
    to boot; the other fields NodePool's defaults unless `changes` set them."""
    fields: dict[str, Any] = {
        "name": "gpu-h100",
        "gpus": 8,
        "gpu_model": "H100",
        "cpu_milli": 64_000,
        "memory_mib": 512_000,
        "max_nodes": 4,
        "boot_seconds": 240,
    }
    return NodePool(**{**fields, **changes})
