"""The data the dashboard's pages draw (cluster map, tenant numbers, GPU history) as JSON.

Pure functions over domain types and telemetry frames (no I/O), so they are tested without a
server and reused by any route that serves them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpupool.domain import GPU, Allocation, GPUHealth, Node, NodeState, SharingMode, Workload
from gpupool.domain.mig import instances_of
from gpupool.telemetry.attribution import Attribution, Via
from gpupool.telemetry.policing import DetectionKind
from gpupool.telemetry.sampler import Frame, GPUPoint
from gpupool.telemetry.snapshots import MIB, GPUSnapshot, ProcessSnapshot

#: A GPU held by work whose utilization is at or below this (percent) shows as idle when
#: telemetry has no idle detection of its own (e.g. before the policer's window has passed).
IDLE_UTIL_PCT = 5.0

#: Ranges the usage page offers, in seconds.
RANGES_S = (3600, 86400, 7 * 86400, 30 * 86400)
#: Time slots per GPU series sent to the browser.
MAX_POINTS = 120
#: A young server's charts span its age rounded up to this (and at least this), in seconds.
WINDOW_STEP_S = 600


def chart_window(now: float, range_s: int, oldest: float | None) -> int:
    """The span the usage page's charts draw for a `range_s` asked for: all of it, unless the
    history starts later (a server younger than the range): then the server's age, rounded up
    to `WINDOW_STEP_S`, so a new server's 24 h is not an empty chart with a sliver at its end.
    `oldest`: the first telemetry point there is (None: none yet, the whole range)."""
    if oldest is None or now - oldest >= range_s:
        return range_s
    steps = max(1, -(-int(now - oldest) // WINDOW_STEP_S))  # ceil, at least one step
    return min(range_s, steps * WINDOW_STEP_S)


def _round(x: float | None, nd: int = 1) -> float | None:
    return None if x is None else round(x, nd)


def _process(p: ProcessSnapshot, o: Attribution | None) -> dict[str, Any]:
    """One GPU process with its owner; `outside` when no gpupool workload owns it (then `pod`
    names the Kubernetes pod it runs in, where known)."""
    return {
        "pid": p.pid,
        "memory_mib": _round(None if p.used_memory_bytes is None else p.used_memory_bytes / MIB),
        "sm_util": p.sm_util,
        "workload": o.workload_id if o else None,
        "user": (o.user or o.unix_user) if o else None,
        "tenant": o.tenant if o else None,
        "via": str(o.via) if o else "none",
        "pod": (o.pod or o.pod_uid) if o else None,
        "outside": not (o and (o.owned or o.via is Via.SERVICE)),
    }


def mig_instances(
    g: GPU, held: Sequence[Mapping[str, Any]], reading: GPUSnapshot | None
) -> list[dict[str, Any]]:
    """The instances of a `mig` GPU's layout: profile, start, memory, who holds it, and the
    memory its MIG device uses where telemetry reads it ([] without a layout)."""
    if g.sharing is not SharingMode.MIG or not g.mig_layout:
        return []
    by_start = {h["mig_start"]: h for h in held if h.get("mig_start") is not None}
    devices = {d.start: d for d in (reading.mig_devices if reading else ()) if d.start is not None}
    out = []
    for profile, start, _, mem in instances_of(g.model, g.memory_mib, g.mig_layout):
        h = by_start.get(start)
        d = devices.get(start)
        used = d.memory_used_bytes if d is not None else None
        out.append(
            {
                "profile": profile,
                "start": start,
                "memory_mib": mem,
                "memory_used_mib": None if used is None else round(used / MIB),
                "workload": h["workload"] if h else None,
                "user": h["user"] if h else None,
            }
        )
    return out


def cluster_view(
    nodes: Sequence[Node],
    running: Iterable[tuple[Workload, Allocation]],
    frames: Iterable[Frame] = (),
    *,
    now: float,
) -> dict[str, Any]:
    """Every node and GPU with its live readings and holders, plus a summary.

    Each GPU lists the processes telemetry sees on it, with their owners (`_process`).
    A GPU's `status` is `down` (unhealthy, node down or unknown), `idle` (held, telemetry says
    idle), `busy` (held), `outside` (healthy, but work gpupool did not create holds it: its
    `outside` names that work) or `free`. Readings are None where no telemetry covers the GPU.
    """
    holders: dict[str, list[dict[str, Any]]] = {}
    for w, a in running:
        for s in a.shares:
            mig = {} if s.mig_profile is None else {"mig_profile": s.mig_profile}
            if s.mig_start is not None:
                mig["mig_start"] = s.mig_start
            holders.setdefault(s.gpu_uuid, []).append(
                mig
                | {
                    "workload": w.id,
                    "kind": str(w.kind),
                    "user": w.owner,
                    "tenant": w.tenant,
                    "state": str(w.state),
                    "milli": s.milli,
                    "memory_mib": s.memory_mib,
                    "enforcement": str(s.enforcement),
                    "since": a.since,
                }
            )
    readings: dict[str, Any] = {}
    processes: dict[str, list[dict[str, Any]]] = {}
    idle_from_telemetry: dict[str, float] = {}
    simulated_hosts: set[str] = set()
    for f in frames:
        if f.snapshot.simulated:
            simulated_hosts.add(f.snapshot.hostname)
        for g in f.snapshot.gpus:
            readings[g.uuid] = g
            processes[g.uuid] = [_process(p, f.owners.get(p.pid)) for p in g.processes]
        for d in f.detections:
            if d.kind is DetectionKind.IDLE:
                idle_from_telemetry[d.gpu_uuid] = max(
                    idle_from_telemetry.get(d.gpu_uuid, 0.0), d.duration_s
                )

    out_nodes = []
    counts = {"gpus": 0, "free": 0, "busy": 0, "idle": 0, "down": 0, "outside": 0}
    allocated_milli = 0
    any_simulated = bool(simulated_hosts)
    for n in nodes:
        gpus = []
        for g in n.gpus:
            r = readings.get(g.uuid)
            held = holders.get(g.uuid, [])
            milli = sum(h["milli"] for h in held)
            allocated_milli += milli
            util = r.util_gpu if r is not None else None
            simulated = bool(r is not None and r.simulated) or n.name in simulated_hosts
            any_simulated = any_simulated or simulated
            if (
                g.health is not GPUHealth.HEALTHY
                or n.state in (NodeState.DOWN, NodeState.UNKNOWN)
                or (r is not None and not r.healthy)
            ):
                status = "down"
            elif not held and g.outside is not None:
                status = "outside"
            elif not held:
                status = "free"
            elif g.uuid in idle_from_telemetry or (util is not None and util <= IDLE_UTIL_PCT):
                status = "idle"
            else:
                status = "busy"
            counts["gpus"] += 1
            counts[status] += 1
            mem_used = None
            if r is not None and r.memory_used_bytes is not None:
                mem_used = round(r.memory_used_bytes / MIB)
            gpus.append(
                {
                    "index": g.index,
                    "uuid": g.uuid,
                    "model": g.model,
                    "memory_total_mib": g.memory_mib,
                    "memory_used_mib": mem_used,
                    "util": _round(util),
                    "temperature_c": _round(r.temperature_c if r is not None else None, 0),
                    "power_w": _round(r.power_w if r is not None else None, 0),
                    "sharing": str(g.sharing),
                    "health": str(g.health),
                    "simulated": simulated,
                    "status": status,
                    "idle_for_s": _round(idle_from_telemetry.get(g.uuid)),
                    "allocated_milli": milli,
                    "holders": held,
                    "processes": processes.get(g.uuid, []),
                    "outside": None
                    if g.outside is None
                    else {"ref": g.outside.ref, "user": g.outside.user, "since": g.outside.since},
                    "mig_layout": g.mig_layout if g.sharing is SharingMode.MIG else None,
                    "mig_instances": mig_instances(g, held, r),
                }
            )
        out_nodes.append(
            {
                "name": n.name,
                "state": str(n.state),
                "last_heartbeat": n.last_heartbeat,
                "labels": dict(n.labels),
                "gpus": gpus,
            }
        )
    return {
        "now": now,
        "simulated": any_simulated,
        "summary": counts | {"allocated_milli": allocated_milli},
        "nodes": out_nodes,
    }


def tenant_live_view(
    tenants: Sequence[str],
    running: Iterable[tuple[Workload, Allocation]],
    frames: Iterable[Frame] = (),
    fair_shares: Mapping[str, int] | None = None,
) -> dict[str, dict[str, int | None]]:
    """Per tenant (its subtree rolled up): fair share and GPUs busy now, both in milli.

    Busy is each share's size times its GPU's utilization (a GPU's utilization is split among
    its holders in proportion to their shares); None where no telemetry covers the GPUs.
    """
    util = {g.uuid: g.util_gpu for f in frames for g in f.snapshot.gpus}
    fair = dict(fair_shares or {})
    out: dict[str, dict[str, int | None]] = {
        t: {"fair_share_milli": fair.get(t), "busy_milli": None} for t in tenants
    }
    for w, a in running:
        for s in a.shares:
            u = util.get(s.gpu_uuid)
            if u is None:
                continue
            busy = round(s.milli * u / 100)
            parts = w.tenant.split("/")
            for i in range(1, len(parts) + 1):
                row = out.get("/".join(parts[:i]))
                if row is not None:
                    row["busy_milli"] = (row["busy_milli"] or 0) + busy
    if util:
        for row in out.values():
            if row["busy_milli"] is None:
                row["busy_milli"] = 0
    for t, row in out.items():
        if row["fair_share_milli"] is None and fair:
            kids = [v for k, v in fair.items() if k.startswith(t + "/")]
            row["fair_share_milli"] = sum(kids) if kids else None
    return out


def gpu_history_view(
    gpus: Sequence[tuple[str, str, int, str]],
    history: Mapping[str, Sequence[GPUPoint]],
    *,
    now: float,
    range_s: float,
    buckets: int = MAX_POINTS,
) -> dict[str, Any]:
    """Utilization and memory per GPU over the last `range_s` seconds on one time grid.

    `gpus`: (node, uuid, index, model) for each GPU; `history[uuid]`: its points, oldest first
    (the caller picks the resolution). The range is cut into `buckets` equal slots; each
    GPU's value in a slot is the mean of its points there, None where it has none.
    `covered_from` is the oldest point seen (telemetry may not reach back the whole range).
    """
    start = now - range_s
    width = range_s / buckets
    grid = [round(start + (i + 0.5) * width, 1) for i in range(buckets)]
    series = []
    earliest: float | None = None
    for node, uuid, index, model in gpus:
        pts = history.get(uuid, ())
        u_sum = [0.0] * buckets
        u_n = [0] * buckets
        m_sum = [0.0] * buckets
        m_n = [0] * buckets
        for p in pts[bisect_left(pts, start, key=lambda q: q.t) :]:
            i = min(int((p.t - start) / width), buckets - 1)
            if p.util is not None:
                u_sum[i] += p.util
                u_n[i] += 1
            if p.memory_used_mib is not None:
                m_sum[i] += p.memory_used_mib
                m_n[i] += 1
            if earliest is None or p.t < earliest:
                earliest = p.t
        series.append(
            {
                "node": node,
                "uuid": uuid,
                "label": f"{node}/{index} {model}",
                "util": [round(a / n, 1) if n else None for a, n in zip(u_sum, u_n, strict=True)],
                "memory_used_mib": [
                    round(a / n) if n else None for a, n in zip(m_sum, m_n, strict=True)
                ],
            }
        )
    return {
        "now": now,
        "from": start,
        "range_s": range_s,
        "covered_from": earliest,
        "t": grid,
        "series": series,
    }
