"""Timestamped, immutable snapshots of GPUs, their processes and the host.

Every value NVML may fail to give is optional: `None` means "not available" (the driver
lacks the function, the GPU does not support it, or the call failed). Memory is in bytes,
utilization in percent (0-100), temperature in degrees C, power in watts, clocks in MHz,
energy in millijoules (since the driver was loaded, as NVML and DCGM count it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from gpupool.domain import GPU, GPUHealth, SharingMode
from gpupool.domain.mig import short_name

MIB = 1024 * 1024


class ProcessKind(StrEnum):
    """How a process uses a GPU: a plain CUDA context, or a client of a CUDA MPS server."""

    COMPUTE = "compute"
    MPS = "mps"


@dataclass(frozen=True, slots=True)
class ProcessSnapshot:
    """One process seen on one GPU (or MIG device) at `timestamp`."""

    pid: int
    gpu_uuid: str
    gpu_index: int
    timestamp: float
    used_memory_bytes: int | None = None
    sm_util: float | None = None
    kind: ProcessKind = ProcessKind.COMPUTE
    mig_uuid: str | None = None

    @property
    def used_memory_mib(self) -> float | None:
        return None if self.used_memory_bytes is None else self.used_memory_bytes / MIB


@dataclass(frozen=True, slots=True)
class MigDeviceSnapshot:
    """One MIG slice of a GPU in MIG mode."""

    index: int
    uuid: str | None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    #: its MIG profile (`1g.10gb`, from the device name) and start slot on the placement
    #: grid (from its GPU instance's placement), when NVML tells them
    profile: str | None = None
    start: int | None = None


@dataclass(frozen=True, slots=True)
class GPUSnapshot:
    """One GPU at `timestamp`. A GPU that stopped answering stays listed with healthy=False."""

    index: int
    uuid: str
    name: str
    timestamp: float
    healthy: bool = True
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    memory_free_bytes: int | None = None
    memory_reserved_bytes: int | None = None
    util_gpu: float | None = None
    util_memory: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    energy_mj: int | None = None
    pci_bus_id: str | None = None
    minor_number: int | None = None
    mig_enabled: bool | None = None
    mig_devices: tuple[MigDeviceSnapshot, ...] = ()
    processes: tuple[ProcessSnapshot, ...] = ()
    errors: tuple[str, ...] = ()
    simulated: bool = False

    @property
    def memory_total_mib(self) -> float | None:
        return None if self.memory_total_bytes is None else self.memory_total_bytes / MIB

    @property
    def memory_used_mib(self) -> float | None:
        return None if self.memory_used_bytes is None else self.memory_used_bytes / MIB

    @property
    def memory_free_mib(self) -> float | None:
        return None if self.memory_free_bytes is None else self.memory_free_bytes / MIB

    @property
    def device(self) -> str:
        """The device file name DCGM uses (`nvidia0`)."""
        minor = self.index if self.minor_number is None else self.minor_number
        return f"nvidia{minor}"

    def to_domain(self, sharing: SharingMode = SharingMode.EXCLUSIVE) -> GPU:
        """The domain GPU this snapshot describes (memory rounded down to MiB)."""
        mib = int(self.memory_total_bytes // MIB) if self.memory_total_bytes else 1
        health = GPUHealth.HEALTHY if self.healthy else GPUHealth.UNHEALTHY
        layout = self.mig_layout()
        if layout is not None and sharing is SharingMode.EXCLUSIVE:
            sharing = SharingMode.MIG  # MIG mode on with instances: offer them one by one
        return GPU(
            self.index,
            self.uuid,
            self.name,
            mib,
            sharing=sharing,
            health=health,
            mig_layout=layout,
        )

    def mig_layout(self) -> str | None:
        """The layout the MIG devices form (`PROFILE@START,...`), or None unless MIG mode is
        on and NVML told every device's profile and start."""
        devs = self.mig_devices
        if self.mig_enabled is not True or not devs:
            return None
        if any(d.profile is None or d.start is None for d in devs):
            return None
        explicit = ",".join(f"{d.profile}@{d.start}" for d in sorted(devs, key=_start))
        mib = int(self.memory_total_bytes // MIB) if self.memory_total_bytes else 1
        return short_name(self.name, mib, explicit)


@dataclass(frozen=True, slots=True)
class HostSnapshot:
    """All GPUs of one host at `timestamp`, with driver facts. `simulated` flags fake GPUs."""

    hostname: str
    timestamp: float
    gpus: tuple[GPUSnapshot, ...] = ()
    driver_version: str | None = None
    cuda_version: str | None = None
    nvml_version: str | None = None
    simulated: bool = False
    errors: tuple[str, ...] = field(default=())

    @property
    def processes(self) -> tuple[ProcessSnapshot, ...]:
        return tuple(p for g in self.gpus for p in g.processes)

    def gpu(self, uuid: str) -> GPUSnapshot | None:
        for g in self.gpus:
            if g.uuid == uuid:
                return g
        return None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (enums as strings)."""
        return _jsonable(asdict(self))


# Kept for readers who look for the name used in the design notes.
DeviceSnapshot = GPUSnapshot


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, StrEnum):
        return str(value)
    return value


def mig_device_uuid(gpu: GPUSnapshot, profile: str | None, start: int | None) -> str | None:
    """The UUID of `gpu`'s MIG device of `profile` at `start`; where NVML does not tell the
    starts, the only device of that profile. None if there is no such device."""
    devs = [d for d in gpu.mig_devices if d.profile == profile and d.uuid]
    exact = [d for d in devs if d.start is not None and d.start == start]
    if exact:
        return exact[0].uuid
    unknown = [d for d in devs if d.start is None]
    if len(unknown) == 1 and len(devs) == 1:
        return unknown[0].uuid
    return None


def _start(d: MigDeviceSnapshot) -> int:
    return d.start or 0
