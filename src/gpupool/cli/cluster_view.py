"""The server's GPUs as `gpupool devices` and `gpupool top` show them when logged in.

Both read `GET /api/v1/dashboard/cluster` (any logged-in user may: everyone can see who uses
which GPU and whether it is busy): every node's GPUs with live readings from the server's
telemetry, their status (free, busy, idle, outside, down) and the workloads holding shares of
them, or the work outside gpupool that holds them (a plain Slurm job, someone else's pod);
`gpupool top` also lists the GPU processes with their owners (or "outside gpupool").
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.text import Text

from gpupool.cli import tables
from gpupool.cli.base import Api
from gpupool.cli.tables import Col, Output


def fetch(c: Api) -> dict[str, Any]:
    """The server's cluster view (nodes, GPUs, readings, holders)."""
    data: dict[str, Any] = c.get("/dashboard/cluster")
    return data


def _gpus(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [g | {"node": n["name"]} for n in data["nodes"] for g in n["gpus"]]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}%"


def _mem(g: dict[str, Any]) -> str:
    total = g["memory_total_mib"] / 1024
    used = g["memory_used_mib"]
    return f"- / {total:.0f} GiB" if used is None else f"{used / 1024:.1f} / {total:.0f} GiB"


def _status(g: dict[str, Any]) -> str:
    if g["status"] == "idle" and g["idle_for_s"]:
        return f"idle {tables.duration(g['idle_for_s'])}"
    return str(g["status"])


def outside_text(o: dict[str, Any] | None) -> str:
    """Who holds a GPU outside gpupool, as the API gives it: 'slurm job 4711 (bob)'."""
    if not o:
        return ""
    return f"{o['ref']} ({o['user']})" if o.get("user") else str(o["ref"])


def _holders(g: dict[str, Any]) -> str:
    held = [f"{h['user']}/{h['workload']}" for h in g["holders"]]
    if g.get("outside"):
        held.append(f"outside: {outside_text(g['outside'])}")
    return ", ".join(held)


def _num(x: float | None, unit: str) -> str:
    return "-" if x is None else f"{x:.0f}{unit}"


DEVICE_COLUMNS = (
    Col("GPU", lambda g: f"{g['node']}:{g['index']}"),
    Col("MODEL", lambda g: g["model"]),
    Col("MEMORY", _mem, right=True),
    Col("UTIL", lambda g: _pct(g["util"]), right=True),
    Col("TEMP", lambda g: _num(g["temperature_c"], "C"), wide=True, right=True),
    Col("POWER", lambda g: _num(g["power_w"], "W"), wide=True, right=True),
    Col("SHARING", lambda g: g["sharing"], wide=True),
    Col("HEALTH", lambda g: g["health"], wide=True),
    Col("STATUS", _status),
    Col("HELD BY", _holders, wrap=True),
    Col("UUID", lambda g: g["uuid"], wide=True),
)


def _share(h: dict[str, Any]) -> str:
    if h["milli"] >= 1000:
        return f"{h['milli'] / 1000:g} GPU"
    return f"{h['milli'] / 1000:g} GPU {h['memory_mib'] / 1024:g}G"


#: `gpupool top`'s GPU table: the readings (who holds them is in the table below it).
TOP_COLUMNS = tuple(
    Col(c.header, c.get, right=c.right)
    for c in DEVICE_COLUMNS
    if c.header in ("GPU", "MODEL", "MEMORY", "UTIL", "TEMP", "POWER", "STATUS")
)


#: One row per (workload, GPU) share: who holds what, and how it is enforced.
HOLDER_COLUMNS = (
    Col("WORKLOAD", lambda h: h["workload"]),
    Col("USER", lambda h: h["user"]),
    Col("TENANT", lambda h: h["tenant"], wrap=True),
    Col("GPU", lambda h: h["gpu"]),
    Col("SHARE", _share),
    Col("ENFORCEMENT", lambda h: h["enforcement"]),
    Col("AGE", lambda h: tables.age(h["since"], h["now"])),
)


def _owner(p: dict[str, Any]) -> str:
    if not p.get("outside", True):
        return str(p["workload"])
    pod = p.get("pod") or ""
    if not pod:
        return "outside gpupool"
    return f"outside: {pod if '/' in pod else 'pod ' + pod[:8]}"  # a bare UID: its start


#: One row per GPU process the nodes' agents report: whose it is (a workload, by its pod on
#: Kubernetes) or that it runs outside gpupool.
PROCESS_COLUMNS = (
    Col("GPU", lambda p: p["gpu"]),
    Col("PID", lambda p: str(p["pid"]), right=True),
    Col("WORKLOAD", _owner, wrap=True),
    Col("USER", lambda p: p["user"] or "-"),
    Col("TENANT", lambda p: p["tenant"] or "-", wrap=True),
    Col("MEM", lambda p: _num(p["memory_mib"], " MiB"), right=True),
    Col("SM", lambda p: _pct(p["sm_util"]), right=True),
)


#: One row per GPU used outside gpupool: which work holds it (`gpupool top`).
OUTSIDE_COLUMNS = (
    Col("GPU", lambda g: f"{g['node']}:{g['index']}"),
    Col("USED OUTSIDE GPUPOOL BY", lambda g: g["outside"]["ref"], wrap=True),
    Col("USER", lambda g: g["outside"]["user"] or "-"),
    Col("AGE", lambda g: tables.age(g["outside"]["since"], g["now"])),
)


def _title(data: dict[str, Any], url: str) -> Text:
    s = data["summary"]
    head = Text(f"GPUs of {url}: ", style="bold")
    head.append(
        f"{s['gpus']} GPUs, {s['busy']} busy, {s['idle']} idle, {s['free']} free, {s['down']} down"
    )
    if s.get("outside"):
        head.append(f", {s['outside']} outside")
    if data["simulated"]:
        head.append("  SIMULATED", style="bold magenta")
    return head


def print_devices(console: Console, data: dict[str, Any], url: str, output: Output) -> None:
    """`gpupool devices` for the server's GPUs."""
    console.print(_title(data, url))
    tables.show(console, DEVICE_COLUMNS, _gpus(data), output, empty="no GPUs registered")


def render_top(data: dict[str, Any], url: str) -> Group:
    """One `gpupool top` screen of the server's GPUs and the workloads holding them."""
    gpus = _gpus(data)
    holders = [
        h | {"gpu": f"{g['node']}:{g['index']}", "now": data["now"]}
        for g in gpus
        for h in g["holders"]
    ]
    parts: list[Any] = [_title(data, url)]
    parts.append(tables.build(TOP_COLUMNS, gpus) if gpus else Text("no GPUs registered"))
    parts.append(Text(""))
    if holders:
        parts.append(tables.build(HOLDER_COLUMNS, holders))
    else:
        parts.append(Text("no workload holds a GPU", style="dim"))
    outside = [g | {"now": data["now"]} for g in gpus if g.get("outside")]
    if outside:
        parts.append(Text(""))
        parts.append(tables.build(OUTSIDE_COLUMNS, outside))
    procs = [p | {"gpu": f"{g['node']}:{g['index']}"} for g in gpus for p in g.get("processes", ())]
    if procs:
        parts.append(Text(""))
        parts.append(tables.build(PROCESS_COLUMNS, procs))
    return Group(*parts)
