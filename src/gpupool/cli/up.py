"""`gpupool up`: the whole single-machine system in one command.

Parses the flags, turns them into `SystemSettings` and the engines (`--engine local`: this
host's GPUs through NVML, or simulated ones when asked or when none exist, said loudly;
`--engine local --engine slurm`: both in one pool, docs/engines.md), and hands them to
`gpupool.system.build_system`, which opens the store, registers this machine and its GPUs
(and each engine's nodes), creates the first admin and a `default` tenant, and serves the
API and dashboard with every background loop (scheduler, reconciler, telemetry, culler,
accounting) until Ctrl-C. On shutdown the MPS daemons stop; running jobs keep running and
are adopted by the next `gpupool up`.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import typer

from gpupool.engines.common.options import Flag, OptionsError, build, flags
from gpupool.engines.registry import ENGINES

ADMIN = "admin"
#: `gpupool up --help` groups its options: general ones first, then JupyterHub's, then one
#: panel per engine (`EngineSpec.panel`).
HUB_PANEL = "JupyterHub"


def default_data_dir() -> Path:
    """`$GPUPOOL_DATA_DIR`, else `$XDG_DATA_HOME/gpupool` (`~/.local/share/gpupool`)."""
    if os.environ.get("GPUPOOL_DATA_DIR"):
        return Path(os.environ["GPUPOOL_DATA_DIR"])
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "gpupool"


def _say(msg: str, *, loud: bool = False) -> None:
    if loud:
        typer.secho(msg, fg=typer.colors.YELLOW, bold=True, err=True)
    else:
        typer.echo(msg, err=True)


def _param(name: str, annotation: Any, option: Any) -> inspect.Parameter:
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation
    )


def _engine_help() -> str:
    named = [f"{s.name} ({s.description})" for s in ENGINES.values()]
    listed = ", ".join(named[:-1]) + " or " + named[-1] if len(named) > 1 else named[0]
    return (
        f"Where work runs: {listed}. Each has its own options below. Repeat it to run "
        "several engines in one pool (the first is the default; docs/engines.md)."
    )


def _flag_param(flag: Flag, panel: str) -> inspect.Parameter:
    """An engine's flag (`gpupool.engines.common.options`) as a Typer option."""
    extra: dict[str, Any] = {}
    if flag.metavar is not None:
        extra["metavar"] = flag.metavar
    if flag.min is not None:
        extra["min"] = flag.min
    option = typer.Option(
        flag.default,
        flag.name,
        help=flag.help,
        hidden=flag.hidden,
        show_default=flag.show_default,
        rich_help_panel=None if flag.general else panel,
        **extra,
    )
    return _param(flag.param, flag.annotation, option)


def _parameters() -> list[inspect.Parameter]:
    """`gpupool up`'s options: the general ones first (with the engines' `general` flags
    after --port), then JupyterHub's, then one panel per engine of `ENGINES`, each built
    from the engine's options."""
    by_engine = {name: flags(name, spec.options_class()) for name, spec in ENGINES.items()}
    general = [
        _flag_param(f, ENGINES[name].panel)
        for name, fs in by_engine.items()
        for f in fs
        if f.general
    ]
    own = [
        _flag_param(f, ENGINES[name].panel)
        for name, fs in by_engine.items()
        for f in fs
        if not f.general
    ]
    return [
        _param(
            "engine",
            list[str] | None,
            typer.Option(
                None,
                "--engine",
                metavar="NAME",
                help=_engine_help() + " Default: local.",
                show_default=False,
            ),
        ),
        _param(
            "data_dir",
            Path | None,
            typer.Option(
                None,
                "--data-dir",
                metavar="DIR",
                help="Database, job logs and state (default: ~/.local/share/gpupool).",
                show_default=False,
            ),
        ),
        _param(
            "host",
            str,
            typer.Option("127.0.0.1", "--host", metavar="ADDR", help="Address to listen on."),
        ),
        _param(
            "port",
            int,
            typer.Option(
                8000,
                "--port",
                metavar="PORT",
                help="Port of the API and dashboard (default: 8000, or 8080 when JupyterHub "
                "runs on port 8000).",
                show_default=False,
            ),
        ),
        *general,
        _param(
            "workers",
            str,
            typer.Option(
                "auto",
                "--workers",
                metavar="N|auto",
                help="API worker processes serving the port in front of this one, which then "
                "only runs the loops and what the workers forward. 0: this process serves the "
                "API itself (~150 requests/s). auto: (CPUs - 2) / 2, at most 4 (0 below 4 CPUs).",
            ),
        ),
        _param(
            "log_level",
            str,
            typer.Option("info", "--log-level", metavar="LEVEL", help="debug, info, warning."),
        ),
        _param(
            "budget_webhook",
            str | None,
            typer.Option(
                None,
                "--budget-webhook",
                metavar="URL",
                help="POST a JSON message to this http(s) URL when a tenant's GPU-hour budget "
                "is spent, once per period (default: $GPUPOOL_BUDGET_WEBHOOK_URL, or none).",
                show_default=False,
            ),
        ),
        _param(
            "jupyterhub",
            bool | None,
            typer.Option(
                None,
                "--jupyterhub/--no-jupyterhub",
                help="Run JupyterHub (notebooks through gpupool's queue) on --hub-port, with the "
                "gpupool API and dashboard on port 8080 unless --port says otherwise "
                "(default: on when configurable-http-proxy is installed).",
                show_default=False,
                rich_help_panel=HUB_PANEL,
            ),
        ),
        _param(
            "hub_port",
            int,
            typer.Option(
                8000,
                "--hub-port",
                metavar="PORT",
                help="JupyterHub's public port.",
                rich_help_panel=HUB_PANEL,
            ),
        ),
        *own,
    ]


