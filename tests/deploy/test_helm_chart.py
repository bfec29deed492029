"""The Helm chart deploy/helm/gpupool: `helm lint`, `helm template` with value combinations,
every rendered object validated with kubernetes-validate --strict (Kubernetes 1.30 and 1.34),
and what the objects say (RBAC exactly what the kubernetes engine uses, probes, secrets)."""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy.conftest import CHART, KUBE_VERSIONS
from tests.kubernetes.rbac_rules import ENGINE_RULES

EXTERNAL_DB = {
    "postgresql.enabled": "false",
    "externalDatabase.url": "postgresql+psycopg://gp:pw@db.example:5432/gpupool",
}
COMBOS = {
    "defaults": {},
    "external-db": EXTERNAL_DB,
    "external-db-secret": {
        "postgresql.enabled": "false",
        "externalDatabase.existingSecret": "my-db",
        "externalDatabase.existingSecretKey": "dsn",
    },
    "ingress-tls": {
        "ingress.enabled": "true",
        "ingress.className": "nginx",
        "ingress.tlsSecretName": "gpupool-tls",
    },
    "agent-off": {"agent.enabled": "false"},
    "agent-runtime": {"agent.runtimeClassName": "nvidia"},
    "plain-http-trial": {"server.cookieSecure": "false", "networkPolicy.enabled": "false"},
    "unconfined": {"rbac.confineToTenantNamespaces": "false"},
    "tenant-namespaces": {"rbac.tenantNamespaces[0]": "gpupool-team-a"},
    "no-persistence": {"postgresql.persistence.enabled": "false"},
    "cloud-metadata-open": {"server.blockCloudMetadata": "false"},
    "webhook-ignore": {"webhook.failurePolicy": "Ignore"},
    "webhook-off": {"webhook.enabled": "false"},
}

#: What the kubernetes engine does through the API (tests/kubernetes checks every request of
#: its tests against the same set): the chart grants exactly this, nothing more.


def template(helm: str, values: dict[str, str], *extra: str) -> subprocess.CompletedProcess:
    args = [helm, "template", "gp", str(CHART), "-n", "gpupool"]
    for k, v in values.items():
        args += ["--set", f"{k}={v}"]
    return subprocess.run([*args, *extra], capture_output=True, text=True, timeout=120)


def render(helm: str, values: dict[str, str], *extra: str) -> list[dict]:
    r = template(helm, values, *extra)
    assert r.returncode == 0, r.stderr
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def by_kind(objs: list[dict], kind: str) -> list[dict]:
    return [o for o in objs if o["kind"] == kind]


