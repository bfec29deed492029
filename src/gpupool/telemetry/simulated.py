"""Simulated GPUs with the `GPUSource` interface, scripted by tests and demos.

A spec lists `COUNTxMODEL-MEMGB` entries separated by commas: `4xH100-80GB,2xA100-40GB`
(the count and the memory are optional for known models: `H100`, `2xA100`). Every
snapshot is flagged `simulated=True` so that every UI can label it.

An entry may end in `:mig=LAYOUT`: those GPUs have MIG mode on and the instances of that
MIG layout (gpupool.domain.mig; write `+` for the commas of a mixed layout), e.g.
`1xH100-80GB:mig=all-1g.10gb,1xH100-80GB:mig=3g.40gb:1+1g.10gb:4,2xH100-80GB`. Other GPUs
have MIG mode off.
"""

from __future__ import annotations

import re
import uuid as uuidlib
from dataclasses import dataclass, field

from gpupool.clock import Clock, SystemClock
from gpupool.domain import ValidationError
from gpupool.domain.mig import instances_of, layout_for_gpu
from gpupool.telemetry.snapshots import (
    MIB,
    GPUSnapshot,
    HostSnapshot,
    MigDeviceSnapshot,
    ProcessKind,
    ProcessSnapshot,
)
from gpupool.telemetry.source import TelemetryError

# model -> (NVML name, memory MiB as NVML reports it, power limit W)
KNOWN_MODELS: dict[str, tuple[str, int, float]] = {
    "H100-80GB": ("NVIDIA H100 80GB HBM3", 81559, 700.0),
    "H200-141GB": ("NVIDIA H200", 143771, 700.0),
    "A100-40GB": ("NVIDIA A100-SXM4-40GB", 40960, 400.0),
    "A100-80GB": ("NVIDIA A100-SXM4-80GB", 81920, 400.0),
    "L40S-48GB": ("NVIDIA L40S", 46068, 350.0),
    "L4-24GB": ("NVIDIA L4", 23034, 72.0),
    "A10-24GB": ("NVIDIA A10", 23028, 150.0),
    "V100-32GB": ("Tesla V100-SXM2-32GB", 32768, 300.0),
    "T4-16GB": ("Tesla T4", 15360, 70.0),
}
# NVML name -> (max SM clock, memory clock) in MHz; others get IDLE_/DEFAULT_CLOCKS_MHZ
MODEL_CLOCKS_MHZ: dict[str, tuple[float, float]] = {
    "NVIDIA H100 80GB HBM3": (1980.0, 2619.0),
    "NVIDIA H200": (1980.0, 3201.0),
    "NVIDIA A100-SXM4-40GB": (1410.0, 1215.0),
    "NVIDIA A100-SXM4-80GB": (1410.0, 1593.0),
}
DEFAULT_CLOCKS_MHZ = (1500.0, 1500.0)
IDLE_SM_CLOCK_MHZ = 345.0
_DEFAULT_MEMORY = {k.split("-")[0]: k for k in KNOWN_MODELS if k != "A100-80GB"}
_ENTRY = re.compile(r"^(?:(\d+)\s*[xX]\s*)?([A-Za-z][A-Za-z0-9]*)(?:-(\d+)GB)?$")
SPEC_HELP = (
    "expected COUNTxMODEL-MEMGB entries separated by commas, e.g. 4xH100-80GB,2xA100-40GB, "
    "each optionally with :mig=LAYOUT (MIG mode on, e.g. 1xH100-80GB:mig=all-1g.10gb) "
    f"(known models: {', '.join(sorted(KNOWN_MODELS))})"
)


class SpecError(TelemetryError, ValueError):
    """A --simulate spec that cannot be read."""


@dataclass(frozen=True, slots=True)
class SimModel:
    name: str
    memory_mib: int
    power_limit_w: float
    #: MIG mode on with this layout's instances (None: MIG mode off)
    mig_layout: str | None = None


