"""The Helm chart's limits on what a compromised gpupool server or tenant pod reaches (review
F7): the ValidatingAdmissionPolicy that confines the server's ServiceAccount to gpupool's
tenant namespaces (its CEL evaluated here with cel-python on the requests Kubernetes would
send), and the NetworkPolicies of the server and PostgreSQL. Not run against a real API
server: docs/kubernetes.md says so."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.test_helm_chart import by_kind, one, render

SA = "system:serviceaccount:gpupool:gp-gpupool"
PSA = "pod-security.kubernetes.io/enforce"


def _policy(helm: str, values: dict[str, str] | None = None) -> dict:
    return one(render(helm, values or {}), "ValidatingAdmissionPolicy")


def test_the_policy_matches_the_servers_writes_and_is_bound_to_deny(helm):
    objs = render(helm, {})
    policy = one(objs, "ValidatingAdmissionPolicy")
    binding = one(objs, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {
        "policyName": "gp-gpupool-tenant-namespaces-only",
        "validationActions": ["Deny"],
    }
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    (cond,) = spec["matchConditions"]
    assert cond["expression"] == f'request.userInfo.username == "{SA}"'
    matched = {
        (group, res)
        for rule in spec["matchConstraints"]["resourceRules"]
        for group in rule["apiGroups"]
        for res in rule["resources"]
    }
    # every kind the engine creates, patches or deletes (tests/kubernetes/rbac_rules.py),
    # but those its RBAC already names one by one (its own webhook's caBundle: resourceNames)
    from tests.kubernetes.rbac_rules import ENGINE_RULES

    written = {
        (g, r)
        for _s, g, r, verb, names in ENGINE_RULES
        if verb in ("create", "patch", "delete") and not names
    }
    assert written <= matched, written - matched
    assert all(
        set(r["operations"]) == {"CREATE", "UPDATE", "DELETE"}
        for r in spec["matchConstraints"]["resourceRules"]
    )


def test_no_policy_where_it_is_off_or_rbac_is_bound_per_namespace(helm):
    for values in (
        {"rbac.confineToTenantNamespaces": "false"},
        {"rbac.tenantNamespaces[0]": "team-a"},  # only there; the admin named them
        {"rbac.create": "false"},
    ):
        objs = render(helm, values)
        assert not by_kind(objs, "ValidatingAdmissionPolicy"), values
        assert not by_kind(objs, "ValidatingAdmissionPolicyBinding"), values


def _ns(name: str, **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": labels}}


TENANT_NS = _ns("gpupool-lab", **{"gpupool.dev/tenant": "lab", PSA: "restricted"})
KUBE_SYSTEM = _ns("kube-system", **{"kubernetes.io/metadata.name": "kube-system"})


def _request(resource: str, operation: str) -> dict:
    return {
        "resource": {"group": "", "version": "v1", "resource": resource},
        "operation": operation,
        "userInfo": {"username": SA},
    }


#: (what, resource, operation, object, oldObject, namespaceObject, allowed)
CASES: list[tuple[str, str, str, Any, Any, Any, bool]] = [
    ("pod in a tenant namespace", "pods", "CREATE", {}, None, TENANT_NS, True),
    ("pod in kube-system", "pods", "CREATE", {}, None, KUBE_SYSTEM, False),
    ("RoleBinding in kube-system", "rolebindings", "CREATE", {}, None, KUBE_SYSTEM, False),
    ("Secret deleted in the release's namespace", "secrets", "DELETE", None, {},
     _ns("gpupool", **{"kubernetes.io/metadata.name": "gpupool"}), False),
    ("a namespace named gpupool-* but not labelled", "pods", "CREATE", {}, None,
     _ns("gpupool-x"), False),
    ("a labelled namespace outside the prefix", "pods", "CREATE", {}, None,
     _ns("team-a", **{"gpupool.dev/tenant": "a"}), False),
    ("tenant namespace created", "namespaces", "CREATE", TENANT_NS, None, None, True),
    ("tenant namespace patched", "namespaces", "UPDATE", TENANT_NS, TENANT_NS, None, True),
    ("baseline escape hatch", "namespaces", "UPDATE",
     _ns("gpupool-lab", **{"gpupool.dev/tenant": "lab", PSA: "baseline"}), TENANT_NS, None,
     True),
    ("Pod Security turned off", "namespaces", "UPDATE",
     _ns("gpupool-lab", **{"gpupool.dev/tenant": "lab", PSA: "privileged"}), TENANT_NS, None,
     False),
    ("Pod Security label dropped", "namespaces", "UPDATE",
     _ns("gpupool-lab", **{"gpupool.dev/tenant": "lab"}), TENANT_NS, None, False),
    ("kube-system labelled as a tenant", "namespaces", "UPDATE",
     _ns("kube-system", **{"gpupool.dev/tenant": "x", PSA: "restricted"}), KUBE_SYSTEM, None,
     False),
    ("namespace outside the prefix created", "namespaces", "CREATE",
     _ns("evil", **{"gpupool.dev/tenant": "x", PSA: "restricted"}), None, None, False),
    ("tenant namespace deleted", "namespaces", "DELETE", None, TENANT_NS, None, False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("what", "resource", "operation", "obj", "old", "ns", "allowed"),
    CASES,
    ids=[c[0] for c in CASES],
)
def test_the_policy_admits_only_gpupools_tenant_namespaces(
    helm, what, resource, operation, obj, old, ns, allowed
):
    celpy = pytest.importorskip("celpy")
    env = celpy.Environment()
    activation = {
        "request": celpy.json_to_cel(_request(resource, operation)),
        "object": celpy.json_to_cel(obj),
        "oldObject": celpy.json_to_cel(old),
        "namespaceObject": celpy.json_to_cel(ns),
    }
    spec = _policy(helm)["spec"]
    (cond,) = spec["matchConditions"]
    assert bool(env.program(env.compile(cond["expression"])).evaluate(activation))
    results = [
        bool(env.program(env.compile(v["expression"])).evaluate(activation))
        for v in spec["validations"]
    ]
    assert all(results) is allowed, results


def test_postgresql_admits_only_the_server_and_the_server_only_its_peers(helm):
    objs = render(helm, {})
    policies = {p["metadata"]["name"]: p["spec"] for p in by_kind(objs, "NetworkPolicy")}
    server = {
        "app.kubernetes.io/name": "gpupool",
        "app.kubernetes.io/instance": "gp",
        "app.kubernetes.io/component": "server",
    }
    pg = policies["gp-gpupool-postgresql"]
    assert pg["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "postgresql"
    assert pg["policyTypes"] == ["Ingress"]
    assert pg["ingress"] == [
        {
            "from": [{"podSelector": {"matchLabels": server}}],
            "ports": [{"port": 5432, "protocol": "TCP"}],
        }
    ]
    srv = policies["gp-gpupool-server"]
    assert srv["podSelector"]["matchLabels"] == server
    rule, webhook = srv["ingress"]  # the webhook port: kube-apiserver, from anywhere
    assert webhook == {"ports": [{"port": "webhook", "protocol": "TCP"}]}
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]
    peers = rule["from"]
    assert peers[0] == {
        "podSelector": {"matchLabels": {**server, "app.kubernetes.io/component": "agent"}}
    }
    names = [
        p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] for p in peers[1:]
    ]
    assert names == ["ingress-nginx", "jupyterhub"]
    # the pods the policies select carry those labels
    labels = one(objs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert server.items() <= labels.items()
    agent = one(objs, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert agent["app.kubernetes.io/component"] == "agent"
    assert pg["podSelector"]["matchLabels"].items() <= (
        one(objs, "StatefulSet")["spec"]["template"]["metadata"]["labels"].items()
    )
    assert "gp-gpupool-postgresql" not in {
        p["metadata"]["name"] for p in by_kind(render(helm, {"postgresql.enabled": "false",
        "externalDatabase.url": "postgresql+psycopg://a:b@db:5432/g"}), "NetworkPolicy")
    }  # fmt: skip
    assert not by_kind(render(helm, {"networkPolicy.enabled": "false"}), "NetworkPolicy")
