"""The one defensive wrapper over nvidia-ml-py (`pynvml`).

Contract: no NVML call can crash the caller. A driver function that is missing or not
supported gives `None` ("N/A") silently; any other NVML error gives `None` and is recorded
in the snapshot's `errors`; a GPU that is lost (or stops answering) stays listed with
`healthy=False` under the identity it had when it was last seen.
"""

from __future__ import annotations

import importlib
import re
import socket
from collections import defaultdict
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from gpupool.clock import Clock, SystemClock
from gpupool.telemetry.snapshots import (
    GPUSnapshot,
    HostSnapshot,
    MigDeviceSnapshot,
    ProcessKind,
    ProcessSnapshot,
)
from gpupool.telemetry.source import NoGPUError

# NVML return codes (stable across driver versions); the module's own constants win if present.
_CODES = {
    "NOT_SUPPORTED": 3,
    "NO_PERMISSION": 4,
    "NOT_FOUND": 6,
    "FUNCTION_NOT_FOUND": 13,
    "GPU_IS_LOST": 15,
}
_NA = object()  # "not available": the function is missing or the GPU does not support it
PROCESS_UTIL_HOLD_S = 3.0


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


@dataclass
class _Reads:
    """Guarded calls for one GPU; collects the errors and whether the GPU is lost."""

    module: ModuleType
    errors: list[str] = field(default_factory=list)
    lost: bool = False

    def code(self, name: str) -> int:
        return int(getattr(self.module, f"NVML_ERROR_{name}", _CODES[name]))

    def classify(self, exc: Exception) -> str:
        value = getattr(exc, "value", None)
        base = getattr(self.module, "NVMLError", None)
        if base is None or not isinstance(exc, base):
            return "error"
        if value in (self.code("NOT_SUPPORTED"), self.code("FUNCTION_NOT_FOUND")):
            return "na"
        if value == self.code("NOT_FOUND"):
            return "not_found"
        if value == self.code("GPU_IS_LOST"):
            return "lost"
        return "error"

    def get(self, what: str, fn_name: str, *args: Any, not_found: Any = _NA, **kw: Any) -> Any:
        """`fn_name(*args)`, or `_NA` when unavailable, or `not_found` for NVML_ERROR_NOT_FOUND."""
        if self.lost:
            return _NA
        fn = getattr(self.module, fn_name, None)
        if fn is None:  # an older nvidia-ml-py without this function
            return _NA
        try:
            return fn(*args, **kw)
        except Exception as exc:  # noqa: BLE001 - the contract is "never raise"
            kind = self.classify(exc)
            if kind == "na":
                return _NA
            if kind == "not_found":
                return not_found
            if kind == "lost":
                self.lost = True
            self.errors.append(f"{what}: {_describe(exc)}")
            return _NA


def _clock(module: ModuleType, name: str, default: int) -> int:
    """NVML's clock type constant (`NVML_CLOCK_SM` = 1, `NVML_CLOCK_MEM` = 2)."""
    return int(getattr(module, f"NVML_CLOCK_{name}", default))


def _describe(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) < 200 else text[:197] + "..."


def _opt(value: Any) -> Any:
    return None if value is _NA else value


_MIG_PROFILE = re.compile(r"\b([0-9]+g\.[0-9]+gb)\b")


def _mig_profile(name: str | None) -> str | None:
    """`1g.10gb` from a MIG device's name ('NVIDIA H100 80GB HBM3 MIG 1g.10gb')."""
    m = _MIG_PROFILE.search(name or "")
    return m.group(1) if m else None


