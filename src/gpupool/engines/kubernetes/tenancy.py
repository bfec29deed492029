"""Pure builders of a tenant's Kubernetes objects (plain dicts, no I/O); the engine applies
them (`TenancySync`, create-or-patch) for every leaf tenant.

For a leaf tenant `a/b` in namespace `namespace_for(a/b)` (injective, `external_names`):

- the **Namespace**, labelled `gpupool.dev/tenant` (the NetworkPolicy finds tenants by it)
  and with the Pod Security Admission labels, annotated `gpupool.dev/tenant: <exact path>`
  (whose it is: `TenancySync` refuses a namespace marked for another tenant or unmarked);
- a **ResourceQuota** `gpupool-gpus`, `requests.nvidia.com/gpu` = the tenant's GPU limit
  (the smallest `limit` on its path, rounded up to whole GPUs; none when unlimited). It is a
  backstop against pods made outside gpupool, never the queue: gpupool admits within it;
- gpupool's own **Roles** `gpupool-viewer`, `gpupool-member`, `gpupool-tenant-admin`
  (`ROLE_RULES`) and a **RoleBinding** of the same name to each, subjects `kind: User` named
  by the gpupool user name (the cluster's authentication must give people the same names as
  gpupool does). Read-only: pods and events; tenant-admins also pods' logs. Never secrets,
  pods/exec, pods/attach, pod create or delete: work goes through gpupool's queue, a
  workload's `env` lives in a Secret nobody but gpupool reads. (gpupool before issue 29 bound
  the built-in `edit` and `view`; `TenancySync` deletes those bindings, `LEGACY_BINDINGS`);
- a **NetworkPolicy** `gpupool-tenant-isolation`: ingress only from the same namespace and
  from namespaces that are no tenant's (no `gpupool.dev/tenant` label: gpupool's own, the
  hub's, ingress controllers, monitoring); other tenants' namespaces are denied;
- a **NetworkPolicy** `gpupool-block-cloud-metadata` (unless `block_cloud_metadata` is off):
  egress anywhere (any address, any pod of the cluster) except the cloud metadata server
  169.254.169.254 (and AWS's IPv6 one, fd00:ec2::254), whose DNS port stays open (GKE's
  Cloud DNS answers there); it stands in for Zero-to-JupyterHub's privileged iptables init
  container, which gpupool refuses;
- a **PersistentVolumeClaim** `home-<user>` per member (every member, up front), for
  notebook homes.

Memberships of an ancestor tenant apply to its whole subtree, as in gpupool's own checks.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gpupool.domain import Membership, Role, TenantTree
from gpupool.engines.kubernetes.manifests import (
    GPU,
    MANAGED_BY,
    TENANT,
    USER,
    _dns,
    label_value,
    namespace_for,
    namespace_manifest,
)

QUOTA_NAME = "gpupool-gpus"
POLICY_NAME = "gpupool-tenant-isolation"
METADATA_POLICY_NAME = "gpupool-block-cloud-metadata"
#: the cloud metadata server (node credentials on AWS, GCP, Azure and most other clouds)
CLOUD_METADATA_IP = "169.254.169.254"
#: AWS's IPv6 address of the same server (Nitro instances with the IPv6 endpoint on)
CLOUD_METADATA_IPV6 = "fd00:ec2::254"
_RBAC = "rbac.authorization.k8s.io"
_READ_PODS: list[dict[str, Any]] = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},
]
#: gpupool's Role (and RoleBinding) of each gpupool role -> its rules. Only what the server
#: itself holds (Kubernetes' escalation prevention: it may grant no more).
ROLE_RULES: dict[str, list[dict[str, Any]]] = {
    "gpupool-viewer": _READ_PODS,
    "gpupool-member": _READ_PODS,  # their work goes through gpupool, not kubectl
    "gpupool-tenant-admin": [
        *_READ_PODS,
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    ],
}
ROLE_TO_BINDING = {
    Role.TENANT_ADMIN: "gpupool-tenant-admin",
    Role.MEMBER: "gpupool-member",
    Role.VIEWER: "gpupool-viewer",
}
#: the RoleBindings gpupool made before issue 29 (to ClusterRoles `edit` and `view`)
LEGACY_BINDINGS = ("gpupool-edit", "gpupool-view")


@dataclass(frozen=True)
class TenancySettings:
    """`home_size`: each notebook home's size; `home_storage_class`: its StorageClass
    (None: the cluster's default); `block_cloud_metadata`: keep the tenants' pods from the
    cloud metadata server (the `gpupool-block-cloud-metadata` NetworkPolicy; off: gpupool
    removes its policy, e.g. for workload identity through the metadata server)."""

    home_size: str = field(
        default="10Gi",
        metadata={
            "flag": "--home-size",
            "metavar": "SIZE",
            "help": "Size of each member's notebook-home PVC (home-<user> in the tenant's "
            "namespace).",
        },
    )
    home_storage_class: str | None = field(
        default=None,
        metadata={
            "flag": "--home-storage-class",
            "metavar": "NAME",
            "help": "StorageClass of the notebook homes (default: the cluster's default).",
        },
    )
    block_cloud_metadata: bool = field(
        default=True,
        metadata={
            "flag": "--no-block-cloud-metadata",
            "negate": True,
            "positive": "--block-cloud-metadata",
            "help": "Let tenant pods reach the cloud metadata server 169.254.169.254 (node "
            "credentials), for workloads that need it (workload identity). By default a "
            "NetworkPolicy in every tenant namespace keeps them from it (needs a CNI that "
            "enforces NetworkPolicy).",
        },
    )


@dataclass(frozen=True)
class TenantSpec:
    """What one leaf tenant needs: its GPU limit (None: unlimited) and its members' roles."""

    tenant: str
    gpu_limit: int | None
    members: tuple[tuple[str, Role], ...]


def _labels(tenant: str) -> dict[str, str]:
    return {MANAGED_BY: "gpupool", TENANT: label_value(tenant.replace("/", "-"))}


def tenant_specs(tree: TenantTree, memberships: Iterable[Membership]) -> list[TenantSpec]:
    """One spec per leaf tenant: the smallest limit on its path (milli-GPUs rounded up to
    GPUs) and every member of it or an ancestor (the strongest role wins)."""
    ms = list(memberships)
    out = []
    for leaf in tree.leaves():
        path = [leaf]
        while (parent := tree.get(path[-1]).parent) is not None:
            path.append(parent)
        limits = [tree.get(t).quota.limit_milli for t in path]
        known = [x for x in limits if x is not None]
        limit = math.ceil(min(known) / 1000) if known else None
        roles: dict[str, Role] = {}
        rank = [Role.VIEWER, Role.MEMBER, Role.TENANT_ADMIN]
        for m in ms:
            if m.tenant in path and (
                m.user not in roles or rank.index(m.role) > rank.index(roles[m.user])
            ):
                roles[m.user] = m.role
        out.append(TenantSpec(leaf, limit, tuple(sorted(roles.items()))))
    return out


def fingerprint(
    specs: Iterable[TenantSpec], prefix: str, settings: TenancySettings, pod_security: str = ""
) -> str:
    """A digest of everything the objects depend on: equal digests, nothing to apply."""
    return hashlib.sha256(
        repr((sorted(specs, key=lambda s: s.tenant), prefix, settings, pod_security)).encode()
    ).hexdigest()


def quota_manifest(namespace: str, tenant: str, gpu_limit: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": QUOTA_NAME, "namespace": namespace, "labels": _labels(tenant)},
        "spec": {"hard": {f"requests.{GPU}": str(gpu_limit)}},
    }


def role_manifests(namespace: str, tenant: str) -> list[dict[str, Any]]:
    """gpupool's three Roles (`ROLE_RULES`) in a tenant's namespace."""
    return [
        {
            "apiVersion": f"{_RBAC}/v1",
            "kind": "Role",
            "metadata": {"name": name, "namespace": namespace, "labels": _labels(tenant)},
            "rules": rules,
        }
        for name, rules in ROLE_RULES.items()
    ]


def role_binding_manifests(
    namespace: str, tenant: str, members: Iterable[tuple[str, Role]]
) -> list[dict[str, Any]]:
    """A RoleBinding to each of gpupool's Roles, always (an empty `subjects` list when no
    member has that role, so removing the last one is a patch, not a delete)."""
    subjects: dict[str, list[str]] = {name: [] for name in ROLE_RULES}
    for user, role in members:
        subjects[ROLE_TO_BINDING[role]].append(user)
    return [
        {
            "apiVersion": f"{_RBAC}/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": namespace, "labels": _labels(tenant)},
            "roleRef": {"apiGroup": _RBAC, "kind": "Role", "name": name},
            "subjects": [{"apiGroup": _RBAC, "kind": "User", "name": u} for u in sorted(users)],
        }
        for name, users in subjects.items()
    ]


