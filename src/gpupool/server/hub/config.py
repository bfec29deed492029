"""The JupyterHub that `gpupool up` starts: its settings, its generated config file, its command.

Layout on one machine (all on loopback by default):

- JupyterHub's public proxy (configurable-http-proxy) on ``http://127.0.0.1:8000`` — users
  open this; the gpupool dashboard is reachable from the hub's Services menu.
- the hub's own API on ``127.0.0.1:8081`` and the proxy's API on ``127.0.0.1:8001``;
- the gpupool API and dashboard elsewhere, ``http://127.0.0.1:8080`` by default.

`write_hub_config` writes ``<data_dir>/jupyterhub_config.py`` (no secrets in it: the gpupool
token the hub uses travels in the environment, ``GPUPOOL_HUB_TOKEN``), `hub_command` is the
command line, `start_hub` runs it as a child process and `wait_hub_ready` polls until the
hub answers. This runs in the gpupool server (`gpupool up`); nothing here imports
JupyterHub, so it stays light. The generated config points the hub at `gpupool.jupyterhub`.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

#: Environment variable carrying the gpupool API token the hub (spawner, services) uses.
TOKEN_ENV = "GPUPOOL_HUB_TOKEN"
#: Environment variable carrying the dashboard service's OAuth client secret (its api_token);
#: the gpupool server's SSO router needs the same value (`service_secret`).
SERVICE_SECRET_ENV = "GPUPOOL_HUB_SERVICE_SECRET"
#: Environment variable carrying the gpupool API base URL (overrides the generated value).
URL_ENV = "GPUPOOL_HUB_API_URL"
CONFIG_FILE = "jupyterhub_config.py"
#: JupyterHub's name for the dashboard service; it appears under /services/<name>/.
DASHBOARD_SERVICE = "gpupool"


class HubSetupError(RuntimeError):
    """JupyterHub cannot be started as configured; the message says what to do."""


@dataclass(frozen=True, slots=True)
class HubSettings:
    """What the generated hub needs to know. Defaults fit one machine.

    api_url: the gpupool server as the hub reaches it (API under ``/api/v1``).
    dashboard_url: where the gpupool server serves its dashboard (the Services menu entry
        proxies ``/services/gpupool/`` to it); None leaves the dashboard out of the menu.
    queue_timeout_s: how long a spawn may wait in the gpupool queue before JupyterHub gives
        up (Spawner.start_timeout). Generous on purpose: queued spawns are normal here.
    spawn_ready_timeout_s: after the GPU is granted, how long the notebook server may take
        to answer (Spawner.http_timeout).
    """

    data_dir: Path
    #: Hand-off directory shared with the gpupool server's HubLaunchExecutor (same host).
    launch_dir: Path
    api_url: str = "http://127.0.0.1:8080"
    dashboard_url: str | None = "http://127.0.0.1:8080"
    ip: str = "127.0.0.1"
    port: int = 8000
    hub_port: int = 8081
    proxy_api_port: int = 8001
    queue_timeout_s: int = 24 * 3600
    spawn_ready_timeout_s: int = 120
    poll_interval_s: int = 10
    default_url: str = "/lab"
    #: Run notebooks as the hub's own Unix user (one-person machines, demos, tests) instead
    #: of each user's Unix account (needs root).
    single_user_mode: bool = True
    #: Single-user mode under root: the unprivileged account notebooks run as (None: the
    #: hub's own user; only tests' hubs do that, `gpupool up` always names one).
    jobs_account: str | None = None
    #: Where notebook home directories go in single-user mode ({username} is replaced).
    home_dir_template: str | None = None
    proxy_command: str | None = None
    extra_config: str = ""
    debug: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    #: The spawner class: notebooks on the hub's host (default) or run by the engine
    #: (`Engine.notebook_spawner`)
    spawner_class: str = "gpupool.jupyterhub.spawner.GpupoolSpawner"
    #: The single-user server command (None: `jupyterhub-singleuser` of this Python)
    singleuser_command: tuple[str, ...] | None = None

    @property
    def public_url(self) -> str:
        return f"http://{self.ip}:{self.port}"

    @property
    def hub_api_url(self) -> str:
        return f"http://127.0.0.1:{self.hub_port}/hub/api"


def find_proxy(explicit: str | None = None) -> str:
    """Path of configurable-http-proxy, or HubSetupError saying how to install it."""
    found = explicit or shutil.which("configurable-http-proxy")
    if not found:
        raise HubSetupError(
            "configurable-http-proxy is not installed; install it with "
            "`npm install -g configurable-http-proxy@5.1.0` (needs Node.js 18 or newer), "
            "then run again"
        )
    return found


def _singleuser_command() -> list[str]:
    """The single-user server of the Python environment gpupool runs in."""
    script = Path(sys.executable).with_name("jupyterhub-singleuser")
    return [str(script)] if script.exists() else ["jupyterhub-singleuser"]


def render_hub_config(settings: HubSettings) -> str:
    """The text of jupyterhub_config.py for `settings` (pure; no secrets inside)."""
    data = settings.data_dir.resolve()
    home = settings.home_dir_template or str(data / "home" / "{username}")
    proxy = find_proxy(settings.proxy_command)
    lines = [
        "# Generated by gpupool (gpupool.server.hub.config); edits are overwritten.",
        "import os",
        "",
        "c = get_config()  # noqa: F821",
        f"c.JupyterHub.ip = {settings.ip!r}",
        f"c.JupyterHub.port = {settings.port}",
        "c.JupyterHub.hub_ip = '127.0.0.1'",
        f"c.JupyterHub.hub_port = {settings.hub_port}",
        f"c.ConfigurableHTTPProxy.api_url = 'http://127.0.0.1:{settings.proxy_api_port}'",
        f"c.ConfigurableHTTPProxy.command = [{proxy!r}]",
        f"c.ConfigurableHTTPProxy.pid_file = {str(data / 'proxy.pid')!r}",
        f"c.JupyterHub.db_url = {'sqlite:///' + str(data / 'jupyterhub.sqlite')!r}",
        f"c.JupyterHub.cookie_secret_file = {str(data / 'jupyterhub_cookie_secret')!r}",
        f"c.JupyterHub.pid_file = {str(data / 'jupyterhub.pid')!r}",
        # A hub restart must keep running notebooks (and so their GPU allocations).
        "c.JupyterHub.cleanup_servers = False",
        # Queued spawns are pending spawns: gpupool's queue is the limit, not JupyterHub's.
        "c.JupyterHub.concurrent_spawn_limit = 0",
        "c.JupyterHub.authenticator_class = "
        "'gpupool.jupyterhub.authenticator.GpupoolAuthenticator'",
        f"c.JupyterHub.spawner_class = {settings.spawner_class!r}",
        f"_api_url = os.environ.get({URL_ENV!r}, {settings.api_url!r})",
        f"_token = os.environ.get({TOKEN_ENV!r}, '')",
        "c.GpupoolAuthenticator.gpupool_url = _api_url",
        # The user's gpupool token (from login) is kept encrypted in auth_state.
        "c.Authenticator.enable_auth_state = bool(os.environ.get('JUPYTERHUB_CRYPT_KEY'))",
        "c.GpupoolSpawner.gpupool_url = _api_url",
        "c.GpupoolSpawner.gpupool_token = _token",
        f"c.GpupoolSpawner.single_user_mode = {settings.single_user_mode!r}",
        f"c.GpupoolSpawner.jobs_account = {settings.jobs_account or ''!r}",
        f"c.GpupoolSpawner.home_dir_template = {home!r}",
        f"c.GpupoolSpawner.cmd = {list(settings.singleuser_command or _singleuser_command())!r}",
        f"c.Spawner.default_url = {settings.default_url!r}",
        # Waiting in the gpupool queue happens inside Spawner.start(): allow for it.
        f"c.Spawner.start_timeout = {int(settings.queue_timeout_s)}",
        f"c.Spawner.http_timeout = {int(settings.spawn_ready_timeout_s)}",
        f"c.Spawner.poll_interval = {int(settings.poll_interval_s)}",
        "c.JupyterHub.template_vars = {'announcement': "
        "__import__('gpupool.jupyterhub.notices', fromlist=['x']).notice_for}",
        # gpupool's spawn-pending page (one live message): gpupool/jupyterhub/templates
        "c.JupyterHub.template_paths = [os.path.join(os.path.dirname("
        "__import__('gpupool.jupyterhub', fromlist=['x']).__file__), 'templates')]",
        f"c.GpupoolSpawner.launch_dir = {str(settings.launch_dir.resolve())!r}",
    ]
    if settings.dashboard_url:
        lines += [
            "c.JupyterHub.services = [{",
            f"    'name': {DASHBOARD_SERVICE!r},",
            f"    'url': {settings.dashboard_url.rstrip('/')!r},",
            "    'display': True,",
            "    'oauth_no_confirm': True,",
            f"    'api_token': os.environ.get({SERVICE_SECRET_ENV!r}) or None,",
            "}]",
            "c.JupyterHub.services = [{k: v for k, v in s.items() if v is not None}"
            " for s in c.JupyterHub.services]",
            "c.JupyterHub.load_roles = [{",
            "    'name': 'user',",
            "    'scopes': ['self', f'access:services!service=" + DASHBOARD_SERVICE + "'],",
            # The sign-on checks that the hub user is the gpupool user it logged in as (the
            # token in auth_state); gpupool issued those tokens, so this tells it nothing new.
            "}, {",
            "    'name': 'gpupool-sign-on',",
            f"    'services': [{DASHBOARD_SERVICE!r}],",
            "    'scopes': ['read:users:name', 'admin:auth_state'],",
            "}]",
        ]
    if settings.debug:
        lines.append("c.JupyterHub.log_level = 'DEBUG'")
    if settings.extra_config:
        lines += ["", "# extra configuration", settings.extra_config]
    return "\n".join(lines) + "\n"


def write_hub_config(settings: HubSettings) -> Path:
    """Write ``<data_dir>/jupyterhub_config.py`` and return its path."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    path = settings.data_dir / CONFIG_FILE
    path.write_text(render_hub_config(settings))
    return path


