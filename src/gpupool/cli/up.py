"""`gpupool up`: the whole single-machine system in one command.

Opens the store (SQLite in the data dir), registers this machine and its GPUs (real ones
through NVML; simulated ones when asked, or when none exist, said loudly), creates the first
admin and a `default` tenant, and serves the API and dashboard with every background loop
(scheduler, reconciler, telemetry, culler, accounting) until Ctrl-C. On shutdown the MPS
daemons stop; running jobs keep running and are adopted by the next `gpupool up`.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
from dataclasses import dataclass
from pathlib import Path

import typer

from gpupool.clock import SystemClock

DEFAULT_SIMULATION = "4xH100-80GB"
ADMIN = "admin"
DEFAULT_TENANT = "default"


def default_data_dir() -> Path:
    """`$GPUPOOL_DATA_DIR`, else `$XDG_DATA_HOME/gpupool` (`~/.local/share/gpupool`)."""
    if os.environ.get("GPUPOOL_DATA_DIR"):
        return Path(os.environ["GPUPOOL_DATA_DIR"])
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "gpupool"


@dataclass
class Plan:
    """What `up` decided, printed before serving (and used by tests)."""

    data_dir: Path
    node: str
    simulated: bool
    spec: str | None
    user_mode: str
    mps: bool
    jobs_account: str | None = None


def _say(msg: str, *, loud: bool = False) -> None:
    if loud:
        typer.secho(msg, fg=typer.colors.YELLOW, bold=True, err=True)
    else:
        typer.echo(msg, err=True)


def _open_gpus(simulate: str | None, node: str):  # noqa: ANN202 - GPUSource
    from gpupool.telemetry import NoGPUError, SpecError, open_source

    if simulate:
        try:
            return open_source(simulate, hostname=node), simulate
        except SpecError as e:
            _say(f"error: --simulate {simulate!r}: {e}")
            raise typer.Exit(2) from None
    try:
        return open_source(None, hostname=node), None
    except NoGPUError as e:
        _say(
            f"No NVIDIA GPU found ({e}). Starting on SIMULATED GPUs ({DEFAULT_SIMULATION}): "
            "jobs run for real but see fake GPU UUIDs. Pass --simulate SPEC to choose them.",
            loud=True,
        )
        return open_source(DEFAULT_SIMULATION, hostname=node), DEFAULT_SIMULATION


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""

    @app.command("up")
    def up(
        simulate: str | None = typer.Option(
            None,
            "--simulate",
            metavar="SPEC",
            help="Use simulated GPUs, e.g. 4xH100-80GB or 2xH100-80GB,2xA100-40GB.",
        ),
        data_dir: Path | None = typer.Option(
            None,
            "--data-dir",
            help="Database, job logs and state (default: ~/.local/share/gpupool).",
        ),
        host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
        port: int = typer.Option(8000, "--port", help="Port to listen on."),
        user_mode: str = typer.Option(
            "auto",
            "--user-mode",
            help="Who jobs run as: per-user (owner's Unix account; needs root), single-user "
            "(one account: --jobs-account when root, else the server's own), or auto "
            "(per-user when root on real GPUs). Never root. See docs/security.md.",
        ),
        jobs_account: str = typer.Option(
            "gpupool-jobs",
            "--jobs-account",
            help="Unprivileged Unix account of single-user jobs when gpupool runs as root "
            "(created if missing; nobody if it cannot be).",
        ),
        mps: str = typer.Option(
            "auto",
            "--mps",
            help="CUDA MPS for fractional shares on shared GPUs: on, off, or auto (on when "
            "nvidia-cuda-mps-control exists and the GPUs are real).",
        ),
        mps_binary: str = typer.Option(
            "nvidia-cuda-mps-control", "--mps-binary", help="The MPS control program."
        ),
        mps_service_account: str | None = typer.Option(
            None,
            "--mps-service-account",
            help="Run every job on shared GPUs as this Unix account so all of them get MPS.",
        ),
        node_name: str | None = typer.Option(
            None, "--node-name", help="Name of this machine in gpupool (default: hostname)."
        ),
        jupyterhub: bool | None = typer.Option(
            None,
            "--jupyterhub/--no-jupyterhub",
            help="Run JupyterHub (notebooks through gpupool's queue) on --hub-port, with the "
            "gpupool API and dashboard on port 8080 unless --port says otherwise. Default: on "
            "when configurable-http-proxy is installed.",
            show_default=False,
        ),
        hub_port: int = typer.Option(8000, "--hub-port", help="JupyterHub's public port."),
        workers: str = typer.Option(
            "auto",
            "--workers",
            metavar="N|auto",
            help="API worker processes serving the port in front of this one, which then "
            "only runs the loops and what the workers forward. 0: this process serves the "
            "API itself (~150 requests/s). auto: (CPUs - 2) / 2, at most 4 (0 below 4 CPUs).",
        ),
        log_level: str = typer.Option("info", "--log-level", help="debug, info, warning."),
    ) -> None:
        """Start gpupool on this machine: API, dashboard and background loops."""
        serve(
            simulate=simulate,
            data_dir=data_dir or default_data_dir(),
            host=host,
            port=port,
            user_mode=user_mode,
            jobs_account=jobs_account,
            mps=mps,
            mps_binary=mps_binary,
            mps_service_account=mps_service_account,
            node_name=node_name or socket.gethostname(),
            log_level=log_level,
            jupyterhub=jupyterhub,
            hub_port=hub_port,
            workers=_choose_workers(workers),
        )


def _choose_workers(requested: str) -> int:
    """--workers N|auto -> a count (auto: leave two CPUs to the loops and the jobs' helpers,
    then one worker per two CPUs, at most 4: bench/results/api_load.md)."""
    if requested == "auto":
        return min(4, max(0, ((os.cpu_count() or 1) - 2) // 2))
    try:
        n = int(requested)
    except ValueError:
        n = -1
    if not 0 <= n <= 64:
        _say(f"error: --workers must be a number from 0 to 64 or auto, not {requested!r}")
        raise typer.Exit(2)
    return n


def _choose_user_mode(requested: str, simulated: bool) -> str:
    from gpupool.executors.local import UserMode

    if requested not in ("auto", "per-user", "single-user"):
        _say(f"error: --user-mode must be auto, per-user or single-user, not {requested!r}")
        raise typer.Exit(2)
    if requested == "auto":
        return str(
            UserMode.PER_USER if os.geteuid() == 0 and not simulated else UserMode.SINGLE_USER
        )
    if requested == "per-user" and os.geteuid() != 0:
        _say("error: --user-mode per-user needs gpupool to run as root; use single-user")
        raise typer.Exit(2)
    return requested


def _choose_mps(requested: str, binary: str, simulated: bool) -> bool:
    if requested not in ("auto", "on", "off"):
        _say(f"error: --mps must be auto, on or off, not {requested!r}")
        raise typer.Exit(2)
    found = shutil.which(binary) is not None
    if requested == "on" and not found:
        _say(f"error: --mps on, but {binary!r} was not found; install it or use --mps off")
        raise typer.Exit(2)
    return requested == "on" or (requested == "auto" and found and not simulated)


def serve(
    *,
    simulate: str | None,
    data_dir: Path,
    host: str,
    port: int,
    user_mode: str,
    mps: str,
    mps_binary: str,
    mps_service_account: str | None,
    node_name: str,
    log_level: str,
    jupyterhub: bool | None = False,
    hub_port: int = 8000,
    workers: int = 0,
    jobs_account: str = "gpupool-jobs",
) -> None:
    """Set everything up and serve until interrupted (see the module docstring)."""
    import psutil
    import uvicorn

    from gpupool.domain import Enforcement, Event, Node
    from gpupool.executors.local import LocalExecutor
    from gpupool.executors.mps import MPSManager
    from gpupool.scheduler.types import SchedulerConfig
    from gpupool.server.app import create_app
    from gpupool.server.bootstrap import (
        ensure_admin,
        ensure_default_profiles,
        ensure_tenant,
        register_node,
    )
    from gpupool.server.loops.accounting import AccountingLoop
    from gpupool.server.loops.culler import CullerLoop
    from gpupool.server.loops.history import HistoryLoop
    from gpupool.server.loops.reconciler import ReconcilerLoop
    from gpupool.server.loops.telemetry import TelemetryLoop
    from gpupool.server.serving import make_server, settle_heap, stop_on_signals
    from gpupool.server.settings import Settings
    from gpupool.store import EventRepo, StoreError, open_store
    from gpupool.telemetry.exporter import TelemetryCollector

    logging.basicConfig(
        level=getattr(logging, log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from gpupool.cli.up_isolation import choose_jobs_account, isolation_lines, secure_data_dir

    data_dir = data_dir.expanduser().resolve()
    os.umask(0o077)  # what the server writes is its own; jobs get 022 from their launcher
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        fixed = secure_data_dir(data_dir)
    except OSError as e:
        _say(f"error: cannot create the data directory {data_dir}: {e}; choose --data-dir")
        raise typer.Exit(2) from None
    if fixed:
        _say(f"gpupool: made {len(fixed)} file(s) in {data_dir} private (0700/0600)")
    if jupyterhub is None:  # auto: on when the hub's proxy is installed
        jupyterhub = _hub_available()
    if jupyterhub and port == hub_port:
        if port != 8000:
            _say(f"error: --port and --hub-port are both {port}; choose two ports")
            raise typer.Exit(2)
        port = 8080
    lock = _lock_data_dir(data_dir)  # noqa: F841 - held (flock) until the process exits
    clock = SystemClock()
    source, spec = _open_gpus(simulate, node_name)
    simulated = bool(getattr(source, "simulated", False))
    chosen_mode = _choose_user_mode(user_mode, simulated)
    use_mps = _choose_mps(mps, mps_binary, simulated)
    run_as, account_warning = choose_jobs_account(chosen_mode, jobs_account)
    if account_warning:
        _say(f"gpupool: warning: {account_warning}", loud=True)
    plan = Plan(data_dir, node_name, simulated, spec, chosen_mode, use_mps, run_as)
    if simulated:
        _say(f"*** SIMULATED GPUs ({spec}): not real hardware ***", loud=True)

    settings = Settings.from_env(
        database_url=os.environ.get("GPUPOOL_DATABASE_URL", f"sqlite:///{data_dir}/gpupool.db"),
        scheduler=SchedulerConfig(
            shared_enforcement=Enforcement.MPS if use_mps else Enforcement.POLICED
        ),
    )
    try:
        # checkpoints are the CheckpointLoop's, off the writers' path (Store.checkpoint)
        store = open_store(settings.database_url, wal_autocheckpoint=False)
    except StoreError as e:
        _say(f"error: {e}")
        raise typer.Exit(2) from None
    now = clock.now()
    snap = source.snapshot()
    node = Node(
        node_name,
        tuple(g.to_domain() for g in snap.gpus),
        cpu_milli=(os.cpu_count() or 1) * 1000,
        memory_mib=psutil.virtual_memory().total // (1024 * 1024),
        last_heartbeat=now,
    )
    register_node(store, node)
    password = ensure_admin(store, ADMIN, os.environ.get("GPUPOOL_ADMIN_PASSWORD"), now)
    ensure_tenant(store, DEFAULT_TENANT, now, members=(ADMIN,))
    ensure_default_profiles(store, node)

    def record(kind: str, message: str, data: dict[str, object]) -> None:
        with store.write() as s:
            EventRepo(s).add(Event(at=clock.now(), kind=kind, message=message, data=data))

    manager = None
    if use_mps:
        manager = MPSManager(
            mps_base(data_dir),
            binary=mps_binary,
            service_account=mps_service_account,
            on_event=record,
        )
    executor = LocalExecutor(
        data_dir / "jobs", clock=clock, user_mode=chosen_mode, mps=manager, jobs_account=run_as
    )
    if jupyterhub:
        from gpupool.jupyterhub.launch import HubLaunchExecutor

        executor = HubLaunchExecutor(executor, data_dir / "hub-launch", clock=clock)
    holder: dict[str, TelemetryLoop] = {}
    collector = TelemetryCollector(
        lambda: holder["t"].sampler.latest if "t" in holder else None, node_name
    )
    app = create_app(settings, executor=executor, clock=clock, telemetry=collector, store=store)
    ctx = app.state.ctx
    ctx.work_nodes = frozenset({node_name})  # agents' nodes are watched, not run on (yet)
    if not any(str(getattr(r, "path", "")).startswith("/dashboard") for r in app.routes):
        from gpupool.web import create_router

        app.include_router(create_router())
    tl = TelemetryLoop(
        ctx,
        source,
        node=node_name,
        mps_daemons=manager.daemons if manager is not None else None,
        police_unowned=chosen_mode == "per-user",
    )
    holder["t"] = tl
    ctx.loops.add(ReconcilerLoop(ctx, mps=manager, node=node_name))
    ctx.loops.add(tl)
    ctx.loops.add(CullerLoop(ctx, tl.idle_seconds))
    ctx.loops.add(AccountingLoop(ctx, tl.busy_fraction, tl.memory_mib))
    ctx.loops.add(HistoryLoop(ctx, [tl.sampler]))
    ctx.extras["up_plan"] = plan

    _say(f"gpupool: data in {data_dir}")
    _say(
        f"gpupool: node {node_name} with {len(node.gpus)} GPU(s): "
        + ", ".join(f"{g.index}:{g.model}" for g in node.gpus)
    )
    for line in isolation_lines(chosen_mode, run_as):
        _say(line, loud=chosen_mode == "single-user" and run_as is None)
    tracking = "cgroup, " if executor_tracks_cgroups(executor) else ""
    _say(f"gpupool: a job's processes are tracked by {tracking}process group, session and marker")
    _say(f"gpupool: fractional shares are enforced by {'CUDA MPS' if use_mps else 'policing'}")
    if password is not None:
        shown = (
            "from GPUPOOL_ADMIN_PASSWORD" if os.environ.get("GPUPOOL_ADMIN_PASSWORD") else password
        )
        _say(f"gpupool: first admin created: user {ADMIN!r}, password {shown}", loud=True)
        if not os.environ.get("GPUPOOL_ADMIN_PASSWORD"):
            _say("gpupool: (shown once; keep it)", loud=True)
    url = f"http://{host}:{port}"
    _say(f"gpupool: serving on {url}  (log in: gpupool login --url {url} --user {ADMIN})")

    hub = _hub_settings(data_dir, host, port, hub_port, chosen_mode, run_as) if jupyterhub else None
    if hub is not None:
        from gpupool.jupyterhub.config import service_secret
        from gpupool.jupyterhub.sso import SSOSettings, install_hub_sso

        hub.data_dir.mkdir(parents=True, exist_ok=True)
        install_hub_sso(app, SSOSettings(hub.hub_api_url, service_secret(hub)))
    hub_keeper = _start_hub(ctx, hub) if hub is not None else None

    config = uvicorn.Config(app, host=host, port=port, log_level=log_level.lower(), lifespan="on")
    server = make_server(config)
    pool = (
        _start_workers(ctx, server, data_dir, host, port, workers, log_level) if workers else None
    )
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    stop_on_signals(server)
    settle_heap()
    try:
        server.run(sockets=pool.sockets if pool is not None else None)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if pool is not None:
            pool.close()
        if hub_keeper is not None:
            hub_keeper.stop()
        if manager is not None:
            manager.stop_all()
            if manager.base_dir.is_relative_to("/run/gpupool"):  # this data dir's, under /run
                shutil.rmtree(manager.base_dir.parent, ignore_errors=True)
        source.close()
        store.close()
        _say("gpupool: stopped; running jobs keep running and are adopted on the next start")


def _start_workers(ctx, server, data_dir, host, port, workers, log_level):  # noqa: ANN001, ANN202
    """The API workers in front of this process (gpupool.server.workers.WorkerPool)."""
    import errno

    from gpupool.server.workers import WorkerPool

    try:
        pool = WorkerPool(
            ctx, data_dir, host, port, workers, log_level, on_all_gone=lambda: _give_up(server)
        )
    except OSError as e:
        why = "the port is in use" if e.errno == errno.EADDRINUSE else str(e)
        _say(f"error: cannot listen on {host}:{port}: {why}; choose another --port")
        raise typer.Exit(2) from None
    _say(
        f"gpupool: {workers} API worker process(es) serve port {port}; this one (pid "
        f"{os.getpid()}) runs the loops and answers what they forward"
    )
    return pool


def _give_up(server) -> None:  # noqa: ANN001 - a uvicorn.Server
    """Every API worker keeps dying: nothing serves the port, so stop (jobs keep running)."""
    _say(
        "error: the API worker processes keep exiting (see their errors above); stopping. "
        "Start again without --workers to serve from one process.",
        loud=True,
    )
    server.should_exit = True


def executor_tracks_cgroups(executor) -> bool:  # noqa: ANN001 - an Executor
    inner = getattr(executor, "inner", executor)
    return getattr(inner, "cgroup_root", None) is not None


def mps_base(data_dir: Path) -> Path:
    """Where MPS pipe directories go. Jobs of other Unix accounts must reach them (a client
    that cannot reach its pipe directory silently runs without MPS, i.e. without limits), so
    when gpupool runs as root (jobs then run as other accounts, in either mode) they live in
    /run/gpupool/<data dir hash>/mps (world-traversable), not in the private data dir."""
    if os.geteuid() != 0:
        return data_dir / "mps"
    import hashlib

    tag = hashlib.sha256(str(data_dir).encode()).hexdigest()[:12]  # one per data dir
    base = Path("/run/gpupool") / tag / "mps"
    base.mkdir(parents=True, exist_ok=True)
    for d in (base.parent.parent, base.parent, base):
        d.chmod(0o755)
    return base


def _lock_data_dir(data_dir: Path):  # noqa: ANN202 - an open file holding the lock
    """One `gpupool up` per data dir: two servers would both run and adopt the same jobs.

    The lock is an flock, so the kernel drops it when the process dies (even by kill -9)."""
    import fcntl

    f = open(data_dir / "gpupool.lock", "a+")  # noqa: SIM115 - kept open for the lock
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        _say(
            f"error: gpupool is already running with the data directory {data_dir} "
            f"(pid {holder}); stop it first or choose another --data-dir"
        )
        raise typer.Exit(2) from None
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    return f


def _hub_available() -> bool:
    """Whether JupyterHub can be started here (its configurable-http-proxy is installed)."""
    from gpupool.jupyterhub.config import HubSetupError, find_proxy

    try:
        find_proxy()
    except HubSetupError as e:
        _say(f"gpupool: JupyterHub not started: {e} (or pass --no-jupyterhub to silence this)")
        return False
    return True


def _hub_settings(data_dir: Path, host: str, port: int, hub_port: int, mode: str, run_as=None):  # noqa: ANN001, ANN202
    """JupyterHub's settings when it runs beside this server (see gpupool.jupyterhub).
    With a jobs account (root, single-user), notebooks run as it, with their homes under its
    home (the data dir is private to the server)."""
    import pwd

    from gpupool.jupyterhub.config import HubSettings

    homes = None
    if run_as is not None:
        base = pwd.getpwnam(run_as).pw_dir
        homes = f"{base}/{{username}}" if os.path.isdir(base) else None
        homes = homes or "/var/lib/gpupool-notebooks/{username}"

    api = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
    return HubSettings(
        data_dir=data_dir / "hub",
        launch_dir=data_dir / "hub-launch",
        api_url=api,
        dashboard_url=api,
        ip=host,
        port=hub_port,
        # JupyterHub's defaults for a public port of 8000 (proxy API 8001, hub API 8081)
        proxy_api_port=hub_port + 1,
        hub_port=hub_port + 81,
        single_user_mode=mode == "single-user",
        jobs_account=run_as,
        home_dir_template=homes,
    )


def _start_hub(ctx, hub):  # noqa: ANN001, ANN202
    """Start JupyterHub as a child process talking to this server, kept running by
    `keep_hub` (its exits are reported here with the end of its log)."""
    from gpupool.jupyterhub.config import HubSetupError, find_proxy, start_hub
    from gpupool.jupyterhub.keeper import check_ports, keep_hub
    from gpupool.server.services.accounts import issue_token

    log_path = hub.data_dir / "jupyterhub.log"
    try:
        find_proxy()
        check_ports(hub)
        token = issue_token(ctx, ADMIN, "jupyterhub", None).token
        keeper = keep_hub(
            lambda: start_hub(hub, token, log_path=log_path),
            log_path,
            report=lambda message: _say(f"gpupool: {message}", loud=True),
        )
        keeper.start()
    except HubSetupError as e:
        _say(f"error: cannot start JupyterHub: {e}")
        raise typer.Exit(2) from None
    _say(
        f"gpupool: JupyterHub on {hub.public_url} (users log in there; the dashboard is also "
        f"in its Services menu; log: {log_path})",
        loud=True,
    )
    return keeper
