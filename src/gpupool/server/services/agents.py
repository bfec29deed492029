"""Node agents: credentials, reports, and lost agents.

- An admin creates a node credential for a node name (`create_token`); `gpupool agent` sends
  it with every report. It is accepted by `POST /nodes/{name}/report` for that name only:
  user routes look tokens up among user tokens, where it is not (`node_credential`).
- `accept_report` registers or refreshes the node and its GPUs (the admin's sharing modes and
  the node's state and labels are kept) and keeps the report, with workload owners resolved.
  A node the server's engine registers itself (a cluster's) keeps the engine's GPUs: the
  report is re-keyed to them by index (`to_engine_gpus`).
  Only what the node observes decides whose a process is, never the process's own claim
  (its environment's `GPUPOOL_WORKLOAD_ID`, which the report may carry and the server
  drops): the container the host saw it run in (`gpupool.telemetry.containers`), whose
  owner the executor names (`ExecutorWithAttribution.owners`; `attribute_containers`, one
  path for every kind of container). Anything else is no workload's (`via` `unix-user` or
  `none`).
  A report whose `timestamp` is more than `skew_allowed_s` off the server's clock (a replay,
  a long-delayed report, a node without NTP) is refused (422) and changes nothing.
- `mark_lost` turns a node whose agent missed `LOST_AFTER_REPORTS` reports `unknown`; the
  next report gives it back the state it had.
- `report_frames` and `node_telemetry` read the reports back for `/metrics`, the dashboard
  and `GET /api/v1/nodes`. A node whose agent is lost shows no live readings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gpupool.domain import GPU, Event, GPUHealth, Node, NodeState
from gpupool.engines.common.executor import Executor, ExecutorWithAttribution
from gpupool.server.context import AppContext
from gpupool.server.principal import Principal
from gpupool.server.problems import NotAuthenticated, PermissionDenied
from gpupool.server.schemas.agents import (
    GpuTelemetryOut,
    NodeReportAck,
    NodeReportIn,
    NodeTelemetryOut,
    NodeTokenCreated,
    NodeTokenOut,
    ProcessTelemetryOut,
)
from gpupool.server.security import TOKEN_PREFIX, hash_token, new_token
from gpupool.store import (
    EventRepo,
    NodeRepo,
    NodeReportRepo,
    NodeTokenRepo,
    NotFound,
    TokenRepo,
    WorkloadRepo,
)
from gpupool.store.nodeagents import NodeReportRow, NodeTokenRow
from gpupool.telemetry.attribution import Attribution, Via
from gpupool.telemetry.containers import CONTAINER_KINDS, ContainerKind
from gpupool.telemetry.sampler import Frame
from gpupool.telemetry.snapshots import MIB, GPUSnapshot, HostSnapshot, ProcessKind, ProcessSnapshot

#: an agent that misses this many reports in a row is lost
LOST_AFTER_REPORTS = 3
#: ... but never sooner than this (a very short interval must not flap on a slow request)
MIN_LOST_AFTER_S = 1.0
NODE_TOKEN_PREFIX = "gpn_"
_NODE_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$")
#: a report's timestamp may be this many intervals off the server's clock ...
SKEW_REPORTS = 3
#: ... and never less than this (NTP keeps hosts within milliseconds; a slow request is not)
MIN_SKEW_S = 30.0
#: node states a lost agent turns `unknown` (`down` is the admin's word and stays)
_WATCHED = (NodeState.READY, NodeState.DRAINING)


def lost_after_s(interval_s: float) -> float:
    """Seconds without a report after which an agent reporting every `interval_s` is lost."""
    return max(LOST_AFTER_REPORTS * interval_s, MIN_LOST_AFTER_S)


def skew_allowed_s(interval_s: float) -> float:
    """How far (either way, s) the timestamp of a report sent every `interval_s` may be from
    the server's clock."""
    return max(SKEW_REPORTS * interval_s, MIN_SKEW_S)


