"""The telemetry loop: samples this node's GPUs, attributes processes, polices shares.

Each pass takes one sample through `gpupool.telemetry.Sampler` (the allocations it polices
come from the store; processes are attributed to workloads by their `GPUPOOL_WORKLOAD_ID`),
refreshes the node's heartbeat, and acts on the policing detections:

- `over_memory` on a share that is not enforced by hardware or MPS, and `foreign_gpu`
  (a workload's process on a GPU it does not hold): an event warns at once; if the
  condition still holds after `kill_after_s`, the offending processes are killed and a
  `gpu.policed` event records why. Shares enforced by `mps`/`hardware` are never killed
  for memory: the limit holds there (an event is still recorded).
- `unowned_on_allocated` (a process no workload owns on a held GPU): an event; with
  `police_unowned` (per-user mode) it is also killed after `kill_after_s` unless it runs as
  root or as the server's account (system services, gpupool's own MPS servers, which are
  never reported: `mps_daemons`).
- `idle`: nothing here; the culler reads idleness from `idle_seconds()`.

Events are written once per condition (and once more when acted on), not on every pass.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from gpupool.domain import Allocation, Enforcement, Event, Share
from gpupool.server.context import AppContext
from gpupool.server.loops.base import Loop
from gpupool.store import AllocationRepo, EventRepo, NodeRepo, NotFound, WorkloadRepo
from gpupool.telemetry import (
    Attribution,
    Attributor,
    Detection,
    DetectionKind,
    GPUSource,
    Policer,
    PolicingConfig,
    Sampler,
    SimulatedSource,
    WorkloadOwner,
)
from gpupool.telemetry.mps_busy import mps_estimate, mps_holders
from gpupool.telemetry.sampler import Frame

if TYPE_CHECKING:
    from gpupool.engines.common.engine import NodeTelemetry

log = logging.getLogger(__name__)
ENFORCED = (Enforcement.MPS, Enforcement.HARDWARE)
MPS_ESTIMATES_KEPT = 1000  # samples per GPU: 83 min at the default 5 s


def default_killer(source: GPUSource) -> Callable[[int], None]:
    """Kill a real process with SIGKILL; on simulated GPUs, take the process off the GPU."""
    if isinstance(source, SimulatedSource):
        return source.remove_process

    def kill(pid: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    return kill


class TelemetryLoop(Loop):
    name = "telemetry"

    def __init__(
        self,
        ctx: AppContext,
        source: GPUSource,
        *,
        node: str,
        interval_s: float = 5.0,
        kill_after_s: float = 30.0,
        kill: Callable[[int], None] | None = None,
        policing: PolicingConfig | None = None,
        proc_root: str = "/proc",
        attributor: Attributor | None = None,
        mps_daemons: Callable[[], Mapping[int, str]] | None = None,
        police_unowned: bool = False,
    ):
        super().__init__(interval_s, on_error=lambda n: ctx.metrics.loop_errors.labels(n).inc())
        self.ctx = ctx
        self.node = node
        self.kill_after_s = kill_after_s
        self.kill = kill or default_killer(source)
        self.police_unowned = police_unowned
        self._owners: Mapping[int, Attribution] = {}
        self.policer = Policer(ctx.clock, policing or PolicingConfig(idle_after_s=0.0))
        self.sampler = Sampler(
            source,
            ctx.clock,
            interval_s=interval_s,
            attributor=attributor
            or Attributor(proc_root, resolve_workload=self._owner, mps_daemons=mps_daemons),
            policer=self.policer,
            allocations=self._allocations,
        )
        ctx.samplers.append(self.sampler)  # the dashboard shows what it samples
        #: detection key -> the `since` it was reported with (dedupes events)
        self._warned: dict[tuple, float] = {}
        self._acted: set[tuple] = set()
        #: GPU -> (sample time, workload id -> its MPS estimate then, % of the GPU), bounded:
        #: the accounted window of an MPS share, even one that has ended since
        self._mps_estimates: dict[str, deque[tuple[float, dict[str, float]]]] = {}

    # -- store lookups (called by the sampler) --------------------------------------------
    def _owner(self, workload_id: str) -> WorkloadOwner | None:
        with self.ctx.store.read() as s:
            try:
                w = WorkloadRepo(s).get(workload_id)
            except NotFound:
                return None
        return WorkloadOwner(w.owner, w.tenant)

    def _allocations(self) -> list[Allocation]:
        with self.ctx.store.read() as s:
            return [a for a in AllocationRepo(s).active() if self.node in a.nodes]

    # -- the pass ----------------------------------------------------------------------------
    def run_once(self) -> list[Detection]:
        frame = self.sampler.sample_once()
        self._owners = frame.owners
        now = self.ctx.clock.now()
        self._record_mps_estimates(frame, now)
        with self.ctx.store.write() as s, contextlib.suppress(NotFound):
            NodeRepo(s).heartbeat(self.node, now)
        current = {d.key: d for d in frame.detections}
        for key in set(self._warned) - set(current):
            del self._warned[key]
            self._acted.discard(key)
        for d in frame.detections:
            self._handle(d, now)
        return list(frame.detections)

    def _handle(self, d: Detection, now: float) -> None:
        if d.kind is DetectionKind.IDLE:
            return
        if self._warned.get(d.key) != d.since:
            self._warned[d.key] = d.since
            self._acted.discard(d.key)
            self._record(d, now, f"telemetry.{d.kind}", d.message)
        actionable = (
            d.kind is DetectionKind.FOREIGN_GPU
            or (d.kind is DetectionKind.OVER_MEMORY and d.enforcement not in ENFORCED)
            or (d.kind is DetectionKind.UNOWNED_ON_ALLOCATED and self._may_kill_unowned(d))
        )
        if not actionable or d.key in self._acted or d.duration_s < self.kill_after_s:
            return
        self._acted.add(d.key)
        for pid in d.pids:
            try:
                self.kill(pid)
            except (PermissionError, OSError) as e:
                log.warning("policing could not kill pid %d: %s", pid, e)
        self._record(
            d,
            now,
            "gpu.policed",
            f"killed process{'es' if len(d.pids) > 1 else ''} "
            f"{', '.join(map(str, d.pids))}: {d.message} for {d.duration_s:.0f} s",
        )

    def _may_kill_unowned(self, d: Detection) -> bool:
        """Per-user mode: a person's process on a GPU others hold; never root's or ours."""
        if not self.police_unowned:
            return False
        owner = self._owners.get(d.pids[0]) if d.pids else None
        return owner is not None and owner.uid not in (None, 0, os.geteuid())

    def _record_mps_estimates(self, frame: Frame, now: float) -> None:
        """Keep each MPS share's estimate of this sample (docs/telemetry.md)."""
        for gpu, wids in mps_holders(frame.allocations).items():
            got = {w: e for w in wids if (e := mps_estimate(frame, gpu, w)) is not None}
            if got:
                ring = self._mps_estimates.setdefault(gpu, deque(maxlen=MPS_ESTIMATES_KEPT))
                ring.append((now, got))

    def _record(self, d: Detection, now: float, kind: str, message: str) -> None:
        tenant = user = None
        if d.workload_id:
            owner = self._owner(d.workload_id)
            if owner is not None:
                tenant, user = owner.tenant, owner.user
        data: dict[str, object] = {"gpu": d.gpu_uuid, "pids": list(d.pids), "kind": str(d.kind)}
        if d.observed is not None:
            data["observed"] = d.observed
        if d.limit is not None:
            data["limit"] = d.limit
        if d.enforcement is not None:
            data["enforcement"] = str(d.enforcement)
        with self.ctx.store.write() as s:
            EventRepo(s).add(
                Event(
                    at=now,
                    kind=kind,
                    message=message,
                    workload_id=d.workload_id,
                    tenant=tenant,
                    user=user,
                    data=data,
                )
            )

    # -- for the culler and accounting ------------------------------------------------------
    def idle_seconds(self, allocation: Allocation) -> float | None:
        """How long every GPU of `allocation` has been idle (0 when any is busy).

        None when telemetry has not sampled yet (no evidence: never cull on no evidence)."""
        if self.sampler.latest is None or not allocation.shares:
            return None
        return min(
            self.policer.idle_for(allocation.workload_id, s.gpu_uuid) for s in allocation.shares
        )

    def busy_fraction(self, allocation: Allocation, since: float | None = None) -> float | None:
        """Busy GPU-seconds per allocated GPU-second of `allocation`.

        Whole GPUs: the mean utilization of the samples taken since `since` (the latest
        sample when none). Fractional shares: the SM use of its processes in the latest
        sample; an MPS share whose processes NVML gives no SM use of gets its part of the
        GPU's MPS work instead, estimated (`estimated_fraction`, docs/telemetry.md "Busy
        time under MPS"). Each share is capped at its size. None when nothing is known."""
        got = self._busy(allocation, since)
        return None if got is None else got[0]

    def estimated_fraction(self, allocation: Allocation, since: float | None = None) -> float:
        """The part (0..1, by GPU milli) of `allocation` whose busy figure in `busy_fraction`
        is an estimate (an MPS share's split of its GPU's MPS work), not a measurement."""
        got = self._busy(allocation, since)
        return 0.0 if got is None else got[1]

    def _busy(self, allocation: Allocation, since: float | None) -> tuple[float, float] | None:
        """(busy fraction, estimated part) of `allocation`; None when nothing is known."""
        frame = self.sampler.latest
        if frame is None or not allocation.shares:
            return None
        busy = 0.0
        estimated_milli = 0
        known = False
        for sh in allocation.shares:
            got = self._share_util(frame, sh, allocation.workload_id, since)
            if got is None:
                continue
            util, estimated = got
            known = True
            busy += min(sh.milli / 1000, util / 100)
            estimated_milli += sh.milli if estimated else 0
        if not known:
            return None
        return busy / (allocation.gpu_milli / 1000), estimated_milli / allocation.gpu_milli

    def _share_util(
        self, frame: Frame, sh: Share, workload_id: str, since: float | None
    ) -> tuple[float, bool] | None:
        """(utilization in % of the GPU, estimated?) of one share; None when unknown."""
        gpu = frame.snapshot.gpu(sh.gpu_uuid)
        if gpu is None:
            return None
        sm = [
            p.sm_util
            for p in frame.snapshot.processes
            if p.gpu_uuid == sh.gpu_uuid
            and p.sm_util is not None
            and (o := frame.owners.get(p.pid)) is not None
            and o.workload_id == workload_id
        ]
        if not sh.whole and sh.enforcement is Enforcement.MPS and not any(sm):
            kept = [
                got[workload_id]
                for t, got in self._mps_estimates.get(sh.gpu_uuid, ())
                if since is not None and t >= since and workload_id in got
            ]
            if kept:  # the samples of the window, each split among who held the GPU then
                return sum(kept) / len(kept), True
            estimate = mps_estimate(
                frame, sh.gpu_uuid, workload_id, self._window_mean(sh.gpu_uuid, since)
            )
            if estimate is not None:
                return estimate, True
        if not sh.whole:
            return (sum(sm), False) if sm else None
        util = self._window_mean(sh.gpu_uuid, since)(None)
        if util is None:
            util = gpu.util_gpu
        return None if util is None else (util, False)

    def _window_mean(
        self, gpu_uuid: str, since: float | None
    ) -> Callable[[int | None], float | None]:
        """pid -> its mean SM use on `gpu_uuid` since `since` (None: the GPU's utilization);
        None without a window or points in it."""

        def mean(pid: int | None) -> float | None:
            if since is None:
                return None
            if pid is None:
                got = [pt.util for pt in self.sampler.gpu_history(gpu_uuid) if pt.t >= since]
            else:
                pts = self.sampler.process_history(gpu_uuid, pid)
                got = [pt.sm_util for pt in pts if pt.t >= since]
            vals = [v for v in got if v is not None]
            return sum(vals) / len(vals) if vals else None

        return mean

    def memory_mib(self, allocation: Allocation) -> float:
        """GPU memory the workload's processes use now, MiB (0 when not sampled)."""
        frame = self.sampler.latest
        if frame is None:
            return 0.0
        total = 0
        for p in frame.snapshot.processes:
            o = frame.owners.get(p.pid)
            if o is not None and o.workload_id == allocation.workload_id:
                total += p.used_memory_bytes or 0
        return total / (1024 * 1024)


def node_loops(ctx: AppContext, sampled: Sequence[NodeTelemetry]) -> list[TelemetryLoop]:
    """A telemetry loop for each node the engine samples here, named `telemetry-<node>`
    when there are several; their samplers join `ctx.samplers`."""
    loops = []
    for t in sampled:
        tl = TelemetryLoop(
            ctx,
            t.source,
            node=t.node,
            kill=t.kill,
            mps_daemons=t.mps_daemons,
            police_unowned=t.police_unowned,
        )
        if len(sampled) > 1:
            tl.name = f"telemetry-{t.node}"
        loops.append(tl)
    return loops