def parse_spec(spec: str) -> list[SimModel]:
    """The GPUs a spec describes, in order. Raises `SpecError` saying what is wrong."""
    if not spec or not spec.strip():
        raise SpecError(f"empty --simulate spec: {SPEC_HELP}")
    gpus: list[SimModel] = []
    for raw in spec.split(","):
        entry, _, mig = raw.strip().partition(":mig=")
        entry = entry.strip()
        m = _ENTRY.match(entry)
        if not m:
            raise SpecError(f"bad --simulate entry {entry!r}: {SPEC_HELP}")
        count = int(m.group(1)) if m.group(1) else 1
        model = m.group(2).upper()
        if count < 1 or count > 64:
            raise SpecError(f"bad --simulate entry {entry!r}: count must be 1..64")
        if m.group(3):
            gb = int(m.group(3))
            if gb < 1 or gb > 1024:
                raise SpecError(f"bad --simulate entry {entry!r}: memory must be 1..1024 GB")
            key = f"{model}-{gb}GB"
            name, mib, power = KNOWN_MODELS.get(key, (f"NVIDIA {model}", gb * 1024, 300.0))
        elif model in _DEFAULT_MEMORY:
            name, mib, power = KNOWN_MODELS[_DEFAULT_MEMORY[model]]
        else:
            raise SpecError(f"bad --simulate entry {entry!r}: give the memory, e.g. {model}-24GB")
        layout = mig.strip().replace("+", ",") or None
        if layout is not None:
            try:
                layout_for_gpu(name, mib, layout)
            except ValidationError as e:
                raise SpecError(f"bad --simulate entry {raw.strip()!r}: {e}") from None
        gpus.extend(SimModel(name, mib, power, layout) for _ in range(count))
    if len(gpus) > 256:
        raise SpecError("a --simulate spec may describe at most 256 GPUs")
    return gpus


@dataclass
class _SimProcess:
    pid: int
    memory_mib: float
    sm_util: float | None
    kind: ProcessKind
    #: the start slot of the MIG instance it runs on (None: the whole GPU)
    mig_start: int | None = None


@dataclass
class _SimGPU:
    index: int
    uuid: str
    model: SimModel
    processes: dict[int, _SimProcess] = field(default_factory=dict)
    util: float | None = None  # None: derived from the processes
    memory_util: float | None = None
    extra_memory_mib: float = 0.0
    temperature_c: float = 34.0
    power_w: float | None = None
    failing: set[str] = field(default_factory=set)
    lost: bool = False
    energy_mj: float = 0.0  # integrated from the power of each snapshot
    energy_t: float | None = None
    #: the GPU's MPS server (`serve_mps`): its pid and whether NVML lists the clients
    mps_server: int | None = None
    mps_clients_listed: bool = True


FAILABLE = (
    "memory",
    "utilization",
    "temperature",
    "power",
    "clocks",
    "energy",
    "processes",
    "process_utilization",
)