def _check_name(node: str) -> None:
    if not _NODE_NAME.match(node):
        from gpupool.domain import ValidationError

        raise ValidationError(
            f"bad node name {node!r}: use letters, digits, '.', '_' and '-' (at most 253)",
            "node",
        )


# -- credentials --------------------------------------------------------------------------------


def _token_out(row: NodeTokenRow) -> NodeTokenOut:
    return NodeTokenOut.model_validate(row)


def create_token(ctx: AppContext, p: Principal, node: str) -> NodeTokenCreated:
    """A new credential for `node`'s agent; its secret is in the answer and nowhere else."""
    p.require_admin("create node credentials")
    _check_name(node)
    token_id, user_style, _ = new_token()
    secret = NODE_TOKEN_PREFIX + user_style.removeprefix(TOKEN_PREFIX)
    digest = hash_token(secret)
    with ctx.store.write() as s:
        row = NodeTokenRepo(s).issue(token_id, node, digest, ctx.clock.now(), p.name)
        out = _token_out(row)
    return NodeTokenCreated(**out.model_dump(), token=secret)


def list_tokens(ctx: AppContext, p: Principal, node: str) -> list[NodeTokenOut]:
    p.require_admin("list node credentials")
    with ctx.store.read() as s:
        return [_token_out(r) for r in NodeTokenRepo(s).list(node)]


def revoke_token(ctx: AppContext, p: Principal, node: str, token_id: str) -> NodeTokenOut:
    p.require_admin("revoke node credentials")
    with ctx.store.write() as s:
        return _token_out(NodeTokenRepo(s).revoke(node, token_id, ctx.clock.now()))


def node_credential(ctx: AppContext, node: str, secret: str | None) -> str:
    """The id of the valid credential `secret` for reporting as `node`.

    401 when it is no credential at all; 403 when it is a user token or another node's."""
    if not secret:
        raise NotAuthenticated(
            "send the node's credential as 'Authorization: Bearer <token>'; an admin creates "
            f"it with `gpupool node token create {node}`"
        )
    digest = hash_token(secret)
    with ctx.store.read() as s:
        row = NodeTokenRepo(s).by_hash(digest)
        user_token = row is None and TokenRepo(s).by_hash(digest) is not None
        found = (row.id, row.node, row.revoked_at) if row is not None else None
    if user_token:
        raise PermissionDenied(
            "only a node credential may report a node's GPUs, not a user's token; "
            f"an admin creates one with `gpupool node token create {node}`"
        )
    if found is None or found[2] is not None:
        raise NotAuthenticated(
            "the node credential is unknown or revoked; ask an admin for a new one "
            f"(`gpupool node token create {node}`)"
        )
    token_id, bound, _ = found
    if bound != node:
        raise PermissionDenied(
            f"this credential reports for node {bound!r}, not {node!r}; run the agent with "
            f"--node {bound} or ask an admin for a credential for {node!r}"
        )
    return token_id


# -- reports ------------------------------------------------------------------------------------


def attribute(
    kind: ContainerKind,
    owners: Mapping[str, str | None],
    names: Mapping[str, str],
    procs: list[dict[str, Any]],
) -> None:
    """Attribute reported processes (dicts, changed in place) by the container of `kind`
    they run in, from the executor's `owners` (and `names`) of those containers.

    A process in a container gpupool started belongs to that container's workload (`via`
    the kind's), even over an environment marker, which any process can set; one in a
    container gpupool did not start is outside gpupool (no workload, whatever its
    environment says) and keeps the container's readable name where the kind has one. A
    container the executor does not know changes nothing."""
    for p in procs:
        cid = p.get(kind.field) or ""
        if cid not in owners:
            continue
        if kind.name_field is not None and cid in names:
            p[kind.name_field] = names[cid]
        p["workload_id"] = owners[cid]
        if owners[cid]:
            p["via"] = str(kind.via)
        else:
            p["via"] = "unix-user" if p.get("unix_user") else "none"


