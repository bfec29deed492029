"""`gpupool up`: the whole single-machine system in one command.

Parses the flags, turns them into `SystemSettings` and an engine (`--engine local`: this
host's GPUs through NVML, or simulated ones when asked or when none exist, said loudly), and
hands them to `gpupool.system.build_system`, which opens the store, registers this
machine and its GPUs, creates the first admin and a `default` tenant, and serves the API and
dashboard with every background loop (scheduler, reconciler, telemetry, culler, accounting)
until Ctrl-C. On shutdown the MPS daemons stop; running jobs keep running and are adopted by
the next `gpupool up`.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import typer

ADMIN = "admin"
#: `gpupool up --help` groups its options: general ones first, then one panel per part.
HUB_PANEL = "JupyterHub"
LOCAL_PANEL = "Local engine (--engine local)"
KUBE_PANEL = "Kubernetes engine (--engine kubernetes)"
SLURM_PANEL = "Slurm engine (--engine slurm)"
#: Engines `gpupool up --engine` offers.
AVAILABLE = ("local", "kubernetes", "slurm")
#: Engines named in `--engine` that do not exist yet -> the issue that adds them.
PLANNED: dict[str, int] = {}


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


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""

    @app.command("up")
    def up(
        # General options first (the "Options" panel), then one panel per engine or part.
        engine: str = typer.Option(
            "local",
            "--engine",
            metavar="NAME",
            help="Where work runs: local (processes on this machine's GPUs), kubernetes "
            "(pods of a cluster) or slurm (batch jobs of the Slurm cluster of $SLURM_CONF). "
            "Each has its own options below.",
        ),
        simulate: str | None = typer.Option(
            None,
            "--simulate",
            metavar="SPEC",
            help="Use simulated GPUs, e.g. 4xH100-80GB or 2xH100-80GB,2xA100-40GB; "
            "H100-80GB:mig=all-1g.10gb has MIG mode on with that layout (docs/mig.md).",
        ),
        data_dir: Path | None = typer.Option(
            None,
            "--data-dir",
            metavar="DIR",
            help="Database, job logs and state (default: ~/.local/share/gpupool).",
            show_default=False,
        ),
        host: str = typer.Option(
            "127.0.0.1", "--host", metavar="ADDR", help="Address to listen on."
        ),
        port: int = typer.Option(
            8000,
            "--port",
            metavar="PORT",
            help="Port of the API and dashboard (default: 8000, or 8080 when JupyterHub "
            "runs on port 8000).",
            show_default=False,
        ),
        user_mode: str = typer.Option(
            "auto",
            "--user-mode",
            metavar="MODE",
            help="Who jobs and notebooks run as: per-user (each owner's existing Unix account; "
            "needs root), single-user (no directory of accounts: as root, an account gpupool "
            "makes for each user, gp-<name>; else the server's own, and JupyterHub serves the "
            "first admin only), or auto (per-user when root on real GPUs). Never root. See "
            "docs/security.md.",
        ),
        jobs_account: str | None = typer.Option(
            None,
            "--jobs-account",
            metavar="NAME",
            help="Single-user mode as root: run every member's plain jobs as this one "
            "unprivileged account (created if missing; nobody if it cannot be) instead of "
            "each user's own. Members' jobs can then reach each other; notebooks keep their "
            "own accounts. Not recommended.",
        ),
        node_name: str | None = typer.Option(
            None,
            "--node-name",
            metavar="NAME",
            help="Name of this machine in gpupool (default: the host name).",
            show_default=False,
        ),
        workers: str = typer.Option(
            "auto",
            "--workers",
            metavar="N|auto",
            help="API worker processes serving the port in front of this one, which then "
            "only runs the loops and what the workers forward. 0: this process serves the "
            "API itself (~150 requests/s). auto: (CPUs - 2) / 2, at most 4 (0 below 4 CPUs).",
        ),
        log_level: str = typer.Option(
            "info", "--log-level", metavar="LEVEL", help="debug, info, warning."
        ),
        jupyterhub: bool | None = typer.Option(
            None,
            "--jupyterhub/--no-jupyterhub",
            help="Run JupyterHub (notebooks through gpupool's queue) on --hub-port, with the "
            "gpupool API and dashboard on port 8080 unless --port says otherwise "
            "(default: on when configurable-http-proxy is installed).",
            show_default=False,
            rich_help_panel=HUB_PANEL,
        ),
        hub_port: int = typer.Option(
            8000,
            "--hub-port",
            metavar="PORT",
            help="JupyterHub's public port.",
            rich_help_panel=HUB_PANEL,
        ),
        mps: str = typer.Option(
            "auto",
            "--mps",
            metavar="on|off|auto",
            help="CUDA MPS for fractional shares on shared GPUs (auto: on when "
            "nvidia-cuda-mps-control exists and the GPUs are real).",
            rich_help_panel=LOCAL_PANEL,
        ),
        mps_binary: str = typer.Option(
            "nvidia-cuda-mps-control",
            "--mps-binary",
            metavar="PATH",
            help="The MPS control program.",
            rich_help_panel=LOCAL_PANEL,
        ),
        mps_service_account: str | None = typer.Option(
            None,
            "--mps-service-account",
            metavar="NAME",
            help="Run every job on shared GPUs as this Unix account so all of them get MPS.",
            rich_help_panel=LOCAL_PANEL,
        ),
        kubeconfig: str | None = typer.Option(
            None,
            "--kubeconfig",
            metavar="FILE",
            help="The kubeconfig to use (default: the pod's service account in a cluster, "
            "else $KUBECONFIG or ~/.kube/config).",
            rich_help_panel=KUBE_PANEL,
        ),
        namespace_prefix: str = typer.Option(
            "gpupool-",
            "--namespace-prefix",
            metavar="TEXT",
            help="Tenant a/b runs in namespace <prefix>a-b.",
            rich_help_panel=KUBE_PANEL,
        ),
        image: str = typer.Option(
            "python:3.12-slim",
            "--image",
            metavar="IMAGE",
            help="The container image jobs run in.",
            rich_help_panel=KUBE_PANEL,
        ),
        home_size: str = typer.Option(
            "10Gi",
            "--home-size",
            metavar="SIZE",
            help="Size of each member's notebook-home PVC (home-<user> in the tenant's namespace).",
            rich_help_panel=KUBE_PANEL,
        ),
        home_storage_class: str | None = typer.Option(
            None,
            "--home-storage-class",
            metavar="NAME",
            help="StorageClass of the notebook homes (default: the cluster's default).",
            rich_help_panel=KUBE_PANEL,
        ),
        allow_cloud_metadata: bool = typer.Option(
            False,
            "--no-block-cloud-metadata",
            help="Let tenant pods reach the cloud metadata server 169.254.169.254 (node "
            "credentials), for workloads that need it (workload identity). By default a "
            "NetworkPolicy in every tenant namespace keeps them from it (needs a CNI that "
            "enforces NetworkPolicy).",
            rich_help_panel=KUBE_PANEL,
        ),
        block_cloud_metadata: bool = typer.Option(
            False, "--block-cloud-metadata", hidden=True, help="The default; kept for scripts."
        ),
        pod_security: str = typer.Option(
            "restricted",
            "--pod-security",
            metavar="LEVEL",
            help="The Pod Security level of tenant namespaces and pods. restricted: pods run "
            "as --run-as-user, non-root, all capabilities dropped. baseline: the escape hatch "
            "for images that must run as root (as the image's user, with the runtime's "
            "default capabilities).",
            rich_help_panel=KUBE_PANEL,
        ),
        run_as_user: int = typer.Option(
            1000,
            "--run-as-user",
            min=1,
            metavar="UID",
            help="The uid (and gid) of job pods under --pod-security restricted (a "
            "notebook's pod keeps the hub's non-root user).",
            rich_help_panel=KUBE_PANEL,
        ),
        slurm_partition: str | None = typer.Option(
            None,
            "--slurm-partition",
            metavar="NAME",
            help="Submit to this partition (default: Slurm's default).",
            rich_help_panel=SLURM_PANEL,
        ),
        slurm_output_dir: Path | None = typer.Option(
            None,
            "--slurm-output-dir",
            metavar="DIR",
            help="Jobs' output files, on a file system the compute nodes share (default: "
            "/var/lib/gpupool-slurm/output as root, else <data dir>/../gpupool-slurm-output).",
            rich_help_panel=SLURM_PANEL,
        ),
        slurm_notebook_command: str | None = typer.Option(
            None,
            "--slurm-notebook-command",
            metavar="CMD",
            help="With JupyterHub: the single-user notebook server as the compute nodes run "
            "it (default: this Python's jupyterhub-singleuser, which must then exist at the "
            "same path there).",
            rich_help_panel=SLURM_PANEL,
        ),
    ) -> None:
        """Start gpupool on this machine: API, dashboard and background loops."""
        serve(
            engine=engine,
            kube={
                "kubeconfig": kubeconfig,
                "namespace_prefix": namespace_prefix,
                "image": image,
                "home_size": home_size,
                "home_storage_class": home_storage_class,
                "block_cloud_metadata": block_cloud_metadata or not allow_cloud_metadata,
                "pod_security": pod_security,
                "run_as_user": run_as_user,
            },
            slurm={
                "partition": slurm_partition,
                "output_dir": slurm_output_dir,
                "notebook_command": slurm_notebook_command,
            },
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


def _engine(name: str, kube: dict | None = None, slurm: dict | None = None, **local: object):  # noqa: ANN003, ANN202
    """The engine `--engine` names (an Engine)."""
    from gpupool.engines.local.engine import LocalEngine, LocalOptions

    if name in PLANNED:
        _say(
            f"error: --engine {name} is not available yet (it comes with issue "
            f"{PLANNED[name]}); use --engine local"
        )
        raise typer.Exit(2)
    if name not in AVAILABLE:
        _say(f"error: --engine must be one of {', '.join((*AVAILABLE, *PLANNED))}, not {name!r}")
        raise typer.Exit(2)
    if name == "kubernetes":
        from gpupool.engines.kubernetes.engine import KubeOptions, KubernetesEngine
        from gpupool.engines.kubernetes.manifests import PSA_LEVELS, PodSettings
        from gpupool.engines.kubernetes.tenancy import TenancySettings

        k = kube or {}
        uid = int(k.get("run_as_user") or PodSettings.run_as_user)
        level = k.get("pod_security") or PodSettings.pod_security
        if level not in PSA_LEVELS:
            _say(f"error: --pod-security must be one of {', '.join(PSA_LEVELS)}, not {level!r}")
            raise typer.Exit(2)
        pods = PodSettings(
            image=k.get("image") or PodSettings.image,
            namespace_prefix=k.get("namespace_prefix") or PodSettings.namespace_prefix,
            pod_security=level,
            run_as_user=uid,
            run_as_group=uid,
        )
        tenancy = TenancySettings(
            home_size=k.get("home_size") or TenancySettings.home_size,
            home_storage_class=k.get("home_storage_class") or None,
            block_cloud_metadata=k.get("block_cloud_metadata", True),
        )
        return KubernetesEngine(
            KubeOptions(kubeconfig=k.get("kubeconfig"), pods=pods, tenancy=tenancy)
        )
    if name == "slurm":
        from gpupool.engines.slurm.engine import SlurmEngine, SlurmOptions

        return SlurmEngine(SlurmOptions(**{k: v for k, v in (slurm or {}).items() if v}))
    return LocalEngine(LocalOptions(**local))  # type: ignore[arg-type]


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
    engine: str = "local",
    jobs_account: str | None = None,
    kube: dict | None = None,
    slurm: dict | None = None,
) -> None:
    """Build the system from the flags and serve until interrupted (see the module)."""
    import logging

    from gpupool.server.settings import Settings
    from gpupool.system import SetupError, SystemSettings, build_system

    chosen = _engine(
        engine,
        kube,
        slurm,
        node=node_name,
        simulate=simulate,
        user_mode=user_mode,
        jobs_account=jobs_account,
        mps=mps,
        mps_binary=mps_binary,
        mps_service_account=mps_service_account,
    )
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
