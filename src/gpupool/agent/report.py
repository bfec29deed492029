"""A sample of the host's GPUs -> the body of `POST /api/v1/nodes/{name}/report`.

The server validates it with its `NodeReportIn` schema (gpupool.api.agents);
`tests/agent` checks the two agree. Memory in bytes, utilization in percent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupool import __version__
from gpupool.agent.attribute import ProcessTags
from gpupool.telemetry.containers import CONTAINER_KINDS
from gpupool.telemetry.snapshots import HostSnapshot

_COMMAND_MAX = 256


def build_report(
    snap: HostSnapshot,
    tags: Mapping[int, ProcessTags],
    *,
    interval_s: float,
    cpu_milli: int = 0,
    memory_mib: int = 0,
) -> dict[str, Any]:
    """The JSON-ready report of one snapshot, its processes tagged."""
    gpus = []
    procs = []
    for g in snap.gpus:
        gpus.append(
            {
                "index": g.index,
                "uuid": g.uuid,
                "name": g.name,
                "healthy": g.healthy,
                "memory_total_bytes": g.memory_total_bytes,
                "memory_used_bytes": g.memory_used_bytes,
                "memory_free_bytes": g.memory_free_bytes,
                "util_gpu": g.util_gpu,
                "util_memory": g.util_memory,
                "temperature_c": g.temperature_c,
                "power_w": g.power_w,
                "power_limit_w": g.power_limit_w,
                "pci_bus_id": g.pci_bus_id,
                "mig_enabled": g.mig_enabled,
                "errors": list(g.errors)[:32],
            }
        )
        for p in g.processes:
            t = tags.get(p.pid) or ProcessTags(p.pid)
            procs.append(
                {
                    "pid": p.pid,
                    "gpu_uuid": p.gpu_uuid,
                    "used_memory_bytes": p.used_memory_bytes,
                    "sm_util": p.sm_util,
                    "kind": str(p.kind),
                    "mig_uuid": p.mig_uuid,
                    "command": (t.command or None) and t.command[:_COMMAND_MAX],
                    "unix_user": t.unix_user,
                    "workload_id": t.workload_id,
                    **{k.field: t.containers.get(k.name) for k in CONTAINER_KINDS},
                }
            )
    return {
        "agent_version": __version__,
        "interval_s": interval_s,
        "timestamp": snap.timestamp,
        "hostname": snap.hostname,
        "simulated": snap.simulated,
        "driver_version": snap.driver_version,
        "cuda_version": snap.cuda_version,
        "cpu_milli": cpu_milli,
        "memory_mib": memory_mib,
        "gpus": gpus,
        "processes": procs,
        "errors": list(snap.errors)[:32],
    }
