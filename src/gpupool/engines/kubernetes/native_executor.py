"""The kubernetes executor with Kubernetes-native work (native.py): Pods and Jobs that
`kubectl apply` made and the webhook held. gpupool creates nothing for them:

- `tick` first queues the held objects the watches show that carry a valid mark of the
  webhook (native_intake.py: the workload is made from the stored object, never from a
  review); only such objects are ever found, released or stopped as a workload's.

- `start` finds the object by its `gpupool.dev/native-workload` label, pins it to the
  allocation's node and lets it run in one patch (`native.release_patch`), with an Event
  "admitted on node ..."; kube-scheduler binds it. An object deleted while it waited is a
  permanent start failure (nothing is half-admitted).
- `poll` reads it: a Pod's phase (`podstatus`), a Job's conditions. A Pod still gated or a
  Job still suspended that this process never released reads as not launched (`UNKNOWN`):
  what a crash between gpupool's decision and the release leaves. The reconciler requeues
  admitted work that stays unlaunched, and the next admission releases it, writing the
  node affinity afresh (undone, never half-done).
- `stop` (preemption, cancel) deletes the Pod or suspends the Job again (Kubernetes then
  deletes its pods), with an Event saying why; a suspended Job resumes when re-admitted.
- `tick` writes an Event on each waiting object whose queue reason changed, at most every
  `events_every_s`: the text of `gpupool queue`; a waiting object deleted since the last
  check has its workload withdrawn (`EngineEnv.withdraw`: cancelled if still pending).

Every other workload is the plain `KubernetesExecutor`'s.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Collection, Mapping
from typing import Any

from gpupool.domain import Allocation, Enforcement, Workload
from gpupool.engines.common.executor import (
    ExecState,
    ExecStatus,
    ExecutorError,
    Handle,
    RunningProcess,
    StartError,
)
from gpupool.engines.kubernetes import native
from gpupool.engines.kubernetes.client import KubeError
from gpupool.engines.kubernetes.executor import KubernetesExecutor
from gpupool.engines.kubernetes.native_api import NativeApi
from gpupool.engines.kubernetes.native_intake import Intake
from gpupool.engines.kubernetes.podstatus import status_of

#: the objects as the watches hold them (None: not listed yet)
Snapshot = Callable[[], list[dict[str, Any]] | None]
#: while gpupool's own release patch of (kind, namespace, name) is under way (the webhook
#: refuses anyone else's)
Releasing = Callable[[str, str, str], contextlib.AbstractContextManager[None]]


def _not_guarded(kind: str, namespace: str, name: str) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


def _wid(obj: Mapping[str, Any]) -> str:
    return str(((obj.get("metadata") or {}).get("labels") or {}).get(native.NATIVE, ""))


def _ref(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind')}/{meta.get('namespace')}/{meta.get('name')}"


def job_status(wid: str, job: Mapping[str, Any]) -> ExecStatus:
    """A released Job's state from its status (pure)."""
    st = job.get("status") or {}
    for c in st.get("conditions") or []:
        if c.get("status") != "True":
            continue
        if c.get("type") == "Complete":
            return ExecStatus(wid, ExecState.SUCCEEDED, exit_code=0)
        if c.get("type") == "Failed":
            why = f"{c.get('reason', 'Failed')}: {c.get('message', '')}".strip(": ")
            return ExecStatus(wid, ExecState.FAILED, message=why)
    if int(st.get("active") or 0) > 0:
        return ExecStatus(wid, ExecState.RUNNING)
    return ExecStatus(wid, ExecState.STARTING)


