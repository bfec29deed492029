"""`GpupoolKubeSpawner` against a real gpupool server (HTTP, its loops running, the
kubernetes engine following the fake API server's watches): gpupool creates the notebook's
pod from KubeSpawner's manifest (valid for Kubernetes 1.30 and 1.34), the hub's token is
never returned by gpupool's API, the queue's position and reason show as progress, a
cancel while queued creates and deletes nothing, and start() returns the pod's endpoint."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("kubespawner")
kv = pytest.importorskip("kubernetes_validate")

import httpx  # noqa: E402

from gpupool.clock import SystemClock  # noqa: E402
from gpupool.domain import Membership, Role, User  # noqa: E402
from gpupool.engines.kubernetes.engine import KubeOptions, KubernetesEngine  # noqa: E402
from gpupool.server.services.accounts import issue_token  # noqa: E402
from gpupool.server.settings import Settings  # noqa: E402
from gpupool.store import UserRepo  # noqa: E402
from gpupool.system import SystemSettings, build_system  # noqa: E402
from tests.support import ServedApp, wait_for  # noqa: E402

NS = "gpupool-default"
HUB_TOKEN = "hub-api-token-for-ann-0123456789"


class _User:
    """What the spawner reads of JupyterHub's User."""

    def __init__(self, name: str):
        self.name = self.escaped_name = name
        self.id = 7
        self.url = f"/user/{name}/"

    async def get_auth_state(self) -> None:
        return None


@pytest.fixture
def served(kube, tmp_path, monkeypatch):
    kube.add_node("gpu-1", 1, labels={"nvidia.com/gpu.product": "NVIDIA-A100"})
    kcfg = tmp_path / "kubeconfig"
    kube.kubeconfig(kcfg)
    # KubeSpawner loads a kubeconfig (its module read $KUBECONFIG at import); it never calls it
    import kubernetes_asyncio.config.kube_config as kc

    monkeypatch.setattr(kc, "KUBE_CONFIG_DEFAULT_LOCATION", str(kcfg))
    db = f"sqlite:///{tmp_path / 'gpupool.db'}"
    s = SystemSettings(server=Settings(database_url=db), admin="admin")
    system = build_system(
        s, KubernetesEngine(KubeOptions(), api_client=kube.client()), clock=SystemClock()
    )
    with system.ctx.store.write() as tx:
        users = UserRepo(tx)
        users.create(User("ann"), None, 0.0)
        users.set_membership(Membership("ann", "default", Role.MEMBER))
    admin = issue_token(system.ctx, "admin", "hub", None).token
    app = ServedApp(system.app)
    url = app.start()
    try:
        yield url, admin, system
    finally:
        app.stop()
        system.stop()
        kube.end_watches()


def _spawner(url: str, admin: str):
    from gpupool.jupyterhub.kubespawner import GpupoolKubeSpawner

    sp = GpupoolKubeSpawner(
        _mock=True,
        user=_User("ann"),
        gpupool_url=url,
        gpupool_token=admin,
        admission_poll_s=0.05,
        image="quay.io/jupyter/base-notebook:2026-11-01",
    )
    sp.api_token = HUB_TOKEN
    sp.user_options = {"profile": "gpu"}
    return sp


def _api(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=f"{url}/api/v1", headers={"Authorization": f"Bearer {token}"})


def _notebook_pod(kube) -> dict | None:
    pods = [p for p in kube.pods_of("app.kubernetes.io/managed-by=gpupool")]
    notebooks = [p for p in pods if "gpupool.dev/port" in p["metadata"]["annotations"]]
    return notebooks[0] if notebooks else None


async def _progress_until(sp, pred, timeout: float = 60.0) -> list[str]:
    seen: list[str] = []

    async def collect() -> None:
        async for ev in sp.progress():
            seen.append(ev["message"])
            if pred(ev["message"]):
                return

    await asyncio.wait_for(collect(), timeout)
    return seen