def engine_options(name: str, values: Mapping[str, Any]) -> Any:
    """The options of engine `name` from `gpupool up`'s flag values (by parameter name);
    a wrong engine name or a refused value ends the command (exit 2) saying why."""
    spec = ENGINES.get(name)
    if spec is None:
        _say(f"error: --engine must be one of {', '.join(ENGINES)}, not {name!r}")
        raise typer.Exit(2)
    try:
        return build(name, spec.options_class(), values)
    except OptionsError as e:
        _say(f"error: {e}")
        raise typer.Exit(2) from None


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app. `up`'s options are built at run time
    (`_parameters`): Typer reads them from the function's signature."""

    def up(**values: Any) -> None:
        """Start gpupool on this machine: API, dashboard and background loops."""
        names = values["engine"] or ["local"]
        chosen = [(name, engine_options(name, values)) for name in names]
        serve(
            engine=chosen[0][0],
            options=chosen[0][1],
            engines=chosen,
            data_dir=values["data_dir"] or default_data_dir(),
            host=values["host"],
            port=values["port"],
            log_level=values["log_level"],
            jupyterhub=values["jupyterhub"],
            hub_port=values["hub_port"],
            workers=_choose_workers(values["workers"]),
            budget_webhook=values["budget_webhook"],
        )

    up.__signature__ = inspect.Signature(_parameters())  # type: ignore[attr-defined]
    app.command("up")(up)


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


def serve(
    *,
    data_dir: Path,
    host: str,
    port: int,
    log_level: str,
    jupyterhub: bool | None = False,
    hub_port: int = 8000,
    workers: int = 0,
    engine: str = "local",
    options: object | None = None,
    engines: Sequence[tuple[str, object]] = (),
    budget_webhook: str | None = None,
) -> None:
    """Build the system from the flags and serve until interrupted (see the module):
    `engine` names an engine of `ENGINES`, `options` are its options (None: defaults);
    `engines`, when given, are every engine to run in one pool, (name, options) each, the
    default first (`engine` and `options` are then ignored). `budget_webhook`: where a spent
    budget is POSTed (None: $GPUPOOL_BUDGET_WEBHOOK_URL, if set)."""
    import dataclasses
    import logging

    from gpupool.server.settings import Settings
    from gpupool.server.webhook import webhook_url
    from gpupool.system import SetupError, SystemSettings, build_system

    if not engines:
        engines = [(engine, options if options is not None else engine_options(engine, {}))]
    names = [name for name, _ in engines]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        _say(f"error: --engine {', '.join(twice)} is given twice; name each engine once")
        raise typer.Exit(2)
    chosen = [ENGINES[name].create(opts) for name, opts in engines]
    level = getattr(logging, log_level.upper(), logging.INFO)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if level > logging.DEBUG:  # one line per schema migration is noise before the password
        logging.getLogger("alembic").setLevel(logging.WARNING)
    data_dir = data_dir.expanduser().resolve()
    os.umask(0o077)  # what the server writes is its own; jobs get 022 from their launcher
    try:
        server = Settings.from_env(
            database_url=os.environ.get("GPUPOOL_DATABASE_URL", f"sqlite:///{data_dir}/gpupool.db")
        )
        if budget_webhook is not None:
            url = webhook_url(budget_webhook, "--budget-webhook")
            server = dataclasses.replace(server, budget_webhook_url=url)
    except ValueError as e:  # a GPUPOOL_* variable that does not parse
        _say(f"error: {e}")
        raise typer.Exit(2) from None
    settings = SystemSettings(
        server=server,
        data_dir=data_dir,
        host=host,
        port=port,
        workers=workers,
        jupyterhub=jupyterhub,
        hub_port=hub_port,
        admin=ADMIN,
        admin_password=os.environ.get("GPUPOOL_ADMIN_PASSWORD"),
        log_level=log_level,
    )
    try:
        build_system(settings, chosen, say=_say).serve()
    except SetupError as e:
        _say(f"error: {e}")
        raise typer.Exit(2) from None