def one(objs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [o for o in by_kind(objs, kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {[o['metadata']['name'] for o in found]}"
    return found[0]


def test_helm_lint(helm):
    for values in (COMBOS["defaults"], EXTERNAL_DB):
        args = [helm, "lint", "--strict", str(CHART)]
        for k, v in values.items():
            args += ["--set", f"{k}={v}"]
        r = subprocess.run(args, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "0 chart(s) failed" in r.stdout


@pytest.mark.parametrize("combo", sorted(COMBOS))
def test_rendered_objects_are_valid(helm, kube_validate, combo, tmp_path):
    for version in KUBE_VERSIONS:
        r = template(helm, COMBOS[combo], "--kube-version", version)
        assert r.returncode == 0, r.stderr
        out = tmp_path / f"{combo}-{version}.yaml"
        out.write_text(r.stdout)
        kube_validate(out, (version,))


def test_defaults(helm):
    objs = render(helm, {})
    kinds = sorted(o["kind"] for o in objs)
    assert kinds == sorted(
        ["ServiceAccount", "Secret", "Secret", "Secret", "ClusterRole", "ClusterRole",
         "ClusterRoleBinding", "ClusterRoleBinding", "Service", "Service", "Service",
         "Deployment", "StatefulSet", "DaemonSet", "NetworkPolicy", "NetworkPolicy",
         "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
         "MutatingWebhookConfiguration", "PriorityClass"]
    )  # fmt: skip
    # node pools' placeholder pods (issue 34): the class the engine names, below everything
    from gpupool.engines.kubernetes.provisioning import priority_class

    want, got = priority_class(), one(objs, "PriorityClass")
    assert got["metadata"]["name"] == want["metadata"]["name"] == "gpupool-placeholder"
    assert (got["value"], got["preemptionPolicy"]) == (want["value"], "Never")
    dep = one(objs, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["image"] == "ghcr.io/gpupool/gpupool:0.1.0"  # appVersion
    args = c["args"]
    assert args[:8] == ["up", "--engine", "kubernetes", "--host", "0.0.0.0", "--port", "8080",
                        "--no-jupyterhub"]  # fmt: skip
    env = {e["name"]: e for e in c["env"]}
    db_ref = env["GPUPOOL_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert db_ref == {"name": "gp-gpupool-database", "key": "url"}
    assert env["GPUPOOL_ADMIN_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "gp-gpupool-admin"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["resources"]["requests"] and c["resources"]["limits"]
    assert pod["serviceAccountName"] == "gp-gpupool"
    svc = one(objs, "Service", "gp-gpupool")
    assert svc["spec"]["ports"][0]["port"] == 8080

    db = one(objs, "Secret", "gp-gpupool-database")["data"]
    pw = base64.b64decode(db["postgres-password"]).decode()
    url = base64.b64decode(db["url"]).decode()
    assert len(pw) == 24 and pw.isalnum()
    assert url == f"postgresql+psycopg://gpupool:{pw}@gp-gpupool-postgresql:5432/gpupool"
    keep = {"helm.sh/resource-policy": "keep"}  # the PVC and the database outlive uninstall
    assert one(objs, "Secret", "gp-gpupool-database")["metadata"]["annotations"] == keep
    assert one(objs, "Secret", "gp-gpupool-admin")["metadata"]["annotations"] == keep
    admin = base64.b64decode(one(objs, "Secret", "gp-gpupool-admin")["data"]["password"])
    assert len(admin) == 24 and admin.isalnum()
    sts = one(objs, "StatefulSet")
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"] == {
        "storage": "8Gi"
    }


def test_admin_password_is_random_unless_given(helm):
    def admin(values):
        sec = one(render(helm, values), "Secret", "gp-gpupool-admin")
        return base64.b64decode(sec["data"]["password"]).decode()

    assert admin({}) != admin({})  # no cluster to look up: a fresh one each time
    assert admin({"admin.password": "s3cret-pw"}) == "s3cret-pw"
    objs = render(helm, {"admin.existingSecret": "mine", "admin.existingSecretKey": "pw"})
    assert not [o for o in by_kind(objs, "Secret") if o["metadata"]["name"].endswith("-admin")]
    (c,) = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
    ref = {e["name"]: e for e in c["env"]}["GPUPOOL_ADMIN_PASSWORD"]["valueFrom"]
    assert ref["secretKeyRef"] == {"name": "mine", "key": "pw"}


def test_metrics_need_a_scrape_token_random_unless_given(helm):
    """/metrics is not public in the chart either: the server gets GPUPOOL_METRICS_TOKEN from
    a Secret (a random token, kept; or the given one; or an existing Secret)."""

    def token(values):
        objs = render(helm, values)
        (c,) = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
        ref = {e["name"]: e for e in c["env"]}["GPUPOOL_METRICS_TOKEN"]["valueFrom"]
        assert ref["secretKeyRef"] == {"name": "gp-gpupool-metrics", "key": "token"}
        sec = one(objs, "Secret", "gp-gpupool-metrics")
        assert sec["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
        return base64.b64decode(sec["data"]["token"]).decode()

    first = token({})
    assert len(first) == 24 and first.isalnum() and first != token({})
    assert token({"metrics.token": "scrape-me"}) == "scrape-me"
    objs = render(helm, {"metrics.existingSecret": "prom", "metrics.existingSecretKey": "t"})
    assert not [o for o in by_kind(objs, "Secret") if o["metadata"]["name"].endswith("-metrics")]
    (c,) = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
    ref = {e["name"]: e for e in c["env"]}["GPUPOOL_METRICS_TOKEN"]["valueFrom"]
    assert ref["secretKeyRef"] == {"name": "prom", "key": "t"}


def test_cluster_role_is_exactly_what_the_engine_uses(helm):
    objs = render(helm, {})
    granted = set()
    for role in by_kind(objs, "ClusterRole"):
        suffix = role["metadata"]["name"].removeprefix("gp-gpupool-")
        for rule in role["rules"]:
            assert "nonResourceURLs" not in rule
            (group,) = rule["apiGroups"]
            names = tuple(rule.get("resourceNames", ()))
            granted |= {
                (suffix, group, res, verb, names)
                for res in rule["resources"]
                for verb in rule["verbs"]
            }
    assert granted == ENGINE_RULES
    assert not any(
        "escalate" in r["verbs"] or "*" in r["verbs"]
        for c in by_kind(objs, "ClusterRole")
        for r in c["rules"]
    )
    assert not by_kind(objs, "Role") and not by_kind(objs, "RoleBinding")
    bindings = {b["roleRef"]["name"]: b for b in by_kind(objs, "ClusterRoleBinding")}
    assert set(bindings) == {"gp-gpupool-cluster", "gp-gpupool-workloads"}
    for b in bindings.values():
        assert b["subjects"] == [
            {"kind": "ServiceAccount", "name": "gp-gpupool", "namespace": "gpupool"}
        ]


def test_tenant_namespaces_bind_pod_rules_per_namespace(helm):
    objs = render(
        helm, {"rbac.tenantNamespaces[0]": "gpupool-a", "rbac.tenantNamespaces[1]": "gpupool-b"}
    )
    crbs = [b["roleRef"]["name"] for b in by_kind(objs, "ClusterRoleBinding")]
    assert crbs == ["gp-gpupool-cluster"]  # nodes, namespaces, pods: list and watch, cluster-wide
    (cluster,) = [c for c in by_kind(objs, "ClusterRole") if c["metadata"]["name"] == crbs[0]]
    pods = [r for r in cluster["rules"] if r["resources"] == ["pods"]]
    assert pods == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}]
    rbs = by_kind(objs, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in rbs) == ["gpupool-a", "gpupool-b"]
    assert {b["roleRef"]["name"] for b in rbs} == {"gp-gpupool-workloads"}


def test_rbac_off(helm):
    objs = render(helm, {"rbac.create": "false"})
    assert not [o for o in objs if o["kind"].endswith(("Role", "RoleBinding"))]


def test_external_database(helm):
    objs = render(helm, EXTERNAL_DB)
    assert not by_kind(objs, "StatefulSet")
    db = one(objs, "Secret", "gp-gpupool-database")["data"]
    assert base64.b64decode(db["url"]).decode() == EXTERNAL_DB["externalDatabase.url"]
    assert "postgres-password" not in db

    objs = render(helm, COMBOS["external-db-secret"])
    assert not [o for o in by_kind(objs, "Secret") if o["metadata"]["name"].endswith("database")]
    (c,) = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
    ref = {e["name"]: e for e in c["env"]}["GPUPOOL_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "my-db", "key": "dsn"}


def test_no_database_is_refused_with_what_to_set(helm):
    r = template(helm, {"postgresql.enabled": "false"})
    assert r.returncode != 0
    assert "externalDatabase.url" in r.stderr


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"server.replicas": "2"}, "/server/replicas"),
        ({"externalDatabase.url": "mysql://x"}, "/externalDatabase/url"),
        ({"agent.tokenHostPath": "etc/token"}, "/agent/tokenHostPath"),
        ({"agent.nodeTokens.existingSecret": "all-nodes"}, "nodeTokens"),  # gone: shared
        ({"servr.replicas": "1"}, "servr"),
    ],
)
def test_schema_refuses_bad_values(helm, values, says):
    r = template(helm, values)
    assert r.returncode != 0
    assert says in r.stderr


def test_ingress(helm):
    objs = render(helm, COMBOS["ingress-tls"])
    ing = one(objs, "Ingress")
    assert ing["spec"]["ingressClassName"] == "nginx"
    assert ing["spec"]["tls"] == [{"hosts": ["gpupool.example.com"], "secretName": "gpupool-tls"}]
    backend = ing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "gp-gpupool", "port": {"name": "http"}}
    (c,) = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert {e["name"]: e.get("value") for e in c["env"]}["GPUPOOL_COOKIE_SECURE"] == "true"
    assert not by_kind(render(helm, {}), "Ingress")


def test_the_session_cookie_is_secure_unless_turned_off(helm):
    def secure(values: dict[str, str]) -> str:
        (c,) = one(render(helm, values), "Deployment")["spec"]["template"]["spec"]["containers"]
        return {e["name"]: e.get("value") for e in c["env"]}["GPUPOOL_COOKIE_SECURE"]

    assert secure({}) == "true"  # review F7: was false without ingress TLS
    assert secure({"server.cookieSecure": "false"}) == "false"


def test_agent_daemonset(helm):
    objs = render(helm, COMBOS["agent-runtime"])
    ds = one(objs, "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostPID"] is True
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["automountServiceAccountToken"] is False
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    (c,) = pod["containers"]
    assert c["args"][:7] == [
        "agent", "--url", "http://gp-gpupool.gpupool.svc:8080", "--node", "$(NODE_NAME)",
        "--token-file", "/var/run/gpupool/node-token",
    ]  # fmt: skip
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert "nvidia.com/gpu" not in str(c["resources"])  # the agent takes no GPU
    # review F7: each agent reads only its own node's credential, from that node; no Secret
    # holds every node's
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["node-token"] == {
        "name": "node-token",
        "hostPath": {"path": "/etc/gpupool/node-token", "type": "File"},
    }
    assert not [v for v in pod["volumes"] if "secret" in v or "projected" in v]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["node-token"]["readOnly"] is True
    assert not [o for o in by_kind(objs, "Secret") if "node-token" in o["metadata"]["name"]]
    assert not by_kind(render(helm, COMBOS["agent-off"]), "DaemonSet")


def test_block_cloud_metadata_is_on_unless_turned_off(helm):
    def args(values: dict[str, str]) -> list[str]:
        (c,) = one(render(helm, values), "Deployment")["spec"]["template"]["spec"]["containers"]
        return c["args"]

    assert "--no-block-cloud-metadata" not in args({})  # gpupool up's default: blocked
    assert "--no-block-cloud-metadata" in args(COMBOS["cloud-metadata-open"])
    r = template(helm, {"server.blockCloudMetadata": "maybe"})
    assert r.returncode != 0 and "/server/blockCloudMetadata" in r.stderr


def test_image_tag_override(helm):
    (c,) = one(render(helm, {"image.tag": "dev"}), "Deployment")["spec"]["template"]["spec"][
        "containers"
    ]
    assert c["image"] == "ghcr.io/gpupool/gpupool:dev"


def test_z2jh_values_point_the_hub_at_gpupool():
    values = yaml.safe_load((CHART.parent / "z2jh-values.yaml").read_text())
    hub = values["hub"]
    assert hub["config"]["JupyterHub"]["authenticator_class"] == (
        "gpupool.jupyterhub.authenticator.GpupoolAuthenticator"
    )
    assert hub["config"]["GpupoolAuthenticator"]["gpupool_url"].startswith(
        "http://gpupool.gpupool.svc:8080"
    )
    # notebooks queue through gpupool, which creates their pods
    assert hub["config"]["JupyterHub"]["spawner_class"] == (
        "gpupool.jupyterhub.kubespawner.GpupoolKubeSpawner"
    )
    spawner = hub["config"]["GpupoolKubeSpawner"]
    assert spawner["gpupool_url"] == hub["config"]["GpupoolAuthenticator"]["gpupool_url"]
    token = hub["extraEnv"]["GPUPOOL_HUB_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert token == {"name": "gpupool-hub-token", "key": "token"}
    assert "GPUPOOL_HUB_TOKEN" in hub["extraConfig"]["gpupool"]
    assert values["singleuser"]["storage"]["type"] == "none"  # gpupool mounts home-<user>
    assert "profileList" not in values["singleuser"]  # profiles are gpupool's
    assert hub["networkPolicy"]["interNamespaceAccessLabels"] == "accept"
    # the hub and the proxy reach the notebooks in the tenants' namespaces by selector
    tenants = {"matchExpressions": [{"key": "gpupool.dev/tenant", "operator": "Exists"}]}
    for policy in (hub["networkPolicy"], values["proxy"]["chp"]["networkPolicy"]):
        assert {"to": [{"namespaceSelector": tenants}]} in policy["egress"]
        kv = pytest.importorskip("kubernetes_validate")
        for version in KUBE_VERSIONS:  # what Z2JH puts into its NetworkPolicy's egress
            netpol = {"podSelector": {}, "policyTypes": ["Egress"], "egress": policy["egress"]}
            kv.validate(
                {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                 "metadata": {"name": "z2jh"}, "spec": netpol},
                version, strict=True,
            )  # fmt: skip
    assert hub["image"]["name"] and values["singleuser"]["image"]["name"]
    # gpupool refuses Z2JH's privileged, root init container that blocks cloud metadata;
    # gpupool's own NetworkPolicy in the tenants' namespaces blocks it instead
    assert values["singleuser"]["cloudMetadata"]["blockWithIptables"] is False
    assert values["singleuser"]["uid"] == 1000  # never root


def test_z2jh_spawner_class_and_its_settings_exist():
    pytest.importorskip("kubespawner")
    from gpupool.jupyterhub.kubespawner import GpupoolKubeSpawner

    values = yaml.safe_load((CHART.parent / "z2jh-values.yaml").read_text())
    names = GpupoolKubeSpawner.class_trait_names()
    for key in values["hub"]["config"]["GpupoolKubeSpawner"]:
        assert key in names, key


def test_z2jh_authenticator_class_exists():
    from gpupool.jupyterhub.authenticator import GpupoolAuthenticator

    assert "gpupool_url" in GpupoolAuthenticator.class_trait_names()


def test_chart_files_are_where_the_docs_say():
    docs = (Path(__file__).resolve().parents[2] / "docs" / "kubernetes.md").read_text()
    for path in ("deploy/helm/gpupool", "deploy/helm/z2jh-values.yaml",
                 "deploy/docker/Dockerfile", "scripts/k8s-real-cluster.sh"):  # fmt: skip
        assert path in docs
        assert (CHART.parents[2] / path).exists(), path


def test_real_cluster_script_parses_and_says_it_was_not_run_here():
    script = CHART.parents[2] / "scripts" / "k8s-real-cluster.sh"
    head = script.read_text().splitlines()[:3]
    assert any("NOT RUN HERE" in line for line in head)
    r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    bash = shutil.which("bash")
    r = subprocess.run([bash, str(script)], capture_output=True, text=True, env={"PATH": ""})
    assert r.returncode != 0 and "set IMAGE=" in r.stderr  # refuses before touching a cluster


def test_kind_e2e_script_parses_and_says_it_was_not_run_here():
    script = CHART.parents[2] / "deploy" / "kind" / "e2e.sh"
    text = script.read_text()
    assert "NOT RUN HERE" in "".join(text.splitlines()[:3])
    assert "deploy/helm/z2jh-values.yaml" in text and "scripts/k8s-real-cluster.sh" in text
    r = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(
        [shutil.which("bash"), str(script)], capture_output=True, text=True, env={"PATH": ""}
    )
    assert r.returncode == 2 and "missing: docker" in r.stderr  # before touching anything
    docs = (CHART.parents[2] / "docs" / "kubernetes.md").read_text()
    assert "deploy/kind/e2e.sh" in docs
