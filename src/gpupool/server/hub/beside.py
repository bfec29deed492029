"""JupyterHub beside a gpupool server, as `gpupool up` runs it (gpupool.system): whether it
can run here, its settings from the server's address and data directory, the admin token
each start hands it, and its start under the keeper that restarts it (`keeper`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gpupool.server.context import AppContext
from gpupool.server.hub.config import HubSettings, HubSetupError, find_proxy, start_hub
from gpupool.server.hub.keeper import check_ports, keep_hub
from gpupool.supervise import Supervisor

#: The name of the admin token each start hands JupyterHub (the previous one is revoked).
HUB_TOKEN_NAME = "jupyterhub-hub"


def hub_available(say: Callable[..., None]) -> bool:
    """Whether JupyterHub can be started here (its configurable-http-proxy is installed)."""
    try:
        find_proxy()
    except HubSetupError as e:
        say(f"gpupool: JupyterHub not started: {e} (or pass --no-jupyterhub to silence this)")
        return False
    return True


def hub_settings(data_dir: Path, host: str, port: int, hub_port: int) -> HubSettings:
    """JupyterHub's settings beside the server listening on `host`:`port` with the data
    directory `data_dir` (see gpupool.jupyterhub); its public port is `hub_port`. The hub
    only talks to gpupool's API: the engine runs its notebooks, as the account the engine's
    rules pick."""
    api = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
    return HubSettings(
        data_dir=data_dir / "hub",
        api_url=api,
        dashboard_url=api,
        ip=host,
        port=hub_port,
        # JupyterHub's defaults for a public port of 8000 (proxy API 8001, hub API 8081)
        proxy_api_port=hub_port + 1,
        hub_port=hub_port + 81,
    )


def start_hub_beside(
    hub: HubSettings, ctx: AppContext, admin: str, say: Callable[..., None]
) -> Supervisor:
    """Start JupyterHub as a child process talking to this server with a new token of
    `admin`, kept running by `keep_hub` (its exits are reported through `say` with the end
    of its log); HubSetupError when it cannot start."""
    log_path = hub.data_dir / "jupyterhub.log"
    find_proxy()
    check_ports(hub)
    token = hub_token(ctx, admin)
    keeper = keep_hub(
        lambda: start_hub(hub, token, log_path=log_path),
        log_path,
        report=lambda message: say(f"gpupool: {message}", loud=True),
    )
    keeper.start()
    say(
        f"gpupool: JupyterHub on {hub.public_url} (users log in there; the dashboard is also "
        f"in its Services menu; log: {log_path})",
        loud=True,
    )
    return keeper


def hub_token(ctx: AppContext, admin: str) -> str:
    """A new admin token of `admin` for the hub (the server's default lifetime), named
    `HUB_TOKEN_NAME`; the earlier starts' hub tokens of `admin` are revoked first, so only
    the running hub's token is live."""
    from gpupool.server.services.accounts import issue_token
    from gpupool.store import TokenRepo

    now = ctx.clock.now()
    with ctx.store.write() as s:
        repo = TokenRepo(s)
        for old in repo.list(admin):
            if old.name == HUB_TOKEN_NAME and old.revoked_at is None:
                repo.revoke(old.id, now)
    ctx.auth_changed()
    return issue_token(ctx, admin, HUB_TOKEN_NAME, None).token
