"""Where snapshots come from: the `GPUSource` protocol and `open_source()`.

Two implementations: `NVMLSource` (real GPUs through nvidia-ml-py) and `SimulatedSource`
(scripted fake GPUs, the only stand-in for a GPU in CI).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from gpupool.clock import Clock
from gpupool.telemetry.snapshots import HostSnapshot


class TelemetryError(Exception):
    """Base of telemetry errors; the message says what happened and what to do."""


#: What every "no GPU here" message advises (the simulation `gpupool up` starts by itself).
SIMULATE_ADVICE = "Use --simulate 4xH100-80GB to try gpupool without a GPU."


class NoGPUError(TelemetryError):
    """No NVIDIA GPU (or no working driver) on this host. The message is `reason` followed
    by `advice`; callers that say something else to do use `reason` alone."""

    def __init__(self, reason: str, advice: str = SIMULATE_ADVICE) -> None:
        super().__init__(f"{reason}. {advice}" if advice else reason)
        self.reason = reason


@runtime_checkable
class GPUSource(Protocol):
    """Reads the GPUs of one host. `snapshot()` never raises for a failing GPU or field."""

    simulated: bool

    def snapshot(self) -> HostSnapshot:
        """All GPUs now, with their processes."""
        ...

    def close(self) -> None:
        """Release the driver handle. Safe to call twice."""
        ...


def open_source(
    simulate: str | None = None, clock: Clock | None = None, hostname: str | None = None
) -> GPUSource:
    """A simulated source for a spec (`4xH100-80GB,2xA100-40GB`), else the real GPUs.

    Raises `SpecError` for a bad spec and `NoGPUError` when there is no GPU to read.
    """
    if simulate:
        from gpupool.telemetry.simulated import SimulatedSource

        return SimulatedSource(simulate, clock=clock, hostname=hostname)
    from gpupool.telemetry.nvml import NVMLSource

    return NVMLSource.open(clock=clock, hostname=hostname)
