"""The API calls of Kubernetes-native work (native.py) over the official client, with
`KubeApi`'s error handling: patch a queued Pod, read and patch Jobs (batch/v1), follow them
(`list_jobs_at` for an informer), write Events (core/v1), and patch the caBundle of
gpupool's own MutatingWebhookConfiguration."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from typing import Any

from gpupool.engines.kubernetes.client import KubeApi, KubeError
from gpupool.engines.kubernetes.native import NATIVE_SELECTOR


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class NativeApi:
    """Pods and Jobs queued through the webhook, and their Events."""

    def __init__(self, api: KubeApi):
        from kubernetes import client

        self.api = api
        base = api.core.api_client
        self.batch = client.BatchV1Api(base)
        self.admission = client.AdmissionregistrationV1Api(base)

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        fn = self.api.core.read_namespaced_pod if kind == "Pod" else self.batch.read_namespaced_job
        try:
            return dict(self.api._call(fn, name, namespace))
        except KubeError as e:
            if e.status == 404:
                return None
            raise

    def patch(self, kind: str, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
        """A JSON patch (RFC 6902) of a Pod or Job."""
        fn = (
            self.api.core.patch_namespaced_pod if kind == "Pod" else self.batch.patch_namespaced_job
        )
        self.api._call(fn, name, namespace, ops, _content_type="application/json-patch+json")

    def list_pods_at(self) -> tuple[list[dict[str, Any]], str]:
        return self.api.list_pods_at(NATIVE_SELECTOR)

    def list_jobs_at(self) -> tuple[list[dict[str, Any]], str]:
        body = self.api._call(
            self.batch.list_job_for_all_namespaces, label_selector=NATIVE_SELECTOR
        )
        return list(body["items"]), str((body.get("metadata") or {}).get("resourceVersion", ""))

    def event(
        self, obj: Mapping[str, Any], reason: str, message: str, now: float, warning: bool = False
    ) -> None:
        """A core/v1 Event on `obj` (what `kubectl describe` and `kubectl get events` show)."""
        meta = obj.get("metadata") or {}
        ns = str(meta.get("namespace") or "")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta.get('name')}.{uuid.uuid4().hex[:12]}", "namespace": ns},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion")
                or ("batch/v1" if obj.get("kind") == "Job" else "v1"),
                "kind": obj.get("kind"),
                "name": meta.get("name"),
                "namespace": ns,
                "uid": meta.get("uid"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": "gpupool"},
            "reportingComponent": "gpupool.dev/admission",
            "reportingInstance": "gpupool",
            "firstTimestamp": _iso(now),
            "lastTimestamp": _iso(now),
            "count": 1,
        }
        self.api._call(self.api.core.create_namespaced_event, ns, body)

    def set_ca_bundle(self, webhook_config: str, ca_pem: bytes) -> None:
        """Write `ca_pem` into every webhook of gpupool's own MutatingWebhookConfiguration
        (the only one the chart's RBAC lets it patch, by resourceNames) whose caBundle
        differs; no patch when none does."""
        import base64

        current = self.api._call(self.admission.read_mutating_webhook_configuration, webhook_config)
        bundle = base64.b64encode(ca_pem).decode()
        ops = [
            {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle}
            for i, w in enumerate(current.get("webhooks") or [])
            if (w.get("clientConfig") or {}).get("caBundle") != bundle
        ]
        if ops:
            self.api._call(
                self.admission.patch_mutating_webhook_configuration,
                webhook_config,
                ops,
                _content_type="application/json-patch+json",
            )
