"""Tenants never share a namespace, and what members may do there (security review F3, F4),
through the engine against the fake API server:

- `alpha/lab` and `alpha-lab` (one namespace before issue 29) get two, each marked with its
  exact tenant, and each keeps its own bindings after both are synced;
- a namespace marked for another tenant, or for nobody, is refused: nothing of the tenant is
  applied there, the refusal is an event, the other tenants are synced; the executor starts
  no pod there either;
- a namespace of gpupool before issue 29 is adopted only when its old name is unambiguous,
  and the old bindings to `edit`/`view` are deleted;
- members get gpupool's own Roles: no ClusterRole, no Secrets, no pods/exec or attach, no pod
  create; viewers and members no pods/log. The fake API server refuses Roles that grant more
  than the engine holds, as Kubernetes' escalation prevention does.
"""

from __future__ import annotations

import pytest

from gpupool.domain import Membership, Role, Tenant, TenantTree
from gpupool.engines.common.engine import EngineEnv
from gpupool.engines.common.executor import StartError
from gpupool.engines.kubernetes import tenancy as t
from gpupool.engines.kubernetes.client import KubeError, ObjectApi
from gpupool.engines.kubernetes.engine import KubeOptions, KubernetesEngine
from gpupool.engines.kubernetes.executor import KubernetesExecutor
from gpupool.engines.kubernetes.manifests import TENANT, namespace_for
from gpupool.engines.kubernetes.tenancy import TenancySettings
from tests.kubernetes.rbac_rules import ENGINE_RULES

RBAC = "rbac.authorization.k8s.io"


def _engine(kube, clock, events: list | None = None) -> KubernetesEngine:
    engine = KubernetesEngine(KubeOptions(tenancy=TenancySettings()), api_client=kube.client())

    def record(kind: str, message: str, data: dict | None = None) -> None:
        if events is not None:
            events.append((kind, message))

    engine.open(EngineEnv(clock, record=record))
    return engine


def _objects_in(kube, ns: str) -> dict[str, list[str]]:
    return {
        res: sorted(name for (ons, name) in store if ons == ns)
        for res, store in kube.objects.items()
        if any(ons == ns for ons, _ in store)
    }


def _subjects(kube, ns: str, binding: str) -> list[str]:
    return [s["name"] for s in kube.objects["rolebindings"][(ns, binding)].get("subjects") or []]


TREE = TenantTree([Tenant("alpha"), Tenant("alpha/lab"), Tenant("alpha-lab")])
MEMBERS = [
    Membership("ann", "alpha/lab", Role.TENANT_ADMIN),
    Membership("amy", "alpha/lab", Role.MEMBER),
    Membership("bea", "alpha-lab", Role.TENANT_ADMIN),
    Membership("bob", "alpha-lab", Role.VIEWER),
]


def test_tenants_whose_old_names_collide_get_two_namespaces_and_keep_their_bindings(kube, clock):
    engine = _engine(kube, clock)
    engine.sync_tenants(TREE, MEMBERS)
    engine.sync_tenants(TREE, MEMBERS)  # both synced, twice: nobody overwrites the other
    lab, dash = namespace_for("alpha/lab"), namespace_for("alpha-lab")
    assert lab != dash and {lab, dash} <= set(kube.namespaces)
    assert dash == "gpupool-alpha-lab"  # a one-segment name stays readable
    assert kube.namespaces[lab]["metadata"]["annotations"][TENANT] == "alpha/lab"
    assert kube.namespaces[dash]["metadata"]["annotations"][TENANT] == "alpha-lab"
    assert _subjects(kube, lab, "gpupool-tenant-admin") == ["ann"]
    assert _subjects(kube, lab, "gpupool-member") == ["amy"]
    assert _subjects(kube, dash, "gpupool-tenant-admin") == ["bea"]
    assert _subjects(kube, dash, "gpupool-viewer") == ["bob"]
    assert _subjects(kube, dash, "gpupool-member") == []
    pvcs = kube.objects["persistentvolumeclaims"]
    assert {n for ns, n in pvcs if ns == lab} == {"home-ann", "home-amy"}
    assert {n for ns, n in pvcs if ns == dash} == {"home-bea", "home-bob"}


@pytest.mark.parametrize(
    ("owner", "labels", "words"),
    [
        ("bravo", {}, "belongs to gpupool tenant 'bravo'"),
        (None, {}, "not marked as a gpupool tenant's"),
        (None, {"team": "x"}, "not marked as a gpupool tenant's"),
    ],
)
def test_sync_refuses_a_namespace_of_another_tenant_or_of_nobody(kube, clock, owner, labels, words):
    ns = namespace_for("lab")
    kube.add_namespace(ns, owner, **labels)
    before = _objects_in(kube, ns)
    events: list = []
    engine = _engine(kube, clock, events)
    tree = TenantTree([Tenant("lab"), Tenant("solo")])
    members = [Membership("ann", "lab", Role.TENANT_ADMIN), Membership("sam", "solo", Role.MEMBER)]
    engine.sync_tenants(tree, members)
    assert _objects_in(kube, ns) == before  # no binding, policy, quota or PVC of `lab`
    assert kube.namespaces[ns]["metadata"].get("annotations", {}).get(TENANT) == owner
    (kind, message), *rest = events
    assert kind == "kubernetes.tenancy_refused" and not rest
    assert words in message and f"annotate it {TENANT}=lab" in message
    # the other tenant is synced all the same
    assert _subjects(kube, namespace_for("solo"), "gpupool-member") == ["sam"]
    # a second pass retries (the admin may fix it) but reports the same refusal once
    engine.sync_tenants(tree, members)
    assert len(events) == 1
    # the admin marks it as lab's: the next pass applies lab's objects
    kube.namespaces[ns]["metadata"]["annotations"] = {TENANT: "lab"}
    engine.sync_tenants(tree, members)
    assert _subjects(kube, ns, "gpupool-tenant-admin") == ["ann"]


