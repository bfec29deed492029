"""The whole gpupool system, assembled in one place from settings and its engines.

`build_system(settings, engines)` opens the store, opens each engine (its executor, its
nodes and GPUs, its telemetry; several engines are one pool: `gpupool.engines.common.engineset`),
registers the engines' nodes, each labelled with its engine, creates the first admin when
asked, builds the API app with the dashboard (and, when JupyterHub runs, the hub's settings:
its notebooks are run by the engine like any work, see gpupool.server.services.notebooks),
and adds every background loop: scheduler, checkpoint (SQLite), reconciler, telemetry (one
per sampled node), culler and accounting. `System.serve()` then starts the
hub keeper and the API worker processes and serves until SIGINT/SIGTERM; `System.stop()`
releases what was opened (running jobs keep running and are adopted on the next start).

`gpupool up` only turns its flags into `SystemSettings` and engines and calls this; the
tests and benchmarks build their servers here too (with the fake engine), so they run the
system `gpupool up` runs. This is the composition root: it sits above the server, the
dashboard (`gpupool.web`) and the hub's settings, which do not import each other downwards
(the layers in pyproject.toml), and only the CLI sits above it.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import signal
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import IO, TYPE_CHECKING, Any

from fastapi import FastAPI

from gpupool.clock import Clock, SystemClock
from gpupool.domain import Event, Tenant
from gpupool.domain.placement import ENGINE_LABEL
from gpupool.engines.common.datadir import secure_data_dir
from gpupool.engines.common.engine import (
    Engine,
    EngineEnv,
    EngineError,
    ExternalAnswer,
    ExternalWork,
)
from gpupool.engines.common.engineset import EngineSet
from gpupool.engines.common.executor import Executor, ExecutorWithNotebooks
from gpupool.server.app import create_app
from gpupool.server.context import AppContext
from gpupool.server.settings import Settings
from gpupool.store import (
    AllocationRepo,
    EventRepo,
    NodeRepo,
    NotFound,
    Store,
    StoreError,
    TenantRepo,
    WorkloadRepo,
    open_store,
)

if TYPE_CHECKING:
    import uvicorn

    from gpupool.server.hub.config import HubSettings
    from gpupool.server.workers import WorkerPool
    from gpupool.supervise import Supervisor

log = logging.getLogger(__name__)
DEFAULT_TENANT = "default"


class SetupError(Exception):
    """The system cannot start as configured; the message says what to do."""


def _print(message: str, loud: bool = False) -> None:
    print(message, file=sys.stderr)


@dataclass(frozen=True)
class SystemSettings:
    """How the whole system runs, beyond what the API's `Settings` say.

    data_dir: the data directory (locked: one server per directory; jobs and hub files live
        there); None for tests that keep no files.
    host, port: where the API and dashboard listen.
    workers: API worker processes in front of this one (gpupool.server.workers); 0: none.
    jupyterhub: run JupyterHub beside the server (None: when configurable-http-proxy is
        installed); hub_port: its public port. `hub`: the hub's settings, when the caller
        chose them (default: derived from the above, as `gpupool up` runs it).
    admin: create this first admin (password `admin_password`, else a generated one, shown
        once) and a `default` tenant on the first start; None: create no one.
    """

    server: Settings = field(default_factory=Settings)
    data_dir: Path | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 0
    jupyterhub: bool | None = False
    hub_port: int = 8000
    hub: HubSettings | None = None
    admin: str | None = None
    admin_password: str | None = None
    log_level: str = "info"


@dataclass
class System:
    """A built system (see the module docstring). `app` is its ASGI app, `ctx` the context
    its requests and loops share; `engine` is the default (first) engine, `engines` all."""

    settings: SystemSettings
    engine: Engine
    app: FastAPI
    store: Store
    executor: Executor
    say: Callable[..., None] = _print
    hub: HubSettings | None = None  # when the hub runs
    admin_password: str | None = None  # the first admin's, when created by this start
    own_store: bool = True
    lock: IO[str] | None = None
    hub_keeper: Supervisor | None = None
    pool: WorkerPool | None = None
    server: uvicorn.Server | None = None  # once started
    engines: EngineSet | None = None

    @property
    def ctx(self) -> AppContext:
        return self.app.state.ctx  # type: ignore[no-any-return]

    @property
    def url(self) -> str:
        return f"http://{self.settings.host}:{self.settings.port}"

    def start(self) -> None:
        """Start what runs beside the API: JupyterHub (kept running) and the API workers."""
        import uvicorn

        from gpupool.server.serving import make_server

        s = self.settings
        admin = s.admin or "admin"
        self.say(
            f"gpupool: serving on {self.url}  (log in: gpupool login --url {self.url} "
            f"--user {admin}; dashboard: {self.url}/dashboard)"
        )
        if self.hub is not None:
            self.hub_keeper = _start_hub(self, admin)
        config = uvicorn.Config(
            self.app, host=s.host, port=s.port, log_level=s.log_level.lower(), lifespan="on"
        )
        self.server = make_server(config)
        if s.workers:
            self.pool = _start_workers(self)

    def serve(self) -> None:
        """`start()`, serve until SIGINT/SIGTERM, then `stop()`."""
        from gpupool.server.serving import settle_heap, stop_on_signals

        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        stop_on_signals(self.server)
        settle_heap()
        assert self.server is not None
        try:
            self.server.run(sockets=self.pool.sockets if self.pool is not None else None)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.stop()
            self.say(
                "gpupool: stopped; running jobs keep running and are adopted on the next start"
            )

    def stop(self) -> None:
        """Stop the workers, the hub and the engine's helpers; close the store if it was
        opened here. Running work keeps running. Safe to call twice."""
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        if self.hub_keeper is not None:
            self.hub_keeper.stop()
            self.hub_keeper = None
        if self.engines is not None:
            self.engines.close()
        else:
            self.engine.close()
        if self.own_store:
            self.store.close()
            self.own_store = False
        if self.lock is not None:
            self.lock.close()
            self.lock = None


def build_system(
    settings: SystemSettings,
    engines: Engine | Sequence[Engine],
    *,
    clock: Clock | None = None,
    store: Store | None = None,
    say: Callable[..., None] = _print,
) -> System:
    """Assemble the system (see the module docstring). `store` may be given (tests share
    one; it is then not closed here), else it is opened from `settings.server.database_url`.
    `engines`: one engine, or several run as one pool (the first is the default: the hub's
    notebooks and work no node places run there). `say(message, loud=False)` tells the
    operator what was decided. Raises `SetupError`."""
    clock = clock or SystemClock()
    s = settings
    data_dir = s.data_dir.expanduser().resolve() if s.data_dir is not None else None
    if data_dir is not None:
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
            fixed = secure_data_dir(data_dir)
        except OSError as e:
            raise SetupError(
                f"cannot create the data directory {data_dir}: {e}; choose --data-dir"
            ) from None
        if fixed:
            say(f"gpupool: made {len(fixed)} file(s) in {data_dir} private (0700/0600)")
    jupyterhub = s.jupyterhub
    if jupyterhub is None:  # auto: on when the hub's proxy is installed
        from gpupool.server.hub.beside import hub_available

        jupyterhub = hub_available(say)
    port = s.port
    if jupyterhub and port == s.hub_port:
        if port != 8000:
            raise SetupError(f"--port and --hub-port are both {port}; choose two ports")
        port = 8080
    s = dataclasses.replace(s, data_dir=data_dir, jupyterhub=jupyterhub, port=port)
    lock = _lock_data_dir(data_dir) if data_dir is not None else None
    own_store = store is None
    try:
        if store is None:
            try:
                # checkpoints are the CheckpointLoop's, off the writers' path (Store.checkpoint)
                store = open_store(s.server.database_url, wal_autocheckpoint=False)
            except StoreError as e:
                raise SetupError(str(e)) from None
        try:
            chosen = EngineSet([engines] if isinstance(engines, Engine) else list(engines))
        except EngineError as e:
            raise SetupError(str(e)) from None
        system = _assemble(s, chosen, clock, store, say)
    except BaseException:
        if own_store and store is not None:
            store.close()
        if lock is not None:
            lock.close()
        raise
    system.own_store = own_store
    system.lock = lock
    return system


def _assemble(
    s: SystemSettings, engines: EngineSet, clock: Clock, store: Store, say: Callable[..., None]
) -> System:
    from gpupool.server.bootstrap import (
        ensure_admin,
        ensure_default_profiles,
        ensure_tenant,
        register_node,
    )
    from gpupool.server.loops.inventory import sync_tenants
    from gpupool.web import create_router

    def record(kind: str, message: str, data: Mapping[str, object]) -> None:
        with store.write() as tx:
            EventRepo(tx).add(
                Event(at=clock.now(), kind=kind, message=message, data=MappingProxyType(dict(data)))
            )

    def tenants() -> list[Tenant]:
        with store.read() as tx:
            return TenantRepo(tx).list()

    def pod_spec(workload_id: str) -> dict[str, Any] | None:
        with store.read() as tx:
            return WorkloadRepo(tx).pod_spec_of(workload_id)

    def held() -> set[str]:
        with store.read() as tx:
            return {u for a in AllocationRepo(tx).active() for u in a.gpu_uuids}

    def locate(workload_id: str) -> str | None:
        """The engine of the node of the workload's last allocation (after a restart)."""
        with store.read() as tx:
            last = AllocationRepo(tx).last_for(workload_id)
            if last is None:
                return None
            node = last[0].node
            if node in engines.owner:
                return engines.owner[node]
            try:
                return NodeRepo(tx).get(node).label_map.get(ENGINE_LABEL)
            except NotFound:
                return None

    from gpupool.server.services.external import (
        check_external,
        submitter,
        waiting_reasons,
        withdraw_external,
    )

    late: list[AppContext] = []  # the app's context, made once the engines are open

    def starting(work: ExternalWork) -> ExternalAnswer:
        raise EngineError("gpupool is still starting; try again")

    def submit_pass() -> Callable[[ExternalWork], ExternalAnswer]:
        return submitter(late[0]) if late else starting

    def check(work: ExternalWork) -> None:
        if not late:
            raise EngineError("gpupool is still starting; try again")
        check_external(late[0], work)

    def waiting(ids: Collection[str]) -> Mapping[str, str]:
        return waiting_reasons(late[0], ids) if late else {}

    def withdraw(workload_id: str, reason: str) -> None:
        if late:
            withdraw_external(late[0], workload_id, reason)

    engine = engines.default  # the hub's notebooks run on the default engine
    try:
        env = EngineEnv(clock, s.data_dir, record, say, tenants, held, notebook_template=pod_spec)
        env = dataclasses.replace(
            env, submitter=submit_pass, check=check, waiting=waiting, withdraw=withdraw
        )
        executor = engines.open(env, locate)
        nodes = engines.inventory()
    except EngineError as e:
        engines.close()
        raise SetupError(str(e)) from None
    server = dataclasses.replace(
        s.server,
        scheduler=dataclasses.replace(
            s.server.scheduler, shared_enforcement=engines.shared_enforcement
        ),
    )
    now = clock.now()
    nodes = [dataclasses.replace(n, last_heartbeat=now) for n in nodes]
    for node in nodes:
        register_node(store, node)
    password = None
    if s.admin is not None:
        password = ensure_admin(store, s.admin, s.admin_password, now)
        ensure_tenant(store, DEFAULT_TENANT, now, members=(s.admin,))
        if nodes:
            ensure_default_profiles(store, nodes[0])
    for one in engines.engines:
        sync_tenants(store, one)

    hub = None
    if s.jupyterhub:
        hub = s.hub or _hub_settings(s)
        if s.hub is None and engine.notebook_command:
            hub = dataclasses.replace(hub, singleuser_command=tuple(engine.notebook_command))
    app = create_app(server, executor=executor, clock=clock, store=store)
    app.include_router(create_router())
    ctx: AppContext = app.state.ctx
    late.append(ctx)
    # the scheduler places work only on the engine's nodes (agents' nodes are watched); an
    # engine that brings no nodes (the tests' fake one) runs work on every registered node
    ctx.work_nodes = frozenset(n.name for n in nodes) if nodes else None
    if hub is not None:  # notebooks come from the hub; where all work shares one account,
        ctx.hub, ctx.notebook_owner = True, s.admin  # the first admin's only
        if engines.several:  # the hub's notebook command is the default engine's nodes'
            ctx.notebook_engine = engine.name
    _add_loops(ctx, engines)
    system = System(s, engine, app, store, executor, say, hub, password, engines=engines)

    if s.data_dir is not None:
        say(f"gpupool: data in {s.data_dir}")
    for line, loud in engines.describe():
        say(line, loud=loud)
    if hub is not None and isinstance(executor, ExecutorWithNotebooks) and executor.one_account:
        say(
            f"gpupool: JupyterHub serves {s.admin!r} only: without root every notebook would "
            "run as this server's account, where one user's notebook or job could change "
            "another's and act in their session; other users' notebooks are refused. Run "
            "gpupool as root to give each user an account of their own.",
            loud=True,
        )
    notebooks = None
    if hub is not None:
        from gpupool.server.hub.config import _singleuser_command

        notebooks = list(hub.singleuser_command or _singleuser_command())
    for problem in engines.reach_problems(notebooks):
        say(f"gpupool: warning: {problem}", loud=True)
    if password is not None:
        shown = "from GPUPOOL_ADMIN_PASSWORD" if s.admin_password else password
        say(f"gpupool: first admin created: user {s.admin!r}, password {shown}", loud=True)
        if not s.admin_password:
            say("gpupool: (shown once; keep it)", loud=True)
    if hub is not None:
        from gpupool.server.hub.config import service_secret
        from gpupool.web.hub_sso import SSOSettings, install_hub_sso

        hub.data_dir.mkdir(parents=True, exist_ok=True)
        sso = SSOSettings(hub.hub_api_url, service_secret(hub), public_port=hub.port)
        install_hub_sso(app, sso)
    return system


