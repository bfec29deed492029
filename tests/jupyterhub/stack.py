"""A real gpupool server + a real JupyterHub (+ configurable-http-proxy) on loopback, over a
store seeded with 2 simulated GPUs. Used by the end-to-end tests and bench/spawn_latency.py.

The gpupool server runs in a thread of this process (uvicorn, its real loops, the
HubLaunchExecutor over the fake executor: notebooks are started by the hub, never by the
executor). JupyterHub runs as a child process with the config `gpupool.server.hub.config`
generates, plus a `driver` service whose admin token the tests use for the hub's REST API.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from gpupool.clock import SystemClock
from gpupool.domain import GPU, Membership, Node, Quota, Request, Role, Tenant, User
from gpupool.domain.profiles import Profile
from gpupool.engines.common.hub_launch import HubLaunchExecutor
from gpupool.engines.fake.engine import FakeEngine
from gpupool.engines.fake.executor import FakeExecutor
from gpupool.server.hub.config import HubSettings, start_hub, wait_hub_ready
from gpupool.server.security import hash_password
from gpupool.server.services.accounts import issue_token
from gpupool.server.settings import Settings
from gpupool.store import NodeRepo, ProfileRepo, TenantRepo, UserRepo, open_store
from gpupool.system import SystemSettings, build_system
from tests.support import ServedApp, free_port, wait_for

PASSWORD = "hub-test-password-1"
GPU_UUIDS = ("GPU-sim-0000", "GPU-sim-0001")
MEMBERS = ("alice", "bob", "carol", "dave")


def seed(db_url: str) -> None:
    store = open_store(db_url)
    now = time.time()
    with store.write() as s:
        NodeRepo(s).upsert(
            Node(
                "gpu-box",
                tuple(GPU(i, u, "SimGPU-16G", 16384) for i, u in enumerate(GPU_UUIDS)),
                cpu_milli=16000,
                memory_mib=65536,
            )
        )
        tenants = TenantRepo(s)
        tenants.save(Tenant("lab", Quota.gpus(guaranteed=2, limit=2, max_per_user=1)), now)
        tenants.save(Tenant("other", Quota.gpus(guaranteed=0, limit=2)), now)
        users = UserRepo(s)
        users.create(User("root", admin=True), hash_password(PASSWORD), now)
        for name in MEMBERS:
            users.create(User(name), hash_password(PASSWORD), now)
            users.set_membership(Membership(name, "lab", Role.MEMBER))
        profiles = ProfileRepo(s)
        profiles.save(Profile("gpu", Request(gpus=1), description="One whole GPU"), create=True)
        profiles.save(
            Profile("pair", Request(gpus=2), description="Two GPUs (more than lab allows)"),
            create=True,
        )
        profiles.save(Profile("other-only", Request(gpus=1), tenants=("other",)), create=True)
    store.close()


@dataclass
class Stack:
    root: Path
    api_url: str
    hub: HubSettings
    admin_token: str
    driver_token: str
    app: Any
    server: ServedApp
    #: the API worker processes in front of `server` (a gpupool.server.workers.WorkerPool)
    pool: Any = None
    hub_proc: subprocess.Popen | None = None
    cookies: dict[str, httpx.Client] = field(default_factory=dict)

    # -- processes -----------------------------------------------------------------------
    def start_hub(self) -> None:
        self.hub_proc = start_hub(self.hub, self.admin_token)
        wait_hub_ready(self.hub, timeout_s=90, proc=self.hub_proc)

    def restart_gpupool(self) -> None:
        """Stop the gpupool server and start a new one over the same database and launch
        directory (as after a crash or an upgrade); the hub keeps running."""
        assert self.pool is None, "restart_gpupool is for stacks without API workers"
        port = int(self.api_url.rsplit(":", 1)[1])
        self.server.stop()
        self.app = make_app(f"sqlite:///{self.root / 'gpupool.db'}", self.hub)
        self.server = ServedApp(self.app, port)
        self.server.start()

    def stop_hub(self) -> None:
        """Stop JupyterHub (and its proxy) the polite way; notebooks keep running."""
        if self.hub_proc is None:
            return
        self.hub_proc.send_signal(signal.SIGTERM)
        try:
            self.hub_proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.hub_proc.pid, signal.SIGKILL)
            self.hub_proc.wait(timeout=30)
        self.hub_proc = None

    def close(self) -> None:
        for c in self.cookies.values():
            c.close()
        # stop every notebook, then the hub
        if self.hub_proc is not None:
            for name in MEMBERS:
                with contextlib.suppress(httpx.HTTPError):
                    self.hub_api("DELETE", f"/users/{name}/server")
            for name in MEMBERS:
                with contextlib.suppress(AssertionError, httpx.HTTPError):
                    wait_for(lambda n=name: not self.server_model(n), f"{name} stopped", 30)
        self.stop_hub()
        self.server.stop()
        if self.pool is not None:
            self.pool.close()

    # -- hub REST API (as the driver service, an admin) ----------------------------------
    def hub_api(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return httpx.request(
            method,
            f"{self.hub.public_url}/hub/api{path}",
            headers={"Authorization": f"token {self.driver_token}"},
            timeout=30,
            **kw,
        )

    def server_model(self, user: str) -> dict | None:
        r = self.hub_api("GET", f"/users/{user}")
        r.raise_for_status()
        return r.json().get("servers", {}).get("")

    def ready(self, user: str) -> dict | None:
        m = self.server_model(user)
        return m if m and m.get("ready") else None

    def spawn(self, user: str, options: dict) -> httpx.Response:
        return self.hub_api("POST", f"/users/{user}/server", json={"user_options": options})

    def spawn_all_ready(
        self, users: tuple[str, ...], options: dict, timeout: float
    ) -> dict[str, dict[str, str]]:
        """Spawn a notebook for each of `users`, wait until every one is ready and return
        their environments (user -> env)."""
        for user in users:
            assert self.spawn(user, options).status_code in (201, 202)
        for user in users:
            wait_for(lambda u=user: self.ready(u), f"{user}'s notebook", timeout, 0.5)
        return {user: self.notebook_env(user) for user in users}

    def notebook_env(self, user: str) -> dict[str, str]:
        """The environment of `user`'s running notebook process (from /proc)."""
        m = self.ready(user)
        assert m, f"{user} has no running notebook"
        pid = m["state"]["pid"]
        raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        return dict(x.decode().split("=", 1) for x in raw if b"=" in x)

    # -- gpupool API ---------------------------------------------------------------------
    def gpupool(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return httpx.request(
            method,
            f"{self.api_url}/api/v1{path}",
            headers={"Authorization": f"Bearer {self.admin_token}"},
            timeout=30,
            **kw,
        )

    def notebooks(self, user: str) -> list[dict]:
        r = self.gpupool("GET", "/workloads", params={"user": user, "kind": "notebook"})
        r.raise_for_status()
        return r.json()

    # -- a browser-like session: log in through the hub's login form ---------------------
    def login(self, user: str) -> httpx.Client:
        """Log `user` in through /hub/login (stores the gpupool token in auth_state)."""
        if user in self.cookies:
            return self.cookies[user]
        c = httpx.Client(base_url=self.hub.public_url, timeout=30, follow_redirects=True)
        page = c.get("/hub/login")
        m = re.search(r'name="_xsrf" value="([^"]+)"', page.text)
        data = {"username": user, "password": PASSWORD}
        if m:
            data["_xsrf"] = m.group(1)
        r = c.post("/hub/login", data=data)
        assert r.status_code == 200 and "/hub/login" not in str(r.url), r.text[:500]
        self.cookies[user] = c
        return c


def make_app(db_url: str, hub: HubSettings) -> Any:
    """The gpupool server as `gpupool up --jupyterhub` builds it (gpupool.system): the
    hub launch executor over the fake engine's executor, every loop, the dashboard under the
    hub prefix with hub sign-on. The stack starts the hub itself (`Stack.start_hub`)."""
    settings = Settings(
        database_url=db_url,
        scheduler_interval_s=0.5,
        reconciler_interval_s=0.5,
        stop_grace_s=5.0,
    )
    system = build_system(
        SystemSettings(server=settings, jupyterhub=True, hub=hub),
        FakeEngine(FakeExecutor(SystemClock())),
        clock=SystemClock(),
    )
    assert isinstance(system.executor, HubLaunchExecutor)
    return system.app


def build(root: Path, *, hub_poll_s: int = 1, extra_config: str = "", workers: int = 0) -> Stack:
    """The stack, started. With `workers`, gpupool serves as `gpupool up --workers N` does:
    N API worker processes on the public port in front of this process's app."""
    root.mkdir(parents=True, exist_ok=True)
    db_url = f"sqlite:///{root / 'gpupool.db'}"
    seed(db_url)
    port = free_port()
    api_url = f"http://127.0.0.1:{port}"
    driver_token = secrets.token_hex(16)
    driver = f"""
c.JupyterHub.services.append({{'name': 'driver', 'api_token': {driver_token!r}}})
c.JupyterHub.load_roles.append({{
    'name': 'driver',
    'scopes': ['admin:users', 'admin:servers', 'admin:server_state', 'read:users',
               'access:servers', 'tokens'],
    'services': ['driver'],
}})
c.JupyterHub.last_activity_interval = 5
"""
    hub = HubSettings(
        data_dir=root / "hub",
        launch_dir=root / "hub-launch",
        api_url=api_url,
        dashboard_url=api_url,
        port=free_port(),
        hub_port=free_port(),
        proxy_api_port=free_port(),
        poll_interval_s=hub_poll_s,
        home_dir_template=str(root / "homes" / "{username}"),
        extra_config=driver + extra_config,
    )
    app = make_app(db_url, hub)
    admin_token = issue_token(app.state.ctx, "root", "jupyterhub", None).token
    pool = None
    if workers:
        from gpupool.server.workers import WorkerPool

        pool = WorkerPool(app.state.ctx, root, "127.0.0.1", port, workers, "warning")
        server = ServedApp(app, port, sock=pool.sockets[0])
    else:
        server = ServedApp(app, port)
    server.start()
    if workers:
        wait_for(lambda: _worker_answers(api_url), "an API worker", timeout=60)
    stack = Stack(root, api_url, hub, admin_token, driver_token, app, server, pool)
    stack.start_hub()
    return stack


def _worker_answers(api_url: str) -> bool:
    try:
        return httpx.get(f"{api_url}/healthz", timeout=2).json()["process"].startswith("worker")
    except (httpx.HTTPError, ValueError, KeyError):
        return False


def events(stack: Stack, user: str, until: Callable[[dict], bool], timeout: float = 60) -> list:
    """Read the hub's spawn progress stream for `user` until `until(event)` holds."""
    seen: list[dict] = []
    with httpx.stream(
        "GET",
        f"{stack.hub.public_url}/hub/api/users/{user}/server/progress",
        headers={"Authorization": f"token {stack.driver_token}"},
        timeout=timeout,
    ) as r:
        r.raise_for_status()
        deadline = time.monotonic() + timeout
        for line in r.iter_lines():
            if line.startswith("data:"):
                ev = json.loads(line[5:])
                seen.append(ev)
                if until(ev):
                    return seen
            if time.monotonic() > deadline:
                break
    raise AssertionError(f"progress of {user} never matched; saw {seen}")