def test_gpupool_creates_the_notebook_pod_and_start_returns_its_endpoint(served, kube):
    url, admin, system = served

    async def scenario():  # the spawner's clients need a running loop, as in the hub
        sp = _spawner(url, admin)
        task = asyncio.ensure_future(sp.start())
        await asyncio.to_thread(wait_for, lambda: _notebook_pod(kube), "the notebook's pod")
        pod = _notebook_pod(kube)
        kube.set_phase(NS, pod["metadata"]["name"], "Running", node="gpu-1", pod_ip="10.4.0.9")
        endpoint = await asyncio.wait_for(task, 60)
        return sp, endpoint, await sp.poll()

    sp, endpoint, polled = asyncio.run(scenario())
    assert endpoint == "http://10.4.0.9:8888" and polled is None
    pod = _notebook_pod(kube)
    c = pod["spec"]["containers"][0]
    assert c["image"] == "quay.io/jupyter/base-notebook:2026-11-01"
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    env = kube.env_of(pod)  # the hub's variables reach the pod through its env Secret
    assert env["JUPYTERHUB_API_TOKEN"] == HUB_TOKEN and env["JUPYTERHUB_USER"] == "ann"
    assert HUB_TOKEN not in json.dumps(pod)  # never in the pod spec that `view` could read
    assert env["GPUPOOL_WORKLOAD_ID"] == sp.workload_id
    assert {"name": "home", "mountPath": "/home/jovyan"} in c["volumeMounts"]
    homes = [v for v in pod["spec"]["volumes"] if v["name"] == "home"]
    assert homes == [{"name": "home", "persistentVolumeClaim": {"claimName": "home-ann"}}]
    affinity = pod["spec"]["affinity"]["nodeAffinity"]
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == ["gpu-1"]
    assert pod["metadata"]["labels"]["gpupool.dev/user"] == "ann"
    assert "serviceAccountName" not in pod["spec"]
    body = {k: v for k, v in pod.items() if k != "status"}
    body["metadata"] = {
        k: v
        for k, v in pod["metadata"].items()
        if k not in ("uid", "resourceVersion", "creationTimestamp")
    }
    for version in ("1.30.0", "1.34.0"):
        kv.validate(body, version, strict=True)
    # the hub's token is in the pod, never in what gpupool's API returns (owner or admin)
    for token in (admin, issue_token(system.ctx, "ann", "t", None).token):
        with _api(url, token) as api:
            w = api.get(f"/workloads/{sp.workload_id}").json()
            listed = api.get("/workloads").text
        assert w["endpoint"] == "http://10.4.0.9:8888" and w["state"] == "running"
        assert HUB_TOKEN not in json.dumps(w) and HUB_TOKEN not in listed

    async def stop() -> None:
        await sp.stop()

    asyncio.run(stop())
    assert kube.deletes and kube.deletes[-1][:2] == (NS, pod["metadata"]["name"])


def test_queued_notebook_shows_position_and_reason_and_cancel_frees_the_slot(served, kube):
    url, admin, system = served
    with _api(url, admin) as api:  # the node's only GPU is taken by a job
        job = api.post("/workloads", json={"gpus": 1, "command": ["sleep", "1d"]}).json()
    wait_for(lambda: kube.pods_of(f"gpupool.dev/workload={job['id']}"), "the job's pod")
    before = len(kube.pods)

    async def scenario() -> list[str]:
        sp = _spawner(url, admin)
        task = asyncio.ensure_future(sp.start())
        seen = await _progress_until(sp, lambda m: "in line" in m)
        await sp.stop()  # the user cancels while queued
        with pytest.raises(Exception, match="did not start the notebook"):
            await asyncio.wait_for(task, 30)
        return seen

    seen = asyncio.run(scenario())
    assert any("1st in line for default" in m for m in seen), seen
    assert len(kube.pods) == before and not kube.deletes  # nothing created, nothing deleted
    with _api(url, admin) as api:
        queue = api.get("/queue").json()
        (w,) = [w for w in api.get("/workloads", params={"kind": "notebook"}).json()]
    assert w["state"] == "cancelled" and queue == []