def _inventory_loop_name(engines: EngineSet, engine: Engine, name: str = "inventory") -> str:
    """An engine's own loop (``inventory``) is ``inventory-<engine>`` when there are several."""
    return f"{name}-{engine.name}" if name == "inventory" and engines.several else name


def _add_loops(ctx: AppContext, engines: EngineSet) -> None:
    """Every background loop, in the order they start; each engine keeps its own inventory
    loop, telemetry and MPS daemons."""
    from gpupool.server.loops.accounting import AccountingLoop
    from gpupool.server.loops.autoscale import AutoscaleLoop
    from gpupool.server.loops.checkpoint import CheckpointLoop
    from gpupool.server.loops.culler import CullerLoop
    from gpupool.server.loops.energy import EnergyLoop
    from gpupool.server.loops.forecast import ForecastLoop
    from gpupool.server.loops.history import HistoryLoop
    from gpupool.server.loops.inventory import InventoryLoop
    from gpupool.server.loops.nodewatch import NodeWatchLoop
    from gpupool.server.loops.reconciler import ReconcilerLoop
    from gpupool.server.loops.scheduler import SchedulerLoop
    from gpupool.server.loops.telemetry import node_loops
    from gpupool.server.loops.telemetry_join import AllocationTelemetry
    from gpupool.server.services import budgets

    ctx.loops.add(SchedulerLoop(ctx))
    ctx.loops.add(AutoscaleLoop(ctx))  # node pools (issue 34): a no-op without them
    ctx.loops.add(  # start-time forecasts, on their own cadence
        ForecastLoop(  # budgets on hold and advance reservations as its inputs (issue 35)
            ctx,
            tenant_holds=budgets.forecast_tenant_holds(ctx),
            capacity_holds=budgets.forecast_capacity_holds(ctx),
        )
    )
    ctx.loops.add(NodeWatchLoop(ctx))
    if ctx.settings.mig_relayout:
        from gpupool.server.loops.mig_relayout import MigRelayoutLoop

        ctx.loops.add(MigRelayoutLoop(ctx, engines.apply_mig_layout))
    for engine in engines.engines:
        if engine.inventory_interval_s is not None:
            name = _inventory_loop_name(engines, engine)
            read = functools.partial(engines.nodes_of, engine)
            ctx.loops.add(InventoryLoop(ctx, engine, read=read, name=name))
    if ctx.store.dialect == "sqlite":
        ctx.loops.add(CheckpointLoop(ctx))
    ctx.loops.add(
        ReconcilerLoop(
            ctx,
            interval_s=ctx.settings.reconciler_interval_s,
            launch_grace_s=ctx.settings.launch_grace_s,
            daemons=engines.mps(),
        )
    )
    by_node = {}
    for tl in node_loops(ctx, engines.telemetry()):
        ctx.loops.add(tl)  # its sampler is in ctx.samplers: /metrics and the dashboard read it
        by_node[tl.node] = tl
    joined = AllocationTelemetry(by_node)  # a multi-node allocation: every node's loop
    ctx.loops.add(CullerLoop(ctx, joined.idle_seconds))
    ctx.loops.add(
        AccountingLoop(
            ctx,
            joined.busy_fraction,
            joined.memory_mib,
            estimated_fraction=joined.estimated_fraction,
        )
    )
    ctx.loops.add(HistoryLoop(ctx, [tl.sampler for tl in by_node.values()]))
    ctx.loops.add(EnergyLoop(ctx, [tl.sampler for tl in by_node.values()]))  # chargeback
    if ctx.settings.start_loops:  # loops driven by hand (tests) are not woken
        engines.follow(ctx.loops.wake, functools.partial(_inventory_loop_name, engines))