class SimulatedSource:
    """Fake GPUs whose processes and load a test scripts. All snapshots say simulated=True."""

    simulated = True

    def __init__(self, spec: str, clock: Clock | None = None, hostname: str | None = None):
        self.clock = clock or SystemClock()
        self.hostname = hostname or "simulated"
        self.spec = spec
        self._gpus = [
            _SimGPU(i, _sim_uuid(self.hostname, i), model)
            for i, model in enumerate(parse_spec(spec))
        ]

    # -- scripting -------------------------------------------------------------------------

    def _gpu(self, index: int) -> _SimGPU:
        if not 0 <= index < len(self._gpus):
            raise IndexError(f"simulated host has GPUs 0..{len(self._gpus) - 1}, not {index}")
        return self._gpus[index]

    def uuid(self, index: int) -> str:
        return self._gpu(index).uuid

    def add_process(
        self,
        gpu: int,
        pid: int,
        memory_mib: float = 0.0,
        sm_util: float | None = 0.0,
        mps: bool = False,
        mig_start: int | None = None,
    ) -> None:
        """Put process `pid` on GPU `gpu` (replacing an earlier entry for that pid there), on
        its MIG instance at `mig_start` if given."""
        kind = ProcessKind.MPS if mps else ProcessKind.COMPUTE
        self._gpu(gpu).processes[pid] = _SimProcess(pid, memory_mib, sm_util, kind, mig_start)

    def serve_mps(self, gpu: int, server_pid: int | None, clients_listed: bool = True) -> None:
        """Run GPU `gpu`'s MPS clients (processes added with `mps=True`) through an MPS server
        `server_pid` (None: stop it), as NVML shows that: the clients' SM use is reported
        under the server's pid (a compute process holding their memory when they are not
        listed); the clients are listed with no SM use of their own, or (`clients_listed`
        False) not at all. The GPU's utilization stays the sum of the work."""
        g = self._gpu(gpu)
        g.mps_server = server_pid
        g.mps_clients_listed = clients_listed

    def set_mig(self, gpu: int, layout: str | None) -> None:
        """Turn MIG mode on with `layout`'s instances, or off (None), like an admin with
        nvidia-smi would."""
        g = self._gpu(gpu)
        if layout is not None:
            layout_for_gpu(g.model.name, g.model.memory_mib, layout)
        g.model = SimModel(g.model.name, g.model.memory_mib, g.model.power_limit_w, layout)

    def mig_uuid(self, gpu: int, start: int) -> str:
        """The MIG device UUID of the instance at `start` of GPU `gpu`."""
        return _sim_mig_uuid(self._gpu(gpu).uuid, start)

    def set_process(
        self, gpu: int, pid: int, memory_mib: float | None = None, sm_util: float | None = None
    ) -> None:
        p = self._gpu(gpu).processes[pid]
        if memory_mib is not None:
            p.memory_mib = memory_mib
        if sm_util is not None:
            p.sm_util = sm_util

    def remove_process(self, pid: int, gpu: int | None = None) -> None:
        """Take `pid` off one GPU, or off every GPU when `gpu` is None."""
        for g in self._gpus if gpu is None else [self._gpu(gpu)]:
            g.processes.pop(pid, None)

    def set_utilization(self, gpu: int, util: float | None, memory_util: float | None = None):
        """Fix the GPU's utilization (None: the sum of its processes' SM use, capped at 100)."""
        g = self._gpu(gpu)
        g.util = util
        g.memory_util = memory_util

    def set_sensors(
        self, gpu: int, temperature_c: float | None = None, power_w: float | None = None
    ) -> None:
        g = self._gpu(gpu)
        if temperature_c is not None:
            g.temperature_c = temperature_c
        if power_w is not None:
            g.power_w = power_w

    def fail(self, gpu: int, what: str = "lost") -> None:
        """Make a reading fail (`memory`, `power`, ... or `lost` for the whole GPU)."""
        g = self._gpu(gpu)
        if what == "lost":
            g.lost = True
        elif what in FAILABLE:
            g.failing.add(what)
        else:
            raise ValueError(f"cannot fail {what!r}: choose 'lost' or one of {FAILABLE}")

    def heal(self, gpu: int) -> None:
        g = self._gpu(gpu)
        g.lost = False
        g.failing.clear()

    def close(self) -> None:
        """Nothing to release."""

    # -- reading ---------------------------------------------------------------------------

    def snapshot(self) -> HostSnapshot:
        now = self.clock.now()
        return HostSnapshot(
            hostname=self.hostname,
            timestamp=now,
            gpus=tuple(self._read(g, now) for g in self._gpus),
            driver_version="simulated",
            cuda_version="simulated",
            nvml_version="simulated",
            simulated=True,
        )

    def _processes(self, g: _SimGPU, now: float) -> tuple[ProcessSnapshot, ...]:
        if g.mps_server is None:
            return tuple(_process(g, p, now, p.sm_util) for p in g.processes.values())
        clients = [p for p in g.processes.values() if p.kind is ProcessKind.MPS]
        out = [_process(g, p, now, p.sm_util) for p in g.processes.values() if p not in clients]
        if g.mps_clients_listed:
            out += [_process(g, p, now, 0.0) for p in clients]
        server = _SimProcess(
            g.mps_server,
            0.0 if g.mps_clients_listed else sum(p.memory_mib for p in clients),
            min(100.0, sum(p.sm_util or 0.0 for p in clients)),
            ProcessKind.COMPUTE,
        )
        return (*out, _process(g, server, now, server.sm_util))

    def _read(self, g: _SimGPU, now: float) -> GPUSnapshot:
        if g.lost:
            return GPUSnapshot(
                index=g.index,
                uuid=g.uuid,
                name=g.model.name,
                timestamp=now,
                healthy=False,
                errors=("GPU is lost (simulated failure)",),
                simulated=True,
            )
        errors = [f"{w}: simulated failure" for w in sorted(g.failing)]
        procs: tuple[ProcessSnapshot, ...] = ()
        if "processes" not in g.failing:
            procs = self._processes(g, now)
        total = g.model.memory_mib * MIB
        used_mib = min(
            g.model.memory_mib, g.extra_memory_mib + sum(p.memory_mib for p in g.processes.values())
        )
        used = int(used_mib * MIB)
        util = g.util
        if util is None:
            util = float(min(100.0, sum(p.sm_util or 0.0 for p in g.processes.values())))
        power = g.power_w
        if power is None:
            power = round(0.1 * g.model.power_limit_w + 0.9 * g.model.power_limit_w * util / 100, 1)
        mem_ok = "memory" not in g.failing
        # energy counts up with the power drawn since the last snapshot (mJ, like NVML)
        if g.energy_t is not None and now > g.energy_t:
            g.energy_mj += power * (now - g.energy_t) * 1000.0
        g.energy_t = now
        max_sm, mem_clock = MODEL_CLOCKS_MHZ.get(g.model.name, DEFAULT_CLOCKS_MHZ)
        sm_clock = max_sm if util > 0 else IDLE_SM_CLOCK_MHZ
        clocks_ok = "clocks" not in g.failing
        return GPUSnapshot(
            index=g.index,
            uuid=g.uuid,
            name=g.model.name,
            timestamp=now,
            healthy=True,
            memory_total_bytes=total if mem_ok else None,
            memory_used_bytes=used if mem_ok else None,
            memory_free_bytes=total - used if mem_ok else None,
            memory_reserved_bytes=0 if mem_ok else None,
            util_gpu=util if "utilization" not in g.failing else None,
            util_memory=(g.memory_util if g.memory_util is not None else util * 0.5)
            if "utilization" not in g.failing
            else None,
            temperature_c=g.temperature_c if "temperature" not in g.failing else None,
            power_w=power if "power" not in g.failing else None,
            power_limit_w=g.model.power_limit_w,
            sm_clock_mhz=sm_clock if clocks_ok else None,
            mem_clock_mhz=mem_clock if clocks_ok else None,
            energy_mj=int(g.energy_mj) if "energy" not in g.failing else None,
            pci_bus_id=f"00000000:{0x18 + g.index:02X}:00.0",
            minor_number=g.index,
            mig_enabled=g.model.mig_layout is not None,
            mig_devices=_mig_devices(g),
            processes=procs,
            errors=tuple(errors),
            simulated=True,
        )


