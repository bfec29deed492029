"""Test doubles for telemetry: a fake pynvml module with injectable failures, a fake /proc."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

NOT_SUPPORTED, NO_PERMISSION, NOT_FOUND, UNKNOWN = 3, 4, 6, 999
FUNCTION_NOT_FOUND, GPU_IS_LOST, LIBRARY_NOT_FOUND = 13, 15, 12


class NVMLError(Exception):
    def __init__(self, value: int):
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {
            NOT_SUPPORTED: "Not Supported",
            FUNCTION_NOT_FOUND: "Function Not Found",
            GPU_IS_LOST: "GPU is lost",
            LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
            NOT_FOUND: "Not Found",
        }.get(self.value, "Unknown Error")


@dataclass
class FakeGPU:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    total: int = 80 * 2**30
    used: int = 2**30
    reserved: int = 512 * 2**20
    util: tuple[int, int] = (37, 12)
    temp: int = 41
    power_mw: int = 250_000
    limit_mw: int = 700_000
    sm_clock: int = 1980  # MHz
    mem_clock: int = 2619  # MHz
    energy_mj: int = 123_456_789  # since the driver loaded
    compute: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, bytes)
    mps: list[tuple[int, int | None]] = field(default_factory=list)
    samples: list[tuple[int, int, int]] = field(default_factory=list)  # (pid, ts_us, sm)
    mig: list[FakeGPU] | None = None  # MIG devices when MIG mode is on


@dataclass
class Handle:
    gpu: FakeGPU
    index: int
    mig_of: int | None = None


class FakeNVML:
    """Enough of pynvml's surface for NVMLSource; `fail()` injects errors per function."""

    NVMLError = NVMLError
    NVML_ERROR_NOT_SUPPORTED = NOT_SUPPORTED
    NVML_ERROR_NOT_FOUND = NOT_FOUND
    NVML_ERROR_FUNCTION_NOT_FOUND = FUNCTION_NOT_FOUND
    NVML_ERROR_GPU_IS_LOST = GPU_IS_LOST
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    nvmlMemory_v2 = 0x02000028

    def __init__(self, gpus: list[FakeGPU], driver: str = "580.1", cuda: int = 13000):
        self.gpus = gpus
        self.driver = driver
        self.cuda = cuda
        self.failures: dict[tuple[str, int | None], int] = {}
        self.calls: list[str] = []
        self.init_error: int | None = None
        self.shutdowns = 0

    def fail(self, fn: str, code: int, gpu: int | None = None) -> None:
        self.failures[(fn, gpu)] = code

    def remove(self, fn: str) -> None:
        """Simulate an older nvidia-ml-py that lacks `fn`."""
        setattr(self, fn, None)

    def _check(self, fn: str, h: Handle | None = None) -> None:
        self.calls.append(fn)
        idx = None if h is None else h.index
        for key in ((fn, idx), (fn, None)):
            if key in self.failures:
                raise NVMLError(self.failures[key])

    # -- system
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlSystemGetNVMLVersion(self) -> bytes:
        return b"13.580.1"

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._check("nvmlSystemGetCudaDriverVersion_v2")
        return self.cuda

    # -- devices
    def nvmlDeviceGetCount(self) -> int:
        self._check("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> Handle:
        self._check("nvmlDeviceGetHandleByIndex", Handle(self.gpus[i], i))
        return Handle(self.gpus[i], i)

    def nvmlDeviceGetUUID(self, h: Handle) -> str:
        self._check("nvmlDeviceGetUUID", h)
        return h.gpu.uuid

    def nvmlDeviceGetName(self, h: Handle) -> bytes:
        self._check("nvmlDeviceGetName", h)
        return h.gpu.name.encode()

    def nvmlDeviceGetPciInfo(self, h: Handle) -> Any:
        self._check("nvmlDeviceGetPciInfo", h)
        return SimpleNamespace(busId=f"00000000:{0x18 + h.index:02X}:00.0".encode())

    def nvmlDeviceGetMinorNumber(self, h: Handle) -> int:
        self._check("nvmlDeviceGetMinorNumber", h)
        return h.index

    def nvmlDeviceGetEnforcedPowerLimit(self, h: Handle) -> int:
        self._check("nvmlDeviceGetEnforcedPowerLimit", h)
        return h.gpu.limit_mw

    def nvmlDeviceGetMemoryInfo(self, h: Handle, version: int | None = None) -> Any:
        self._check("nvmlDeviceGetMemoryInfo" + ("_v2" if version else ""), h)
        g = h.gpu
        if version:
            return SimpleNamespace(
                total=g.total, used=g.used, free=g.total - g.used - g.reserved, reserved=g.reserved
            )
        return SimpleNamespace(
            total=g.total, used=g.used + g.reserved, free=g.total - g.used - g.reserved
        )

    def nvmlDeviceGetUtilizationRates(self, h: Handle) -> Any:
        self._check("nvmlDeviceGetUtilizationRates", h)
        return SimpleNamespace(gpu=h.gpu.util[0], memory=h.gpu.util[1])

    def nvmlDeviceGetTemperature(self, h: Handle, sensor: int) -> int:
        self._check("nvmlDeviceGetTemperature", h)
        return h.gpu.temp

    def nvmlDeviceGetPowerUsage(self, h: Handle) -> int:
        self._check("nvmlDeviceGetPowerUsage", h)
        return h.gpu.power_mw

    def nvmlDeviceGetClockInfo(self, h: Handle, clock_type: int) -> int:
        self._check("nvmlDeviceGetClockInfo", h)
        return {self.NVML_CLOCK_SM: h.gpu.sm_clock, self.NVML_CLOCK_MEM: h.gpu.mem_clock}[
            clock_type
        ]

    def nvmlDeviceGetTotalEnergyConsumption(self, h: Handle) -> int:
        self._check("nvmlDeviceGetTotalEnergyConsumption", h)
        return h.gpu.energy_mj

    def nvmlDeviceGetMigMode(self, h: Handle) -> list[int]:
        self._check("nvmlDeviceGetMigMode", h)
        on = int(h.gpu.mig is not None)
        return [on, on]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: Handle) -> int:
        self._check("nvmlDeviceGetMaxMigDeviceCount", h)
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: Handle, j: int) -> Handle:
        self._check("nvmlDeviceGetMigDeviceHandleByIndex", h)
        if not h.gpu.mig or j >= len(h.gpu.mig):
            raise NVMLError(NOT_FOUND)
        return Handle(h.gpu.mig[j], h.index, mig_of=j)

    def nvmlDeviceGetGpuInstanceId(self, h: Handle) -> int:
        return (h.mig_of or 0) + 1

    def nvmlDeviceGetComputeInstanceId(self, h: Handle) -> int:
        return 0

    def nvmlDeviceGetComputeRunningProcesses(self, h: Handle) -> list[Any]:
        self._check("nvmlDeviceGetComputeRunningProcesses", h)
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in h.gpu.compute]

    def nvmlDeviceGetMPSComputeRunningProcesses(self, h: Handle) -> list[Any]:
        self._check("nvmlDeviceGetMPSComputeRunningProcesses", h)
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in h.gpu.mps]

    def nvmlDeviceGetProcessUtilization(self, h: Handle, since: int) -> list[Any]:
        self._check("nvmlDeviceGetProcessUtilization", h)
        found = [
            SimpleNamespace(pid=p, timeStamp=ts, smUtil=sm, memUtil=0)
            for p, ts, sm in h.gpu.samples
            if ts > since
        ]
        if not found:
            raise NVMLError(NOT_FOUND)
        return found


