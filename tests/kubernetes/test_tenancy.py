"""The tenancy objects: built by pure builders (valid for Kubernetes 1.30 and 1.34,
`kubernetes-validate --strict`) and applied by the engine over HTTP to the fake API server:
created, patched when a limit or a member changes, and a second pass makes no writes; the
metadata-blocking NetworkPolicy follows `block_cloud_metadata` (made, removed, made again)."""

from __future__ import annotations

import pytest

from gpupool.domain import Membership, Quota, Role, Tenant, TenantTree
from gpupool.engines.common.engine import EngineEnv
from gpupool.engines.kubernetes import tenancy as t
from gpupool.engines.kubernetes.client import ObjectApi
from gpupool.engines.kubernetes.engine import KubeOptions, KubernetesEngine
from gpupool.engines.kubernetes.manifests import namespace_for
from gpupool.engines.kubernetes.tenancy import TenancySettings
from gpupool.engines.kubernetes.tenancy_sync import TenancySync

kv = pytest.importorskip("kubernetes_validate")

NS = namespace_for("physics/lab-a")  # gpupool-physics-lab-a-h<hash>: injective


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
        "Role",
        "Role",
        "Role",
        "RoleBinding",
        "RoleBinding",
        "RoleBinding",
        "NetworkPolicy",
        "NetworkPolicy",
        "PersistentVolumeClaim",
        "PersistentVolumeClaim",
        "PersistentVolumeClaim",
    ]
    for o in objs:
        kv.validate(o, version, strict=True)
    off = TenancySettings(block_cloud_metadata=False)
    assert [o["metadata"]["name"] for o in t.tenant_objects(_spec(), "gpupool-", off)][8:10] == [
        t.POLICY_NAME,
        "home-ada",
    ]


def test_validation_is_real_for_the_new_kinds():
    policy = t.network_policy_manifest(NS, "physics/lab-a")
    policy["spec"]["ingres"] = policy["spec"].pop("ingress")
    with pytest.raises(kv.ValidationError):
        kv.validate(policy, "1.34.0", strict=True)
    egress = t.metadata_policy_manifest(NS, "physics/lab-a")
    egress["spec"]["egress"][0]["to"][0]["ipBlock"]["excepts"] = ["169.254.169.254/32"]
    with pytest.raises(kv.ValidationError):
        kv.validate(egress, "1.34.0", strict=True)


def test_the_metadata_policy_allows_all_egress_but_the_metadata_server():
    policy = t.metadata_policy_manifest(NS, "physics/lab-a")
    assert policy["metadata"]["name"] == "gpupool-block-cloud-metadata"
    assert policy["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpupool"
    spec = policy["spec"]
    # every pod of the namespace, egress only: the ingress policy stays as it was
    assert spec["podSelector"] == {} and spec["policyTypes"] == ["Egress"]
    anywhere, dns = spec["egress"]
    assert "ports" not in anywhere  # any port
    assert anywhere["to"] == [
        {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}},
        {"ipBlock": {"cidr": "::/0", "except": ["fd00:ec2::254/128"]}},
        {"namespaceSelector": {}},  # every pod of the cluster (CNIs that skip ipBlock for pods)
    ]
    # the metadata server's DNS port stays open (GKE's Cloud DNS), as in Zero-to-JupyterHub
    assert dns == {
        "to": [{"ipBlock": {"cidr": "169.254.169.254/32"}}],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }


def test_the_docs_show_the_policy_gpupool_makes():
    from pathlib import Path

    import yaml

    docs = (Path(__file__).parents[2] / "docs" / "kubernetes.md").read_text()
    section = docs.split("## Cloud metadata", 1)[1]
    shown = yaml.safe_load(section.split("```yaml", 1)[1].split("```", 1)[0])
    made = t.metadata_policy_manifest("gpupool-x", "x")
    assert shown["metadata"]["name"] == made["metadata"]["name"]
    assert shown["spec"] == made["spec"]


def _allows(policy: dict, address: str, port: int) -> bool:
    """Whether an egress rule of `policy` admits `address:port` by its ipBlocks (what a
    CNI matching ipBlocks does for an address outside the cluster's pods)."""
    import ipaddress

    ip = ipaddress.ip_address(address)
    for rule in policy["spec"]["egress"]:
        ports = [p["port"] for p in rule.get("ports", [])]
        if ports and port not in ports:
            continue
        for peer in rule["to"]:
            block = peer.get("ipBlock")
            if block is None:
                continue
            net = ipaddress.ip_network(block["cidr"])
            if (
                ip.version == net.version
                and ip in net
                and not any(ip in ipaddress.ip_network(e) for e in block.get("except", []))
            ):
                return True
    return False


@pytest.mark.parametrize(
    ("address", "port", "allowed"),
    [
        ("169.254.169.254", 80, False),  # the metadata API: node credentials
        ("169.254.169.254", 443, False),
        ("fd00:ec2::254", 80, False),  # AWS's IPv6 metadata endpoint
        ("169.254.169.254", 53, True),  # DNS on it (GKE Cloud DNS)
        ("169.254.169.253", 80, True),  # only the one address is blocked
        ("169.254.20.10", 53, True),  # NodeLocal DNSCache's link-local address
        ("10.96.0.10", 53, True),  # the cluster DNS Service
        ("10.0.3.7", 8081, True),  # the hub, other pods by address
        ("140.82.112.3", 443, True),  # the internet
        ("2606:4700::1111", 443, True),
    ],
)
def test_what_the_metadata_policy_lets_through(address, port, allowed):
    assert _allows(t.metadata_policy_manifest(NS, "t"), address, port) is allowed