def test_the_executor_starts_no_pod_in_a_namespace_not_the_tenants(kube, api, clock):
    from gpupool.domain import Request, Workload

    kube.add_namespace(namespace_for("lab"), "bravo")
    ex = KubernetesExecutor(api, clock)
    work = Workload("w1", "lab", "ann", Request(), command=("true",))
    with pytest.raises(StartError, match="not marked as tenant lab's"):
        ex.start(work, None)
    assert kube.pods_of() == []


def _legacy_namespace(kube, name: str, old_label: str) -> None:
    """A namespace and bindings as gpupool before issue 29 made them."""
    kube.add_namespace(name, None, **{"app.kubernetes.io/managed-by": "gpupool", TENANT: old_label})
    for binding, role in (("gpupool-edit", "edit"), ("gpupool-view", "view")):
        kube.objects["rolebindings"][(name, binding)] = {
            "apiVersion": f"{RBAC}/v1",
            "kind": "RoleBinding",
            "metadata": {
                "name": binding,
                "namespace": name,
                "labels": {"app.kubernetes.io/managed-by": "gpupool"},
            },
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": RBAC, "kind": "User", "name": "ann"}],
        }


def test_an_old_namespace_is_adopted_when_unambiguous_and_its_edit_view_bindings_go(kube, clock):
    _legacy_namespace(kube, "gpupool-lab", "lab")
    engine = _engine(kube, clock)
    engine.sync_tenants(TenantTree([Tenant("lab")]), [Membership("ann", "lab", Role.MEMBER)])
    meta = kube.namespaces["gpupool-lab"]["metadata"]
    assert meta["annotations"][TENANT] == "lab"
    assert meta["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    rbs = kube.objects["rolebindings"]
    assert ("gpupool-lab", "gpupool-edit") not in rbs and ("gpupool-lab", "gpupool-view") not in rbs
    assert _subjects(kube, "gpupool-lab", "gpupool-member") == ["ann"]


def test_an_old_namespace_two_tenants_could_own_is_refused(kube, clock):
    _legacy_namespace(kube, "gpupool-alpha-lab", "alpha-lab")  # alpha/lab's or alpha-lab's?
    events: list = []
    _engine(kube, clock, events).sync_tenants(TREE, MEMBERS)
    assert "annotations" not in kube.namespaces["gpupool-alpha-lab"]["metadata"]
    assert ("gpupool-alpha-lab", "gpupool-edit") in kube.objects["rolebindings"]  # untouched
    assert "shared by several tenants" in events[0][1]
    assert _subjects(kube, namespace_for("alpha/lab"), "gpupool-tenant-admin") == ["ann"]


def _grants(role: dict) -> set[tuple[str, str, str]]:
    return {
        (g, r, v)
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def test_members_get_gpupools_own_read_only_roles(kube, clock):
    _engine(kube, clock).sync_tenants(TREE, MEMBERS)
    ns = namespace_for("alpha/lab")
    bindings = {n: b for (bns, n), b in kube.objects["rolebindings"].items() if bns == ns}
    assert set(bindings) == {"gpupool-viewer", "gpupool-member", "gpupool-tenant-admin"}
    for name, b in bindings.items():  # never the built-in view/edit (they read pods' env)
        assert b["roleRef"] == {"apiGroup": RBAC, "kind": "Role", "name": name}
    roles = {n: _grants(r) for (rns, n), r in kube.objects["roles"].items() if rns == ns}
    for name, grants in roles.items():
        for g, r, v in grants:
            assert "*" not in (g, r, v), name
            assert r not in ("secrets", "pods/exec", "pods/attach", "pods/portforward"), name
            assert not (r == "pods" and v in ("create", "update", "patch")), name
            assert v in ("get", "list", "watch"), name  # read-only
    read = {
        ("", "pods", "get"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("", "events", "list"),
    }
    assert roles["gpupool-viewer"] == read == roles["gpupool-member"]  # no pods/log
    assert roles["gpupool-tenant-admin"] == read | {("", "pods/log", "get")}


def test_the_fake_refuses_a_role_granting_more_than_the_engine_holds(kube, api, clock):
    engine = _engine(kube, clock)
    engine.sync_tenants(TenantTree([Tenant("lab")]), [])
    too_much = t.role_manifests("gpupool-lab", "lab")[0]
    too_much["metadata"]["name"] = "mine"
    too_much["rules"] = [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
    with pytest.raises(KubeError) as e:
        ObjectApi(engine.api).create(too_much)
    assert e.value.status == 403 and "not currently held" in str(e.value)
    # and gpupool's own rules are all held by the chart's rules (tests/deploy checks those)
    held = {(g, r, v) for _, g, r, v, names in ENGINE_RULES if not names}
    for rules in t.ROLE_RULES.values():
        assert _grants({"rules": rules}) <= held
