"""Notebooks on a real Slurm through a real JupyterHub: the hub's `RemoteNotebookSpawner`
submits `jupyterhub-singleuser` as a gpupool notebook; it waits in gpupool's queue with the
reason on the hub's progress page, then runs as a Slurm job under the tenant's account as the
member's Unix account, and the hub's proxy reaches it at the endpoint the job reported.

The single-user server runs as that Unix account, which cannot read the test's own Python
(under /root): a virtual environment of the system Python with the same JupyterHub is made
once under /tmp (GPUPOOL_TEST_NOTEBOOK_VENV names another); without it the test skips."""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import jupyterhub
from gpupool.clock import SystemClock
from gpupool.domain import Membership, Quota, Request, Role, Tenant, User
from gpupool.domain.profiles import Profile
from gpupool.engines.slurm.engine import SlurmEngine, SlurmOptions
from gpupool.server.hub.config import HubSettings, start_hub, wait_hub_ready
from gpupool.server.security import hash_password
from gpupool.server.services.accounts import issue_token
from gpupool.server.settings import Settings
from gpupool.store import ProfileRepo, TenantRepo, UserRepo, open_store
from gpupool.system import SystemSettings, build_system
from tests.jupyterhub.stack import events
from tests.slurm.conftest import sacct, sh
from tests.support import ServedApp, free_port, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slow]
PASSWORD = "slurm-notebook-password"


@pytest.fixture(scope="session")
def notebook_venv(slurm) -> Path:  # noqa: ANN001
    """A Python environment with jupyterhub-singleuser that any account can run."""
    given = os.environ.get("GPUPOOL_TEST_NOTEBOOK_VENV")
    venv = Path(given or f"/tmp/gpupool-slurm-nbenv-{jupyterhub.__version__}")
    exe = venv / "bin" / "jupyterhub-singleuser"
    if not exe.exists() and not given:
        python = shutil.which("python3", path="/usr/bin:/usr/local/bin")
        if python is None:
            pytest.skip("no system python3 to make the notebooks' environment from")
        try:
            subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=120)
            subprocess.run(
                [str(venv / "bin" / "pip"), "install", "-q",
                 f"jupyterhub=={jupyterhub.__version__}", "jupyter_server"],
                check=True, timeout=600, capture_output=True,
            )  # fmt: skip
        except (subprocess.SubprocessError, OSError) as e:
            pytest.skip(f"could not make the notebooks' Python environment: {e}")
        subprocess.run(["chmod", "-R", "a+rX", str(venv)], check=True)
    if not exe.exists():
        pytest.skip(f"{exe} is missing")
    return venv


class SlurmHub:
    def __init__(self, root: Path, venv: Path) -> None:
        db = f"sqlite:///{root / 'gpupool.db'}"
        store = open_store(db)
        now = time.time()
        with store.write() as s:
            TenantRepo(s).save(Tenant("lab", Quota.gpus(1, 2)), now)
            users = UserRepo(s)
            users.create(User("root", admin=True), hash_password(PASSWORD), now)
            users.create(User("slann"), hash_password(PASSWORD), now)
            users.set_membership(Membership("slann", "lab", Role.MEMBER))
            ProfileRepo(s).save(Profile("gpu", Request(gpus=1), description="1 GPU"), create=True)
        store.close()
        self.out = Path(tempfile.mkdtemp(prefix="gpupool-slurm-nb-"))
        port = free_port()
        self.api_url = f"http://127.0.0.1:{port}"
        self.driver_token = secrets.token_hex(16)
        driver = f"""
c.JupyterHub.services.append({{'name': 'driver', 'api_token': {self.driver_token!r}}})
c.JupyterHub.load_roles.append({{
    'name': 'driver',
    'scopes': ['admin:users', 'admin:servers', 'read:users', 'access:servers', 'tokens'],
    'services': ['driver'],
}})
c.GpupoolSpawner.cmd = [{str(venv / "bin" / "jupyterhub-singleuser")!r}]
c.Spawner.default_url = '/api/status'
c.RemoteNotebookSpawner.endpoint_wait_s = 120
"""
        self.hub = HubSettings(
            data_dir=root / "hub",
            api_url=self.api_url,
            dashboard_url=None,
            port=free_port(),
            hub_port=free_port(),
            proxy_api_port=free_port(),
            poll_interval_s=1,
            extra_config=driver,
        )
        settings = Settings(
            database_url=db, scheduler_interval_s=0.5, reconciler_interval_s=0.5, stop_grace_s=5
        )
        engine = SlurmEngine(SlurmOptions(output_dir=self.out, accounts_interval_s=0))
        self.system = build_system(
            SystemSettings(server=settings, jupyterhub=True, hub=self.hub),
            engine,
            clock=SystemClock(),
        )
        self.token = issue_token(self.system.ctx, "root", "jupyterhub", None).token
        self.member = issue_token(self.system.ctx, "slann", "test", None).token
        self.server = ServedApp(self.system.app, port)
        self.server.start()
        self.hub_proc = start_hub(self.hub, self.token)
        wait_hub_ready(self.hub, timeout_s=90, proc=self.hub_proc)

    def hub_api(self, method: str, path: str, **kw) -> httpx.Response:  # noqa: ANN003
        return httpx.request(
            method,
            f"{self.hub.public_url}/hub/api{path}",
            headers={"Authorization": f"token {self.driver_token}"},
            timeout=30,
            **kw,
        )

    def gpupool(self, method: str, path: str, member: bool = False, **kw) -> httpx.Response:  # noqa: ANN003
        return httpx.request(
            method,
            f"{self.api_url}/api/v1{path}",
            headers={"Authorization": f"Bearer {self.member if member else self.token}"},
            timeout=30,
            **kw,
        )

    def server_model(self) -> dict | None:
        r = self.hub_api("GET", "/users/slann")
        if r.status_code == 404:
            return None
        return r.json().get("servers", {}).get("")

    def close(self) -> None:
        self.hub_api("DELETE", "/users/slann/server")
        for w in self.gpupool("GET", "/workloads", params={"limit": 1000}).json():
            subprocess.run(["scancel", "--name", f"gpupool-{w['id']}"], check=False)
        if self.hub_proc is not None:
            self.hub_proc.terminate()
            self.hub_proc.wait(30)
        self.server.stop()
        self.system.stop()
        shutil.rmtree(self.out, ignore_errors=True)


