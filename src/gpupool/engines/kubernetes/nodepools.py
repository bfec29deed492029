"""The Kubernetes executor's node pools (issue 34): the cluster's autoscaler adds the nodes.

`request_nodes` makes, in each tenant namespace of the waiting work, a ProvisioningRequest
named by the request's id with a PodTemplate per waiting shape (`provisioning`); where the
cluster has no ProvisioningRequest API (the create answers 404), placeholder pods at the
lowest priority instead, from then on. `pool_states` reads the pools' nodes (label
`POOL_LABEL`: Ready -> up, else booting) and the requests: gpupool's ProvisioningRequests
(one list over every namespace; a restarted server finds them again) by their conditions,
placeholders by whether each is bound to a Ready node (then they are deleted: the node is
there, gpupool's pods take it). `withdraw` deletes a request's objects. A request that is
over (fulfilled or withdrawn, and reported so) has its ProvisioningRequest and PodTemplates
deleted once its booking is over (`provisioning.booking_over`) or `KEEP_ENDED_S` after it
ended, whichever comes first, and is forgotten; its PodTemplates are also owned by the
ProvisioningRequest, so the garbage collector removes them with it whoever deletes it.
`release_node` does nothing: an idle node with no gpupool work is left to the autoscaler's
own scale-down (nothing of gpupool pins it). Pods gpupool admits for a request carry
`autoscaling.x-k8s.io/consume-provisioning-request` (`consume_annotations`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpupool.clock import Clock
from gpupool.domain import Workload
from gpupool.domain.nodepools import POOL_LABEL, NodePool, PoolNodeState, RequestState
from gpupool.engines.common.executor import (
    ExecutorError,
    ExecutorWithNodePools,
    NodeRequestStatus,
    PoolNodeStatus,
    PoolStates,
)
from gpupool.engines.kubernetes import provisioning as pr
from gpupool.engines.kubernetes.client import KubeApi, KubeError
from gpupool.engines.kubernetes.inventory import node_state
from gpupool.engines.kubernetes.manifests import PodSettings, namespace_for

P = PoolNodeState
#: how long a fulfilled request's objects stay at most: its pods consume the capacity it
#: booked within minutes (the Cluster Autoscaler books it for 10 minutes by default)
KEEP_ENDED_S = 1800.0


@dataclass
class _Request:
    """A node request as this process knows it."""

    id: str
    pool: str
    klass: str  # "" for placeholders
    namespaces: dict[str, list[str]] = field(default_factory=dict)  # ns -> object names
    for_workloads: tuple[str, ...] = ()
    state: RequestState = RequestState.OPEN
    message: str = ""
    #: found in the cluster (after a restart), not made by this process
    adopted: bool = False
    #: when this process saw it end (fulfilled or withdrawn), and whether `pool_states`
    #: has said so since (only then may its objects go and it be forgotten)
    ended_at: float | None = None
    reported: bool = False


@dataclass
class _Pools:
    requests: dict[str, _Request] = field(default_factory=dict)
    #: whether the cluster serves ProvisioningRequests (None: not tried yet)
    provreq: bool | None = None


def _ns(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "")


def _name(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


class KubeNodePools(ExecutorWithNodePools):
    """`ExecutorWithNodePools` over the cluster's autoscaler (see the module). Uses the
    executor's `api`, `clock` and `settings`; `provisioning_class` is the class of a
    request that is not a gang's (a gang's is always atomic)."""

    api: KubeApi
    clock: Clock
    settings: PodSettings
    provisioning_class: str = pr.ATOMIC
    _node_pools: _Pools | None = None
    _request_ids = itertools.count(1)

    def _ensure_namespace(self, ns: str, tenant: str) -> None:
        raise NotImplementedError  # the executor's

    @property
    def _pools(self) -> _Pools:
        if self._node_pools is None:
            self._node_pools = _Pools()
        return self._node_pools

    def _custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self.api.core.api_client)

    # -- asking ---------------------------------------------------------------------------
    def request_nodes(
        self, pool: NodePool, count: int, for_workloads: Sequence[Workload], *, atomic: bool
    ) -> str:
        if not for_workloads:
            raise ExecutorError("a node request needs the work it is for (its shapes)")
        rid = f"gpupool-{int(self.clock.now() * 1000):x}-{next(self._request_ids)}"
        klass = pr.ATOMIC if atomic else self.provisioning_class
        by_ns: dict[str, list[Workload]] = {}
        for w in for_workloads:
            by_ns.setdefault(namespace_for(w.tenant, self.settings.namespace_prefix), []).append(w)
        req = _Request(rid, pool.name, klass, for_workloads=tuple(w.id for w in for_workloads))
        try:
            for ns, work in by_ns.items():
                self._ensure_namespace(ns, work[0].tenant)
                if self._pools.provreq is not False and self._provisioning(req, ns, pool, work):
                    continue
                req.klass = ""
                req.namespaces[ns] = self._placeholders(rid, ns, pool, work, atomic)
        except KubeError as e:
            self._delete(req)
            raise ExecutorError(f"asking the cluster for nodes of pool {pool.name}: {e}") from None
        self._pools.requests[rid] = req
        return rid

    def _provisioning(self, req: _Request, ns: str, pool: NodePool, work: list[Workload]) -> bool:
        """Make the request's ProvisioningRequest in `ns`, then its PodTemplates, owned by it;
        False when the cluster has no ProvisioningRequest API."""
        shapes = pr.pod_sets(work, req.klass == pr.ATOMIC)
        templates = [(f"{req.id}-{i}", n) for i, (_, n) in enumerate(shapes)]
        ids = [w.id for w in work]
        body = pr.provisioning_request(req.id, ns, pool, templates, req.klass, ids)
        try:
            made = self.api._call(
                self._custom().create_namespaced_custom_object,
                pr.GROUP,
                pr.VERSION,
                ns,
                pr.PLURAL,
                body,
            )
        except KubeError as e:
            if e.status != 404:
                raise
            self._pools.provreq = False  # no ProvisioningRequest API: placeholders from now on
            return False
        self._pools.provreq = True
        names = [req.id]
        req.namespaces[ns] = names  # what a failure below leaves is deleted with the request
        owner = pr.owner_reference(made)
        for (name, _), (shape, _) in zip(templates, shapes, strict=True):
            body = pr.pod_template(name, ns, req.id, pool, shape, owner)
            self.api._call(self.api.core.create_namespaced_pod_template, ns, body)
            names.append(name)
        return True

    def _placeholders(
        self, rid: str, ns: str, pool: NodePool, work: list[Workload], atomic: bool
    ) -> list[str]:
        """Placeholder pods for `work` in `ns`, of the PriorityClass the Helm chart makes
        (`provisioning.priority_class`; without the chart, the admin makes it)."""
        names: list[str] = []
        for shape, n in pr.pod_sets(work, atomic):
            for _ in range(n):
                name = f"{rid}-{len(names)}"
                self.api.create_pod(ns, pr.placeholder_pod(name, ns, rid, pool, shape))
                names.append(name)
        return names

    # -- ending -------------------------------------------------------------------------------
    def _delete_templates(self, ns: str, names: Sequence[str]) -> None:
        for name in names:
            try:
                self.api._call(self.api.core.delete_namespaced_pod_template, name, ns)
            except KubeError as e:
                if e.status != 404:
                    raise

    def _delete(self, req: _Request) -> None:
        """Delete the request's objects (gone already: fine)."""
        for ns, names in req.namespaces.items():
            if req.klass:
                try:
                    self.api._call(
                        self._custom().delete_namespaced_custom_object,
                        pr.GROUP,
                        pr.VERSION,
                        ns,
                        pr.PLURAL,
                        req.id,
                    )
                except KubeError as e:
                    if e.status != 404:
                        raise
                self._delete_templates(ns, names[1:])
            else:
                for name in names:
                    self.api.delete_pod(ns, name, 0)

    def withdraw(self, request: str) -> None:
        req = self._pools.requests.get(request)
        if req is None:
            return
        try:
            self._delete(req)
        except KubeError as e:
            raise ExecutorError(f"withdrawing node request {request}: {e}") from None
        if req.state is RequestState.OPEN:
            req.state, req.message = RequestState.WITHDRAWN, "withdrawn by gpupool"
            req.ended_at = self.clock.now()

    def release_node(self, node: str) -> None:
        """Nothing to do: the autoscaler removes a node idle for its own scale-down time;
        gpupool no longer places work there (the caller marks it down)."""

    # -- where they stand ---------------------------------------------------------------------
    def consume_annotations(self, workload_id: str) -> dict[str, str]:
        """The annotations of a pod admitted for a ProvisioningRequest: the request it
        consumes and its class (none for work no request was made for)."""
        for req in self._pools.requests.values():
            if req.klass and workload_id in req.for_workloads:
                return {pr.CONSUME: req.id, pr.CLASS_ANNOTATION: req.klass}
        return {}

    def _adopt(self) -> list[dict[str, Any]]:
        """gpupool's ProvisioningRequests in every namespace (known again after a restart)."""
        if self._pools.provreq is False:
            return []
        try:
            body = self.api._call(
                self._custom().list_cluster_custom_object,
                pr.GROUP,
                pr.VERSION,
                pr.PLURAL,
                label_selector=pr.REQUEST_LABEL,
            )
        except KubeError as e:
            if e.status == 404:
                return []
            raise
        items = list(body.get("items") or [])
        for obj in items:
            meta = obj["metadata"]
            rid, ns = meta["name"], meta["namespace"]
            labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
            templates = [str(ps["podTemplateRef"]["name"]) for ps in obj["spec"]["podSets"]]
            ids = tuple(w for w in notes.get(pr.FOR_WORKLOADS, "").split(",") if w)
            known = self._pools.requests.get(rid)
            if known is not None:
                # one request, a ProvisioningRequest per namespace; one this process made
                # has all its namespaces already: a namesake elsewhere is someone else's
                if known.adopted:
                    known.namespaces.setdefault(ns, [rid, *templates])
                    known.for_workloads = tuple(dict.fromkeys((*known.for_workloads, *ids)))
                continue
            self._pools.requests[rid] = _Request(
                rid,
                labels.get(pr.POOL, ""),
                obj["spec"]["provisioningClassName"],
                {ns: [rid, *templates]},
                ids,
                adopted=True,
            )
        return items

    def pool_states(self, pools: Sequence[NodePool]) -> PoolStates:
        names = {p.name for p in pools}
        try:
            nodes = self.api.list_nodes()
            prs = self._adopt()
            placeholders = self.api.list_pods(label_selector=pr.PLACEHOLDER)
        except KubeError as e:
            raise ExecutorError(f"reading the pools' nodes and requests: {e}") from None
        ready: dict[str, bool] = {}
        out_nodes = []
        for n in nodes:
            meta = n.get("metadata") or {}
            pool = (meta.get("labels") or {}).get(POOL_LABEL)
            up = node_state(n).value == "ready"
            ready[str(meta.get("name"))] = up
            if pool in names:
                out_nodes.append(PoolNodeStatus(meta["name"], pool, P.UP if up else P.BOOTING))
        by_pr: dict[str, list[dict[str, Any]]] = {}
        for obj in prs:
            by_pr.setdefault(obj["metadata"]["name"], []).append(obj)
        by_holder: dict[str, list[dict[str, Any]]] = {}
        for pod in placeholders:
            rid = ((pod.get("metadata") or {}).get("labels") or {}).get(pr.PLACEHOLDER, "")
            by_holder.setdefault(rid, []).append(pod)
        reqs = []
        for req in list(self._pools.requests.values()):
            if req.pool not in names:
                continue
            if req.state is RequestState.OPEN:
                self._advance(req, by_pr.get(req.id, []), by_holder.get(req.id, []), ready)
            elif req.reported and self._sweep(req, by_pr.get(req.id, [])):
                continue
            reqs.append(NodeRequestStatus(req.id, req.pool, req.state, req.message))
            req.reported = req.state is not RequestState.OPEN
        return PoolStates(tuple(sorted(out_nodes, key=lambda s: s.name)), tuple(reqs))

    def _sweep(self, req: _Request, prs: list[dict[str, Any]]) -> bool:
        """Delete an ended request's objects and forget it, once its booking is over (or
        gone) or `KEEP_ENDED_S` after it ended; whether it was."""
        mine = [o for o in prs if _ns(o) in req.namespaces]
        ended = req.ended_at if req.ended_at is not None else self.clock.now()
        over = all(pr.booking_over(o) for o in mine)
        if not over and self.clock.now() - ended < KEEP_ENDED_S:
            return False
        try:
            self._delete(req)
        except KubeError as e:
            raise ExecutorError(f"deleting the objects of node request {req.id}: {e}") from None
        del self._pools.requests[req.id]
        return True

    def _advance(
        self,
        req: _Request,
        prs: list[dict[str, Any]],
        holders: list[dict[str, Any]],
        ready: dict[str, bool],
    ) -> None:
        """Move an open request on from what the cluster says (noting when it ended)."""
        self._follow(req, prs, holders, ready)
        if req.state is not RequestState.OPEN and req.ended_at is None:
            req.ended_at = self.clock.now()

    def _follow(
        self,
        req: _Request,
        prs: list[dict[str, Any]],
        holders: list[dict[str, Any]],
        ready: dict[str, bool],
    ) -> None:
        if req.klass:
            prs = [o for o in prs if _ns(o) in req.namespaces]
            if not prs:
                req.state, req.message = RequestState.WITHDRAWN, "its ProvisioningRequest is gone"
                return
            states = [pr.request_state(o) for o in prs]
            failed = [m for s, m in states if s is RequestState.WITHDRAWN]
            if failed:
                req.state, req.message = RequestState.WITHDRAWN, failed[0]
            elif all(s is RequestState.FULFILLED for s, _ in states):
                req.state = RequestState.FULFILLED
            return
        # only the pods it made: the label is anyone's to put on a pod
        holders = [p for p in holders if _name(p) in req.namespaces.get(_ns(p), ())]
        bound = [p for p in holders if ready.get(str((p.get("spec") or {}).get("nodeName")))]
        if holders and len(bound) == len(holders):
            req.state = RequestState.FULFILLED
            for p in holders:  # the node is there: gpupool's pods take it
                self.api.delete_pod(p["metadata"]["namespace"], p["metadata"]["name"], 0)
