"""A workload's env Secret on the cluster (`manifests.env_secret` builds it): made before its
pods, owned by them once they exist (Kubernetes' garbage collector then deletes it with
them), and deleted by gpupool as soon as the pods ended or are deleted. The workload's
declared `env` is so never in a pod spec, which tenant members may read (security review
F4); gpupool's member Roles grant no Secrets."""

from __future__ import annotations

import logging
from typing import Any

from gpupool.engines.kubernetes.client import KubeError, ObjectApi

log = logging.getLogger(__name__)


class EnvSecrets:
    """Create, own and delete env Secrets through `objects`."""

    def __init__(self, objects: ObjectApi):
        self.objects = objects

    def put(self, secret: dict[str, Any]) -> None:
        """Create it (one left by a start retried after a lost answer is overwritten).
        Raises KubeError."""
        try:
            self.objects.create(secret)
        except KubeError as e:
            if e.status != 409:
                raise
            meta = secret["metadata"]
            self.objects.patch("Secret", meta["namespace"], meta["name"], {"data": secret["data"]})

    def own(self, ns: str, secret: dict[str, Any] | None, pods: list[dict[str, Any]]) -> None:
        """Make `pods` the Secret's owners (the garbage collector's backstop to `delete`);
        a failure is logged."""
        refs = [
            {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
            for meta in ((p.get("metadata") or {}) for p in pods)
            if meta.get("uid") and meta.get("name")
        ]
        if secret is None or not refs:
            return
        name = secret["metadata"]["name"]
        try:
            self.objects.patch("Secret", ns, name, {"metadata": {"ownerReferences": refs}})
        except KubeError as e:
            log.warning("owning Secret %s/%s by its pods: %s", ns, name, e)

    def drop(self, ns: str, secret: dict[str, Any] | None) -> None:
        """Delete a Secret made for pods that were not created (errors logged)."""
        if secret is not None:
            self.delete(ns, secret["metadata"]["name"])

    def delete(self, ns: str, name: str) -> bool:
        """Delete it (gone already: fine); False when the API refused (logged, retried by the
        caller or left to the garbage collector)."""
        try:
            self.objects.delete("Secret", ns, name)
        except KubeError as e:
            log.warning("deleting Secret %s/%s: %s", ns, name, e)
            return False
        return True
