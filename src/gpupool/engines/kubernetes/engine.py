"""The kubernetes engine: gpupool as the admission and quota layer of a Kubernetes cluster.

gpupool's scheduler decides who gets which node's GPUs; each admitted workload becomes a Pod
pinned to that node by required node affinity, and kube-scheduler binds it (gpupool never
binds: no second scheduler). Nodes and GPUs come from the Kubernetes Nodes (`inventory`),
re-read every `inventory_interval_s` and at once after a pod stayed Pending; GPU readings
come from the agent DaemonSet, not from this process. See docs/executors.md.

With `KubeOptions.watch` (the default) and the server's loops running, three watches
(`watch.py`: gpupool's pods, every live pod, the nodes) keep local caches: a reconcile pass
and an inventory re-read then make no API request, and a change wakes the loop that cares
(`follow`). Until a watch has listed, and with `watch=False`, every pass lists.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpupool.domain import Enforcement, Membership, Node, TenantTree
from gpupool.engines.common.engine import Engine, EngineEnv, EngineError
from gpupool.engines.common.executor import Executor
from gpupool.engines.kubernetes import inventory as inv
from gpupool.engines.kubernetes.client import KubeApi, KubeError, ObjectApi, load_api_client
from gpupool.engines.kubernetes.manifests import MANAGED_BY, SELECTOR, PodSettings
from gpupool.engines.kubernetes.native import NATIVE_SELECTOR
from gpupool.engines.kubernetes.native_api import NativeApi
from gpupool.engines.kubernetes.native_executor import NativeKubernetesExecutor
from gpupool.engines.kubernetes.native_intake import Intake
from gpupool.engines.kubernetes.native_sign import Signer, load_key
from gpupool.engines.kubernetes.provisioning import ATOMIC
from gpupool.engines.kubernetes.tenancy import TenancySettings, fingerprint, tenant_specs
from gpupool.engines.kubernetes.tenancy_sync import TenancySync
from gpupool.engines.kubernetes.watch import Informer
from gpupool.engines.kubernetes.webhook import Webhook, WebhookServer, WebhookSettings


@dataclass(frozen=True)
class KubeOptions:
    """`gpupool up --engine kubernetes` options; fields with help are its flags, and so are
    those of `pods` (`PodSettings`) and `tenancy` (`TenancySettings`). `kubeconfig`: None ->
    in-cluster, then $KUBECONFIG; `pending_timeout_s`: a pod still Pending this long after
    its start is requeued; `inventory_interval_s`: how often the nodes are re-read;
    `tenancy`: the per-tenant objects' settings (notebook homes, cloud metadata); `watch`:
    follow pods and nodes through watches (re-listed every `resync_s`, each watch re-opened
    after `watch_timeout_s`) instead of listing them every pass."""

    kubeconfig: str | None = field(
        default=None,
        metadata={
            "flag": "--kubeconfig",
            "metavar": "FILE",
            "help": "The kubeconfig to use (default: the pod's service account in a cluster, "
            "else $KUBECONFIG or ~/.kube/config).",
        },
    )
    context: str | None = None
    pods: PodSettings = field(default_factory=PodSettings)
    pending_timeout_s: float = 30.0
    inventory_interval_s: float = 10.0
    tenancy: TenancySettings = field(default_factory=TenancySettings)
    watch: bool = True
    resync_s: float = 600.0
    watch_timeout_s: int = 300
    #: the admission webhook for kubectl-applied Pods and Jobs (webhook.py; off by default)
    webhook: WebhookSettings = field(default_factory=WebhookSettings)
    #: node pools (issue 34, nodepools.py): the ProvisioningRequest class of a request that is
    #: not a gang's (a gang's is always best-effort-atomic-scale-up)
    provisioning_class: str = ATOMIC


LIVE = "status.phase!=Succeeded,status.phase!=Failed"
#: how often gpupool's own webhook certificate and caBundle are checked (seconds)
CERT_CHECK_S = 300.0


class KubernetesEngine(Engine):
    """Work as Pods, nodes from the Kubernetes API. `api_client` (an official
    `kubernetes.client.ApiClient`) is built from `options` when not given."""

    name = "kubernetes"
    executor_class = NativeKubernetesExecutor

    def __init__(self, options: KubeOptions | None = None, *, api_client: Any = None):
        self.options = options or KubeOptions()
        self._api_client = api_client
        self.api: KubeApi | None = None
        self.executor: NativeKubernetesExecutor | None = None
        #: the admission webhook (`webhook.py`) and its HTTPS server, when enabled
        self.webhook: Webhook | None = None
        self.webhook_server: WebhookServer | None = None
        self._allocatable: dict[str, tuple[Mapping[str, str], int]] = {}
        self._lock = threading.Lock()
        self.inventory_interval_s: float | None = self.options.inventory_interval_s
        self._stale = threading.Event()
        self._tenancy_applied: str | None = None
        self._refused: list[str] = []
        self._record: Any = None
        self._env: EngineEnv | None = None
        self._cert_checked = 0.0
        #: the watches (`follow`): gpupool's pods, every live pod, the nodes
        self.watches: dict[str, Informer] = {}
        self._wake: Callable[[str], None] = lambda loop: None

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

        if self.options.watch:
            self.watches = self._informers(env)
        own = self.watches.get("pods")
        native_pods, native_jobs = self.watches.get("native-pods"), self.watches.get("jobs")
        self.executor = NativeKubernetesExecutor(
            self.api,
            env.clock,
            self.options.pods,
            pending_timeout_s=self.options.pending_timeout_s,
            allocatable=self._node_allocatable,
            on_rejected=rejected,
            cache=own.snapshot if own is not None else None,
            pod_spec=env.notebook_template,
            waiting=env.waiting,
            withdraw=env.withdraw,
            native_pods=native_pods.snapshot if native_pods is not None else None,
            native_jobs=native_jobs.snapshot if native_jobs is not None else None,
        )
        self.executor.provisioning_class = self.options.provisioning_class
        prefix = self.options.pods.namespace_prefix
        signer = Signer(load_key(env.data_dir), self.options.webhook.sign_window_s)
        self.webhook = Webhook(env.check, env.tenants, prefix, signer, env.clock, engine=self.name)
        self.executor.intake = Intake(
            env.submitter,
            env.tenants,
            prefix,
            signer,
            self.executor.warn,
            env.clock,
            engine=self.name,
        )
        self.executor.releasing = self.webhook.releasing
        self._env = env
        if self.options.webhook.port:
            self.serve_webhook()
        return self.executor

    def serve_webhook(self) -> int:
        """Serve the webhook over HTTPS (`options.webhook`); the port it listens on. A
        certificate gpupool makes itself goes into its own webhook's caBundle."""
        from pathlib import Path

        o, hook = self.options.webhook, self.webhook
        assert hook is not None
        if o.cert_dir:
            cert_file, key_file = Path(o.cert_dir) / "tls.crt", Path(o.cert_dir) / "tls.key"
        else:
            cert = self._own_cert()
            cert_file, key_file = cert.cert_file, cert.key_file
        self.webhook_server = WebhookServer(
            hook.app(), str(cert_file), str(key_file), o.host, o.port
        )
        return self.webhook_server.start()

    def _own_cert(self) -> Any:
        """gpupool's own webhook certificate (made or renewed when due, webhook_tls.py), its
        CA written into the webhook's caBundle when that differs (a `helm upgrade` empties
        it); a failed write is recorded as an event and retried at the next check."""
        from gpupool.engines.kubernetes import webhook_tls

        o, api, env = self.options.webhook, self.api, self._env
        assert api is not None and env is not None
        if env.data_dir is None:
            raise EngineError("the webhook's own certificate needs --data-dir")
        names = list(dict.fromkeys([o.service, o.service.removesuffix(".svc")]))
        cert = webhook_tls.ensure(env.data_dir / "webhook-tls", names, env.clock.now())
        self._cert_checked = env.clock.now()
        try:
            NativeApi(api).set_ca_bundle(o.config, cert.ca_pem)
        except KubeError as e:
            env.record(
                "kubernetes.webhook_ca",
                f"writing the caBundle of MutatingWebhookConfiguration {o.config} failed "
                f"({e}); kube-apiserver cannot call the webhook until it is set",
                {"config": o.config},
            )
        return cert

    def check_webhook_cert(self) -> bool:
        """Every `CERT_CHECK_S` (from the inventory loop): renew gpupool's own certificate
        when due (the server restarts with it) and restore the caBundle. True: renewed."""
        env, server = self._env, self.webhook_server
        if server is None or self.options.webhook.cert_dir or env is None:
            return False
        if env.clock.now() - self._cert_checked < CERT_CHECK_S:
            return False
        cert = self._own_cert()
        if cert.made:
            server.restart()
        return bool(cert.made)

    def _informers(self, env: EngineEnv) -> dict[str, Informer]:
        api = self.api
        assert api is not None
        o = self.options
        kw: dict[str, Any] = {"resync_s": o.resync_s, "watch_timeout_s": o.watch_timeout_s}

        def own_changed(kind: str, obj: Mapping[str, Any]) -> None:
            self._wake("reconciler")

        def cluster_changed(kind: str, obj: Mapping[str, Any]) -> None:
            labels = (obj.get("metadata") or {}).get("labels") or {}
            if labels.get(MANAGED_BY) != "gpupool":  # gpupool's own: seen by the reconciler
                self._stale.set()
                self._wake("inventory")

        def nodes_changed(kind: str, obj: Mapping[str, Any]) -> None:
            self._stale.set()
            self._wake("inventory")

        core, native = api.core, NativeApi(api)
        return {
            "pods": Informer(
                "pods",
                lambda: api.list_pods_at(SELECTOR),
                core.list_pod_for_all_namespaces,
                env.clock,
                selectors={"label_selector": SELECTOR},
                on_change=own_changed,
                **kw,
            ),
            "live-pods": Informer(
                "live-pods",
                lambda: api.list_pods_at(field_selector=LIVE),
                core.list_pod_for_all_namespaces,
                env.clock,
                selectors={"field_selector": LIVE},
                on_change=cluster_changed,
                **kw,
            ),
            "nodes": Informer(
                "nodes", api.list_nodes_at, core.list_node, env.clock, on_change=nodes_changed, **kw
            ),
            # Pods and Jobs queued through the webhook (native.py)
            "native-pods": Informer(
                "native-pods",
                native.list_pods_at,
                core.list_pod_for_all_namespaces,
                env.clock,
                selectors={"label_selector": NATIVE_SELECTOR},
                on_change=own_changed,
                **kw,
            ),
            "jobs": Informer(
                "jobs",
                native.list_jobs_at,
                native.batch.list_job_for_all_namespaces,
                env.clock,
                selectors={"label_selector": NATIVE_SELECTOR},
                on_change=own_changed,
                **kw,
            ),
        }

    def follow(self, wake: Callable[[str], None]) -> None:
        """Start the watches; a change of gpupool's pods wakes the reconciler, one of the
        nodes or of other pods the inventory (`wake(loop name)`)."""
        self._wake = wake
        for informer in self.watches.values():
            informer.start()

    def close(self) -> None:
        for informer in self.watches.values():
            informer.stop()
        if self.webhook_server is not None:
            self.webhook_server.stop()

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
        self.check_webhook_cert()
        nodes, pods = self._cached("nodes"), self._cached("live-pods")
        try:
            nodes = nodes if nodes is not None else self.api.list_nodes()
            pods = pods if pods is not None else self.api.list_pods(field_selector=LIVE)
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
            pods = self.executor.unmarked(pods)  # a copied label hides no GPU
        self._stale.clear()
        return inv.nodes_from(nodes, pods, held)

    def _cached(self, name: str) -> list[dict[str, Any]] | None:
        informer = self.watches.get(name)
        return informer.snapshot() if informer is not None else None

    def sync_tenants(self, tenants: TenantTree, memberships: Sequence[Membership]) -> None:
        """Apply every leaf tenant's objects (`tenancy.py`) when the tenants, limits or
        members changed since the last complete pass; a failed pass is retried next time."""
        if self.api is None:
            return
        specs = tenant_specs(tenants, memberships)
        prefix, level = self.options.pods.namespace_prefix, self.options.pods.pod_security
        digest = fingerprint(specs, prefix, self.options.tenancy, level)
        if digest == self._tenancy_applied:
            return
        sync = TenancySync(ObjectApi(self.api), prefix, self.options.tenancy, level)
        errors = sync.apply_all(specs)
        if sync.refused != self._refused and self._record is not None and sync.refused:
            self._record(
                "kubernetes.tenancy_refused",
                "tenant namespaces that are not the tenant's were left alone (retried): "
                f"{'; '.join(sync.refused)[:1000]}",
                {"tenants": len(sync.refused)},
            )
        self._refused = sync.refused
        if sync.refused:
            return  # retried every pass until the namespace is fixed (an event on change)
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