def test_a_pod_spec_needs_the_hubs_admin_token(served, kube):
    url, admin, system = served
    ann = issue_token(system.ctx, "ann", "t", None).token
    body = {
        "kind": "notebook",
        "pod_spec": {"spec": {"containers": [{"name": "nb", "image": "x"}]}},
    }
    with _api(url, ann) as api:
        r = api.post("/workloads", json=body)
        assert r.status_code == 403 and "X-Gpupool-Service-Token" in r.json()["detail"]
        r = api.post("/workloads", json=body, headers={"X-Gpupool-Service-Token": ann})
        assert r.status_code == 403 and "admin" in r.json()["detail"]
        bad = {"spec": {"hostNetwork": True, "containers": [{"name": "nb", "image": "x"}]}}
        r = api.post(
            "/workloads",
            json={**body, "pod_spec": bad},
            headers={"X-Gpupool-Service-Token": admin},
        )
        assert r.status_code == 422 and "hostNetwork" in r.text
        r = api.post("/workloads", json=body, headers={"X-Gpupool-Service-Token": admin})
        assert r.status_code == 201, r.text
        assert "pod_spec" not in r.json()


def test_the_z2jh_default_pod_is_accepted_and_root_or_capabilities_are_422(served, kube):
    """KubeSpawner's own manifest for Zero-to-JupyterHub's defaults (uid 1000, fsGroup 100)
    passes; its cloud metadata blocker, a root container and an added capability are refused
    as problem+json naming the field and what to do."""
    url, admin, _system = served
    blocker = {
        "name": "block-cloud-metadata",
        "image": "quay.io/jupyterhub/k8s-network-tools:4.0.0",
        "command": ["iptables", "-A", "OUTPUT", "-d", "169.254.169.254", "-j", "DROP"],
        "securityContext": {
            "privileged": True,
            "runAsUser": 0,
            "capabilities": {"add": ["NET_ADMIN"]},
        },
    }

    async def manifests() -> tuple[dict, dict]:
        sp = _spawner(url, admin)
        sp.uid, sp.fs_gid = 1000, 100  # Z2JH's singleuser.uid and singleuser.fsGid defaults
        default, _env = await sp.pod_template()
        sp.init_containers = [blocker]  # singleuser.cloudMetadata.blockWithIptables: true
        with_blocker, _env = await sp.pod_template()
        return default, with_blocker

    default, with_blocker = asyncio.run(manifests())
    assert default["spec"]["securityContext"] == {"fsGroup": 100}
    root = json.loads(json.dumps(default))
    root["spec"]["containers"][0]["securityContext"]["runAsUser"] = 0
    caps = json.loads(json.dumps(default))
    caps["spec"]["containers"][0]["securityContext"]["capabilities"] = {"add": ["SYS_ADMIN"]}
    vouched = {"X-Gpupool-Service-Token": admin}
    c0 = "pod_spec.spec.containers[0].securityContext"
    with _api(url, admin) as api:

        def submit(pod: dict) -> httpx.Response:
            return api.post(
                "/workloads", json={"kind": "notebook", "pod_spec": pod}, headers=vouched
            )

        r = submit(with_blocker)
        assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json"
        (err,) = r.json()["errors"]
        assert err["field"] == "pod_spec.spec.initContainers[0].securityContext.privileged"
        assert "blockWithIptables: false" in r.json()["detail"]
        r = submit(root)
        assert r.status_code == 422 and r.json()["errors"][0]["field"] == f"{c0}.runAsUser"
        assert "non-zero uid" in r.json()["detail"]
        r = submit(caps)
        assert r.status_code == 422
        assert r.json()["errors"][0]["field"] == f"{c0}.capabilities.add"
        assert "SYS_ADMIN" in r.json()["detail"]
        assert api.get("/workloads").json() == []  # nothing refused was stored
        r = submit(default)
        assert r.status_code == 201, r.text
