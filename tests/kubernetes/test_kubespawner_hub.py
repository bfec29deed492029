"""A real JupyterHub (and configurable-http-proxy) spawning with `GpupoolKubeSpawner` through
a real gpupool server whose kubernetes engine watches the fake API server. The fake API
server plays the kubelet: once gpupool has created the notebook's pod, the test starts
`jupyterhub-singleuser` on this machine with that pod's environment and reports the pod
Running at 127.0.0.1; the hub's proxy then reaches the notebook at the endpoint gpupool
reported. Stopping the server through the hub deletes the pod."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

pytest.importorskip("kubespawner")
if not shutil.which("configurable-http-proxy"):
    pytest.skip("configurable-http-proxy is not installed", allow_module_level=True)

from gpupool.clock import SystemClock  # noqa: E402
from gpupool.domain import Membership, Role, User  # noqa: E402
from gpupool.engines.kubernetes.engine import KubeOptions, KubernetesEngine  # noqa: E402
from gpupool.server.hub.config import HubSettings, start_hub, wait_hub_ready  # noqa: E402
from gpupool.server.services.accounts import issue_token  # noqa: E402
from gpupool.server.settings import Settings  # noqa: E402
from gpupool.store import UserRepo  # noqa: E402
from gpupool.system import SystemSettings, build_system  # noqa: E402
from tests.support import ServedApp, free_port, wait_for  # noqa: E402

NS = "gpupool-default"


def _notebook_pod(kube) -> dict | None:
    pods = [p for p in kube.pods_of() if "gpupool.dev/port" in p["metadata"]["annotations"]]
    return pods[0] if pods else None


@pytest.fixture
def stack(kube, tmp_path):
    kube.add_node("gpu-1", 1, labels={"nvidia.com/gpu.product": "NVIDIA-A100"})
    kcfg = tmp_path / "kubeconfig"
    kube.kubeconfig(kcfg)
    db = f"sqlite:///{tmp_path / 'gpupool.db'}"
    system = build_system(
        SystemSettings(server=Settings(database_url=db), admin="admin"),
        KubernetesEngine(KubeOptions(), api_client=kube.client()),
        clock=SystemClock(),
    )
    with system.ctx.store.write() as tx:
        users = UserRepo(tx)
        users.create(User("alice"), None, 0.0)
        users.set_membership(Membership("alice", "default", Role.MEMBER))
    admin = issue_token(system.ctx, "admin", "jupyterhub", None).token
    served = ServedApp(system.app)
    api_url = served.start()
    driver = secrets.token_hex(16)
    nb_port = free_port()
    extra = f"""
c.JupyterHub.spawner_class = 'gpupool.jupyterhub.kubespawner.GpupoolKubeSpawner'
c.GpupoolKubeSpawner.gpupool_url = _api_url
c.GpupoolKubeSpawner.gpupool_token = _token
c.GpupoolKubeSpawner.admission_poll_s = 0.1
c.GpupoolKubeSpawner.port = {nb_port}
c.GpupoolKubeSpawner.image = 'quay.io/jupyter/base-notebook:2026-11-01'
c.JupyterHub.services.append({{'name': 'driver', 'api_token': {driver!r}}})
c.JupyterHub.load_roles.append({{
    'name': 'driver',
    'scopes': ['admin:users', 'admin:servers', 'read:users', 'access:servers'],
    'services': ['driver'],
}})
"""
    hub = HubSettings(
        data_dir=tmp_path / "hub",
        api_url=api_url,
        dashboard_url=api_url,
        port=free_port(),
        hub_port=free_port(),
        proxy_api_port=free_port(),
        poll_interval_s=1,
        extra_config=extra,
        env={"KUBECONFIG": str(kcfg)},  # KubeSpawner loads one; it never calls it
    )
    proc = start_hub(hub, admin)
    procs: list[subprocess.Popen] = [proc]
    try:
        wait_hub_ready(hub, timeout_s=90, proc=proc)
        yield hub, driver, nb_port, procs, tmp_path
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
        served.stop()
        system.stop()
        kube.end_watches()


def test_a_real_hub_spawns_a_notebook_whose_pod_gpupool_creates(stack, kube):
    hub, driver, nb_port, procs, tmp = stack
    api = httpx.Client(
        base_url=f"{hub.public_url}/hub/api",
        headers={"Authorization": f"token {driver}"},
        timeout=30,
    )
    assert api.post("/users/alice").status_code in (201, 409)
    r = api.post("/users/alice/server", json={"user_options": {"profile": "gpu"}})
    assert r.status_code == 202, r.text
    pod = wait_for(lambda: _notebook_pod(kube), "gpupool's pod for the notebook")
    c = pod["spec"]["containers"][0]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert c["ports"][0]["containerPort"] == nb_port
    env = kube.env_of(pod)  # the kubelet reads the workload's env Secret
    assert env["JUPYTERHUB_USER"] == "alice" and env["JUPYTERHUB_API_TOKEN"]
    # the kubelet's part: run the pod's notebook server here, report the pod Running
    home = tmp / "alice"
    home.mkdir()
    run_env = {**os.environ, **env, "HOME": str(home)}
    procs.append(
        subprocess.Popen(
            [
                str(Path(sys.executable).with_name("jupyterhub-singleuser")),
                "--ip=127.0.0.1",
                f"--port={nb_port}",
                "--ServerApp.allow_root=True",
            ],
            cwd=home,
            env=run_env,
            stdout=(tmp / "singleuser.log").open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    )
    kube.set_phase(NS, pod["metadata"]["name"], "Running", node="gpu-1", pod_ip="127.0.0.1")

    def ready() -> dict | None:
        server = api.get("/users/alice").json().get("servers", {}).get("")
        return server if server and server.get("ready") else None

    server = wait_for(ready, "the hub to see the notebook ready", timeout=90, every=0.5)
    assert server["url"] == "/user/alice/"
    r = httpx.get(
        f"{hub.public_url}/user/alice/api/status",
        headers={"Authorization": f"token {driver}"},
        timeout=30,
    )
    assert r.status_code == 200, r.text  # through the hub's proxy, at gpupool's endpoint
    assert api.delete("/users/alice/server").status_code in (202, 204)
    name = pod["metadata"]["name"]
    wait_for(lambda: (NS, name) in {d[:2] for d in kube.deletes}, "gpupool to delete the pod")
