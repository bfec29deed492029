"""Applies the tenancy objects (`tenancy.py`) to the cluster: create what is missing, merge-patch
what differs in the fields gpupool owns, delete the GPU quota of a tenant that lost its limit
and the metadata-blocking NetworkPolicy when `block_cloud_metadata` is off (only objects
labelled as gpupool's). Idempotent: a pass over an up-to-date cluster only reads. PVCs are
created, never patched or deleted (their spec is immutable and they hold people's files)."""

from __future__ import annotations

import logging
from typing import Any

from gpupool.engines.kubernetes.client import KubeError, ObjectApi
from gpupool.engines.kubernetes.manifests import MANAGED_BY, namespace_for
from gpupool.engines.kubernetes.tenancy import (
    METADATA_POLICY_NAME,
    QUOTA_NAME,
    TenancySettings,
    TenantSpec,
    tenant_objects,
)

log = logging.getLogger(__name__)

#: the fields gpupool owns per kind (besides metadata.labels)
_OWNED = {
    "Namespace": (),
    "ResourceQuota": ("spec",),
    "RoleBinding": ("subjects",),
    "NetworkPolicy": ("spec",),
    "PersistentVolumeClaim": (),
}


def _contains(have: Any, want: Any) -> bool:
    """Whether `have` holds `want` (dicts: every key of `want`, recursively; an absent field
    holds an empty list or map, as the API server omits them; else equal)."""
    if have is None and want in ([], {}):
        return True
    if isinstance(want, dict):
        return isinstance(have, dict) and all(_contains(have.get(k), v) for k, v in want.items())
    return bool(have == want)


def object_patch(desired: dict[str, Any], existing: dict[str, Any]) -> dict[str, Any] | None:
    """The merge patch that brings `existing` to `desired` in gpupool's fields; None: none."""
    patch: dict[str, Any] = {}
    labels = desired["metadata"].get("labels") or {}
    if not _contains(existing.get("metadata", {}).get("labels") or {}, labels):
        patch["metadata"] = {"labels": labels}
    for f in _OWNED[desired["kind"]]:
        if not _contains(existing.get(f), desired[f]):
            patch[f] = desired[f]
    return patch or None


class TenancySync:
    """Applies `tenant_objects` of each spec through `ObjectApi`; counts its writes."""

    def __init__(self, objects: ObjectApi, prefix: str, settings: TenancySettings):
        self.objects, self.prefix, self.settings = objects, prefix, settings
        self.writes = 0

    def apply(self, spec: TenantSpec) -> None:
        """Bring one tenant's objects up to date. Raises KubeError."""
        for obj in tenant_objects(spec, self.prefix, self.settings):
            kind, meta = obj["kind"], obj["metadata"]
            ns = meta.get("namespace", "")
            have = self.objects.get(kind, ns, meta["name"])
            if have is None:
                try:
                    self.objects.create(obj)
                except KubeError as e:
                    if e.status != 409:  # made meanwhile: patched on the next change
                        raise
                self.writes += 1
            elif kind != "PersistentVolumeClaim":
                patch = object_patch(obj, have)
                if patch is not None:
                    self.objects.patch(kind, ns, meta["name"], patch)
                    self.writes += 1
        ns = namespace_for(spec.tenant, self.prefix)
        if spec.gpu_limit is None:  # unlimited: no backstop quota
            self._remove_ours("ResourceQuota", ns, QUOTA_NAME)
        if not self.settings.block_cloud_metadata:  # the admin lets pods reach it
            self._remove_ours("NetworkPolicy", ns, METADATA_POLICY_NAME)

    def _remove_ours(self, kind: str, namespace: str, name: str) -> None:
        """Delete the object if it exists and is gpupool's (an operator's own stays)."""
        have = self.objects.get(kind, namespace, name)
        labels = (have or {}).get("metadata", {}).get("labels") or {}
        if have is not None and labels.get(MANAGED_BY) == "gpupool":
            self.objects.delete(kind, namespace, name)
            self.writes += 1

    def apply_all(self, specs: list[TenantSpec]) -> list[str]:
        """Apply every tenant; returns the errors (tenant: message) of those that failed."""
        errors = []
        for spec in specs:
            try:
                self.apply(spec)
            except KubeError as e:
                log.warning("tenancy objects of %s: %s", spec.tenant, e)
                errors.append(f"{spec.tenant}: {e}")
        return errors