def network_policy_manifest(namespace: str, tenant: str) -> dict[str, Any]:
    """Ingress from the same namespace and from every namespace without the tenant label."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": POLICY_NAME, "namespace": namespace, "labels": _labels(tenant)},
        "spec": {
            "podSelector": {},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [
                        {"podSelector": {}},
                        {
                            "namespaceSelector": {
                                "matchExpressions": [{"key": TENANT, "operator": "DoesNotExist"}]
                            }
                        },
                    ]
                }
            ],
        },
    }


def metadata_policy_manifest(namespace: str, tenant: str) -> dict[str, Any]:
    """Egress from every pod of the namespace to anything but the cloud metadata server.

    Policies add up, so this one allows what it does not block: any IPv4 or IPv6 address
    except the metadata server's, and every pod of the cluster by selector (a CNI such as
    Cilium matches pods by identity, not by `ipBlock`), DNS included. Port 53 of the
    metadata server stays open: GKE's Cloud DNS is served there (Zero-to-JupyterHub's
    `dnsPortsCloudMetadataServer` rule, on by default, does the same)."""
    dns = [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": METADATA_POLICY_NAME,
            "namespace": namespace,
            "labels": _labels(tenant),
        },
        "spec": {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [
                {
                    "to": [
                        {"ipBlock": {"cidr": "0.0.0.0/0", "except": [f"{CLOUD_METADATA_IP}/32"]}},
                        {"ipBlock": {"cidr": "::/0", "except": [f"{CLOUD_METADATA_IPV6}/128"]}},
                        {"namespaceSelector": {}},
                    ]
                },
                {"to": [{"ipBlock": {"cidr": f"{CLOUD_METADATA_IP}/32"}}], "ports": dns},
            ],
        },
    }


def home_claim_name(user: str) -> str:
    """The PVC of `user`'s notebook home: `home-<user>` as a DNS name."""
    return _dns(f"home-{user}", 253)