def _start_workers(system: System) -> WorkerPool:
    """The API workers in front of this process (gpupool.server.workers.WorkerPool)."""
    import errno

    from gpupool.server.workers import WorkerPool

    s = system.settings
    assert s.data_dir is not None, "API workers need a data directory"
    try:
        pool = WorkerPool(
            system.ctx,
            s.data_dir,
            s.host,
            s.port,
            s.workers,
            s.log_level,
            on_all_gone=lambda: _give_up(system),
        )
    except OSError as e:
        why = "the port is in use" if e.errno == errno.EADDRINUSE else str(e)
        raise SetupError(
            f"cannot listen on {s.host}:{s.port}: {why}; choose another --port"
        ) from None
    system.say(
        f"gpupool: {s.workers} API worker process(es) serve port {s.port}; this one (pid "
        f"{os.getpid()}) runs the loops and answers what they forward"
    )
    return pool


def _give_up(system: System) -> None:
    """Every API worker keeps dying: nothing serves the port, so stop (jobs keep running)."""
    system.say(
        "error: the API worker processes keep exiting (see their errors above); stopping. "
        "Start again without --workers to serve from one process.",
        loud=True,
    )
    if system.server is not None:
        system.server.should_exit = True


def _lock_data_dir(data_dir: Path) -> IO[str]:
    """One `gpupool up` per data dir: two servers would both run and adopt the same jobs.

    The lock is an flock, so the kernel drops it when the process dies (even by kill -9)."""
    import fcntl

    f = open(data_dir / "gpupool.lock", "a+")  # noqa: SIM115 - kept open for the lock
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        f.close()
        raise SetupError(
            f"gpupool is already running with the data directory {data_dir} "
            f"(pid {holder}); stop it first or choose another --data-dir"
        ) from None
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    return f


def _hub_settings(s: SystemSettings) -> HubSettings:
    """JupyterHub's settings when it runs beside this server, from the system's (see
    gpupool.server.hub.beside.hub_settings)."""
    from gpupool.server.hub.beside import hub_settings

    assert s.data_dir is not None, "JupyterHub needs a data directory"
    return hub_settings(s.data_dir, s.host, s.port, s.hub_port)


def _start_hub(system: System, admin: str) -> Supervisor:
    """Start JupyterHub as a child process talking to this server, kept running by its
    keeper (gpupool.server.hub.beside.start_hub_beside)."""
    from gpupool.server.hub.beside import start_hub_beside
    from gpupool.server.hub.config import HubSetupError

    assert system.hub is not None, "the hub runs only when SystemSettings.jupyterhub"
    try:
        return start_hub_beside(system.hub, system.ctx, admin, system.say)
    except HubSetupError as e:
        raise SetupError(f"cannot start JupyterHub: {e}") from None
