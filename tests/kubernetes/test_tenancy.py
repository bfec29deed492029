"""The tenancy objects: built by pure builders (valid for Kubernetes 1.30 and 1.34,
`kubernetes-validate --strict`) and applied by the engine over HTTP to the fake API server:
created, patched when a limit or a member changes, and a second pass makes no writes."""

from __future__ import annotations

import pytest

from gpupool.domain import Membership, Quota, Role, Tenant, TenantTree
from gpupool.engines.base import EngineEnv
from gpupool.engines.kubernetes import KubeOptions, KubernetesEngine, TenancySettings
from gpupool.engines.kubernetes import tenancy as t
from gpupool.engines.kubernetes.client import ObjectApi
from gpupool.engines.kubernetes.tenancy_sync import TenancySync

kv = pytest.importorskip("kubernetes_validate")

NS = "gpupool-physics-lab-a"


def _tree(limit_milli: int | None = 2500) -> TenantTree:
    return TenantTree(
        [
            Tenant("physics", Quota(limit_milli=8000)),
            Tenant("physics/lab-a", Quota(limit_milli=limit_milli)),
        ]
    )


MEMBERS = [
    Membership("ada", "physics/lab-a", Role.TENANT_ADMIN),
    Membership("bob", "physics/lab-a", Role.MEMBER),
    Membership("cy", "physics", Role.VIEWER),  # an ancestor's member: the subtree too
]


def _spec(limit_milli: int | None = 2500, members=MEMBERS) -> t.TenantSpec:
    (spec,) = t.tenant_specs(_tree(limit_milli), members)
    return spec


def test_spec_takes_the_smallest_limit_on_the_path_rounded_up_and_inherited_members():
    spec = _spec()
    assert spec.tenant == "physics/lab-a" and spec.gpu_limit == 3
    assert spec.members == (("ada", Role.TENANT_ADMIN), ("bob", Role.MEMBER), ("cy", Role.VIEWER))
    assert _spec(None).gpu_limit == 8  # the parent's limit still caps it
    (free,) = t.tenant_specs(TenantTree([Tenant("solo")]), [])
    assert free.gpu_limit is None


@pytest.mark.parametrize("version", ["1.30.0", "1.34.0"])
def test_every_object_is_valid(version):
    objs = t.tenant_objects(_spec(), "gpupool-", TenancySettings(home_storage_class="fast"))
    kinds = [o["kind"] for o in objs]
    assert kinds == [
        "Namespace",
        "ResourceQuota",
        "RoleBinding",
        "RoleBinding",
        "NetworkPolicy",
        "PersistentVolumeClaim",
        "PersistentVolumeClaim",
        "PersistentVolumeClaim",
    ]
    for o in objs:
        kv.validate(o, version, strict=True)


def test_validation_is_real_for_the_new_kinds():
    policy = t.network_policy_manifest(NS, "physics/lab-a")
    policy["spec"]["ingres"] = policy["spec"].pop("ingress")
    with pytest.raises(kv.ValidationError):
        kv.validate(policy, "1.34.0", strict=True)


