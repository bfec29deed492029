"""`gpupool k8s …`: what a Kubernetes cluster needs from gpupool.

`gpupool k8s gpu-operator-config` writes the NVIDIA GPU Operator's device-plugin
(time-slicing) and MIG-manager ConfigMaps from gpupool's per-GPU sharing modes, and the
commands that point the Operator at them and label the nodes (`gpupool.deploy.gpu_operator`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from gpupool.cli.base import CliError, api, err, handled, out
from gpupool.deploy.gpu_operator import MigLayout, OperatorConfigError, Options, render

k8s_app = typer.Typer(
    name="k8s",
    help="Kubernetes: configuration gpupool writes for the cluster.",
    no_args_is_help=True,
)


def _load_gpus(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise CliError(f"cannot read --from-file {path}: {e.strerror or e}", 2) from e
    except ValueError as e:
        raise CliError(f"--from-file {path} is not JSON: {e}", 2) from e
    if isinstance(data, dict) and isinstance(data.get("gpus"), list):
        data = data["gpus"]
    if not isinstance(data, list) or not all(isinstance(g, dict) for g in data):
        raise CliError(
            f"--from-file {path}: give a JSON list of GPUs as `gpupool gpu ls --json` prints it", 2
        )
    return data


@k8s_app.command("gpu-operator-config")
def gpu_operator_config(
    from_file: Path = typer.Option(
        None,
        "--from-file",
        help="GPUs as `gpupool gpu ls --json` prints them (offline); "
        "default: ask the server (GET /api/v1/gpus).",
    ),
    replicas: int = typer.Option(
        4, "--replicas", help="Time-slicing replicas of each GPU in `shared` mode (2-64)."
    ),
    mig_layout: list[str] = typer.Option(
        None,
        "--mig-layout",
        metavar="MODEL=PROFILE:COUNT[,…]",
        help="MIG devices of `mig` GPUs whose model contains MODEL, e.g. H100=3g.40gb:2 "
        "(repeatable; default: the model's smallest profile as many times as it fits).",
    ),
    namespace: str = typer.Option(
        "gpu-operator", "--namespace", "-n", help="The GPU Operator's namespace."
    ),
    output_dir: Path = typer.Option(
        None,
        "--output-dir",
        "-o",
        help="Write gpu-operator-config.yaml and label-nodes.sh "
        "there instead of printing the YAML (stdout) and the commands (stderr).",
    ),
) -> None:
    """Write the GPU Operator's time-slicing and MIG ConfigMaps from gpupool's GPU sharing
    modes, with the node labels that select them.

    Example: gpupool k8s gpu-operator-config | kubectl apply -f -
    """

    @handled
    def go() -> None:
        gpus = _load_gpus(from_file) if from_file else api().get("/gpus")
        try:
            layouts = tuple(MigLayout.parse(t) for t in mig_layout or ())
            config = render(gpus, Options(replicas, layouts, namespace))
        except OperatorConfigError as e:
            raise CliError(str(e), 2) from None
        commands = config.commands()
        if output_dir is None:
            out.out(config.to_yaml(), end="", highlight=False)
            err.print("# then point the Operator at them and label the nodes:", markup=False)
            for c in commands:
                err.print(c, markup=False, soft_wrap=True)
            return
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / "gpu-operator-config.yaml").write_text(config.to_yaml())
        script = output_dir / "label-nodes.sh"
        script.write_text("#!/bin/sh\nset -e\n" + "\n".join(commands) + "\n")
        script.chmod(0o755)
        out.print(f"wrote {output_dir / 'gpu-operator-config.yaml'} and {script}; run:")
        out.print(
            f"kubectl apply -f {output_dir / 'gpu-operator-config.yaml'} && {script}",
            markup=False,
            soft_wrap=True,
        )

    go()


def register(app: typer.Typer) -> None:
    app.add_typer(k8s_app)
