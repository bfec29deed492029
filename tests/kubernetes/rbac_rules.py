"""The API permissions the kubernetes engine uses, one source for two checks: every request
the engine makes in tests/kubernetes must be one of them (`request_rule`, checked by the `kube`
fixture), and the Helm chart's ClusterRoles must grant exactly them (tests/deploy)."""

from __future__ import annotations

#: (ClusterRole suffix, API group, resource, verb, resourceNames): exactly the engine's calls
#: (client.py KubeApi and ObjectApi). Pods are listed in every namespace (outside GPUs), so
#: `pods: list, watch` is cluster-wide even when the rest is bound per tenant namespace.
#: No `bind` or `escalate`: the Roles gpupool makes for members (tenancy.ROLE_RULES) grant
#: only what these hold (`held`; the fake API server refuses more, as Kubernetes does).
ENGINE_RULES = {
    ("cluster", "", "nodes", "list", ()),
    ("cluster", "", "nodes", "watch", ()),
    ("cluster", "", "namespaces", "create", ()),
    ("cluster", "", "namespaces", "get", ()),
    ("cluster", "", "namespaces", "patch", ()),
    ("cluster", "", "pods", "list", ()),
    ("cluster", "", "pods", "watch", ()),
    ("workloads", "", "pods", "get", ()),
    ("workloads", "", "pods", "create", ()),
    ("workloads", "", "pods", "delete", ()),
    ("workloads", "", "pods/log", "get", ()),
    ("workloads", "", "events", "list", ()),
    ("workloads", "", "services", "create", ()),
    ("workloads", "", "services", "delete", ()),
    ("workloads", "", "resourcequotas", "get", ()),
    ("workloads", "", "resourcequotas", "create", ()),
    ("workloads", "", "resourcequotas", "patch", ()),
    ("workloads", "", "resourcequotas", "delete", ()),
    ("workloads", "", "persistentvolumeclaims", "get", ()),
    ("workloads", "", "persistentvolumeclaims", "create", ()),
    ("workloads", "", "secrets", "create", ()),
    ("workloads", "", "secrets", "patch", ()),
    ("workloads", "", "secrets", "delete", ()),
    ("workloads", "rbac.authorization.k8s.io", "roles", "get", ()),
    ("workloads", "rbac.authorization.k8s.io", "roles", "create", ()),
    ("workloads", "rbac.authorization.k8s.io", "roles", "patch", ()),
    ("workloads", "rbac.authorization.k8s.io", "rolebindings", "get", ()),
    ("workloads", "rbac.authorization.k8s.io", "rolebindings", "create", ()),
    ("workloads", "rbac.authorization.k8s.io", "rolebindings", "patch", ()),
    ("workloads", "rbac.authorization.k8s.io", "rolebindings", "delete", ()),
    ("workloads", "networking.k8s.io", "networkpolicies", "get", ()),
    ("workloads", "networking.k8s.io", "networkpolicies", "create", ()),
    ("workloads", "networking.k8s.io", "networkpolicies", "patch", ()),
    ("workloads", "networking.k8s.io", "networkpolicies", "delete", ()),
    # Kubernetes-native work (native.py): queued Pods and Jobs are found by label across
    # namespaces, released by a patch, stopped by delete or suspend; Events say why
    ("cluster", "batch", "jobs", "list", ()),
    ("cluster", "batch", "jobs", "watch", ()),
    ("workloads", "", "pods", "patch", ()),
    ("workloads", "batch", "jobs", "get", ()),
    ("workloads", "batch", "jobs", "patch", ()),
    ("workloads", "", "events", "create", ()),
    # node pools (issue 34, nodepools.py): ProvisioningRequests with their PodTemplates in
    # the tenants' namespaces, found again in every namespace after a restart; without the
    # API, placeholder pods (pods: create, delete above) of the chart's PriorityClass
    ("cluster", "autoscaling.x-k8s.io", "provisioningrequests", "list", ()),
    ("workloads", "autoscaling.x-k8s.io", "provisioningrequests", "create", ()),
    ("workloads", "autoscaling.x-k8s.io", "provisioningrequests", "delete", ()),
    ("workloads", "", "podtemplates", "create", ()),
    ("workloads", "", "podtemplates", "delete", ()),
    # the caBundle of gpupool's own webhook, and no other (resourceNames)
    (
        "cluster",
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "get",
        ("gpupool",),
    ),
    (
        "cluster",
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "patch",
        ("gpupool",),
    ),
}


_VERBS = {"WATCH": "watch", "POST": "create", "PATCH": "patch", "DELETE": "delete", "PUT": "update"}


def request_rule(method: str, path: str) -> tuple[str, str, str, str]:
    """(scope, group, resource, verb) of one API request; scope `cluster` for cluster-scoped
    objects and all-namespace lists, `workloads` for objects in a namespace."""
    parts = [p for p in path.split("/") if p]
    if parts[0] == "api":
        group, rest = "", parts[2:]
    else:
        group, rest = parts[1], parts[3:]
    if rest[0] == "namespaces" and len(rest) >= 3:
        ns_rest = rest[2:]
        resource = ns_rest[0] + ("/" + ns_rest[2] if len(ns_rest) > 2 else "")
        item = len(ns_rest) > 1
        scope = "workloads"
    else:
        resource, item, scope = rest[0], len(rest) > 1, "cluster"
    verb = _VERBS.get(method) or ("get" if item else "list")
    return scope, group, resource, verb


def allowed(method: str, path: str) -> bool:
    return request_rule(method, path) in {r[:4] for r in ENGINE_RULES}


def held(group: str, resource: str, verb: str) -> bool:
    """Whether the engine's rules hold `verb` on `resource` (any namespace, all names): what
    Kubernetes' RBAC escalation check asks of a Role or RoleBinding the engine writes."""
    return any(r[1:4] == (group, resource, verb) and not r[4] for r in ENGINE_RULES)
