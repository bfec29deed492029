"""Applies the tenancy objects (`tenancy.py`) to the cluster: create what is missing, merge-patch
what differs in the fields gpupool owns, delete the GPU quota of a tenant that lost its limit
and the metadata-blocking NetworkPolicy when `block_cloud_metadata` is off (only objects
labelled as gpupool's). Idempotent: a pass over an up-to-date cluster only reads. PVCs are
created, never patched or deleted (their spec is immutable and they hold people's files).

Ownership (security review F3): a namespace is a tenant's when its annotation
`gpupool.dev/tenant` is that tenant's exact path. One that exists marked for another tenant,
or unmarked (nobody's: made by someone else), is **refused**: nothing of the tenant is
applied there, and the refusal (`NamespaceRefused`) is reported, the other tenants synced.
One exception, for upgrades from gpupool before issue 29, which named namespaces lossily and
did not annotate them: an unmarked namespace labelled `app.kubernetes.io/managed-by=gpupool`
whose name is the tenant's old name (`legacy_namespace_for`), which no other tenant of the
same pass shares, is adopted (annotated). The built-in `edit`/`view` bindings gpupool made
then (`LEGACY_BINDINGS`) are deleted."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from gpupool.engines.kubernetes.client import KubeError, ObjectApi
from gpupool.engines.kubernetes.manifests import (
    MANAGED_BY,
    TENANT,
    legacy_namespace_for,
    namespace_for,
    namespace_manifest,
)
from gpupool.engines.kubernetes.tenancy import (
    LEGACY_BINDINGS,
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
    "Role": ("rules",),
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
    for part in ("labels", "annotations"):
        want = desired["metadata"].get(part) or {}
        if not _contains(existing.get("metadata", {}).get(part) or {}, want):
            patch.setdefault("metadata", {})[part] = want
    for f in _OWNED[desired["kind"]]:
        if not _contains(existing.get(f), desired[f]):
            patch[f] = desired[f]
    return patch or None


class NamespaceRefused(Exception):
    """A tenant's namespace exists and is not that tenant's; the message says whose and what
    to do."""


def namespace_owner_problem(
    namespace: dict[str, Any], tenant: str, prefix: str, legacy_ok: bool = True
) -> str | None:
    """Why `namespace` (as read) is not `tenant`'s (None: it is, or may be adopted; see the
    module docstring)."""
    meta = namespace.get("metadata") or {}
    name = meta.get("name", "")
    owner = (meta.get("annotations") or {}).get(TENANT)
    if owner == tenant:
        return None
    if owner is not None:
        return f"namespace {name} belongs to gpupool tenant {owner!r} (annotation {TENANT})"
    ours = (meta.get("labels") or {}).get(MANAGED_BY) == "gpupool"
    if ours and legacy_ok and name == legacy_namespace_for(tenant, prefix):
        return None
    return (
        f"namespace {name} exists and is not marked as a gpupool tenant's (no {TENANT} "
        "annotation)"
        + (": its old-style name is shared by several tenants" if ours and not legacy_ok else "")
    )


def ensure_namespace_of(
    objects: ObjectApi, ns: str, tenant: str, pod_security: str = "restricted"
) -> str | None:
    """Make `tenant`'s namespace `ns` if missing; if it exists, why it is not the tenant's
    (None: it is, by its annotation). For the executor, before it creates a pod there (the
    tenancy sync adopts upgraded namespaces first). Raises KubeError."""
    have = objects.get("Namespace", "", ns)
    if have is None:
        try:
            objects.create(namespace_manifest(ns, tenant, pod_security))
        except KubeError as e:
            if e.status != 409:
                raise
            have = objects.get("Namespace", "", ns)
    owner = (((have or {}).get("metadata") or {}).get("annotations") or {}).get(TENANT)
    if have is None or owner == tenant:
        return None
    return (
        f"namespace {ns} is not marked as tenant {tenant}'s (annotation {TENANT}: "
        f"{owner or 'none'}), so gpupool starts no pod there; the tenancy sync says why "
        "(event kubernetes.tenancy_refused) and what to do"
    )


class TenancySync:
    """Applies `tenant_objects` of each spec through `ObjectApi`; counts its writes.
    `pod_security`: the Pod Security Admission level the namespaces enforce."""

    def __init__(
        self,
        objects: ObjectApi,
        prefix: str,
        settings: TenancySettings,
        pod_security: str = "restricted",
    ):
        self.objects, self.prefix, self.settings = objects, prefix, settings
        self.pod_security = pod_security
        self.writes = 0
        #: "tenant: why" of each tenant whose namespace was refused in the last `apply_all`
        self.refused: list[str] = []

    def apply(self, spec: TenantSpec, legacy_ok: bool = True) -> None:
        """Bring one tenant's objects up to date. Raises NamespaceRefused (nothing applied)
        and KubeError. `legacy_ok`: an unmarked gpupool namespace of the tenant's old name
        may be adopted (no other tenant has that old name)."""
        ns = namespace_for(spec.tenant, self.prefix)
        have_ns = self.objects.get("Namespace", "", ns)
        if have_ns is not None:
            problem = namespace_owner_problem(have_ns, spec.tenant, self.prefix, legacy_ok)
            if problem is not None:
                raise NamespaceRefused(
                    f"{problem}: gpupool applies none of tenant {spec.tenant!r}'s objects "
                    "(RoleBindings, NetworkPolicies, quota, PVCs) there and starts none of its "
                    f"pods. If it is {spec.tenant!r}'s, annotate it {TENANT}={spec.tenant}; "
                    "otherwise delete or rename it, or give gpupool another --namespace-prefix"
                )
        for obj in tenant_objects(spec, self.prefix, self.settings, self.pod_security):
            kind, meta = obj["kind"], obj["metadata"]
            where = meta.get("namespace", "")
            have = have_ns if kind == "Namespace" else self.objects.get(kind, where, meta["name"])
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
                    self.objects.patch(kind, where, meta["name"], patch)
                    self.writes += 1
        for name in LEGACY_BINDINGS:  # gpupool's old bindings to `edit` / `view`
            self._remove_ours("RoleBinding", ns, name)
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
        """Apply every tenant; returns the errors (tenant: message) of those that failed on
        an API error (worth retrying). Refused namespaces go to `refused` instead (logged)."""
        errors = []
        self.refused = []
        legacy = Counter(legacy_namespace_for(s.tenant, self.prefix) for s in specs)
        for spec in specs:
            try:
                self.apply(spec, legacy[legacy_namespace_for(spec.tenant, self.prefix)] == 1)
            except NamespaceRefused as e:
                log.warning("tenancy objects of %s refused: %s", spec.tenant, e)
                self.refused.append(f"{spec.tenant}: {e}")
            except KubeError as e:
                log.warning("tenancy objects of %s: %s", spec.tenant, e)
                errors.append(f"{spec.tenant}: {e}")
        return errors
