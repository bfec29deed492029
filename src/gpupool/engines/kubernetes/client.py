"""Glue over the official `kubernetes` client: the few calls the engine makes, as plain
dicts (the raw JSON: parsing 5,000 pods into client models would cost seconds per pass).

`KubeError` carries the HTTP status (403 quota, 404, 409 conflict) and the API's message.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from gpupool.engines.common import logread
from gpupool.engines.common.engine import EngineError


class KubeError(Exception):
    """An API call failed; `status` is the HTTP status (0: no answer) and the message is the
    API server's own."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def _message(e: Any) -> str:
    try:
        return str(json.loads(e.body).get("message") or e.reason)
    except (TypeError, ValueError, AttributeError):
        return str(getattr(e, "reason", e))


def load_api_client(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """An `ApiClient`: from `kubeconfig` when given, else in-cluster (the pod's service
    account), else $KUBECONFIG / ~/.kube/config. Raises EngineError saying what to do."""
    try:
        from kubernetes import client, config
    except ImportError:
        raise EngineError(
            "the kubernetes engine needs the kubernetes client: pip install 'gpupool[kubernetes]'"
        ) from None
    cfg = client.Configuration()
    try:
        if kubeconfig:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                kubeconfig, context=context, client_configuration=cfg
            )
        else:
            try:
                config.load_incluster_config(  # type: ignore[no-untyped-call]
                    client_configuration=cfg
                )
            except config.ConfigException:
                config.load_kube_config(  # type: ignore[no-untyped-call]
                    context=context, client_configuration=cfg
                )
    except (config.ConfigException, OSError, TypeError, ValueError) as e:
        raise EngineError(
            f"cannot configure the Kubernetes client ({e}); run gpupool in the cluster with a "
            "service account, or pass --kubeconfig (or set KUBECONFIG)"
        ) from None
    return client.ApiClient(cfg)


def _body_chunks(resp: Any) -> Iterator[bytes]:
    """A urllib3 response's body in chunks; the connection goes back to the pool after."""
    try:
        yield from resp.stream(logread.CHUNK_BYTES)
    except Exception as e:  # noqa: BLE001 - a broken connection ends the read early
        raise KubeError(0, f"the Kubernetes API stopped sending the log: {e}") from None
    finally:
        resp.release_conn()