def _mig_start(module: ModuleType, parent: Any, gi: int | None) -> int | None:
    """The start slot of GPU instance `gi` of `parent` (nvmlDeviceGetGpuInstanceById, then
    nvmlGpuInstanceGetInfo's placement), or None where NVML does not tell it (older
    nvidia-ml-py, or not permitted): a missing start is not an error of the GPU."""
    get_gi = getattr(module, "nvmlDeviceGetGpuInstanceById", None)
    info = getattr(module, "nvmlGpuInstanceGetInfo", None)
    if gi is None or get_gi is None or info is None:
        return None
    try:
        placement = info(get_gi(parent, gi)).placement
        return int(placement.start)
    except Exception:  # noqa: BLE001 - optional detail; never raise from a read
        return None


@dataclass
class _Identity:
    uuid: str
    name: str
    pci_bus_id: str | None
    minor_number: int | None
    power_limit_w: float | None
    handle: Any


class NVMLSource:
    """Real GPUs through NVML. Use `NVMLSource.open()`; `module` lets tests inject a fake.

    Two NVML calls are expensive (measured on an H100: nvmlDeviceGetProcessUtilization
    about 2 ms of CPU, nvmlDeviceGetMigMode about 0.4 ms; all others together about 0.15 ms),
    so: per-process SM utilization is read only on GPUs that have processes, at most every
    `process_util_interval_s` (values held in between), and MIG mode every
    `mig_mode_interval_s`.
    """

    simulated = False

    def __init__(
        self,
        module: ModuleType | None = None,
        clock: Clock | None = None,
        hostname: str | None = None,
        process_util_interval_s: float = 5.0,
        mig_mode_interval_s: float = 60.0,
    ):
        self.m = module if module is not None else importlib.import_module("pynvml")
        self.clock = clock or SystemClock()
        self.hostname = hostname or socket.gethostname()
        self.process_util_interval_s = process_util_interval_s
        self.mig_mode_interval_s = mig_mode_interval_s
        self._util_read_at: dict[int, float] = {}
        self._util_supported: dict[int, bool] = {}
        self._mig_mode: dict[int, tuple[float, bool | None]] = {}
        self._identity: dict[int, _Identity] = {}
        self._last_util_us: dict[int, int] = {}
        self._held_sm: dict[int, dict[int, tuple[float, int]]] = {}
        self._open = False
        self.driver_version: str | None = None
        self.cuda_version: str | None = None
        self.nvml_version: str | None = None

    @classmethod
    def open(
        cls,
        module: ModuleType | None = None,
        clock: Clock | None = None,
        hostname: str | None = None,
        **options: float,
    ) -> NVMLSource:
        """Initialise NVML; `NoGPUError` (with what to do) when there is no driver or no GPU."""
        try:
            src = cls(module, clock, hostname, **options)
        except ImportError as exc:
            raise NoGPUError(f"nvidia-ml-py is not installed ({exc})") from exc
        src.init()
        count = _opt(_Reads(src.m).get("device count", "nvmlDeviceGetCount"))
        if not count:
            src.close()
            raise NoGPUError("NVML found no NVIDIA GPU on this host")
        return src

    def init(self) -> None:
        """Initialise NVML and read the driver facts once. Raises `NoGPUError` on failure."""
        try:
            self.m.nvmlInit()
        except Exception as exc:  # noqa: BLE001
            raise NoGPUError(
                f"no NVIDIA GPU driver could be loaded (NVML: {_describe(exc)})"
            ) from exc
        self._open = True
        r = _Reads(self.m)
        self.driver_version = _text(_opt(r.get("driver", "nvmlSystemGetDriverVersion")))
        self.nvml_version = _text(_opt(r.get("nvml", "nvmlSystemGetNVMLVersion")))
        cuda = _opt(r.get("cuda", "nvmlSystemGetCudaDriverVersion_v2"))
        if cuda is None:
            cuda = _opt(r.get("cuda", "nvmlSystemGetCudaDriverVersion"))
        if isinstance(cuda, int) and cuda > 0:
            self.cuda_version = f"{cuda // 1000}.{(cuda % 1000) // 10}"

    def close(self) -> None:
        if self._open:
            self._open = False
            _Reads(self.m).get("shutdown", "nvmlShutdown")

    def snapshot(self) -> HostSnapshot:
        now = self.clock.now()
        host = _Reads(self.m)
        count = _opt(host.get("device count", "nvmlDeviceGetCount"))
        indexes = set(range(count or 0)) | set(self._identity)
        gpus = tuple(self._gpu(i, now, visible=i < (count or 0)) for i in sorted(indexes))
        return HostSnapshot(
            hostname=self.hostname,
            timestamp=now,
            gpus=gpus,
            driver_version=self.driver_version,
            cuda_version=self.cuda_version,
            nvml_version=self.nvml_version,
            simulated=False,
            errors=tuple(host.errors),
        )

    # -- one GPU ---------------------------------------------------------------------------

    def _lost(self, index: int, now: float, errors: list[str]) -> GPUSnapshot:
        known = self._identity.pop(index, None)
        self._last_util_us.pop(index, None)
        self._held_sm.pop(index, None)
        self._util_read_at.pop(index, None)
        self._util_supported.pop(index, None)
        self._mig_mode.pop(index, None)
        uuid = known.uuid if known else f"GPU-unknown-{index}"
        name = known.name if known else "N/A"
        return GPUSnapshot(
            index=index,
            uuid=uuid,
            name=name,
            timestamp=now,
            healthy=False,
            pci_bus_id=known.pci_bus_id if known else None,
            errors=tuple(errors) or ("GPU is no longer visible to NVML",),
        )

    def _identify(self, index: int, r: _Reads) -> _Identity | None:
        known = self._identity.get(index)
        if known is not None:
            return known
        handle = _opt(r.get("handle", "nvmlDeviceGetHandleByIndex", index))
        if handle is None:
            return None
        uuid = _text(_opt(r.get("uuid", "nvmlDeviceGetUUID", handle)))
        if uuid is None:
            return None
        name = _text(_opt(r.get("name", "nvmlDeviceGetName", handle))) or "N/A"
        pci = _opt(r.get("pci", "nvmlDeviceGetPciInfo", handle))
        limit = _opt(r.get("power limit", "nvmlDeviceGetEnforcedPowerLimit", handle))
        ident = _Identity(
            uuid=uuid,
            name=name,
            pci_bus_id=_text(getattr(pci, "busId", None)),
            minor_number=_opt(r.get("minor", "nvmlDeviceGetMinorNumber", handle)),
            power_limit_w=None if limit is None else limit / 1000.0,
            handle=handle,
        )
        if not r.lost:
            self._identity[index] = ident
        return ident

    def _gpu(self, index: int, now: float, visible: bool) -> GPUSnapshot:
        r = _Reads(self.m)
        if not visible:
            return self._lost(index, now, [])
        ident = self._identify(index, r)
        if ident is None or r.lost:
            return self._lost(index, now, r.errors or ["GPU did not answer"])
        h = ident.handle
        total, used, free, reserved = self._memory(r, h)
        util = _opt(r.get("utilization", "nvmlDeviceGetUtilizationRates", h))
        temp_sensor = getattr(self.m, "NVML_TEMPERATURE_GPU", 0)
        temp = _opt(r.get("temperature", "nvmlDeviceGetTemperature", h, temp_sensor))
        power = _opt(r.get("power", "nvmlDeviceGetPowerUsage", h))
        sm_clock = _opt(r.get("sm clock", "nvmlDeviceGetClockInfo", h, _clock(self.m, "SM", 1)))
        mem_clock = _opt(r.get("mem clock", "nvmlDeviceGetClockInfo", h, _clock(self.m, "MEM", 2)))
        energy = _opt(r.get("energy", "nvmlDeviceGetTotalEnergyConsumption", h))  # mJ
        mig_enabled = self._mig_enabled(r, h, index, now)
        procs = self._processes(r, h, index, ident.uuid, now, None)
        mig_devices: tuple[MigDeviceSnapshot, ...] = ()
        if mig_enabled:
            mig_devices, mig_procs = self._mig(r, h, index, ident.uuid, now)
            procs = procs + mig_procs
        if r.lost:
            return self._lost(index, now, r.errors)
        return GPUSnapshot(
            index=index,
            uuid=ident.uuid,
            name=ident.name,
            timestamp=now,
            healthy=True,
            memory_total_bytes=total,
            memory_used_bytes=used,
            memory_free_bytes=free,
            memory_reserved_bytes=reserved,
            util_gpu=None if util is None else float(util.gpu),
            util_memory=None if util is None else float(util.memory),
            temperature_c=None if temp is None else float(temp),
            power_w=None if power is None else power / 1000.0,
            power_limit_w=ident.power_limit_w,
            sm_clock_mhz=None if sm_clock is None else float(sm_clock),
            mem_clock_mhz=None if mem_clock is None else float(mem_clock),
            energy_mj=None if energy is None else int(energy),
            pci_bus_id=ident.pci_bus_id,
            minor_number=ident.minor_number,
            mig_enabled=mig_enabled,
            mig_devices=mig_devices,
            processes=procs,
            errors=tuple(r.errors),
            simulated=False,
        )

    def _memory(self, r: _Reads, h: Any) -> tuple[int | None, int | None, int | None, int | None]:
        v2 = getattr(self.m, "nvmlMemory_v2", None)
        info: Any = _NA
        if v2 is not None:
            probe = _Reads(self.m)  # v2 may be unsupported or the binding too old: fall back
            info = probe.get("memory v2", "nvmlDeviceGetMemoryInfo", h, version=v2)
            if probe.lost:
                r.lost = True
                r.errors.extend(probe.errors)
                return None, None, None, None
        if info is _NA:
            info = r.get("memory", "nvmlDeviceGetMemoryInfo", h)
        if info is _NA:
            return None, None, None, None
        reserved = getattr(info, "reserved", None)
        return info.total, info.used, info.free, reserved

    def _mig_enabled(self, r: _Reads, h: Any, index: int, now: float) -> bool | None:
        cached = self._mig_mode.get(index)
        if cached is not None and now - cached[0] < self.mig_mode_interval_s:
            return cached[1]
        mode = _opt(r.get("mig mode", "nvmlDeviceGetMigMode", h))
        enabled = bool(mode[0]) if isinstance(mode, list | tuple) and mode else None
        self._mig_mode[index] = (now, enabled)
        return enabled

    def _process_sm(
        self, r: _Reads, h: Any, index: int, now: float, has_processes: bool
    ) -> dict[int, float] | None:
        """SM figures per pid, reading NVML only when due (see the class docstring)."""
        if self._util_supported.get(index) is False:
            return None
        if not has_processes:
            return {}
        last = self._util_read_at.get(index)
        if last is not None and now - last < self.process_util_interval_s:
            return {pid: v for pid, (v, _) in self._held_sm.get(index, {}).items()}
        self._util_read_at[index] = now
        errors = len(r.errors)
        sm = self._sm_utils(r, h, index)
        if sm is None and len(r.errors) == errors:  # unsupported, not a passing failure
            self._util_supported[index] = False
        return sm

    def _sm_utils(self, r: _Reads, h: Any, index: int) -> dict[int, float] | None:
        """SM utilization per pid, or None where NVML does not support it.

        NVML keeps sparse per-process samples (seen on an H200: not every process gets one
        each second, and a read returns only samples newer than the timestamp passed). So:
        the mean of a pid's new samples; with none, its last value while that is at most
        `PROCESS_UTIL_HOLD_S` older than the newest sample seen; else 0. Timestamps are
        compared only with each other, never with this host's clock.
        """
        last = self._last_util_us.get(index)
        samples = r.get(
            "process utilization", "nvmlDeviceGetProcessUtilization", h, last or 0, not_found=[]
        )
        if samples is _NA:
            return None
        held = self._held_sm.setdefault(index, {})
        acc: dict[int, list[float]] = defaultdict(list)
        stamp: dict[int, int] = {}
        newest = last or 0
        for s in samples:
            ts = int(getattr(s, "timeStamp", 0) or 0)
            sm = getattr(s, "smUtil", None)
            if (last is None or ts > last) and sm is not None and 0 <= sm <= 100:
                newest = max(newest, ts)
                pid = int(s.pid)
                acc[pid].append(float(sm))
                stamp[pid] = max(stamp.get(pid, 0), ts)
        self._last_util_us[index] = newest
        for pid, values in acc.items():
            held[pid] = (sum(values) / len(values), stamp[pid])
        horizon = newest - int(PROCESS_UTIL_HOLD_S * 1e6)
        for pid in [p for p, (_, ts) in held.items() if ts < horizon]:
            del held[pid]
        return {pid: value for pid, (value, _) in held.items()}

    def _processes(
        self, r: _Reads, h: Any, index: int, uuid: str, now: float, mig_uuid: str | None
    ) -> tuple[ProcessSnapshot, ...]:
        compute = (
            _opt(r.get("processes", "nvmlDeviceGetComputeRunningProcesses", h, not_found=[])) or []
        )
        mps = (
            _opt(r.get("mps processes", "nvmlDeviceGetMPSComputeRunningProcesses", h, not_found=[]))
            or []
        )
        sm = None
        if mig_uuid is None:
            sm = self._process_sm(r, h, index, now, bool(compute or mps))
        seen: dict[int, ProcessSnapshot] = {}
        for kind, items in ((ProcessKind.COMPUTE, compute), (ProcessKind.MPS, mps)):
            for p in items:
                pid = int(p.pid)
                mem = getattr(p, "usedGpuMemory", None)
                prev = seen.get(pid)
                if mem is None and prev is not None:
                    mem = prev.used_memory_bytes
                seen[pid] = ProcessSnapshot(
                    pid=pid,
                    gpu_uuid=uuid,
                    gpu_index=index,
                    timestamp=now,
                    used_memory_bytes=None if mem is None else int(mem),
                    sm_util=None if sm is None else sm.get(pid, 0.0),
                    kind=kind,
                    mig_uuid=mig_uuid,
                )
        return tuple(seen.values())

    def _mig(
        self, r: _Reads, h: Any, index: int, uuid: str, now: float
    ) -> tuple[tuple[MigDeviceSnapshot, ...], tuple[ProcessSnapshot, ...]]:
        count = _opt(r.get("mig count", "nvmlDeviceGetMaxMigDeviceCount", h)) or 0
        devices: list[MigDeviceSnapshot] = []
        procs: list[ProcessSnapshot] = []
        for j in range(int(count)):
            mh = _opt(
                r.get("mig device", "nvmlDeviceGetMigDeviceHandleByIndex", h, j, not_found=None)
            )
            if mh is None:
                continue
            mig_uuid = _text(_opt(r.get("mig uuid", "nvmlDeviceGetUUID", mh)))
            mem = _opt(r.get("mig memory", "nvmlDeviceGetMemoryInfo", mh))
            gi = _opt(r.get("gi", "nvmlDeviceGetGpuInstanceId", mh))
            devices.append(
                MigDeviceSnapshot(
                    index=j,
                    uuid=mig_uuid,
                    memory_total_bytes=getattr(mem, "total", None),
                    memory_used_bytes=getattr(mem, "used", None),
                    gpu_instance_id=gi,
                    compute_instance_id=_opt(r.get("ci", "nvmlDeviceGetComputeInstanceId", mh)),
                    profile=_mig_profile(_text(_opt(r.get("mig name", "nvmlDeviceGetName", mh)))),
                    start=_mig_start(r.module, h, gi),
                )
            )
            procs.extend(self._processes(r, mh, index, uuid, now, mig_uuid or f"mig-{j}"))
        return tuple(devices), tuple(procs)
