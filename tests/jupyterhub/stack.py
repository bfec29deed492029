"""A real gpupool server + a real JupyterHub (+ configurable-http-proxy) on loopback, with
the local engine on 2 simulated GPUs. Used by the end-to-end tests and the spawn benchmarks.

The gpupool server is the system `gpupool up` builds (gpupool.system), run in a thread of
this process (uvicorn, its real loops): its local engine runs each notebook (the hub's
jupyterhub-singleuser) as the owner's own account (single-user mode as root: throwaway
accounts made for the test) on the notebook's GPUs, and reports where it listens.
JupyterHub runs as a child process with the config `gpupool.server.hub.config` generates,
plus a `driver` service whose admin token the tests use for the hub's REST API. The
notebooks' Python is `tests.notebook_env` (one every account can run).
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
import psutil
import pytest

from gpupool.clock import SystemClock
from gpupool.domain import Membership, Quota, Request, Role, Tenant, User
from gpupool.domain.profiles import Profile
from gpupool.engines.local.engine import LocalEngine, LocalOptions
from gpupool.engines.local.executor import LocalExecutor
from gpupool.server.hub.config import HubSettings, start_hub, wait_hub_ready
from gpupool.server.security import hash_password
from gpupool.server.services.accounts import issue_token
from gpupool.server.settings import Settings
from gpupool.store import ProfileRepo, TenantRepo, UserRepo, open_store
from gpupool.system import System, SystemSettings, build_system
from tests.engines.conftest import end_all, throwaway_accounts
from tests.notebook_env import singleuser
from tests.support import ServedApp, free_port, wait_for

PASSWORD = "hub-test-password-1"
#: the local engine's GPUs: two simulated ones of this model, on node `NODE`
SIMULATE, NODE = "2xA100-40GB", "gpu-box"
MEMBERS = ("alice", "bob", "carol", "dave")


def seed(db_url: str) -> None:
    store = open_store(db_url)
    now = time.time()
    with store.write() as s:
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
    system: System
    server: ServedApp
    #: the API worker processes in front of `server` (a gpupool.server.workers.WorkerPool)
    pool: Any = None
    hub_proc: subprocess.Popen | None = None
    cookies: dict[str, httpx.Client] = field(default_factory=dict)
    #: undoes the throwaway accounts (as root)
    accounts: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    @property
    def app(self) -> Any:
        return self.system.app

    @property
    def executor(self) -> LocalExecutor:
        ex = self.system.executor
        assert isinstance(ex, LocalExecutor)
        return ex

    @property
    def gpu_uuids(self) -> tuple[str, ...]:
        r = self.gpupool("GET", "/gpus")
        r.raise_for_status()
        return tuple(g["uuid"] for g in r.json())

    @property
    def gpu_model(self) -> str:
        return str(self.gpupool("GET", "/gpus").json()[0]["model"])

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
        self.system.stop()  # the engine and the data dir's lock; notebooks keep running
        self.system = make_system(self.root, self.hub)
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
        end_all(self.executor)  # nothing of the test is left running
        self.system.stop()
        self.accounts.close()

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

    def notebook_pid(self, user: str) -> int:
        """The pid of `user`'s running notebook server (jupyterhub-singleuser), found by the
        local engine's tracking of the notebook's workload."""
        assert self.ready(user), f"{user} has no running notebook"
        active = [w for w in self.notebooks(user) if w["state"] == "running"]
        assert len(active) == 1, active
        for pid in sorted(self.executor.job_pids(active[0]["id"])):
            try:
                cmd = " ".join(psutil.Process(pid).cmdline())
            except psutil.NoSuchProcess:
                continue
            if "jupyterhub-singleuser" in cmd and "gpupool.engines.local.launcher" not in cmd:
                return pid
        raise AssertionError(f"no notebook server among {user}'s processes")

    def notebook_env(self, user: str) -> dict[str, str]:
        """The environment of `user`'s running notebook process (from /proc)."""
        raw = Path(f"/proc/{self.notebook_pid(user)}/environ").read_bytes().split(b"\0")
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


def make_system(root: Path, hub: HubSettings) -> System:
    """The gpupool server as `gpupool up --jupyterhub --simulate 2xA100-40GB` builds it
    (gpupool.system): the local engine in single-user mode (as root: an account per user),
    every loop, the dashboard under the hub prefix with hub sign-on. The stack starts the
    hub itself (`Stack.start_hub`)."""
    settings = Settings(
        database_url=f"sqlite:///{root / 'gpupool.db'}",
        scheduler_interval_s=0.5,
        reconciler_interval_s=0.5,
        stop_grace_s=5.0,
    )
    engine = LocalEngine(
        LocalOptions(simulate=SIMULATE, node=NODE, user_mode="single-user", mps="off")
    )
    return build_system(
        SystemSettings(server=settings, data_dir=root / "data", jupyterhub=True, hub=hub),
        engine,
        clock=SystemClock(),
    )


def build(root: Path, *, hub_poll_s: int = 1, extra_config: str = "", workers: int = 0) -> Stack:
    """The stack, started. With `workers`, gpupool serves as `gpupool up --workers N` does:
    N API worker processes on the public port in front of this process's app."""
    notebook, why = singleuser()
    if notebook is None:
        pytest.skip(why)
    root.mkdir(parents=True, exist_ok=True)
    db_url = f"sqlite:///{root / 'gpupool.db'}"
    seed(db_url)
    accounts = contextlib.ExitStack()
    if os.geteuid() == 0:  # an account per user: throwaway ones, deleted by Stack.close
        patch = accounts.enter_context(pytest.MonkeyPatch.context())
        accounts.enter_context(throwaway_accounts(patch))
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
        api_url=api_url,
        dashboard_url=api_url,
        port=free_port(),
        hub_port=free_port(),
        proxy_api_port=free_port(),
        poll_interval_s=hub_poll_s,
        extra_config=driver + extra_config,
        singleuser_command=(str(notebook),),
    )
    system = make_system(root, hub)
    app = system.app
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
    stack = Stack(root, api_url, hub, admin_token, driver_token, system, server, pool)
    stack.accounts = accounts
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
