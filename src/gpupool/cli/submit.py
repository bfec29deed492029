"""`gpupool run`: submit a job, with refusals in the terms of its flags (cli/flags.py).

A submission is sent once per invocation with an Idempotency-Key and retried with the same
key while the server cannot be reached (`submit_once`); `--wait` follows it to its end.
"""

from __future__ import annotations

from typing import Any

import typer

from gpupool import client as sdk
from gpupool.cli import flags
from gpupool.cli.base import (
    Api,
    CliError,
    api,
    cli_error,
    cli_errors,
    err,
    handled,
    out,
    parse_mib,
)
from gpupool.domain import WorkloadState
from gpupool.domain.errors import ValidationError
from gpupool.domain.placement import parse_label


def whole_gpus(text: str) -> int:
    """`--gpus`: a whole number of GPUs; a part of one GPU is pointed at --gpu-fraction."""
    try:
        n = int(text)
    except ValueError:
        try:
            f: float | None = float(text)
        except ValueError:
            f = None
        part = f"--gpu-fraction {f:g}" if f is not None and 0 < f < 1 else "--gpu-fraction"
        near = f" ({int(f)} or {int(f) + 1})" if f is not None and f > 1 else ""
        raise typer.BadParameter(
            f"{text} is not a whole number: --gpus takes whole GPUs{near}; for a part of one "
            f"GPU use {part}"
        ) from None
    if n < 0:
        raise typer.BadParameter(f"{text}: give 0 or more whole GPUs")
    return n


def run(
    command: list[str] = typer.Argument(
        None, metavar="-- COMMAND", help="the command, after --", show_default=False
    ),
    gpus: int = typer.Option(
        None, "--gpus", parser=whole_gpus, metavar="INTEGER", help="whole GPUs"
    ),
    nodes: int | None = typer.Option(
        None, "--nodes", min=1, help="nodes to span (with --gpus-per-node); one job on all"
    ),
    gpus_per_node: int | None = typer.Option(
        None, "--gpus-per-node", min=1, help="whole GPUs on each node (with --nodes)"
    ),
    gpu_fraction: float = typer.Option(
        None, "--gpu-fraction", help="a part of one GPU, between 0 and 1 (whole GPUs: --gpus)"
    ),
    gpu_memory: str = typer.Option(None, "--gpu-memory", help="GPU memory, e.g. 20G"),
    gpu_model: str = typer.Option(None, "--gpu-model", help="GPU model, e.g. H100"),
    mig: str = typer.Option(
        None, "--mig", help="one MIG instance of this profile, e.g. 1g.10gb (hardware-isolated)"
    ),
    engine: str = typer.Option(
        None, "--engine", help="run it on this engine's nodes only, e.g. slurm (default: any)"
    ),
    node_label: list[str] = typer.Option(
        None, "--node-label", help="KEY=VALUE a node must have (repeatable)"
    ),
    tenant: str = typer.Option(None, "--tenant", "-t", help="tenant (if you have several)"),
    priority: int = typer.Option(0, "--priority", "-p", help="higher runs first in a tenant"),
    name: str = typer.Option(None, "--name", help="a label for the job"),
    cpus: float = typer.Option(0, "--cpus", min=0, help="CPUs"),
    memory: str = typer.Option(None, "--memory", help="host memory, e.g. 16G"),
    max_runtime: float = typer.Option(None, "--max-runtime", help="seconds before it is stopped"),
    wait: bool = typer.Option(False, "--wait", "-w", help="stream logs, exit with its code"),
    poll: float = typer.Option(1.0, "--poll", hidden=True, help="seconds between polls"),
    env: list[str] = typer.Option(
        None, "--env", "-e", help="NAME=VALUE for the job's environment (repeatable)"
    ),
    preemptible: bool = typer.Option(
        True, "--preemptible/--no-preemptible", help="may be stopped for guaranteed work"
    ),
    checkpointing: bool = typer.Option(
        False,
        "--checkpointing",
        help="it saves its progress when stopped and resumes from there (cheap to preempt)",
    ),
) -> None:
    """Submit a job: gpupool run --gpus 1 -- python3 train.py

    Across nodes: gpupool run --nodes 2 --gpus-per-node 8 -- torchrun ... (all nodes start
    together; --cpus and --memory are per node).

    On one engine or on labelled nodes: gpupool run --gpus 1 --engine slurm --node-label
    zone=a -- python3 train.py."""

    @handled
    def go() -> None:
        if gpus is not None and gpu_fraction is not None:
            whole = f"--gpus {gpus}" if gpus else "--gpus"
            raise CliError(
                f"use {whole} (whole GPUs) or --gpu-fraction (a part of one GPU), not both", 2
            )
        if mig is not None and (gpus is not None or gpu_fraction is not None):
            raise CliError("use --mig or --gpus / --gpu-fraction, not both", 2)
        if (nodes or 1) > 1 and gpus_per_node is None and not gpus:
            raise CliError("--nodes needs --gpus-per-node (whole GPUs on each node)", 2)
        if (
            gpus is not None
            and nodes is not None
            and gpus_per_node is not None
            and gpus
            and gpus != nodes * gpus_per_node
        ):
            raise CliError(
                f"--gpus {gpus} is not --nodes {nodes} x --gpus-per-node {gpus_per_node}; "
                "give --gpus-per-node alone",
                2,
            )
        body: dict[str, Any] = {"command": command or [], "priority": priority}
        if gpus is not None:
            body["gpus"] = gpus
        if nodes is not None:
            body["nodes"] = nodes
        if gpus_per_node is not None:
            body["gpus_per_node"] = gpus_per_node
        if gpu_fraction is not None:
            body["gpu_fraction"] = gpu_fraction
        if gpu_memory:
            body["gpu_memory_mib"] = parse_mib(gpu_memory)
        if memory:
            body["memory_mib"] = parse_mib(memory, "--memory")
        if node_label:
            body["node_labels"] = parse_node_labels(node_label)
        for key, value in (
            ("gpu_model", gpu_model),
            ("engine", engine),
            ("mig", mig),
            ("tenant", tenant),
            ("name", name),
            ("max_runtime_s", max_runtime),
        ):
            if value is not None:
                body[key] = value
        if cpus:
            body["cpus"] = cpus
        if env:
            body["env"] = parse_env(env)
        if not preemptible:
            body["preemptible"] = False
        if checkpointing:
            body["checkpointing"] = True
        given = {
            "gpu_memory_mib": gpu_memory,
            "memory_mib": memory,
            "gpu_fraction": None if gpu_fraction is None else f"{gpu_fraction:g}",
            "max_runtime_s": None if max_runtime is None else f"{max_runtime:g}",
            "cpus": f"{cpus:g}",
            "priority": str(priority),
            "gpus": None if gpus is None else str(gpus),
            "nodes": None if nodes is None else str(nodes),
            "gpus_per_node": None if gpus_per_node is None else str(gpus_per_node),
        }
        given = {k: v for k, v in given.items() if v is not None}
        refused = flags.check_run_body(body, given)
        if refused:
            raise CliError(refused, 2)
        c = api()
        try:
            w = submit_once(c, body)
        except CliError as e:
            raise flags.flag_terms(e, flags.RUN_FLAGS, given) from None
        if not wait:
            out.print(w["id"])
            return
        err.print(f"{w['id']} submitted ({w['request']['description']} in {w['tenant']})")
        raise typer.Exit(_wait(c, w["id"], poll))

    go()


