"""Opening a snapshot source: the simulated GPUs of a spec, else the real ones."""

from __future__ import annotations

from gpupool.clock import Clock
from gpupool.telemetry.nvml import NVMLSource
from gpupool.telemetry.simulated import SimulatedSource
from gpupool.telemetry.source import GPUSource


def open_source(
    simulate: str | None = None, clock: Clock | None = None, hostname: str | None = None
) -> GPUSource:
    """A simulated source for a spec (`4xH100-80GB,2xA100-40GB`), else the real GPUs.

    Raises `SpecError` for a bad spec and `NoGPUError` when there is no GPU to read.
    """
    if simulate:
        return SimulatedSource(simulate, clock=clock, hostname=hostname)
    return NVMLSource.open(clock=clock, hostname=hostname)
