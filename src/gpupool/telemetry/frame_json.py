"""A frame as plain data for UIs and scripts (`gpupool top --json`, the dashboard, the API).

Each GPU lists its processes with their owner (workload, user, tenant, how it was found),
the share the workload holds on that GPU and its enforcement, and the detections
(idle, over memory, foreign GPU) that concern them. Simulated frames say so.
"""

from __future__ import annotations

from typing import Any

from gpupool.telemetry.policing import DetectionKind
from gpupool.telemetry.sampler import Frame
from gpupool.telemetry.snapshots import MIB


def _mib(value: int | None) -> float | None:
    return None if value is None else round(value / MIB, 1)


def frame_view(frame: Frame) -> dict[str, Any]:
    """The JSON-ready view of one frame (stable keys; None for N/A)."""
    snap = frame.snapshot
    shares = {(a.workload_id, s.gpu_uuid): s for a in frame.allocations for s in a.shares}
    holders: dict[str, list[str]] = {}
    for wid, uuid in shares:
        holders.setdefault(uuid, []).append(wid)
    gpus = []
    for g in snap.gpus:
        procs = []
        for p in g.processes:
            o = frame.owners.get(p.pid)
            wid = o.workload_id if o else None
            share = shares.get((wid, g.uuid)) if wid else None
            procs.append(
                {
                    "pid": p.pid,
                    "kind": str(p.kind),
                    "command": o.command if o else None,
                    "memory_mib": _mib(p.used_memory_bytes),
                    "sm_util": p.sm_util,
                    "mig_uuid": p.mig_uuid,
                    "owned": bool(o and o.owned),
                    "workload": wid,
                    "user": o.user if o else None,
                    "tenant": o.tenant if o else None,
                    "unix_user": o.unix_user if o else None,
                    "via": str(o.via) if o else "none",
                    "share_milli": share.milli if share else None,
                    "share_memory_mib": share.memory_mib if share else None,
                    "enforcement": str(share.enforcement) if share else None,
                }
            )
        dets = [
            {
                "kind": str(d.kind),
                "workload": d.workload_id,
                "pids": list(d.pids),
                "since": d.since,
                "duration_s": round(d.duration_s, 1),
                "message": d.message,
            }
            for d in frame.detections
            if d.gpu_uuid == g.uuid
        ]
        gpus.append(
            {
                "index": g.index,
                "uuid": g.uuid,
                "name": g.name,
                "healthy": g.healthy,
                "simulated": g.simulated,
                "util_gpu": g.util_gpu,
                "util_memory": g.util_memory,
                "memory_total_mib": _mib(g.memory_total_bytes),
                "memory_used_mib": _mib(g.memory_used_bytes),
                "temperature_c": g.temperature_c,
                "power_w": g.power_w,
                "power_limit_w": g.power_limit_w,
                "mig_enabled": g.mig_enabled,
                "mig_devices": [
                    {
                        "uuid": m.uuid,
                        "profile": m.profile,
                        "start": m.start,
                        "memory_total_mib": _mib(m.memory_total_bytes),
                        "memory_used_mib": _mib(m.memory_used_bytes),
                    }
                    for m in g.mig_devices
                ],
                "held_by": sorted(holders.get(g.uuid, [])),
                "idle": any(
                    d.kind is DetectionKind.IDLE for d in frame.detections if d.gpu_uuid == g.uuid
                ),
                "processes": procs,
                "detections": dets,
                "errors": list(g.errors),
            }
        )
    return {
        "hostname": snap.hostname,
        "timestamp": snap.timestamp,
        "simulated": snap.simulated,
        "driver_version": snap.driver_version,
        "cuda_version": snap.cuda_version,
        "gpus": gpus,
        "errors": list(snap.errors),
    }