def hub_command(settings: HubSettings) -> list[str]:
    """The command line that runs the hub with the generated config (writes it first)."""
    config = write_hub_config(settings)
    return [sys.executable, "-m", "jupyterhub", "-f", str(config)]


def _secret_file(settings: HubSettings, name: str) -> str:
    """A random secret made once and kept (mode 0600) in ``<data_dir>/<name>``."""
    path = settings.data_dir / name
    if not path.exists():
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    return path.read_text().strip()


def crypt_key(settings: HubSettings) -> str:
    """The hub's auth_state encryption key (``<data_dir>/crypt_key``)."""
    return _secret_file(settings, "crypt_key")


def service_secret(settings: HubSettings) -> str:
    """The dashboard service's OAuth client secret (``<data_dir>/service_secret``); give it
    to the gpupool server's SSO router (`gpupool.web.hub_sso.SSOSettings`)."""
    return _secret_file(settings, "service_secret")


def hub_env(settings: HubSettings, token: str, base: Mapping[str, str] | None = None) -> dict:
    """Environment for the hub process: `base` (default os.environ), the gpupool token and
    the auth_state key."""
    env = dict(os.environ if base is None else base)
    env.update(settings.env)
    env[TOKEN_ENV] = token
    env.setdefault(URL_ENV, settings.api_url)
    env.setdefault("JUPYTERHUB_CRYPT_KEY", crypt_key(settings))
    env.setdefault(SERVICE_SECRET_ENV, service_secret(settings))
    return env