@pytest.fixture
def slurm_hub(notebook_venv, tmp_path) -> Iterator[SlurmHub]:  # noqa: ANN001
    subprocess.run(["chmod", "755", str(tmp_path)], check=True)
    account = pwd.getpwnam("slann")  # a notebook needs its user's home, as on a cluster
    if not os.path.isdir(account.pw_dir):
        os.makedirs(account.pw_dir, 0o700)
        os.chown(account.pw_dir, account.pw_uid, account.pw_gid)
    hub = SlurmHub(tmp_path, notebook_venv)
    try:
        hub.hub_api("POST", "/users/slann")
        yield hub
    finally:
        hub.close()


def test_a_notebook_waits_in_gpupools_queue_then_runs_as_a_slurm_job(slurm_hub):
    h = slurm_hub
    # lab is at its limit of 2 GPUs: the notebook must wait, and say why
    busy = []
    for _ in range(2):
        r = h.gpupool(
            "POST", "/workloads",
            json={"gpus": 1, "command": ["sleep", "300"], "tenant": "lab"}, member=True,
        )  # fmt: skip
        assert r.status_code == 201, r.text
        busy.append(r.json()["id"])
    r = h.hub_api("POST", "/users/slann/server", json={"user_options": {"profile": "gpu"}})
    assert r.status_code in (201, 202), r.text
    seen = events(h, "slann", lambda ev: "limit" in ev.get("message", ""))  # type: ignore[arg-type]
    assert any("limit" in ev["message"] for ev in seen), seen
    (nb,) = h.gpupool("GET", "/workloads", params={"kind": "notebook"}).json()
    assert nb["state"] == "pending"
    assert not sh("squeue", "-h", "--name", f"gpupool-{nb['id']}").strip()  # not in Slurm
    h.gpupool("DELETE", f"/workloads/{busy[0]}")  # a GPU of lab's frees up
    try:
        model = wait_for(
            lambda: (m := h.server_model()) and m.get("ready") and m, "the notebook", timeout=150
        )
    except AssertionError:
        out = h.out / f"{nb['id']}.out"
        detail = h.gpupool("GET", f"/workloads/{nb['id']}").json()
        raise AssertionError(
            f"not ready: {h.server_model()}\n{detail}\n"
            f"{out.read_text() if out.exists() else 'no output'}"
        ) from None
    nb = h.gpupool("GET", f"/workloads/{nb['id']}").json()
    assert nb["state"] == "running" and nb["endpoint"].startswith("http://")
    assert "env" not in nb or not nb["env"]  # the hub's token is never returned
    job = sh("squeue", "-h", "--name", f"gpupool-{nb['id']}", "-o", "%i %T %a %u").split()
    assert job[1:] == ["RUNNING", "gp.lab", "slann"], job  # the tenant's account, the member
    # through the hub's proxy to the job's server
    r = httpx.get(
        f"{h.hub.public_url}/user/slann/api/status",
        headers={"Authorization": f"token {h.driver_token}"},
        timeout=30,
    )
    assert r.status_code == 200, (r.status_code, r.text[:300], model)
    # stopping the server through the hub ends the Slurm job and the workload
    assert h.hub_api("DELETE", "/users/slann/server").status_code in (202, 204)
    wait_for(
        lambda: h.gpupool("GET", f"/workloads/{nb['id']}").json()["state"] == "cancelled",
        "the notebook's workload to end",
        timeout=60,
    )
    assert sacct(job[0])["state"]["current"] in ("CANCELLED", "FAILED", "COMPLETED")
    h.gpupool("DELETE", f"/workloads/{busy[1]}")
