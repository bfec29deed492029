"""The kubernetes engine: gpupool as the admission and quota layer of a Kubernetes cluster.

gpupool's scheduler decides who gets which node's GPUs; each admitted workload becomes a Pod
pinned to that node by required node affinity, and kube-scheduler binds it (gpupool never
binds: no second scheduler). Nodes and GPUs come from the Kubernetes Nodes (`inventory`),
re-read every `inventory_interval_s` and at once after a pod stayed Pending; GPU readings
come from the agent DaemonSet, not from this process. See docs/executors.md.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpupool.domain import Enforcement, Membership, Node, TenantTree
from gpupool.engines.base import Engine, EngineEnv, EngineError
from gpupool.engines.kubernetes import inventory as inv
from gpupool.engines.kubernetes.client import KubeApi, KubeError, ObjectApi, load_api_client
from gpupool.engines.kubernetes.executor import KubernetesExecutor
from gpupool.engines.kubernetes.manifests import PodSettings
from gpupool.engines.kubernetes.tenancy import TenancySettings, fingerprint, tenant_specs
from gpupool.engines.kubernetes.tenancy_sync import TenancySync
from gpupool.executors.base import Executor

__all__ = [
    "KubeOptions",
    "KubernetesEngine",
    "KubernetesExecutor",
    "PodSettings",
    "TenancySettings",
]


@dataclass(frozen=True)
class KubeOptions:
    """`gpupool up --engine kubernetes` options. `kubeconfig`: None -> in-cluster, then
    $KUBECONFIG; `pending_timeout_s`: a pod still Pending this long after its start is
    requeued; `inventory_interval_s`: how often the nodes are re-read; `tenancy`: the
    per-tenant objects' settings (notebook homes)."""

    kubeconfig: str | None = None
    context: str | None = None
    pods: PodSettings = field(default_factory=PodSettings)
    pending_timeout_s: float = 30.0
    inventory_interval_s: float = 10.0
    tenancy: TenancySettings = field(default_factory=TenancySettings)


class KubernetesEngine(Engine):
    """Work as Pods, nodes from the Kubernetes API. `api_client` (an official
    `kubernetes.client.ApiClient`) is built from `options` when not given."""

    name = "kubernetes"

    def __init__(self, options: KubeOptions | None = None, *, api_client: Any = None):
        self.options = options or KubeOptions()
        self._api_client = api_client
        self.api: KubeApi | None = None
        self.executor: KubernetesExecutor | None = None
        self._allocatable: dict[str, tuple[Mapping[str, str], int]] = {}
        self._lock = threading.Lock()
        self.inventory_interval_s: float | None = self.options.inventory_interval_s
        self._stale = threading.Event()
        self._tenancy_applied: str | None = None
        self._record: Any = None

    def open(self, env: EngineEnv) -> Executor:
        client = self._api_client or load_api_client(self.options.kubeconfig, self.options.context)
        self.api = KubeApi(client)
        self._record = env.record
        try:
            self.api.list_nodes()
        except KubeError as e:
            raise EngineError(
                f"the Kubernetes API at {client.configuration.host} cannot list nodes ({e}); "
                "check the kubeconfig or the service account's RBAC (nodes: list)"
            ) from None

        def rejected(node: str | None) -> None:
            env.record(
                "kubernetes.pod_pending",
                f"a pod stayed Pending on node {node}; its capacity is re-read",
                {"node": node or ""},
            )
            self._stale.set()

        self.executor = KubernetesExecutor(
            self.api,
            env.clock,
            self.options.pods,
            pending_timeout_s=self.options.pending_timeout_s,
            allocatable=self._node_allocatable,
            on_rejected=rejected,
        )
        return self.executor

    def _node_allocatable(self, node: str) -> tuple[Mapping[str, str], int]:
        with self._lock:
            known = self._allocatable.get(node)
        if known is None:
            self.inventory()
            with self._lock:
                known = self._allocatable.get(node, ({}, 1))
        return known

    def inventory(self) -> list[Node]:
        """Every GPU node, with GPUs used by pods gpupool did not create marked as taken."""
        if self.api is None:
            raise EngineError("open the engine first")
        try:
            nodes = self.api.list_nodes()
            pods = self.api.list_pods(field_selector="status.phase!=Succeeded,status.phase!=Failed")
        except KubeError as e:
            raise EngineError(f"reading the cluster's nodes failed: {e}") from None
        with self._lock:
            self._allocatable = {
                n["metadata"]["name"]: (
                    dict((n.get("status") or {}).get("allocatable") or {}),
                    inv.replicas_of(n),
                )
                for n in nodes
            }
        held = self.executor.gpu_indexes_by_node() if self.executor else {}
        if self.executor is not None:
            self.executor.note_cluster_pods(pods)
        self._stale.clear()
        return inv.nodes_from(nodes, pods, held)

    def sync_tenants(self, tenants: TenantTree, memberships: Sequence[Membership]) -> None:
        """Apply every leaf tenant's objects (`tenancy.py`) when the tenants, limits or
        members changed since the last complete pass; a failed pass is retried next time."""
        if self.api is None:
            return
        specs = tenant_specs(tenants, memberships)
        prefix = self.options.pods.namespace_prefix
        digest = fingerprint(specs, prefix, self.options.tenancy)
        if digest == self._tenancy_applied:
            return
        errors = TenancySync(ObjectApi(self.api), prefix, self.options.tenancy).apply_all(specs)
        if errors:
            if self._record is not None:
                self._record(
                    "kubernetes.tenancy_failed",
                    "applying the tenants' namespaces, quotas, RoleBindings, network policies "
                    f"or home PVCs failed (retried): {'; '.join(errors)[:500]}",
                    {"tenants": len(errors)},
                )
            return
        self._tenancy_applied = digest

    def inventory_due(self) -> bool:
        """Whether a pod stayed Pending since the last read (re-read the nodes now)."""
        return self._stale.is_set()

    @property
    def shared_enforcement(self) -> Enforcement:
        """Time-slicing isolates neither memory nor compute: fractional shares are `none`."""
        return Enforcement.NONE

    def describe(self) -> list[tuple[str, bool]]:
        host = self.api.core.api_client.configuration.host if self.api else "?"
        return [
            (
                f"gpupool: kubernetes engine on {host}; pods in namespaces "
                f"{self.options.pods.namespace_prefix}<tenant>",
                False,
            ),
            ("gpupool: fractional GPUs use time-slicing: no isolation (enforcement none)", True),
        ]
