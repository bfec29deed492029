"""`gpupool node-pool`: node pools an autoscaler grows and shrinks (issue 34)."""

from __future__ import annotations

from typing import Any

import typer

from gpupool.cli import tables
from gpupool.cli.base import CliError, api, handled, out, parse_mib, print_json
from gpupool.cli.submit import parse_node_labels
from gpupool.cli.tables import Col, Output

pool_app = typer.Typer(
    help="Node pools: nodes gpupool asks an autoscaler for when work waits, and gives back "
    "when idle.",
    no_args_is_help=True,
)


def _shape(p: dict[str, Any]) -> str:
    gpus = f"{p['gpus']}x{p['gpu_model']}, " if p["gpus"] else ""
    return f"{gpus}{p['cpus']:g} CPU, {p['memory_mib'] // 1024} GiB"


COLUMNS = (
    Col("POOL", lambda p: p["name"]),
    Col("NODE", _shape),
    Col("MIN-MAX", lambda p: f"{p['min_nodes']}-{p['max_nodes']}"),
    Col("UP", lambda p: str(p["counts"]["up"])),
    Col(
        "COMING",
        lambda p: (
            str(p["counts"]["requested"] + p["counts"]["booting"])
            + (f" ({len(p['requests'])} req)" if p["requests"] else "")
        ),
    ),
    Col("BOOT", lambda p: tables.duration(p["boot_seconds"])),
    Col("$/GPU-H", lambda p: f"{p['cost_per_gpu_hour']:g}"),
    Col("IDLE", lambda p: tables.duration(p["idle_seconds"]), wide=True),
    Col("TIMEOUT", lambda p: tables.duration(p["request_timeout_seconds"]), wide=True),
    Col("LABELS", lambda p: ",".join(f"{k}={v}" for k, v in p["labels"].items()), wide=True),
)


@pool_app.command("ls")
def pool_ls(as_json: bool = tables.json_option(), output: Output = tables.output_option()) -> None:
    """Node pools: their nodes (up, coming: requested or booting) and requests in flight."""

    @handled
    def go() -> None:
        ps = api().get("/node-pools")
        if tables.wants_json(output, as_json):
            return print_json(ps)
        tables.show(
            out, COLUMNS, ps, output, empty="no node pools (add one: gpupool node-pool add)"
        )

    go()


def _body(
    gpus: int | None,
    gpu_model: str | None,
    gpu_memory: str | None,
    cpus: float | None,
    memory: str | None,
    label: list[str] | None,
    engine: str | None,
    min_nodes: int | None,
    max_nodes: int | None,
    boot: float | None,
    cost: float | None,
    idle: float | None,
    timeout: float | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {}
    for key, value in (
        ("gpus", gpus),
        ("gpu_model", gpu_model),
        ("cpus", cpus),
        ("engine", engine),
        ("min_nodes", min_nodes),
        ("max_nodes", max_nodes),
        ("boot_seconds", boot),
        ("cost_per_gpu_hour", cost),
        ("idle_seconds", idle),
        ("request_timeout_seconds", timeout),
    ):
        if value is not None:
            body[key] = value
    if gpu_memory:
        body["gpu_memory_mib"] = parse_mib(gpu_memory)
    if memory:
        body["memory_mib"] = parse_mib(memory, "--memory")
    if label:
        body["labels"] = parse_node_labels(label, "--label")
    return body


_GPUS = typer.Option(None, "--gpus", help="GPUs per node")
_MODEL = typer.Option(None, "--gpu-model", help="their model, e.g. H100")
_GPU_MEM = typer.Option(None, "--gpu-memory", help="memory per GPU, e.g. 80G")
_CPUS = typer.Option(None, "--cpus", help="CPUs per node")
_MEM = typer.Option(None, "--memory", help="memory per node, e.g. 512G")
_LABEL = typer.Option(None, "--label", help="KEY=VALUE on its nodes (repeat)")
_ENGINE = typer.Option(None, "--engine", help="the engine that adds its nodes")
_MIN = typer.Option(None, "--min", help="nodes kept even when idle")
_MAX = typer.Option(None, "--max", help="most nodes")
_BOOT = typer.Option(None, "--boot-seconds", help="how long a node takes to join")
_COST = typer.Option(None, "--cost", help="cost per GPU-hour")
_IDLE = typer.Option(None, "--idle-seconds", help="give an idle node back after this")
_TIMEOUT = typer.Option(None, "--timeout-seconds", help="withdraw an unfulfilled request")


@pool_app.command("add")
def pool_add(
    name: str = typer.Argument(..., help="e.g. gpu-h100"),
    gpus: int = _GPUS,
    gpu_model: str = _MODEL,
    gpu_memory: str = _GPU_MEM,
    cpus: float = _CPUS,
    memory: str = _MEM,
    label: list[str] = _LABEL,
    engine: str = _ENGINE,
    min_nodes: int = _MIN,
    max_nodes: int = _MAX,
    boot: float = _BOOT,
    cost: float = _COST,
    idle: float = _IDLE,
    timeout: float = _TIMEOUT,
) -> None:
    """Define a node pool (admins): one node's shape, the bounds, boot time and cost."""

    @handled
    def go() -> None:
        body = _body(
            gpus, gpu_model, gpu_memory, cpus, memory, label, engine, min_nodes, max_nodes,
            boot, cost, idle, timeout,
        )  # fmt: skip
        body.setdefault("gpus", 0)
        for need, flag in (("cpus", "--cpus"), ("memory_mib", "--memory")):
            if need not in body:
                raise CliError(f"give {flag}: what one node of the pool has", 2)
        p = api().post("/node-pools", {"name": name, **body})
        out.print(f"added node pool {p['name']}: {_shape(p)}, {p['min_nodes']}-{p['max_nodes']}")

    go()


@pool_app.command("set")
def pool_set(
    name: str = typer.Argument(...),
    gpus: int = _GPUS,
    gpu_model: str = _MODEL,
    gpu_memory: str = _GPU_MEM,
    cpus: float = _CPUS,
    memory: str = _MEM,
    label: list[str] = _LABEL,
    engine: str = _ENGINE,
    min_nodes: int = _MIN,
    max_nodes: int = _MAX,
    boot: float = _BOOT,
    cost: float = _COST,
    idle: float = _IDLE,
    timeout: float = _TIMEOUT,
) -> None:
    """Change a node pool (admins): only the options given."""

    @handled
    def go() -> None:
        body = _body(
            gpus, gpu_model, gpu_memory, cpus, memory, label, engine, min_nodes, max_nodes,
            boot, cost, idle, timeout,
        )  # fmt: skip
        if not body:
            raise CliError("nothing to change: give at least one option (see --help)", 2)
        p = api().call("PATCH", f"/node-pools/{name}", json=body)
        out.print(f"node pool {p['name']}: {_shape(p)}, {p['min_nodes']}-{p['max_nodes']}")

    go()


@pool_app.command("rm")
def pool_rm(name: str = typer.Argument(...)) -> None:
    """Delete a node pool (admins) whose nodes are all powered down."""

    @handled
    def go() -> None:
        api().call("DELETE", f"/node-pools/{name}")
        out.print(f"deleted node pool {name}")

    go()


def register(app: typer.Typer) -> None:
    app.add_typer(pool_app, name="node-pool")
