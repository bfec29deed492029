"""The kubernetes executor: one Pod per workload; kube-scheduler binds, the kubelet runs.

- `start` creates the pod (`manifests.build_pod`) in the tenant's namespace (made on first
  use; one that exists must be marked as that tenant's, else the start fails: see
  `tenancy_sync`), pinned to the allocation's node. The workload's declared `env` goes into a
  Secret (`manifests.env_secret`) made before the pod and owned by it (ownerReferences:
  Kubernetes' garbage collector deletes it with the pod); gpupool also deletes it as soon as
  the pod ended, and with the pod (stop, reject, prune). 403 "exceeded quota" is a transient
  `StartError`
  (the namespace's ResourceQuota is a backstop behind gpupool's own limits: when it bites,
  pods gpupool does not manage use the quota, and that changes; the start-retry policy gives
  up after its tries); 409 (the pod exists: a start retried after a lost answer) adopts it.
- State comes from one list of gpupool's pods (label `app.kubernetes.io/managed-by=gpupool`)
  per reconcile pass (`tick`): phase and container statuses give starting/running/succeeded/
  failed with the container's exit code; a known pod that disappeared without gpupool
  deleting it is `lost`; a pod whose container can never start as configured (an image that
  runs as root under `runAsNonRoot`, `podstatus.config_failure`) is failed and deleted.
  With `cache` (the engine's watch of gpupool's pods, `watch.py`) a
  pass reads that cache and makes no request; a pod missing from it is read once (GET)
  before it is called lost (the watch may not have shown a pod just created yet). Without,
  one list per pass.
- A pod still `Pending` `pending_timeout_s` (30 s) after its start is deleted and reported
  as `ExecState.REJECTED` with the reason from its conditions or events; the workload is
  requeued, and the engine re-reads its nodes (`on_rejected`).
- a notebook (no command) is built from the pod template the hub's spawner sent
  (`notebooks.py`, read through `pod_spec`); once its pod runs, `poll` reports its
  `endpoint` ("http://<pod IP>:<port>") for the spawner to hand to the hub's proxy.
- `stop` deletes the pod with the grace period; `tick` force-deletes (grace 0) what is still
  there once the grace has passed on the executor's clock.
- A multi-node allocation (a gang) is one pod per node plus a headless Service
  (`gang.build_gang`, which says why not an Indexed Job); its state is all its pods' together
  (`gang.gang_view`), and stop, reject and prune act on all of them and the Service.
- `owners` (and `container_names`) map pod UIDs to gpupool's pods (from `start` and the
  last list) and to the other pods the engine's inventory listed in every namespace
  (`note_cluster_pods`, `attribution`), so the server attributes the processes the agents
  report per pod.
- a notebook's pod template is checked at submit (`template_problem`, `notebooks`).

What it remembers of each pod (`known_pods.Known`) and of each stop (`known_pods.Stop`), and
what follows from that record alone, is in `known_pods.py`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

from gpupool.clock import Clock
from gpupool.domain import Allocation, Enforcement, Workload, WorkloadKind
from gpupool.engines.common import logread
from gpupool.engines.common.executor import (
    ExecState,
    ExecStatus,
    Executor,
    ExecutorError,
    ExecutorWithAdoption,
    ExecutorWithAttribution,
    ExecutorWithLogs,
    ExecutorWithMultiNode,
    ExecutorWithNotebooks,
    ExecutorWithPruning,
    ExecutorWithSharedGPUs,
    ExecutorWithSubmitChecks,
    Handle,
    RunningProcess,
    StartError,
    TemplateProblem,
)
from gpupool.engines.kubernetes import gang as g
from gpupool.engines.kubernetes import manifests as m
from gpupool.engines.kubernetes import notebooks as nb
from gpupool.engines.kubernetes import pod_logs
from gpupool.engines.kubernetes.attribution import PodDirectory, PodRef, other_pods
from gpupool.engines.kubernetes.client import KubeApi, KubeError, ObjectApi
from gpupool.engines.kubernetes.env_secrets import EnvSecrets
from gpupool.engines.kubernetes.known_pods import Known, Stop
from gpupool.engines.kubernetes.nodepools import KubeNodePools
from gpupool.engines.kubernetes.podstatus import (
    config_failure,
    node_of,
    pending_reason,
    started_at,
    status_of,
)
from gpupool.engines.kubernetes.tenancy_sync import ensure_namespace_of

log = logging.getLogger(__name__)


def _refused(e: KubeError, ns: str, what: str) -> StartError:
    """A start refused by the API server; a ResourceQuota's refusal is transient."""
    if e.status == 403 and "exceeded quota" in str(e):
        return StartError(
            f"the namespace {ns}'s ResourceQuota refused {what} ({e}); gpupool retries; "
            "raise the quota to at least the tenant's GPU limit"
        )
    return StartError(f"Kubernetes refused {what}: {e}")


