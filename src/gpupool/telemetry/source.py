"""What a snapshot source is: the `GPUSource` protocol and the telemetry errors.

Two implementations: `NVMLSource` (real GPUs through nvidia-ml-py) and `SimulatedSource`
(scripted fake GPUs, the only stand-in for a GPU in CI); `gpupool.telemetry.opening` picks one.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

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
