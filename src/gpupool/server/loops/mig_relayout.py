"""The MIG re-layout loop (optional, `Settings.mig_relayout`): cuts idle `mig` GPUs anew for
waiting MIG requests that no layout serves (gpupool.scheduler.mig_relayout says which).

Each pass plans from the scheduler's snapshot; for each plan it records the new layout only
if no work holds the GPU (checked in the same write as the change), then asks the engine to
apply it (`Engine.apply_mig_layout`); if the engine cannot, the old layout is put back and an
event says why. Every change is an event (`gpu.mig_relayout`) naming the workload it serves.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gpupool.domain import Event
from gpupool.scheduler.mig_relayout import Relayout, plan_relayouts
from gpupool.server.context import AppContext
from gpupool.server.loops.base import Loop
from gpupool.store import AllocationRepo, EventRepo, NodeRepo

log = logging.getLogger(__name__)

#: (node, GPU uuid, layout) -> None when applied, else why not
Apply = Callable[[str, str, str], str | None]


class MigRelayoutLoop(Loop):
    name = "mig-relayout"

    def __init__(self, ctx: AppContext, apply: Apply, interval_s: float = 10.0):
        super().__init__(interval_s, on_error=lambda n: ctx.metrics.loop_errors.labels(n).inc())
        self.ctx = ctx
        self.apply = apply

    def run_once(self) -> list[Relayout]:
        """The re-layouts done in this pass."""
        ctx = self.ctx
        sched = ctx.loops.get("scheduler")
        snap, pending = sched.snapshot()  # type: ignore[attr-defined]
        done: list[Relayout] = []
        for plan in plan_relayouts(snap.nodes, snap.running, pending):
            now = ctx.clock.now()
            with ctx.store.write() as s:
                if any(plan.gpu_uuid in a.gpu_uuids for a in AllocationRepo(s).active()):
                    continue  # work took it meanwhile: never re-laid under work
                _, before = NodeRepo(s).gpu(plan.gpu_uuid)
                NodeRepo(s).set_mig_layout(plan.gpu_uuid, plan.layout)
            why = self.apply(plan.node, plan.gpu_uuid, plan.layout)
            with ctx.store.write() as s:
                data = {"node": plan.node, "gpu": plan.gpu_index, "layout": plan.layout}
                if why is not None:
                    NodeRepo(s).set_mig_layout(plan.gpu_uuid, before.mig_layout)
                    msg = f"GPU {plan.gpu_index} of {plan.node} not re-laid: {why}"
                    EventRepo(s).add(Event(now, "gpu.mig_relayout_refused", msg, data=data))
                    log.warning("%s", msg)
                    continue
                EventRepo(s).add(
                    Event(now, "gpu.mig_relayout", plan.reason, plan.for_workload, data=data)
                )
            log.info("%s", plan.reason)
            done.append(plan)
        if done:
            ctx.wake_scheduler()
        return done