class KubeApi:
    """The core/v1 calls of the engine over an `ApiClient`."""

    def __init__(self, api_client: Any, *, timeout_s: float = 10.0):
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.timeout_s = timeout_s

    def _call(self, fn: Any, *args: Any, raw: bool = True, **kwargs: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            resp = fn(*args, _preload_content=False, _request_timeout=self.timeout_s, **kwargs)
        except ApiException as e:
            raise KubeError(e.status or 0, _message(e)) from None
        except Exception as e:  # noqa: BLE001 - connection errors of urllib3
            raise KubeError(0, f"the Kubernetes API did not answer: {e}") from None
        data = resp.data
        return json.loads(data) if raw else data.decode("utf-8", "replace")

    def list_nodes(self) -> list[dict[str, Any]]:
        return self.list_nodes_at()[0]

    def list_nodes_at(self, **_: Any) -> tuple[list[dict[str, Any]], str]:
        """Every node and the list's resourceVersion (where a watch starts)."""
        body = self._call(self.core.list_node)
        return list(body["items"]), str((body.get("metadata") or {}).get("resourceVersion", ""))

    def list_pods(self, label_selector: str = "", field_selector: str = "") -> list[dict[str, Any]]:
        return self.list_pods_at(label_selector, field_selector)[0]

    def list_pods_at(
        self, label_selector: str = "", field_selector: str = ""
    ) -> tuple[list[dict[str, Any]], str]:
        """The pods of every namespace matching the selectors, and the list's
        resourceVersion (where a watch starts)."""
        kw: dict[str, Any] = {}
        if label_selector:
            kw["label_selector"] = label_selector
        if field_selector:
            kw["field_selector"] = field_selector
        body = self._call(self.core.list_pod_for_all_namespaces, **kw)
        return list(body["items"]), str((body.get("metadata") or {}).get("resourceVersion", ""))

    def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return dict(self._call(self.core.read_namespaced_pod, name, namespace))
        except KubeError as e:
            if e.status == 404:
                return None
            raise

    def create_pod(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return dict(self._call(self.core.create_namespaced_pod, namespace, body))

    def delete_pod(self, namespace: str, name: str, grace_s: int) -> None:
        from kubernetes import client

        try:
            self._call(
                self.core.delete_namespaced_pod,
                name,
                namespace,
                body=client.V1DeleteOptions(grace_period_seconds=grace_s),
            )
        except KubeError as e:
            if e.status != 404:
                raise

    def pod_log_chunks(
        self, namespace: str, name: str, tail_lines: int | None = None
    ) -> Iterator[bytes]:
        """The pod's log (its last `tail_lines` lines when given) as the API server sends
        it, in chunks of at most `logread.CHUNK_BYTES`: never whole in memory. The request
        is made now (errors: KubeError); the body is read as the iterator is consumed."""
        from kubernetes.client.exceptions import ApiException

        kw: dict[str, Any] = {"tail_lines": tail_lines} if tail_lines is not None else {}
        try:
            resp = self.core.read_namespaced_pod_log(
                name, namespace, _preload_content=False, _request_timeout=self.timeout_s, **kw
            )
        except ApiException as e:
            raise KubeError(e.status or 0, _message(e)) from None
        except Exception as e:  # noqa: BLE001 - connection errors of urllib3
            raise KubeError(0, f"the Kubernetes API did not answer: {e}") from None
        return _body_chunks(resp)

    def pod_events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        return list(
            self._call(
                self.core.list_namespaced_event,
                namespace,
                field_selector=f"involvedObject.name={name}",
            )["items"]
        )


#: kind -> (API class, method suffix, namespaced): the objects of a tenant (tenancy.py) and
#: a workload's Service and env Secret
_KINDS = {
    "Namespace": ("CoreV1Api", "namespace", False),
    "Service": ("CoreV1Api", "service", True),  # a gang's headless Service (gang.py)
    "Secret": ("CoreV1Api", "secret", True),  # a workload's env (manifests.env_secret)
    "ResourceQuota": ("CoreV1Api", "resource_quota", True),
    "PersistentVolumeClaim": ("CoreV1Api", "persistent_volume_claim", True),
    "Role": ("RbacAuthorizationV1Api", "role", True),
    "RoleBinding": ("RbacAuthorizationV1Api", "role_binding", True),
    "NetworkPolicy": ("NetworkingV1Api", "network_policy", True),
}


class ObjectApi:
    """get/create/patch/delete of the tenancy objects by kind, over the same `KubeApi`
    error handling (`KubeError`). Patches are JSON merge patches (RFC 7386)."""

    def __init__(self, api: KubeApi):
        from kubernetes import client

        self.api = api
        base = api.core.api_client
        self._apis = {n: getattr(client, n)(base) for n in {k[0] for k in _KINDS.values()}}

    def _fn(self, verb: str, kind: str) -> tuple[Any, bool]:
        cls, suffix, namespaced = _KINDS[kind]
        name = f"{verb}_namespaced_{suffix}" if namespaced else f"{verb}_{suffix}"
        return getattr(self._apis[cls], name), namespaced

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        fn, namespaced = self._fn("read", kind)
        try:
            args = (name, namespace) if namespaced else (name,)
            return dict(self.api._call(fn, *args))
        except KubeError as e:
            if e.status == 404:
                return None
            raise

    def create(self, body: dict[str, Any]) -> None:
        fn, namespaced = self._fn("create", body["kind"])
        args = (body["metadata"]["namespace"], body) if namespaced else (body,)
        self.api._call(fn, *args)

    def patch(self, kind: str, namespace: str, name: str, patch: dict[str, Any]) -> None:
        fn, namespaced = self._fn("patch", kind)
        args = (name, namespace, patch) if namespaced else (name, patch)
        self.api._call(fn, *args, _content_type="application/merge-patch+json")

    def delete(self, kind: str, namespace: str, name: str) -> None:
        fn, namespaced = self._fn("delete", kind)
        try:
            self.api._call(fn, *((name, namespace) if namespaced else (name,)))
        except KubeError as e:
            if e.status != 404:
                raise
