"""Small builders for scenario dicts used by the simulator tests."""

from __future__ import annotations

from typing import Any

from gpupool.sim.engine import simulate
from gpupool.sim.result import SimResult
from gpupool.sim.scenario import parse_scenario


def node(name: str = "n", **kw: Any) -> dict:
    return {"name": name, "gpus": 4, "gpu_model": "H100", **kw}


def tenant(name: str, **kw: Any) -> dict:
    return {"name": name, **kw}


def job(id: str, tenant: str = "a", submit: float = 0, duration: float = 100, **kw: Any) -> dict:
    return {"id": id, "tenant": tenant, "submit": submit, "duration": duration, "gpus": 1, **kw}


def scenario(nodes=None, tenants=None, workloads=(), **sched: Any) -> dict:
    out: dict[str, Any] = {
        "cluster": {"nodes": list(nodes or [node()])},
        "tenants": list(tenants or [tenant("a")]),
        "workloads": list(workloads),
    }
    if sched:
        out["scheduler"] = sched
    return out


def run(data: dict, policy=None) -> SimResult:
    return simulate(parse_scenario(data, policy))


def by_id(result: SimResult) -> dict:
    return {wid: r for wid, r in result.records.items()}
