"""Policing and idleness: detections from allocations and snapshots (values, not actions).

Kinds:
- `foreign_gpu`: a process of workload W runs on a GPU W does not hold (or W holds none);
- `unowned_on_allocated`: a process no workload owns runs on a GPU some workload holds
  (gpupool's own MPS server of that GPU, `Via.SERVICE`, excepted);
- `over_memory`: a workload's processes on a GPU use more memory than its share there;
- `idle`: an allocated GPU (or share) stays near 0% utilization for `idle_after_s`.

`since` is when the condition was first seen continuously (by the injected clock);
the server decides whether to warn, stop or kill.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from gpupool.clock import Clock
from gpupool.domain import Allocation, Enforcement, Share
from gpupool.telemetry.attribution import Attribution
from gpupool.telemetry.snapshots import MIB, HostSnapshot, ProcessKind, ProcessSnapshot


class DetectionKind(StrEnum):
    FOREIGN_GPU = "foreign_gpu"
    UNOWNED_ON_ALLOCATED = "unowned_on_allocated"
    OVER_MEMORY = "over_memory"
    IDLE = "idle"


@dataclass(frozen=True, slots=True)
class Detection:
    """One condition the server may act on. `observed`/`limit` are MiB or % by kind."""

    kind: DetectionKind
    gpu_uuid: str
    workload_id: str | None
    pids: tuple[int, ...]
    since: float
    duration_s: float
    message: str
    observed: float | None = None
    limit: float | None = None
    enforcement: Enforcement | None = None

    @property
    def key(self) -> tuple[str, str, str | None]:
        return (str(self.kind), self.gpu_uuid, self.workload_id)


@dataclass(frozen=True, slots=True)
class PolicingConfig:
    """`idle_util_pct`: at or below this a GPU counts as idle. `memory_slack_mib`: tolerance."""

    idle_after_s: float = 1800.0
    idle_util_pct: float = 1.0
    memory_slack_mib: float = 0.0


class Policer:
    """Turns (snapshot, owners, allocations) into detections; remembers when each began."""

    def __init__(self, clock: Clock, config: PolicingConfig | None = None):
        self.clock = clock
        self.config = config or PolicingConfig()
        self._since: dict[tuple[str, str, str | None], float] = {}

    def check(
        self,
        snapshot: HostSnapshot,
        owners: Mapping[int, Attribution],
        allocations: Sequence[Allocation],
    ) -> list[Detection]:
        now = self.clock.now()
        shares: dict[tuple[str, str], Share] = {}
        holders: dict[str, list[str]] = {}
        for a in allocations:
            for s in a.shares:
                shares[(a.workload_id, s.gpu_uuid)] = s
                holders.setdefault(s.gpu_uuid, []).append(a.workload_id)
        allocated_workloads = {a.workload_id for a in allocations}
        found: list[tuple[tuple[str, str, str | None], dict]] = []

        by_workload_gpu: dict[tuple[str, str], list[ProcessSnapshot]] = {}
        for p in snapshot.processes:
            owner = owners.get(p.pid)
            wid = owner.workload_id if owner else None
            if wid is None:
                if owner is not None and owner.service_gpu == p.gpu_uuid:
                    continue  # gpupool's own MPS server of this GPU
                if p.gpu_uuid in holders:
                    found.append(self._unowned(p, holders[p.gpu_uuid], owner))
                continue
            by_workload_gpu.setdefault((wid, p.gpu_uuid), []).append(p)
            if (wid, p.gpu_uuid) not in shares:
                found.append(self._foreign(p, wid, wid in allocated_workloads))

        for (wid, uuid), procs in sorted(by_workload_gpu.items()):
            share = shares.get((wid, uuid))
            if share is None or share.mig_profile is not None:
                continue  # a MIG instance: the GPU itself holds it to its memory
            used = sum((p.used_memory_bytes or 0) for p in procs) / MIB
            if used > share.memory_mib + self.config.memory_slack_mib:
                key = (str(DetectionKind.OVER_MEMORY), uuid, wid)
                found.append(
                    (
                        key,
                        dict(
                            kind=DetectionKind.OVER_MEMORY,
                            gpu_uuid=uuid,
                            workload_id=wid,
                            pids=tuple(sorted(p.pid for p in procs)),
                            observed=round(used, 1),
                            limit=float(share.memory_mib),
                            enforcement=share.enforcement,
                            message=(
                                f"workload {wid} uses {used:.0f} MiB on GPU {uuid}, over its "
                                f"share of {share.memory_mib} MiB"
                            ),
                        ),
                    )
                )

        for (wid, uuid), share in sorted(shares.items()):
            util = self._share_util(snapshot, uuid, wid, share, by_workload_gpu, holders)
            if util is None or util > self.config.idle_util_pct:
                continue
            key = (str(DetectionKind.IDLE), uuid, wid)
            found.append(
                (
                    key,
                    dict(
                        kind=DetectionKind.IDLE,
                        gpu_uuid=uuid,
                        workload_id=wid,
                        pids=tuple(sorted(p.pid for p in by_workload_gpu.get((wid, uuid), []))),
                        observed=util,
                        limit=self.config.idle_util_pct,
                        enforcement=share.enforcement,
                        message=f"workload {wid} holds GPU {uuid} at {util:.0f}% utilization",
                    ),
                )
            )

        # Remember when each condition began; forget those that ended.
        current = {key for key, _ in found}
        for gone in set(self._since) - current:
            del self._since[gone]
        out: list[Detection] = []
        for key, fields in found:
            since = self._since.setdefault(key, now)
            duration = now - since
            if fields["kind"] is DetectionKind.IDLE:
                if duration < self.config.idle_after_s:
                    continue
                fields["message"] += f" for {duration:.0f} s"
            out.append(Detection(since=since, duration_s=duration, **fields))
        return out

    def idle_for(self, workload_id: str, gpu_uuid: str) -> float:
        """Seconds this share has been idle so far (0 when busy or unknown)."""
        since = self._since.get((str(DetectionKind.IDLE), gpu_uuid, workload_id))
        return 0.0 if since is None else self.clock.now() - since

    def _share_util(
        self,
        snapshot: HostSnapshot,
        uuid: str,
        wid: str,
        share: Share,
        by_workload_gpu: Mapping[tuple[str, str], list[ProcessSnapshot]],
        holders: Mapping[str, list[str]],
    ) -> float | None:
        """Utilization that counts for this share; None when it cannot be known."""
        gpu = snapshot.gpu(uuid)
        if gpu is None or not gpu.healthy:
            return None
        procs = by_workload_gpu.get((wid, uuid), [])
        sm = [p.sm_util for p in procs]
        mps = any(p.kind is ProcessKind.MPS for p in procs)
        # Under MPS, NVML charges SM use to the MPS server, not to its clients: a client's own
        # figure says nothing, so only the whole GPU's utilization can tell (sole holder).
        if procs and not mps and all(v is not None for v in sm):
            return float(sum(v for v in sm if v is not None))
        if not share.whole and not procs:
            return 0.0  # a fractional holder with no process on the GPU does nothing there
        if share.whole or len(holders.get(uuid, ())) == 1:
            return gpu.util_gpu
        return None

    @staticmethod
    def _unowned(p: ProcessSnapshot, holders: list[str], owner: Attribution | None):
        who = f" (Unix user {owner.unix_user})" if owner and owner.unix_user else ""
        key = (str(DetectionKind.UNOWNED_ON_ALLOCATED), p.gpu_uuid, f"pid:{p.pid}")
        return key, dict(
            kind=DetectionKind.UNOWNED_ON_ALLOCATED,
            gpu_uuid=p.gpu_uuid,
            workload_id=None,
            pids=(p.pid,),
            observed=None if p.used_memory_bytes is None else p.used_memory_bytes / MIB,
            message=(
                f"process {p.pid}{who} belongs to no workload but runs on GPU {p.gpu_uuid}, "
                f"held by {', '.join(sorted(holders))}"
            ),
        )

    @staticmethod
    def _foreign(p: ProcessSnapshot, wid: str, holds_any: bool):
        key = (str(DetectionKind.FOREIGN_GPU), p.gpu_uuid, f"{wid}:{p.pid}")
        what = "does not hold it" if holds_any else "holds no GPU"
        return key, dict(
            kind=DetectionKind.FOREIGN_GPU,
            gpu_uuid=p.gpu_uuid,
            workload_id=wid,
            pids=(p.pid,),
            observed=None if p.used_memory_bytes is None else p.used_memory_bytes / MIB,
            message=f"process {p.pid} of workload {wid} runs on GPU {p.gpu_uuid} but {what}",
        )