class KubernetesExecutor(
    Executor,
    ExecutorWithLogs,
    ExecutorWithAdoption,
    ExecutorWithMultiNode,
    ExecutorWithSharedGPUs,
    ExecutorWithNotebooks,
    ExecutorWithSubmitChecks,
    ExecutorWithAttribution,
    ExecutorWithPruning,
    KubeNodePools,
):
    """Pods through `api` (see the module docstring). `on_rejected(node)` is called when a
    pod that stayed Pending is given up (the engine re-reads that node's capacity)."""

    name = "kubernetes"  # multi-node: one pod per node, a headless Service (gang.py)

    def __init__(
        self,
        api: KubeApi,
        clock: Clock,
        settings: m.PodSettings | None = None,
        *,
        pending_timeout_s: float = 30.0,
        allocatable: Callable[[str], tuple[Mapping[str, str], int]] | None = None,
        on_rejected: Callable[[str | None], None] | None = None,
        cache: Callable[[], list[dict[str, Any]] | None] | None = None,
        pod_spec: Callable[[str], Mapping[str, Any] | None] | None = None,
    ):
        self.api = api
        self.clock = clock
        self.settings = settings or m.PodSettings()
        self.pending_timeout_s = pending_timeout_s
        #: node -> (its allocatable resources, its sharing replicas), from the inventory
        self.allocatable = allocatable or (lambda node: ({}, 1))
        self.on_rejected = on_rejected or (lambda node: None)
        #: gpupool's pods as the engine's watch holds them (None: not listed yet -> list)
        self.cache = cache
        #: a notebook's pod template (from the hub's spawner), by workload id
        self.pod_spec = pod_spec or (lambda workload_id: None)
        #: workload id -> its pod; `start` (the scheduler's thread) adds while the reconciler's
        #: and the inventory's threads read: those iterate over copies
        self._known: dict[str, Known] = {}
        self._stops: dict[str, Stop] = {}
        self._namespaces: set[str] = set()
        self._listed = False
        #: pod UID -> pod, rebuilt whole (never mutated: request threads read it)
        self._pods = PodDirectory()
        self._objects: ObjectApi | None = None

    @property
    def objects(self) -> ObjectApi:
        if self._objects is None:
            self._objects = ObjectApi(self.api)
        return self._objects

    @property
    def secrets(self) -> EnvSecrets:
        return EnvSecrets(self.objects)

    # -- start -------------------------------------------------------------------------
    def start(
        self,
        workload: Workload,
        allocation: Allocation | None,
        *,
        env: Mapping[str, str] | None = None,
        unix_user: str | None = None,
    ) -> Handle:
        if allocation is not None and allocation.multi_node:
            return self._start_gang(workload, allocation, env)
        node = allocation.node if allocation is not None else None
        now = self.clock.now()
        enforcement: dict[str, Enforcement] = {}
        try:
            alloc_res, replicas = self.allocatable(node) if node else ({}, 1)
            limits, shared = m.gpu_resources(allocation, alloc_res, replicas)
            for s in allocation.shares if allocation else ():
                enforcement[s.gpu_uuid] = shared if shared is not None else s.enforcement
            build: dict[str, Any] = {
                "node": node,
                "gpu_limits": limits,
                "enforcement": enforcement,
                "started_at": now,
                "env": env,
            }
            if workload.kind is WorkloadKind.NOTEBOOK and not workload.command:
                template = self.pod_spec(workload.id)
                if template is None:
                    raise StartError(
                        "a notebook on Kubernetes is started by JupyterHub's gpupool "
                        "KubeSpawner (gpupool.jupyterhub.kubespawner), which sends its pod; "
                        "this one came without (see docs/kubernetes.md)",
                        permanent=True,
                    )
                pod = nb.notebook_pod(template, workload, allocation, self.settings, **build)
            else:
                pod = m.build_pod(workload, allocation, self.settings, **build)
            pod["metadata"]["annotations"].update(self.consume_annotations(workload.id))
        except (m.ManifestError, nb.TemplateError) as e:
            raise StartError(str(e), permanent=True) from None
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        secret = m.env_secret(workload, ns, env) if env else None
        try:
            self._ensure_namespace(ns, workload.tenant)
            if secret is not None:
                self.secrets.put(secret)
            created = self.api.create_pod(ns, pod)
        except KubeError as e:
            if e.status == 409:
                created = self._adopt_existing(workload.id, ns, name)
            else:
                self.secrets.drop(ns, secret)
                raise _refused(e, ns, f"the pod {ns}/{name}") from None
        self.secrets.own(ns, secret, [created])
        self._known[workload.id] = Known(
            ns,
            name,
            started_at(created, now),
            node,
            created,
            enforcement=enforcement,
            secret=secret["metadata"]["name"] if secret else "",
        )
        self._note_own(workload.id, ns, [created])
        return Handle(workload.id, self.name, f"{ns}/{name}", now, enforcement)

    def _start_gang(
        self, workload: Workload, allocation: Allocation, env: Mapping[str, str] | None
    ) -> Handle:
        """The gang's Service, then its pods in rank order; a refusal after some were
        created deletes what was made (all or nothing)."""
        now = self.clock.now()

        def resources(part: Allocation) -> tuple[dict[str, str], Enforcement | None]:
            alloc_res, replicas = self.allocatable(part.node)
            return m.gpu_resources(part, alloc_res, replicas)

        try:
            svc, pods, enforcement = g.build_gang(
                workload, allocation, self.settings, resources, now, env
            )
        except m.ManifestError as e:
            raise StartError(str(e), permanent=True) from None
        for p in pods:  # admitted for a ProvisioningRequest: its pods consume it
            p["metadata"].setdefault("annotations", {}).update(
                self.consume_annotations(workload.id)
            )
        ns = svc["metadata"]["namespace"]
        names = tuple(p["metadata"]["name"] for p in pods)
        secret = m.env_secret(workload, ns, env) if env else None
        try:
            self._ensure_namespace(ns, workload.tenant)
            if secret is not None:
                self.secrets.put(secret)
            made = g.create_all(
                self.api,
                self.objects,
                svc,
                pods,
                lambda name: self._adopt_existing(workload.id, ns, name),
            )
        except KubeError as e:
            self.secrets.drop(ns, secret)
            raise _refused(e, ns, f"a pod of the gang {ns}/{names[0]}") from None
        k = self._known[workload.id] = Known(
            ns,
            names[0],
            now,
            allocation.node,
            g.gang_view(made, len(names)),
            enforcement=enforcement,
            members=names,
            member_pods={p["metadata"]["name"]: p for p in made},
            service=svc["metadata"]["name"],
            secret=secret["metadata"]["name"] if secret else "",
        )
        self.secrets.own(ns, secret, made)
        self._note_own(workload.id, ns, made)
        return Handle(workload.id, self.name, f"{ns}/{k.name}", now, enforcement)

    def _note_own(self, workload_id: str, ns: str, pods: list[dict[str, Any]]) -> None:
        """`pods` were just made for `workload_id`: no stop pending, their UIDs are ours."""
        self._stops.pop(workload_id, None)
        self._pods.add_own(workload_id, ns, pods)

    def _delete_all(self, k: Known, grace: int) -> None:
        """Delete its pod (a gang: every pod and the Service) and its env Secret; raises
        KubeError."""
        for name, _ in k.pods():
            self.api.delete_pod(k.namespace, name, grace)
        if k.service:
            self.objects.delete("Service", k.namespace, k.service)
        self._forget_secret(k)

    def _ensure_namespace(self, ns: str, tenant: str) -> None:
        """Make `tenant`'s namespace or check it is the tenant's (StartError if not)."""
        if ns not in self._namespaces:
            problem = ensure_namespace_of(self.objects, ns, tenant, self.settings.pod_security)
            if problem is not None:
                raise StartError(problem)
            self._namespaces.add(ns)

    def _forget_secret(self, k: Known) -> None:
        """Delete its env Secret once (the pod ended or is deleted)."""
        if k.secret and self.secrets.delete(k.namespace, k.secret):
            k.secret = ""

    def _adopt_existing(self, workload_id: str, ns: str, name: str) -> dict[str, Any]:
        existing = self.api.get_pod(ns, name)
        labels = (existing or {}).get("metadata", {}).get("labels") or {}
        if existing is None or labels.get(m.WORKLOAD) != m.label_value(workload_id):
            raise StartError(f"a pod {ns}/{name} exists that gpupool did not create for it")
        return existing

    # -- state ---------------------------------------------------------------------------
    def refresh(self) -> None:
        """gpupool's pods (the watch's cache, else one list): adopt what is new, note what
        vanished."""
        pods = self.cache() if self.cache is not None else None
        cached = pods is not None
        if pods is None:
            try:
                pods = self.api.list_pods(m.SELECTOR)
            except KubeError as e:
                raise ExecutorError(f"listing gpupool's pods failed: {e}") from None
        self._listed = True
        now = self.clock.now()
        seen: set[str] = set()
        gangs: dict[str, list[dict[str, Any]]] = {}
        for pod in pods:
            meta = pod.get("metadata") or {}
            wid = (meta.get("annotations") or {}).get(m.WORKLOAD)
            if not wid:
                continue
            seen.add(wid)
            if g.gang_size(pod) > 1:
                gangs.setdefault(wid, []).append(pod)
                continue
            k = self._known.get(wid)
            if k is None:
                k = self._known[wid] = Known(
                    meta.get("namespace", ""),
                    meta.get("name", ""),
                    started_at(pod, now),
                    secret=m.env_secret_of(pod) or "",
                )
            k.node = k.node or node_of(pod)
            k.pod = pod
            st = status_of(wid, pod)
            if st.state.finished and k.finished_at is None:
                k.finished_at = now
                self._forget_secret(k)
            if config_failure(pod) and k.final is None:  # never starts: failed, deleted
                k.final = st
                self._delete_stuck(k, k.pods())
        for wid, members in gangs.items():
            self._note_gang(wid, members, now)
        for wid, k in list(self._known.items()):
            if wid not in seen and k.pod is not None and k.final is None:
                if cached and self._still_there(k):
                    continue
                k.final = k.vanished(wid, self._stops.get(wid))
                k.pod = None
                k.finished_at = k.finished_at or now
        own: dict[str, PodRef] = {}
        for wid, k in list(self._known.items()):
            for name, member in k.pods():
                uid = ((member or {}).get("metadata") or {}).get("uid")
                if uid and member is not None:
                    own[uid] = PodRef(k.namespace, name, wid)
        self._pods.own = own

    def _note_gang(self, wid: str, members: list[dict[str, Any]], now: float) -> None:
        """Take in a gang's listed pods (adopting it if new); once one pod failed, the
        others are deleted: a gang never runs in part."""
        size = g.gang_size(members[0])
        k = self._known.get(wid)
        if k is None:
            meta = members[0].get("metadata") or {}
            names = tuple(g.member_name(wid, r) for r in range(size))
            k = self._known[wid] = Known(
                meta.get("namespace", ""),
                names[0],
                started_at(members[0], now),
                members=names,
                service=g.service_name(wid),
                secret=m.env_secret_of(members[0]) or "",
            )
        k.member_pods = {(p.get("metadata") or {}).get("name", ""): p for p in members}
        k.pod = g.gang_view(members, size)
        head = k.member_pods.get(k.name)
        k.node = k.node or (node_of(head) if head else None)
        st = status_of(wid, k.pod)
        if st.state.finished and k.finished_at is None:
            k.finished_at = now
            self._forget_secret(k)
        if st.state is ExecState.FAILED:
            self._delete_stuck(k, k.pods())

    def _delete_stuck(self, k: Known, pods: list[tuple[str, dict[str, Any] | None]]) -> None:
        """Delete those of `pods` that have not ended (a failed gang's others; a pod whose
        container can never start)."""
        for name, pod in pods:
            phase = ((pod or {}).get("status") or {}).get("phase")
            if pod is None or phase in ("Succeeded", "Failed"):
                continue
            if (pod.get("metadata") or {}).get("deletionTimestamp"):
                continue
            try:
                self.api.delete_pod(k.namespace, name, self.settings.grace_s)
            except KubeError as e:
                log.warning("stopping pod %s/%s of a failed workload: %s", k.namespace, name, e)

    def _still_there(self, k: Known) -> bool:
        """Whether a pod the watch does not show exists (read it; keep it when so)."""
        try:
            pod = self.api.get_pod(k.namespace, k.name)
        except KubeError:
            return True  # cannot tell now: ask again next pass
        if pod is None:
            return False
        if not k.members:  # a gang keeps its view of all its pods
            k.pod = pod
        return True

    def note_cluster_pods(self, pods: list[dict[str, Any]]) -> None:
        """Remember the pods of every namespace (the inventory's list) by UID, so a process
        the agent finds in a pod gpupool did not create is shown with that pod's name."""
        self._pods.other = other_pods(pods)

    def owners(self, container_kind: str, ids: Collection[str]) -> dict[str, str | None]:
        """Pod UID -> the workload of gpupool's pod, None for a pod it did not create."""
        return {i: p.workload_id for i, p in self._pods.of(container_kind, ids).items()}

    def container_names(self, container_kind: str, ids: Collection[str]) -> dict[str, str]:
        """Pod UID -> `namespace/name`, gpupool's pods and the others listed."""
        return {i: p.ref for i, p in self._pods.of(container_kind, ids).items()}

    @property
    def one_account(self) -> bool:
        """False: every tenant's work runs in its own namespace, as its pod says."""
        return False

    def refusal(self, workload: Workload) -> str | None:
        """None: what the scheduler admits, a pod can run."""
        return None

    def template_problem(self, template: Mapping[str, Any], owner: str) -> TemplateProblem | None:
        """A notebook's pod template (`pod_spec`): `notebooks.template_problem`."""
        return nb.template_problem(template, owner)

    def enforcement_of(self, workload_id: str) -> Mapping[str, Enforcement] | None:
        """What the pod really gets per GPU (`hardware` for whole GPUs through the device
        plugin, `none` for time-sliced fractions): recorded at start, or read back from the
        pod's annotation for an adopted pod; empty while the pod is unknown."""
        k = self._known.get(workload_id)
        return {} if k is None else k.recorded_enforcement()

    def poll(self, workload_id: str) -> ExecStatus:
        if not self._listed:
            self.refresh()
        k = self._known.get(workload_id)
        if k is None:
            return ExecStatus.unknown(workload_id)
        stop = self._stops.get(workload_id)
        if k.final is not None:
            st = k.final
        elif k.pod is None:
            return ExecStatus.unknown(workload_id)
        else:
            st = status_of(workload_id, k.pod)
        if stop is not None and st.stop_reason is None:
            st = ExecStatus(
                st.workload_id,
                st.state,
                st.exit_code,
                st.started_at,
                st.finished_at,
                st.message,
                stop.reason,
            )
        return st

    def tick(self) -> None:
        self.refresh()
        now = self.clock.now()
        for wid, stop in list(self._stops.items()):
            k = self._known.get(wid)
            if k is None or k.pod is None or stop.forced or now < stop.due_at:
                continue
            try:
                self._delete_all(k, 0)
                stop.forced = True
            except KubeError as e:
                log.warning("force-deleting pod %s/%s failed: %s", k.namespace, k.name, e)
        for wid, k in list(self._known.items()):
            if k.pod is None or k.final is not None or wid in self._stops:
                continue
            if status_of(wid, k.pod).state is not ExecState.STARTING:
                continue
            if now - k.started_at < self.pending_timeout_s:
                continue
            self._reject(wid, k, now)

    def _reject(self, wid: str, k: Known, now: float) -> None:
        pod = k.pod or {}
        try:
            events = self.api.pod_events(k.namespace, k.name)
        except KubeError:
            events = []
        reason = pending_reason(pod, events)
        waited = int(now - k.started_at)
        try:
            self._delete_all(k, 0)
        except KubeError as e:
            log.warning("deleting the stuck pod %s/%s failed: %s", k.namespace, k.name, e)
            return
        k.final = ExecStatus(
            wid,
            ExecState.REJECTED,
            message=f"the pod stayed Pending for {waited} s ({reason}); requeued",
        )
        k.pod = None
        k.finished_at = now
        self.on_rejected(k.node)

    # -- stop, adoption, logs, pruning ---------------------------------------------------------
    def stop(self, workload_id: str, reason: str, grace_s: float = 30.0) -> None:
        k = self._known.get(workload_id)
        if k is None or k.final is not None or workload_id in self._stops:
            return
        if k.pod is not None and status_of(workload_id, k.pod).state.finished:
            return
        grace = max(0, math.ceil(grace_s))
        try:
            self._delete_all(k, grace)
        except KubeError as e:
            raise ExecutorError(f"deleting pod {k.namespace}/{k.name} failed: {e}") from None
        self._stops[workload_id] = Stop(reason, self.clock.now() + grace_s, forced=grace == 0)

    def list_running(self) -> list[RunningProcess]:
        """From the list of this pass (`tick` runs first in every reconcile pass); listed
        now when no list was made yet (a new server adopting work)."""
        if not self._listed:
            self.refresh()
        out = []
        for wid, k in list(self._known.items()):
            if k.pod is None or not status_of(wid, k.pod).state.alive:
                continue
            out.append(
                RunningProcess(
                    wid, f"{k.namespace}/{k.name}", k.started_at, k.namespace, k.gpu_uuids()
                )
            )
        return out

    def _log_pods(self, workload_id: str) -> tuple[str, list[str]]:
        k = self._known.get(workload_id)
        if k is None:
            raise ExecutorError(f"no pod is known for workload {workload_id}")
        return k.namespace, list(k.members) or [k.name]

    def log_chunks(self, workload_id: str, offset: int = 0) -> Iterator[bytes]:
        """The pod's log streamed from the API server (`pod_logs.stream`)."""
        return pod_logs.stream(self.api, *self._log_pods(workload_id), offset)

    def log_tail(
        self, workload_id: str, lines: int, max_bytes: int = logread.TAIL_MAX_BYTES
    ) -> bytes:
        """The last `lines` of the log, at most `max_bytes` (`pod_logs.tail`)."""
        return pod_logs.tail(self.api, *self._log_pods(workload_id), lines, max_bytes)

    def prune(self, older_than_s: float, now: float | None = None) -> list[str]:
        """Delete the pods (and so the logs) of work that ended `older_than_s` ago."""
        now = self.clock.now() if now is None else now
        gone = []
        for wid, k in list(self._known.items()):
            if k.finished_at is None or now - k.finished_at < older_than_s:
                continue
            if k.pod is not None:
                try:
                    self._delete_all(k, 0)
                except KubeError:
                    continue
            del self._known[wid]
            self._stops.pop(wid, None)
            gone.append(wid)
        return gone

    def gpu_indexes_by_node(self) -> dict[str, set[int]]:
        """The GPU indexes gpupool's live pods hold, per node (for the inventory)."""
        out: dict[str, set[int]] = {}
        for k in list(self._known.values()):
            if k.pod is None or k.final is not None:
                continue
            for node, idx in k.gpu_indexes():
                out.setdefault(node, set()).update(idx)
        return out
