"""What every request handler and loop shares: store, executor, clock, settings, loops, metrics,
the telemetry samplers the dashboard reads, and which process of the server this is."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fastapi import Request

from gpupool.clock import Clock
from gpupool.domain import Workload
from gpupool.engines.common.executor import Executor
from gpupool.server.bus import AUTH_CHANGED, PRIMARY, wake
from gpupool.server.principal import TokenCache
from gpupool.server.settings import Settings
from gpupool.store import Store

if TYPE_CHECKING:
    from gpupool.server.bus import Bus
    from gpupool.server.loops.base import LoopGroup
    from gpupool.server.metrics import Metrics
    from gpupool.server.security import PasswordWork
    from gpupool.server.throttle import LoginThrottle
    from gpupool.server.workload_json import WorkloadJSONMemo
    from gpupool.telemetry.sampler import Sampler

log = logging.getLogger(__name__)


@dataclass
class AppContext:
    settings: Settings
    store: Store
    executor: Executor
    clock: Clock
    loops: LoopGroup
    metrics: Metrics
    #: which process of the server this is: `primary`, or `worker-N` (gpupool.server.workers)
    process: str = "primary"
    #: the telemetry samplers of this process, whose frames and history the dashboard shows
    #: (each `TelemetryLoop` adds its own; tests may add seeded ones)
    samplers: list[Sampler] = field(default_factory=list)
    auth_cache: TokenCache = field(default_factory=TokenCache)
    #: memo of workload JSON for the polling endpoints (see gpupool.server.workload_json)
    workload_json: WorkloadJSONMemo = field(default_factory=lambda: _workload_json())
    #: the other processes of this server, when it runs several (gpupool.server.workers)
    bus: Bus | None = None
    #: the nodes this server's executor runs work on (the engine's inventory); None: every
    #: registered node. Nodes only an agent reports (see gpupool.server.services.agents)
    #: are watched, but the scheduler places nothing there unless they are in this set.
    work_nodes: frozenset[str] | None = None
    #: node pools (issue 34): the pending work that waits for a pool's node, as the
    #: scheduler's last cycle found it (gpupool.server.loops.autoscale)
    node_pool_waiting: tuple[Workload, ...] = ()
    #: and the nodes that cycle saw (None: no cycle looked at node pools yet)
    node_pool_seen: frozenset[str] | None = None
    #: JupyterHub runs beside this server (`gpupool up --jupyterhub`): notebooks come from
    #: its spawner, with their server's command (gpupool.server.services.notebooks)
    hub: bool = False
    #: with the hub, where every user's work shares one Unix account (the executor's
    #: `one_account`): the one user whose notebooks run (the first admin; None: nobody's)
    notebook_owner: str | None = None
    #: with the hub and several engines, the engine whose nodes run the hub's notebooks (the
    #: default engine: the notebook command the hub gives is its nodes'); None: any node
    notebook_engine: str | None = None
    #: failed logins per account and client (gpupool.server.throttle); made from the store
    login_throttle: LoginThrottle = None  # type: ignore[assignment]
    #: the bounded pool that checks and hashes passwords (gpupool.server.security)
    passwords: PasswordWork = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        from gpupool.server.security import PasswordWork
        from gpupool.server.throttle import LoginThrottle

        if self.login_throttle is None:
            self.login_throttle = LoginThrottle(self.store, self.clock)
        if self.passwords is None:
            self.passwords = PasswordWork(
                self.settings.password_threads or None,
                self.settings.password_queue,
                self.settings.password_wait_s,
            )

    def runs_work_on(self, node: str) -> bool:
        """Whether the scheduler may place work on `node`."""
        return self.work_nodes is None or node in self.work_nodes

    def wake_scheduler(self) -> None:
        """Ask the scheduler loop to run a cycle soon (safe from any thread). In an API
        worker process, whose loops do not run, the primary process is asked instead."""
        self.loops.wake("scheduler")
        if self.bus is not None and not self.settings.start_loops:
            self.bus.send(PRIMARY, wake("scheduler"))

    def auth_changed(self) -> None:
        """Forget cached tokens here and in the server's other processes (after a
        revocation or a change of users or roles), and the login blocks this process saw."""
        self.auth_cache.clear()
        self.login_throttle.forget_cached()
        if self.bus is not None:
            self.bus.broadcast(AUTH_CHANGED)

    def on_notice(self, text: str) -> None:
        """Act on a notice from another process of this server (gpupool.server.bus)."""
        arg = text.partition(" ")[2]
        if text == AUTH_CHANGED:
            self.auth_cache.clear()
            self.login_throttle.forget_cached()
        elif arg and text == wake(arg):
            self.loops.wake(arg)
        else:
            log.warning("bus: unknown message %r", text)


def _token_cache() -> TokenCache:

    return TokenCache()


def _workload_json() -> WorkloadJSONMemo:
    from gpupool.server.workload_json import WorkloadJSONMemo

    return WorkloadJSONMemo()


async def get_ctx(request: Request) -> AppContext:
    """FastAPI dependency (async: no thread hop for a lookup)."""
    return request.app.state.ctx  # type: ignore[no-any-return]
