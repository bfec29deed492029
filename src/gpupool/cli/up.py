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
        engine: str = typer.Option(
            "local",
            "--engine",
            metavar="NAME",
            help="Where work runs: local (processes on this machine's GPUs), kubernetes "
            "(pods of the cluster, see --kubeconfig) or slurm (batch jobs of the Slurm "
            "cluster of $SLURM_CONF, see docs/slurm.md).",
        ),
        kubeconfig: str | None = typer.Option(
            None,
            "--kubeconfig",
            help="--engine kubernetes: the kubeconfig to use (default: the pod's service "
            "account in a cluster, else $KUBECONFIG or ~/.kube/config).",
        ),
        namespace_prefix: str = typer.Option(
            "gpupool-",
            "--namespace-prefix",
            help="--engine kubernetes: tenant a/b runs in namespace <prefix>a-b.",
        ),
        home_size: str = typer.Option(
            "10Gi",
            "--home-size",
            help="--engine kubernetes: size of each member's notebook-home PVC (home-<user> "
            "in the tenant's namespace).",
        ),
        home_storage_class: str | None = typer.Option(
            None,
            "--home-storage-class",
            help="--engine kubernetes: StorageClass of the notebook homes (default: the "
            "cluster's default class).",
        ),
        block_cloud_metadata: bool = typer.Option(
            True,
            "--block-cloud-metadata/--no-block-cloud-metadata",
            help="--engine kubernetes: a NetworkPolicy in every tenant namespace keeps its "
            "pods from the cloud metadata server 169.254.169.254 (node credentials); "
            "--no-block-cloud-metadata removes it, for workloads that need that server "
            "(workload identity). Needs a CNI that enforces NetworkPolicy.",
        ),
        image: str = typer.Option(
            "python:3.12-slim",
            "--image",
            help="--engine kubernetes: the container image jobs run in.",
        ),
        pod_security: str = typer.Option(
            "restricted",
            "--pod-security",
            metavar="restricted|baseline",
            help="--engine kubernetes: the Pod Security level of tenant namespaces and pods. "
            "restricted: pods run as --run-as-user, non-root, all capabilities dropped. "
            "baseline: the escape hatch for images that must run as root (as the image's "
            "user, with the runtime's default capabilities).",
        ),
        run_as_user: int = typer.Option(
            1000,
            "--run-as-user",
            min=1,
            help="--engine kubernetes: the uid (and gid) of job pods under --pod-security "
            "restricted (a notebook's pod keeps the hub's non-root user).",
        ),
        slurm_partition: str | None = typer.Option(
            None,
            "--slurm-partition",
            help="--engine slurm: submit to this partition (default: Slurm's default).",
        ),
        slurm_output_dir: Path | None = typer.Option(
            None,
            "--slurm-output-dir",
            help="--engine slurm: jobs' output files, on a file system the compute nodes "
            "share (default: <data dir>/../gpupool-slurm-output).",
        ),
        slurm_notebook_command: str | None = typer.Option(
            None,
            "--slurm-notebook-command",
            help="--engine slurm --jupyterhub: the single-user notebook server as the compute "
            "nodes run it (default: this Python's jupyterhub-singleuser, which must then "
            "exist at the same path there).",
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
            help="Database, job logs and state (default: ~/.local/share/gpupool).",
        ),
        host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
        port: int = typer.Option(8000, "--port", help="Port to listen on."),
        user_mode: str = typer.Option(
            "auto",
            "--user-mode",
            help="Who jobs and notebooks run as: per-user (each owner's existing Unix account; "
            "needs root), single-user (no directory of accounts: as root, an account gpupool "
            "makes for each user, gp-<name>; else the server's own, and JupyterHub serves the "
            "first admin only), or auto (per-user when root on real GPUs). Never root. See "
            "docs/security.md.",
        ),
        jobs_account: str | None = typer.Option(
            None,
            "--jobs-account",
            help="Single-user mode as root: run every member's plain jobs as this one "
            "unprivileged account (created if missing; nobody if it cannot be) instead of "
            "each user's own. Members' jobs can then reach each other; notebooks keep their "
            "own accounts. Not recommended.",
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
            engine=engine,
            kube={
                "kubeconfig": kubeconfig,
                "namespace_prefix": namespace_prefix,
                "image": image,
                "home_size": home_size,
                "home_storage_class": home_storage_class,
                "block_cloud_metadata": block_cloud_metadata,
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
    from gpupool.engines import AVAILABLE, PLANNED
    from gpupool.engines.local import LocalEngine, LocalOptions

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
        from gpupool.engines.kubernetes import (
            KubeOptions,
            KubernetesEngine,
            PodSettings,
            TenancySettings,
        )
        from gpupool.engines.kubernetes.manifests import PSA_LEVELS

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
        from gpupool.engines.slurm import SlurmEngine, SlurmOptions

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
