"""The local engine's inventory: this host, its GPUs read through NVML, or simulated ones
when asked (``--simulate SPEC``) or when none exist (said loudly)."""

from __future__ import annotations

import os

from gpupool.domain import Node
from gpupool.engines.common.engine import EngineEnv, EngineError
from gpupool.telemetry import GPUSource

#: what `open_gpus` simulates when this host has no NVIDIA GPU and none were asked for
DEFAULT_SIMULATION = "4xH100-80GB"


def open_gpus(simulate: str | None, node: str, env: EngineEnv) -> tuple[GPUSource, str | None]:
    """This host's GPUs as a source, and the simulation spec used (None: real GPUs).
    Raises `EngineError` for a spec that does not parse."""
    from gpupool.telemetry import NoGPUError, SpecError, open_source

    if simulate:
        try:
            return open_source(simulate, hostname=node), simulate
        except SpecError as e:
            raise EngineError(f"--simulate {simulate!r}: {e}") from None
    try:
        return open_source(None, hostname=node), None
    except NoGPUError as e:
        env.say(
            f"gpupool: no NVIDIA GPU found ({e.reason}); starting on simulated GPUs, as "
            f"--simulate {DEFAULT_SIMULATION} would: jobs run for real but see fake GPU "
            "UUIDs. Pass --simulate SPEC to choose others (e.g. --simulate 2xA100-40GB).",
            loud=True,
        )
        return open_source(DEFAULT_SIMULATION, hostname=node), DEFAULT_SIMULATION


def host_node(name: str, source: GPUSource) -> Node:
    """This host as node `name`: the GPUs `source` reads now, its CPUs and memory."""
    import psutil

    snap = source.snapshot()
    return Node(
        name,
        tuple(g.to_domain() for g in snap.gpus),
        cpu_milli=(os.cpu_count() or 1) * 1000,
        memory_mib=psutil.virtual_memory().total // (1024 * 1024),
    )