def attribute_containers(executor: Executor, procs: list[dict[str, Any]]) -> None:
    """Ask `executor` who owns the containers of every kind the processes were seen in, and
    attribute them (`attribute`); an executor without `ExecutorWithAttribution` owns none."""
    if not isinstance(executor, ExecutorWithAttribution):
        return
    for kind in CONTAINER_KINDS:
        ids = {str(p[kind.field]) for p in procs if p.get(kind.field)}
        if ids:
            owners = executor.owners(kind.name, ids)
            names = executor.container_names(kind.name, ids) if kind.name_field else {}
            attribute(kind, owners, names, procs)


def _owners(ctx: AppContext, procs: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """workload id -> (user, tenant) for the workloads the report's processes name."""
    wanted = {p["workload_id"] for p in procs if p.get("workload_id")}
    out: dict[str, tuple[str, str]] = {}
    if not wanted:
        return out
    with ctx.store.read() as s:
        repo = WorkloadRepo(s)
        for wid in wanted:
            try:
                w = repo.get(wid)
            except NotFound:
                continue
            out[wid] = (w.owner, w.tenant)
    return out


def to_engine_gpus(engine_node: Node, stored: dict[str, Any]) -> None:
    """Re-key a report (changed in place) to the GPUs of a node the server's engine
    registers (with GPU uuids of its own), by GPU index, so readings and processes land on
    the GPUs work is allocated on. The engine keeps the node's GPUs, capacity and health;
    the agent's own GPU UUID stays as `device_uuid`."""
    by_index = {g.index: g.uuid for g in engine_node.gpus}
    renamed: dict[str, str] = {}
    for g in stored["gpus"]:
        uuid = by_index.get(g["index"])
        if uuid is not None and uuid != g["uuid"]:
            renamed[g["uuid"]] = uuid
            g["device_uuid"], g["uuid"] = g["uuid"], uuid
    for p in stored["processes"]:
        p["gpu_uuid"] = renamed.get(p["gpu_uuid"], p["gpu_uuid"])


def check_fresh(report: NodeReportIn, now: float) -> None:
    """Refuse (422) a report whose timestamp is further than `skew_allowed_s` from `now`."""
    off = report.timestamp - now
    allowed = skew_allowed_s(report.interval_s)
    if abs(off) > allowed:
        from gpupool.domain import ValidationError

        when = "behind" if off < 0 else "ahead of"
        raise ValidationError(
            f"the report's timestamp is {abs(off):.0f} s {when} the server's clock (at most "
            f"{allowed:.0f} s either way: {SKEW_REPORTS} reports of {report.interval_s:g} s, at "
            "least 30 s); a replayed or long-delayed report is refused. If the agent sends "
            "fresh reports, the node's clock is off: synchronise it (NTP/chrony)",
            "timestamp",
        )


def accept_report(ctx: AppContext, node: str, token_id: str, report: NodeReportIn) -> NodeReportAck:
    """Register or refresh `node` from its agent's report and keep the report; see the
    module docstring for what decides whose a process is."""
    now = ctx.clock.now()
    check_fresh(report, now)
    stored: dict[str, Any] = report.model_dump()
    for proc in stored["processes"]:  # the process's own claim: never trusted
        proc["workload_id"] = None
        proc["via"] = "unix-user" if proc.get("unix_user") else "none"
    attribute_containers(ctx.executor, stored["processes"])
    owners = _owners(ctx, stored["processes"])
    for proc in stored["processes"]:
        user, tenant = owners.get(proc["workload_id"] or "", (None, None))
        proc["user"], proc["tenant"] = user, tenant
    found = False
    with ctx.store.write() as s:
        nodes = NodeRepo(s)
        try:
            old: Node | None = nodes.get(node)
        except NotFound:
            old = None
        reports = NodeReportRepo(s)
        prior = reports.get(node)
        state = old.state if old is not None else NodeState.READY
        if state is NodeState.UNKNOWN:
            before = prior.state_before_lost if prior is not None else None
            state = NodeState(before) if before else NodeState.READY
            found = True
        gpus = tuple(
            GPU(
                g.index,
                g.uuid,
                g.name,
                max(1, (g.memory_total_bytes or 0) // MIB),
                health=GPUHealth.HEALTHY if g.healthy else GPUHealth.UNHEALTHY,
            )
            for g in report.gpus
        )
        cpu, memory = report.cpu_milli, report.memory_mib
        if old is not None and old.gpus and ctx.work_nodes is not None and node in ctx.work_nodes:
            to_engine_gpus(old, stored)
            gpus, cpu, memory = old.gpus, old.cpu_milli, old.memory_mib
        changed = (
            old is None
            or found
            or [(g.uuid, g.health) for g in old.gpus] != [(g.uuid, g.health) for g in gpus]
        )
        nodes.upsert(
            Node(
                node,
                gpus,
                cpu_milli=cpu,
                memory_mib=memory,
                labels=old.labels if old is not None else (),
                state=state,
                last_heartbeat=now,
            )
        )
        reports.put(node, now, report.interval_s, stored)
        if prior is not None:
            prior.state_before_lost = None
        NodeTokenRepo(s).touch(token_id, now)
        if found:
            EventRepo(s).add(
                Event(
                    at=now,
                    kind="node.found",
                    message=f"node {node}: its agent reports again; back to {state}",
                    data={"node": node, "state": str(state)},
                )
            )
    if changed:
        ctx.wake_scheduler()
    return NodeReportAck(
        node=node,
        state=str(state),
        received_at=now,
        gpus=len(gpus),
        lost_after_s=lost_after_s(report.interval_s),
    )


def mark_lost(ctx: AppContext) -> list[str]:
    """Turn `unknown` every watched node whose agent missed its reports; the names turned."""
    now = ctx.clock.now()
    lost: list[str] = []
    with ctx.store.write() as s:
        nodes = NodeRepo(s)
        reports = NodeReportRepo(s)
        for row in reports.list():
            silent = now - row.received_at
            if silent <= lost_after_s(row.interval_s):
                continue
            try:
                node = nodes.get(row.node)
            except NotFound:
                continue
            if node.state not in _WATCHED:
                continue
            reports.mark_lost(row.node, str(node.state))
            nodes.set_state(row.node, NodeState.UNKNOWN)
            EventRepo(s).add(
                Event(
                    at=now,
                    kind="node.lost",
                    message=(
                        f"node {row.node}: no report from its agent for {silent:.0f} s "
                        f"(it reports every {row.interval_s:g} s); its state is unknown "
                        "until the agent reports again"
                    ),
                    data={"node": row.node, "state_before": str(node.state)},
                )
            )
            lost.append(row.node)
    if lost:
        ctx.wake_scheduler()
    return lost


# -- reading reports back -----------------------------------------------------------------------


def _via(p: dict[str, Any]) -> str:
    if p.get("via"):
        return str(p["via"])  # decided when the report came (`accept_report`)
    return "unix-user" if p.get("unix_user") else "none"


def frame_of(node: str, report: dict[str, Any]) -> Frame:
    """A telemetry frame (as the local sampler makes them) from a stored report."""
    t = float(report["timestamp"])
    procs: dict[str, list[dict[str, Any]]] = {}
    owners: dict[int, Attribution] = {}
    for p in report.get("processes", []):
        procs.setdefault(p["gpu_uuid"], []).append(p)
        via = _via(p)
        owners[p["pid"]] = Attribution(
            pid=p["pid"],
            via=Via(via) if via in set(Via) else Via.UNIX_USER if p.get("unix_user") else Via.NONE,
            workload_id=p.get("workload_id"),
            user=p.get("user"),
            tenant=p.get("tenant"),
            unix_user=p.get("unix_user"),
            pod_uid=p.get("pod_uid"),
            pod=p.get("pod"),
            command=p.get("command"),
        )
    simulated = bool(report.get("simulated"))
    gpus = tuple(
        GPUSnapshot(
            index=g["index"],
            uuid=g["uuid"],
            name=g["name"],
            timestamp=t,
            healthy=g.get("healthy", True),
            memory_total_bytes=g.get("memory_total_bytes"),
            memory_used_bytes=g.get("memory_used_bytes"),
            memory_free_bytes=g.get("memory_free_bytes"),
            util_gpu=g.get("util_gpu"),
            util_memory=g.get("util_memory"),
            temperature_c=g.get("temperature_c"),
            power_w=g.get("power_w"),
            power_limit_w=g.get("power_limit_w"),
            pci_bus_id=g.get("pci_bus_id"),
            mig_enabled=g.get("mig_enabled"),
            processes=tuple(
                ProcessSnapshot(
                    pid=p["pid"],
                    gpu_uuid=p["gpu_uuid"],
                    gpu_index=g["index"],
                    timestamp=t,
                    used_memory_bytes=p.get("used_memory_bytes"),
                    sm_util=p.get("sm_util"),
                    kind=ProcessKind(p.get("kind", "compute")),
                    mig_uuid=p.get("mig_uuid"),
                )
                for p in procs.get(g["uuid"], [])
            ),
            errors=tuple(g.get("errors", ())),
            simulated=simulated,
        )
        for g in report.get("gpus", [])
    )
    snap = HostSnapshot(
        hostname=node,
        timestamp=t,
        gpus=gpus,
        driver_version=report.get("driver_version"),
        cuda_version=report.get("cuda_version"),
        simulated=simulated,
        errors=tuple(report.get("errors", ())),
    )
    return Frame(snapshot=snap, owners=owners)


def _reports(ctx: AppContext) -> list[tuple[NodeReportRow, NodeState]]:
    with ctx.store.read() as s:
        rows = NodeReportRepo(s).list()
        states = {n.name: n.state for n in NodeRepo(s).list()}
        for r in rows:
            s.expunge(r)
    return [(r, states[r.node]) for r in rows if r.node in states]


def report_frames(ctx: AppContext) -> list[Frame]:
    """Frames of the nodes whose agents report (lost ones left out: no stale readings)."""
    return [
        frame_of(r.node, r.report) for r, state in _reports(ctx) if state is not NodeState.UNKNOWN
    ]


def node_telemetry(ctx: AppContext) -> dict[str, NodeTelemetryOut]:
    """Node name -> the latest report of its agent, for `GET /api/v1/nodes`."""
    now = ctx.clock.now()
    out: dict[str, NodeTelemetryOut] = {}
    for r, state in _reports(ctx):
        rep = r.report
        out[r.node] = NodeTelemetryOut(
            reported_at=r.received_at,
            age_s=round(max(0.0, now - r.received_at), 3),
            interval_s=r.interval_s,
            lost=state is NodeState.UNKNOWN,
            agent_version=rep.get("agent_version", ""),
            simulated=bool(rep.get("simulated")),
            gpus=[
                GpuTelemetryOut(
                    uuid=g["uuid"],
                    index=g["index"],
                    healthy=g.get("healthy", True),
                    util_gpu=g.get("util_gpu"),
                    memory_used_mib=_mib(g.get("memory_used_bytes")),
                    memory_total_mib=_mib(g.get("memory_total_bytes")),
                    temperature_c=g.get("temperature_c"),
                    power_w=g.get("power_w"),
                )
                for g in rep.get("gpus", [])
            ],
            processes=[
                ProcessTelemetryOut(
                    pid=p["pid"],
                    gpu_uuid=p["gpu_uuid"],
                    memory_mib=_mib(p.get("used_memory_bytes")),
                    sm_util=p.get("sm_util"),
                    workload_id=p.get("workload_id"),
                    user=p.get("user"),
                    tenant=p.get("tenant"),
                    slurm_job_id=p.get("slurm_job_id"),
                    pod_uid=p.get("pod_uid"),
                    pod=p.get("pod"),
                    unix_user=p.get("unix_user"),
                    via=_via(p),
                )
                for p in rep.get("processes", [])
            ],
        )
    return out


def _mib(value: int | None) -> float | None:
    return None if value is None else round(value / MIB, 1)