class NativeKubernetesExecutor(KubernetesExecutor):
    """`KubernetesExecutor` plus the native work (see the module docstring). `waiting(ids)`
    says why pending workloads wait (`EngineEnv.waiting`); `native_pods` / `native_jobs`
    are the watches' caches of the queued objects."""

    def __init__(
        self,
        *args: Any,
        waiting: Callable[[Collection[str]], Mapping[str, str]] | None = None,
        withdraw: Callable[[str, str], None] | None = None,
        native_pods: Snapshot | None = None,
        native_jobs: Snapshot | None = None,
        events_every_s: float = 15.0,
        intake: Intake | None = None,
        releasing: Releasing = _not_guarded,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.native = NativeApi(self.api)
        self.intake = intake
        self.releasing = releasing
        self.waiting = waiting or (lambda ids: {})
        self.withdraw_work = withdraw or (lambda workload_id, reason: None)
        self._held: dict[str, str] = {}  # workload id -> ref of the objects held last check
        self._caches = (native_pods, native_jobs)
        self.events_every_s = events_every_s
        #: workload id -> when this process released it / why it stopped it
        self._released: dict[str, float] = {}
        self._stopped: dict[str, str] = {}
        self._said: dict[str, str] = {}  # object ref -> the last waiting message written
        self._said_at = -math.inf
        #: workload id -> queued object, as the watches held it at the start of this pass
        self._index: dict[str, dict[str, Any]] | None = None

    # -- finding the objects -------------------------------------------------------------
    def ours(self, obj: Mapping[str, Any]) -> bool:
        """Whether `obj` is a workload's: its webhook mark verifies (a label alone, copied
        or written by hand, names no workload)."""
        return self.intake is None or self.intake.signer.valid(obj)

    def _workloads_pods(self) -> Callable[[Mapping[str, Any]], bool]:
        """Whether a labelled pod is a workload's: `ours`, or a pod of a Job that is (the
        Jobs read once, on first use: from the watch, else listed)."""
        known: list[set[str]] = []

        def jobs() -> set[str]:
            if not known:
                listed = self._caches[1]() if self._caches[1] is not None else None
                if listed is None:
                    try:
                        listed = self.native.list_jobs_at()[0]
                    except KubeError:
                        listed = []  # unknown: no Job's pods are taken as a workload's
                known.append(
                    {
                        str(j["metadata"].get("uid"))
                        for j in listed
                        if self.ours({"kind": "Job", **j})
                    }
                )
            return known[0]

        def workloads(pod: Mapping[str, Any]) -> bool:
            owners = (pod.get("metadata") or {}).get("ownerReferences") or []
            job = [o for o in owners if o.get("kind") == "Job" and o.get("controller")]
            if job:
                return str(job[0].get("uid")) in jobs()
            return self.ours({"kind": "Pod", **pod})

        return workloads

    def unmarked(self, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """`pods` (the cluster's live pods) with the workload label dropped from those that
        carry it but are no workload's (`_workloads_pods`): their GPUs then count as used
        outside gpupool, as any pod's gpupool did not admit (gpupool under-admits when the
        Jobs cannot be read, never over)."""
        if not any(_wid(p) for p in pods):
            return pods
        workloads = self._workloads_pods()
        out = []
        for p in pods:
            if _wid(p) and not workloads(p):
                meta = dict(p["metadata"])
                meta["labels"] = {k: v for k, v in meta["labels"].items() if k != native.NATIVE}
                p = {**p, "metadata": meta}
            out.append(p)
        return out

    def native_objects(self) -> list[dict[str, Any]]:
        """Every labelled Pod and Job (from the watches, else listed now), whether or not
        its mark verifies (`ours`); not a Job's pods."""
        pods, jobs = (c() if c is not None else None for c in self._caches)
        if pods is None:
            pods = self.native.list_pods_at()[0]
        if jobs is None:
            jobs = self.native.list_jobs_at()[0]
        own = [{"kind": "Pod", **p} for p in pods]
        return [p for p in own if not native.is_own(p)] + [{"kind": "Job", **j} for j in jobs]

    def _find(
        self, wid: str, fresh: bool = False, named: tuple[str, str, str] | None = None
    ) -> dict[str, Any] | None:
        """The object queued as `wid`: from the watches' caches, or (`fresh`) from the API,
        by its name first when `named` (kind, namespace, name) is known."""
        if fresh and named is not None:
            got = self.native.get(*named)
            if got is not None and _wid(got) == wid and self.ours({"kind": named[0], **got}):
                return {"kind": named[0], **got}
        if not fresh:
            if self._index is None:  # once per reconcile pass (`tick` clears it)
                self._index = {_wid(o): o for o in self.native_objects() if self.ours(o)}
            return self._index.get(wid)
        sel = f"{native.NATIVE}={wid}"
        pods = [{"kind": "Pod", **p} for p in self.api.list_pods(sel)]
        pods = [p for p in pods if not native.is_own(p) and self.ours(p)]
        if pods:
            return pods[0]
        body = self.native.api._call(
            self.native.batch.list_job_for_all_namespaces, label_selector=sel
        )
        jobs = [j for j in ({"kind": "Job", **j} for j in body["items"]) if self.ours(j)]
        return jobs[0] if jobs else None

    # -- the contract --------------------------------------------------------------------
    def start(
        self,
        workload: Workload,
        allocation: Allocation | None,
        *,
        env: Mapping[str, str] | None = None,
        unix_user: str | None = None,
    ) -> Handle:
        ref = native.native_ref(workload.command)
        if ref is None:
            return super().start(workload, allocation, env=env, unix_user=unix_user)
        kind, ns = ref
        try:
            named = (kind, ns, workload.command[3])
            obj = self._find(workload.id, fresh=True, named=named)
        except KubeError as e:
            raise StartError(f"reading the {kind} of {workload.id} failed: {e}") from None
        if obj is None:
            raise StartError(
                f"the {kind} in {ns} that was queued as {workload.id} is gone (deleted before "
                "gpupool admitted it); nothing runs",
                permanent=True,
            )
        node = allocation.node if allocation is not None else None
        meta = obj["metadata"]
        try:
            if node is None:  # no GPU asked: nothing to pin
                ops = [op for op in native.release_patch(obj, "-") if "affinity" not in op["path"]]
            else:
                ops = native.release_patch(obj, node)
            with self.releasing(kind, ns, meta["name"]):
                self.native.patch(kind, ns, meta["name"], ops)
        except KubeError as e:
            raise StartError(f"releasing {_ref(obj)} failed: {e}") from None
        now = self.clock.now()
        self._index = None
        self._released[workload.id] = now
        self._stopped.pop(workload.id, None)
        where = f"on node {node}" if node else "(no GPU: kube-scheduler places it)"
        self._event(obj, "Admitted", f"admitted by gpupool {where} for {workload.tenant}")
        return Handle(workload.id, self.name, _ref(obj), now)

    def poll(self, workload_id: str) -> ExecStatus:
        mine = workload_id in self._released or workload_id in self._stopped
        if not mine:
            st = super().poll(workload_id)
            if st.state is not ExecState.UNKNOWN:
                return st
        obj = self._find(workload_id)
        if obj is not None and native.held(obj) and workload_id in self._released:
            obj = self._find(workload_id, fresh=True)  # the watch may not have seen it yet
        stop = self._stopped.get(workload_id)
        if obj is None:
            if not mine:
                return ExecStatus.unknown(workload_id)
            if stop is not None:
                return ExecStatus(
                    workload_id, ExecState.FAILED, message=f"deleted: {stop}", stop_reason=stop
                )
            return ExecStatus(
                workload_id, ExecState.LOST, message="the object was deleted outside gpupool"
            )
        if native.held(obj):
            if stop is not None:  # a Job suspended again by `stop`
                return ExecStatus(
                    workload_id, ExecState.FAILED, message=f"suspended: {stop}", stop_reason=stop
                )
            if workload_id not in self._released:
                # not launched (yet, or gpupool stopped between its decision and the
                # release): the reconciler requeues admitted work that stays so
                return ExecStatus.unknown(workload_id)
        st = job_status(workload_id, obj) if obj["kind"] == "Job" else status_of(workload_id, obj)
        if stop is not None:
            st = ExecStatus(
                st.workload_id, st.state, st.exit_code, message=st.message, stop_reason=stop
            )
        return st

    def stop(self, workload_id: str, reason: str, grace_s: float = 30.0) -> None:
        obj = self._find(workload_id)
        if obj is None:
            return super().stop(workload_id, reason, grace_s)
        if workload_id in self._stopped:
            return
        meta = obj["metadata"]
        ns, name = meta["namespace"], meta["name"]
        try:
            if obj["kind"] == "Job":
                self.native.patch(
                    "Job", ns, name, [{"op": "replace", "path": "/spec/suspend", "value": True}]
                )
            else:
                self.api.delete_pod(ns, name, max(0, math.ceil(grace_s)))
        except KubeError as e:
            raise ExecutorError(f"stopping {_ref(obj)} failed: {e}") from None
        self._stopped[workload_id] = reason
        self._released.pop(workload_id, None)
        self._index = None
        what = "suspended again" if obj["kind"] == "Job" else "deleted"
        self._event(obj, "Preempted", f"{what} by gpupool: {reason}", warning=True)

    def list_running(self) -> list[RunningProcess]:
        out = super().list_running()
        for obj in self.native_objects():
            wid = _wid(obj)
            if not wid or native.held(obj) or not self.ours(obj):
                continue
            st = job_status(wid, obj) if obj["kind"] == "Job" else status_of(wid, obj)
            if st.state.alive:
                self._released.setdefault(wid, self.clock.now())  # adopted after a restart
                out.append(RunningProcess(wid, _ref(obj), user=obj["metadata"]["namespace"]))
        return out

    def enforcement_of(self, workload_id: str) -> Mapping[str, Enforcement] | None:
        """A queued object's GPUs are whole (`nvidia.com/gpu: N`, the device plugin's): what
        the allocation asks (None); gpupool's own pods as the plain executor says."""
        if workload_id in self._released or workload_id in self._stopped:
            return None
        return super().enforcement_of(workload_id)

    def owners(self, container_kind: str, ids: Collection[str]) -> dict[str, str | None]:
        """Pod UID -> workload, a queued Pod's (and a queued Job's pods') included: those
        whose mark verifies (`_workloads_pods`)."""
        out = super().owners(container_kind, ids)
        if container_kind != "pod" or all(out.get(i) for i in ids):
            return out
        cached = self._caches[0]() if self._caches[0] is not None else None
        try:
            pods = cached if cached is not None else self.native.list_pods_at()[0]
        except KubeError:
            return out
        want, workloads = set(ids), self._workloads_pods()
        for p in pods:
            uid = (p.get("metadata") or {}).get("uid")
            if uid in want and not out.get(uid) and _wid(p) and workloads(p):
                out[uid] = _wid(p)  # a label alone, copied, names no workload
        return out

    def tick(self) -> None:
        super().tick()
        self._index = None
        now = self.clock.now()
        objects: list[dict[str, Any]] | None = None
        if self.intake is not None:
            try:
                objects = self.native_objects()
                self.intake.run(objects)
            except KubeError:
                objects = None
        if now - self._said_at < self.events_every_s:
            return
        self._said_at = now
        try:
            objects = objects if objects is not None else self.native_objects()
        except KubeError:
            return
        objects = [o for o in objects if self.ours(o)]
        held = [o for o in objects if native.held(o) and _wid(o)]
        present = {_wid(o) for o in objects}
        gone = [w for w in self._held if w not in present and w not in self._released]
        for wid in gone:  # deleted while it waited: withdrawn
            self.withdraw_work(wid, f"{self._held[wid]} was deleted before gpupool admitted it")
        if self.intake is not None:
            self.intake.forget(gone)
        self._held = {_wid(o): _ref(o) for o in held}
        reasons = self.waiting([_wid(o) for o in held]) if held else {}
        for obj in held:
            why = reasons.get(_wid(obj))
            if why is None or self._said.get(_ref(obj)) == why:
                continue
            self._said[_ref(obj)] = why
            self._event(obj, "Queued", f"waiting: {why}")

    def warn(self, obj: Mapping[str, Any], reason: str, message: str) -> None:
        """A Warning Event on `obj` (native_intake.py's)."""
        self._event(obj, reason, message, warning=True)

    def _event(
        self, obj: Mapping[str, Any], reason: str, message: str, warning: bool = False
    ) -> None:
        with contextlib.suppress(KubeError):  # a courtesy: the work goes on without it
            self.native.event(obj, reason, message, self.clock.now(), warning)