def test_objects_say_the_right_things():
    objs = {
        (o["kind"], o["metadata"]["name"]): o
        for o in t.tenant_objects(_spec(), "gpupool-", TenancySettings())
    }
    assert objs[("ResourceQuota", "gpupool-gpus")]["spec"] == {
        "hard": {"requests.nvidia.com/gpu": "3"}
    }
    bindings = {n: objs[("RoleBinding", n)] for n in t.ROLE_RULES}
    for name, b in bindings.items():  # gpupool's own Role of the same name, never edit/view
        assert b["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": name,
        }
        assert {s["kind"] for s in b["subjects"]} == {"User"}
    assert [s["name"] for s in bindings["gpupool-tenant-admin"]["subjects"]] == ["ada"]
    assert [s["name"] for s in bindings["gpupool-member"]["subjects"]] == ["bob"]
    assert [s["name"] for s in bindings["gpupool-viewer"]["subjects"]] == ["cy"]
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
    assert [s["name"] for s in rbs[(NS, "gpupool-member")]["subjects"]] == ["bob"]
    assert [s["name"] for s in rbs[(NS, "gpupool-viewer")]["subjects"]] == ["cy"]
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
        ("PATCH", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings/gpupool-member")
    ]
    assert rbs[(NS, "gpupool-member")].get("subjects") in (None, [])
    assert (NS, "home-bob") in pvcs

    # the tenant's own limit goes away: the parent's 8 GPUs cap it
    engine.sync_tenants(_tree(None), MEMBERS)
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "8"}


def test_the_metadata_policy_follows_the_setting(kube, clock):
    key = (NS, t.METADATA_POLICY_NAME)
    policies = kube.objects["networkpolicies"]
    # a new tenant: its namespace gets both policies
    _engine(kube, clock).sync_tenants(_tree(), MEMBERS)
    assert kube.namespaces[NS] and key in policies and (NS, t.POLICY_NAME) in policies
    assert policies[key]["spec"] == t.metadata_policy_manifest(NS, "physics/lab-a")["spec"]

    # someone edits it (opens the metadata server): the next pass puts it back
    policies[key]["spec"]["egress"] = [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]}]
    kube.requests.clear()
    _engine(kube, clock).sync_tenants(_tree(), MEMBERS)
    path = f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies"
    assert _writes(kube) == [("PATCH", f"{path}/{t.METADATA_POLICY_NAME}")]
    assert policies[key]["spec"]["egress"][0]["to"][0]["ipBlock"]["except"] == [
        "169.254.169.254/32"
    ]

    # the admin turns it off: removed, the isolation policy stays; a second pass only reads
    kube.requests.clear()
    off = _engine(kube, clock, block_cloud_metadata=False)
    off.sync_tenants(_tree(), MEMBERS)
    assert _writes(kube) == [("DELETE", f"{path}/{t.METADATA_POLICY_NAME}")]
    assert key not in policies and (NS, t.POLICY_NAME) in policies
    kube.requests.clear()
    _engine(kube, clock, block_cloud_metadata=False).sync_tenants(_tree(), MEMBERS)
    assert kube.requests and _writes(kube) == []

    # and on again: made again
    kube.requests.clear()
    _engine(kube, clock).sync_tenants(_tree(), MEMBERS)
    assert _writes(kube) == [("POST", path)]
    assert policies[key]["spec"]["policyTypes"] == ["Egress"]


def test_an_egress_policy_not_made_by_gpupool_is_left_alone(kube, clock):
    engine = _engine(kube, clock, block_cloud_metadata=False)
    engine.sync_tenants(TenantTree([Tenant("solo")]), [])
    mine = t.metadata_policy_manifest("gpupool-solo", "solo")
    del mine["metadata"]["labels"]  # an operator's own, under the same name
    ObjectApi(engine.api).create(mine)
    TenancySync(
        ObjectApi(engine.api), "gpupool-", TenancySettings(block_cloud_metadata=False)
    ).apply(t.TenantSpec("solo", None, ()))
    assert ("gpupool-solo", t.METADATA_POLICY_NAME) in kube.objects["networkpolicies"]


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

    (empty, bobs, _) = t.role_binding_manifests(NS, "physics/lab-a", [("bob", Role.MEMBER)])
    served = {  # the API server omits an empty list and adds its own metadata
        **empty,
        "metadata": {**empty["metadata"], "uid": "u", "resourceVersion": "9"},
    }
    del served["subjects"]
    assert object_patch(empty, served) is None
    ns = t.tenant_objects(_spec(), "gpupool-", TenancySettings())[0]
    labelled = {"kubernetes.io/metadata.name": NS, **ns["metadata"]["labels"]}
    mark = {"gpupool.dev/tenant": "physics/lab-a"}
    assert (
        object_patch(ns, {"metadata": {"name": NS, "labels": labelled, "annotations": mark}})
        is None
    )
    assert object_patch(
        ns, {"metadata": {"name": NS, "labels": {"x": "y"}, "annotations": mark}}
    ) == {"metadata": {"labels": ns["metadata"]["labels"]}}
    assert object_patch(bobs, {**bobs, "subjects": []}) == {"subjects": bobs["subjects"]}