@pytest.fixture
def fake_nvml() -> FakeNVML:
    return FakeNVML(
        [
            FakeGPU(
                "GPU-aaaa",
                compute=[(100, 3 * 2**30), (101, None)],
                mps=[(101, None)],
                samples=[(100, 1_000_000, 50), (100, 1_500_000, 70), (101, 1_600_000, 10)],
            ),
            FakeGPU("GPU-bbbb", name="NVIDIA A100-SXM4-40GB", total=40 * 2**30),
        ]
    )


def write_proc(
    root: Path,
    pid: int,
    ppid: int = 1,
    env: dict[str, str] | None = None,
    uid: int = 1000,
    cgroup: str = "0::/user.slice/user-1000.slice\n",
    comm: str = "python3",
    start: int = 4242,
) -> None:
    """One fake /proc/<pid> with environ, stat, status and cgroup."""
    d = root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    items = [f"{k}={v}".encode() for k, v in (env or {}).items()]
    (d / "environ").write_bytes(b"\0".join(items) + (b"\0" if items else b""))
    tail = ["0"] * 40
    tail[17] = str(start)  # field 22 (starttime) is the 20th after "(comm) state ppid"
    (d / "stat").write_text(f"{pid} ({comm}) S {ppid} {' '.join(tail)}\n")
    (d / "status").write_text(f"Name:\t{comm}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    (d / "cgroup").write_text(cgroup)


@pytest.fixture
def proc_root(tmp_path: Path) -> Path:
    root = tmp_path / "proc"
    root.mkdir()
    return root