def _process(g: _SimGPU, p: _SimProcess, now: float, sm: float | None) -> ProcessSnapshot:
    return ProcessSnapshot(
        pid=p.pid,
        gpu_uuid=g.uuid,
        gpu_index=g.index,
        timestamp=now,
        used_memory_bytes=int(p.memory_mib * MIB),
        sm_util=sm if "process_utilization" not in g.failing else None,
        kind=p.kind,
        mig_uuid=None if p.mig_start is None else _sim_mig_uuid(g.uuid, p.mig_start),
    )


def _mig_devices(g: _SimGPU) -> tuple[MigDeviceSnapshot, ...]:
    """The MIG devices of a simulated GPU in MIG mode: its layout's instances, by start."""
    m = g.model
    if m.mig_layout is None:
        return ()
    out = []
    for j, (profile, start, _, mem) in enumerate(instances_of(m.name, m.memory_mib, m.mig_layout)):
        used = sum(p.memory_mib for p in g.processes.values() if p.mig_start == start)
        out.append(
            MigDeviceSnapshot(
                index=j,
                uuid=_sim_mig_uuid(g.uuid, start),
                memory_total_bytes=mem * MIB,
                memory_used_bytes=int(min(used, mem) * MIB),
                gpu_instance_id=j + 1,
                compute_instance_id=0,
                profile=profile,
                start=start,
            )
        )
    return tuple(out)


def _sim_mig_uuid(gpu_uuid: str, start: int) -> str:
    u = uuidlib.uuid5(uuidlib.NAMESPACE_DNS, f"gpupool-sim-mig/{gpu_uuid}/{start}")
    return f"MIG-{u}"


def _sim_uuid(hostname: str, index: int) -> str:
    """A stable UUID derived from host and index (snapshots say simulated=True)."""
    u = uuidlib.uuid5(uuidlib.NAMESPACE_DNS, f"gpupool-sim/{hostname}/{index}")
    return f"GPU-{u}"