def parse_node_labels(pairs: list[str], flag: str = "--node-label") -> dict[str, str]:
    """`--node-label KEY=VALUE` options (or another `flag`'s) as a mapping, each checked as
    the server does."""
    labels: dict[str, str] = {}
    for pair in pairs:
        try:
            key, value = parse_label(pair)
        except ValidationError as e:
            raise CliError(f"{flag}: {e}", 2) from None
        if labels.get(key, value) != value:
            raise CliError(f"{flag} {key} is given twice with different values", 2)
        labels[key] = value
    return labels


def parse_env(pairs: list[str]) -> dict[str, str]:
    """`--env NAME=VALUE` options as a mapping (the server checks the names)."""
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise CliError(f"--env {pair!r}: write NAME=VALUE, e.g. --env WANDB_MODE=offline", 2)
        env[name] = value
    return env


#: tries of one submission, and the most seconds between them
SUBMIT_TRIES = 4
SUBMIT_MAX_WAIT_S = 5.0


def submit_once(c: Api, body: dict[str, Any]) -> dict[str, Any]:
    """Submit with gpupool.client, which sends one Idempotency-Key for this invocation and
    reuses it on its retries (the server unreachable, a cut connection, 502/503): a
    submission whose answer was lost is answered with the workload already made, never
    submitted twice. Each retry is said on stderr."""

    def said(e: sdk.ApiError, wait: float) -> None:
        err.print(f"submission not confirmed ({cli_error(e, c.url)}); retrying in {wait:g} s")

    c.client.submit_tries = SUBMIT_TRIES
    c.client.retry_max_wait_s = SUBMIT_MAX_WAIT_S
    with cli_errors(c.url):
        w = c.client.submit(body, on_retry=said)
    return w.model_dump(mode="json")


def _wait(c: Api, wid: str, poll: float) -> int:
    """Follow a workload to its end, printing queue changes and logs; return an exit code."""
    last_note = None
    for state, note, text in c.follow(wid, poll):
        if note and note != last_note:
            err.print(note)
            last_note = note
        if text:
            out.out(text, end="")
        if state in sdk.ENDED:
            w = c.get(f"/workloads/{wid}")
            code = w["exit_code"]
            err.print(f"{wid} {state}" + (f": {w['reason']}" if w["reason"] else ""))
            if state == WorkloadState.SUCCEEDED:
                return 0
            return code if isinstance(code, int) and 0 < code < 256 else 1
    return 1