def home_claim_manifest(
    namespace: str, tenant: str, user: str, settings: TenancySettings
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": settings.home_size}},
    }
    if settings.home_storage_class:
        spec["storageClassName"] = settings.home_storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": home_claim_name(user),
            "namespace": namespace,
            "labels": {**_labels(tenant), USER: label_value(user)},
        },
        "spec": spec,
    }


def tenant_objects(
    spec: TenantSpec, prefix: str, settings: TenancySettings, pod_security: str = "restricted"
) -> list[dict[str, Any]]:
    """Every object of one tenant, namespace first (the rest live in it), Roles before the
    RoleBindings that name them."""
    ns = namespace_for(spec.tenant, prefix)
    objs = [namespace_manifest(ns, spec.tenant, pod_security)]
    if spec.gpu_limit is not None:
        objs.append(quota_manifest(ns, spec.tenant, spec.gpu_limit))
    objs += role_manifests(ns, spec.tenant)
    objs += role_binding_manifests(ns, spec.tenant, spec.members)
    objs.append(network_policy_manifest(ns, spec.tenant))
    if settings.block_cloud_metadata:
        objs.append(metadata_policy_manifest(ns, spec.tenant))
    objs += [home_claim_manifest(ns, spec.tenant, u, settings) for u, _ in spec.members]
    return objs