def start_hub(
    settings: HubSettings, token: str, *, log_path: Path | None = None
) -> subprocess.Popen:
    """Start JupyterHub (which starts configurable-http-proxy) as a child process.

    `token` is a gpupool API token with admin rights; the hub submits and releases notebook
    workloads on behalf of its users with it. Output goes to `log_path` (default
    ``<data_dir>/jupyterhub.log``). Returns at once; use `wait_hub_ready`.
    """
    cmd = hub_command(settings)
    log = open(log_path or settings.data_dir / "jupyterhub.log", "ab")  # noqa: SIM115
    try:
        return subprocess.Popen(
            cmd,
            cwd=settings.data_dir,
            env=hub_env(settings, token),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    finally:
        log.close()


def wait_hub_ready(
    settings: HubSettings, timeout_s: float = 60.0, proc: subprocess.Popen | None = None
) -> None:
    """Poll the hub through the proxy until it answers; HubSetupError after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    url = f"{settings.public_url}/hub/api/"
    last = "no answer yet"
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise HubSetupError(
                f"JupyterHub exited with code {proc.returncode} while starting; "
                f"see {settings.data_dir / 'jupyterhub.log'}"
            )
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError as e:
            last = str(e) or type(e).__name__
        time.sleep(0.2)  # readiness polling of a real process, bounded by timeout_s
    raise HubSetupError(
        f"JupyterHub did not answer at {url} within {timeout_s:g} s ({last}); "
        f"see {settings.data_dir / 'jupyterhub.log'}"
    )
