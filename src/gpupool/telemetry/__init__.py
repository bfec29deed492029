"""GPU telemetry: NVML access, simulated GPUs, sampling, attribution, policing, metrics.

A library: it imports only `gpupool.domain` and `gpupool.clock`; the agent, the server,
the CLI and the dashboard sit on it.
"""

from gpupool.telemetry.attribution import (
    WORKLOAD_ENV,
    Attribution,
    Attributor,
    ProcReader,
    Via,
    WorkloadOwner,
)
from gpupool.telemetry.opening import open_source
from gpupool.telemetry.policing import Detection, DetectionKind, Policer, PolicingConfig
from gpupool.telemetry.sampler import Frame, GPUPoint, ProcessPoint, Sampler
from gpupool.telemetry.simulated import SimulatedSource, SpecError, parse_spec
from gpupool.telemetry.snapshots import (
    DeviceSnapshot,
    GPUSnapshot,
    HostSnapshot,
    MigDeviceSnapshot,
    ProcessKind,
    ProcessSnapshot,
)
from gpupool.telemetry.source import GPUSource, NoGPUError, TelemetryError

__all__ = [
    "WORKLOAD_ENV",
    "Attribution",
    "Attributor",
    "Detection",
    "DetectionKind",
    "DeviceSnapshot",
    "Frame",
    "GPUPoint",
    "GPUSnapshot",
    "GPUSource",
    "HostSnapshot",
    "MigDeviceSnapshot",
    "NoGPUError",
    "Policer",
    "PolicingConfig",
    "ProcReader",
    "ProcessKind",
    "ProcessPoint",
    "ProcessSnapshot",
    "Sampler",
    "SimulatedSource",
    "SpecError",
    "TelemetryError",
    "Via",
    "WorkloadOwner",
    "open_source",
    "parse_spec",
]