def test_objects_say_the_right_things():
    objs = {
        (o["kind"], o["metadata"]["name"]): o
        for o in t.tenant_objects(_spec(), "gpupool-", TenancySettings())
    }
    assert objs[("ResourceQuota", "gpupool-gpus")]["spec"] == {
        "hard": {"requests.nvidia.com/gpu": "3"}
    }
    edit, view = objs[("RoleBinding", "gpupool-edit")], objs[("RoleBinding", "gpupool-view")]
    assert edit["roleRef"]["name"] == "edit" and view["roleRef"]["name"] == "view"
    assert [s["name"] for s in edit["subjects"]] == ["ada"]
    assert [s["name"] for s in view["subjects"]] == ["bob", "cy"]
    assert {s["kind"] for s in edit["subjects"] + view["subjects"]} == {"User"}
    (rule,) = objs[("NetworkPolicy", t.POLICY_NAME)]["spec"]["ingress"]
    assert rule["from"][1]["namespaceSelector"]["matchExpressions"] == [
        {"key": "gpupool.dev/tenant", "operator": "DoesNotExist"}
    ]
    home = objs[("PersistentVolumeClaim", "home-ada")]
    assert home["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert "storageClassName" not in home["spec"]  # the cluster's default class
    unlimited = t.tenant_objects(t.TenantSpec("x", None, ()), "gpupool-", TenancySettings())
    assert "ResourceQuota" not in [o["kind"] for o in unlimited]


def _writes(kube) -> list[tuple[str, str]]:
    return [(m, p) for m, p in kube.requests if m != "GET"]


def _engine(kube, clock, **tenancy):
    engine = KubernetesEngine(
        KubeOptions(tenancy=TenancySettings(**tenancy)), api_client=kube.client()
    )
    engine.open(EngineEnv(clock))
    return engine


def test_the_engine_creates_patches_and_then_only_reads(kube, clock):
    engine = _engine(kube, clock, home_storage_class="fast")
    engine.sync_tenants(_tree(), MEMBERS)
    assert kube.namespaces[NS]["metadata"]["labels"]["gpupool.dev/tenant"] == "physics-lab-a"
    quota = kube.objects["resourcequotas"][(NS, "gpupool-gpus")]
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "3"}
    rbs = kube.objects["rolebindings"]
    assert [s["name"] for s in rbs[(NS, "gpupool-view")]["subjects"]] == ["bob", "cy"]
    assert (NS, t.POLICY_NAME) in kube.objects["networkpolicies"]
    pvcs = kube.objects["persistentvolumeclaims"]
    assert sorted(n for _, n in pvcs) == ["home-ada", "home-bob", "home-cy"]
    assert pvcs[(NS, "home-ada")]["spec"]["storageClassName"] == "fast"

    # the same tenants again: nothing is even read (fingerprint)
    kube.requests.clear()
    engine.sync_tenants(_tree(), MEMBERS)
    assert kube.requests == []

    # a fresh engine (a restart) reads everything and writes nothing
    kube.requests.clear()
    _engine(kube, clock, home_storage_class="fast").sync_tenants(_tree(), MEMBERS)
    assert kube.requests and _writes(kube) == []

    # the limit changes: the quota is patched
    kube.requests.clear()
    engine.sync_tenants(_tree(4000), MEMBERS)
    assert _writes(kube) == [("PATCH", f"/api/v1/namespaces/{NS}/resourcequotas/gpupool-gpus")]
    assert quota is kube.objects["resourcequotas"][(NS, "gpupool-gpus")]
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "4"}

    # bob leaves: the view binding is patched; his home stays (it holds his files)
    kube.requests.clear()
    engine.sync_tenants(_tree(4000), [m for m in MEMBERS if m.user != "bob"])
    assert _writes(kube) == [
        ("PATCH", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings/gpupool-view")
    ]
    assert [s["name"] for s in rbs[(NS, "gpupool-view")]["subjects"]] == ["cy"]
    assert (NS, "home-bob") in pvcs

    # the tenant's own limit goes away: the parent's 8 GPUs cap it
    engine.sync_tenants(_tree(None), MEMBERS)
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "8"}


def test_unlimited_tenant_loses_its_quota(kube, clock):
    engine = _engine(kube, clock)
    tree = TenantTree([Tenant("solo", Quota(limit_milli=1000))])
    engine.sync_tenants(tree, [])
    assert ("gpupool-solo", "gpupool-gpus") in kube.quotas
    engine.sync_tenants(TenantTree([Tenant("solo")]), [])
    assert ("gpupool-solo", "gpupool-gpus") not in kube.quotas


def test_a_quota_not_made_by_gpupool_is_left_alone(kube, clock):
    engine = _engine(kube, clock)
    engine.sync_tenants(TenantTree([Tenant("solo")]), [])
    kube.add_quota("gpupool-solo", "gpupool-gpus", 2)  # an operator's own, no gpupool label
    TenancySync(ObjectApi(engine.api), "gpupool-", TenancySettings()).apply(
        t.TenantSpec("solo", None, ())
    )
    assert ("gpupool-solo", "gpupool-gpus") in kube.quotas


def test_a_failed_pass_is_retried(kube, clock):
    engine = _engine(kube, clock)
    kube.stop()
    engine.sync_tenants(TenantTree([Tenant("solo")]), [])  # no answer: not marked applied
    kube.start()
    engine.api = engine.api.__class__(kube.client())
    engine.sync_tenants(TenantTree([Tenant("solo")]), [])
    assert "gpupool-solo" in kube.namespaces


def test_what_a_real_server_adds_or_omits_is_not_a_difference():
    from gpupool.engines.kubernetes.tenancy_sync import object_patch

    (edit, view) = t.role_binding_manifests(NS, "physics/lab-a", [("bob", Role.MEMBER)])
    served = {  # the API server omits an empty list and adds its own metadata
        **edit,
        "metadata": {**edit["metadata"], "uid": "u", "resourceVersion": "9"},
    }
    del served["subjects"]
    assert object_patch(edit, served) is None
    ns = t.tenant_objects(_spec(), "gpupool-", TenancySettings())[0]
    labelled = {"kubernetes.io/metadata.name": NS, **ns["metadata"]["labels"]}
    assert object_patch(ns, {"metadata": {"name": NS, "labels": labelled}}) is None
    assert object_patch(ns, {"metadata": {"name": NS, "labels": {"x": "y"}}}) == {
        "metadata": {"labels": ns["metadata"]["labels"]}
    }
    assert object_patch(view, {**view, "subjects": []}) == {"subjects": view["subjects"]}
