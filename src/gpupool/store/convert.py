"""Explicit converters between store rows and domain types. Nothing else crosses the boundary."""

from __future__ import annotations

import dataclasses
import json
import operator
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Protocol

from gpupool.domain import (
    GPU,
    Allocation,
    Enforcement,
    Event,
    GPUHealth,
    Membership,
    Node,
    NodeState,
    OutsideUse,
    Quota,
    Request,
    Role,
    Share,
    SharingMode,
    Tenant,
    User,
    Workload,
    WorkloadKind,
    WorkloadState,
)
from gpupool.domain.profiles import Profile
from gpupool.scheduler.types import Wait, WaitKind
from gpupool.sim.forecast import Forecast
from gpupool.store.rows import (
    AllocationRow,
    EventRow,
    GpuRow,
    MembershipRow,
    NodeRow,
    ProfileRow,
    ShareRow,
    TenantRow,
    UserRow,
    WorkloadRow,
)

# -- requests (workload and profile rows carry the same request columns) -------------------


class RequestColumns(Protocol):
    """The request columns workload and profile rows share (read only)."""

    @property
    def gpus(self) -> int: ...
    @property
    def gpu_milli(self) -> int: ...
    @property
    def gpu_memory_mib(self) -> int: ...
    @property
    def gpu_model(self) -> str | None: ...
    @property
    def cpu_milli(self) -> int: ...
    @property
    def memory_mib(self) -> int: ...
    @property
    def mig(self) -> str | None: ...


def request_of(
    row: RequestColumns,
    *,
    nodes: int | None = 1,
    engine: str | None = None,
    node_labels: str | None = None,
) -> Request:
    """The request of a workload or profile row. Only workload rows have the columns of
    `nodes` and the pins (`engine`, `node_labels` as stored text): a profile is one node
    and carries no pins (a submit adds them to the profile's request)."""
    return Request(
        gpus=row.gpus,
        gpu_milli=row.gpu_milli,
        gpu_memory_mib=row.gpu_memory_mib,
        gpu_model=row.gpu_model,
        cpu_milli=row.cpu_milli,
        memory_mib=row.memory_mib,
        mig=row.mig,
        nodes=nodes or 1,
        engine=engine,
        node_labels=labels_from_text(node_labels),
    )


def labels_from_text(text: str | None) -> tuple[tuple[str, str], ...]:
    """A request's node labels from their stored JSON object text (NULL: none)."""
    if not text:
        return ()
    return tuple(sorted((str(k), str(v)) for k, v in json.loads(text).items()))


def labels_to_text(labels: tuple[tuple[str, str], ...]) -> str | None:
    """A request's node labels as stored: a JSON object text sorted by key, NULL if none."""
    return json.dumps(dict(labels), sort_keys=True, separators=(",", ":")) if labels else None


def set_request(row: WorkloadRow | ProfileRow, r: Request) -> None:
    if isinstance(row, WorkloadRow):
        row.nodes = r.nodes
        row.engine = r.engine
        row.node_labels = labels_to_text(r.node_labels)
    row.gpus = r.gpus
    row.gpu_milli = r.gpu_milli
    row.gpu_memory_mib = r.gpu_memory_mib
    row.gpu_model = r.gpu_model
    row.cpu_milli = r.cpu_milli
    row.memory_mib = r.memory_mib
    row.mig = r.mig


# -- cluster ----------------------------------------------------------------------------------


def outside_to_domain(d: Mapping[str, Any] | None) -> OutsideUse | None:
    if not d:
        return None
    since = d.get("since")
    user = str(d.get("user") or "")
    return OutsideUse(str(d["ref"]), user, None if since is None else float(since))


def outside_to_row(o: OutsideUse | None) -> dict[str, Any] | None:
    return None if o is None else {"ref": o.ref, "user": o.user, "since": o.since}


#: the columns of a GPU row a `GPU` is made of, in the order `gpu_from` takes them (the ORM
#: path reads them off the row, `NodeRepo.rows` selects them: a new field is added here and
#: in `gpu_from` only)
GPU_FIELDS = ("index", "uuid", "model", "memory_mib", "sharing", "health", "outside", "mig_layout")
_gpu_fields = operator.attrgetter(*GPU_FIELDS)


def _decoded(value: Any) -> Any:
    """A JSON column's value: as the ORM loads it, or its text (plain rows read it cast)."""
    return json.loads(value) if isinstance(value, str) else value


def gpu_from(
    index: int,
    uuid: str,
    model: str,
    memory_mib: int,
    sharing: str,
    health: str,
    outside: Any,
    mig_layout: str | None,
) -> GPU:
    """The GPU of its row's values (`GPU_FIELDS`; `outside` loaded, or its JSON text): the
    one conversion, for ORM rows (`gpu_to_domain`) and plain ones (`NodeRepo.rows`)."""
    return GPU(
        index=index,
        uuid=uuid,
        model=model,
        memory_mib=memory_mib,
        sharing=SharingMode(sharing),
        health=GPUHealth(health),
        outside=outside_to_domain(_decoded(outside)),
        mig_layout=mig_layout,
    )


def gpu_to_domain(row: GpuRow) -> GPU:
    return gpu_from(*_gpu_fields(row))


def gpu_to_row(gpu: GPU, node: str, row: GpuRow | None = None) -> GpuRow:
    row = row or GpuRow(uuid=gpu.uuid)
    row.node = node
    row.index = gpu.index
    row.model = gpu.model
    row.memory_mib = gpu.memory_mib
    row.sharing = str(gpu.sharing)
    row.health = str(gpu.health)
    row.outside = outside_to_row(gpu.outside)
    row.mig_layout = gpu.mig_layout
    return row


#: the columns of a node row a `Node` is made of (its GPUs aside), in the order `node_from`
#: takes them (as `GPU_FIELDS`)
NODE_FIELDS = ("name", "cpu_milli", "memory_mib", "labels", "state", "last_heartbeat")
_node_fields = operator.attrgetter(*NODE_FIELDS)


def node_from(
    gpus: tuple[GPU, ...],
    name: str,
    cpu_milli: int,
    memory_mib: int,
    labels: Any,
    state: str,
    last_heartbeat: float | None,
) -> Node:
    """The node of its row's values (`NODE_FIELDS`; `labels` loaded, or its JSON text) with
    its `gpus` (by index): the one conversion, for ORM rows and plain ones."""
    return Node(
        name=name,
        gpus=gpus,
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        labels=tuple(sorted((str(k), str(v)) for k, v in (_decoded(labels) or {}).items())),
        state=NodeState(state),
        last_heartbeat=last_heartbeat,
    )


def node_to_domain(row: NodeRow, gpus: tuple[GPU, ...] | None = None) -> Node:
    """The node of ORM row `row`; `gpus` (sorted by index) given instead of loading
    `row.gpus`."""
    if gpus is None:
        gpus = tuple(gpu_to_domain(g) for g in sorted(row.gpus, key=lambda g: g.index))
    return node_from(gpus, *_node_fields(row))


def node_fields_to_row(node: Node, row: NodeRow) -> NodeRow:
    """Copy the node's own fields (not its GPUs) onto `row`."""
    row.name = node.name
    row.cpu_milli = node.cpu_milli
    row.memory_mib = node.memory_mib
    row.labels = dict(node.labels)
    row.state = str(node.state)
    row.last_heartbeat = node.last_heartbeat
    return row


# -- tenancy ----------------------------------------------------------------------------------


def tenant_to_domain(row: TenantRow) -> Tenant:
    return Tenant(
        name=row.name,
        quota=Quota(
            guaranteed_milli=row.guaranteed_milli,
            limit_milli=row.limit_milli,
            weight=row.weight,
            max_milli_per_user=row.max_milli_per_user,
            guaranteed_by_model=MappingProxyType(
                {str(k): int(v) for k, v in (row.guaranteed_by_model or {}).items()}
            ),
        ),
        idle_timeout_s=row.idle_timeout_s,
        default_runtime_s=row.default_runtime_s,
        max_runtime_s=row.max_runtime_s,
    )


def tenant_to_row(tenant: Tenant, row: TenantRow | None = None) -> TenantRow:
    row = row or TenantRow(name=tenant.name)
    row.parent = tenant.parent
    q = tenant.quota
    row.guaranteed_milli = q.guaranteed_milli
    row.limit_milli = q.limit_milli
    row.weight = q.weight
    row.max_milli_per_user = q.max_milli_per_user
    row.guaranteed_by_model = dict(q.guaranteed_by_model)
    row.idle_timeout_s = tenant.idle_timeout_s
    row.default_runtime_s = tenant.default_runtime_s
    row.max_runtime_s = tenant.max_runtime_s
    return row


def user_to_domain(row: UserRow) -> User:
    return User(name=row.name, admin=row.admin, unix_user=row.unix_user)


def membership_to_domain(row: MembershipRow) -> Membership:
    return Membership(user=row.user, tenant=row.tenant, role=Role(row.role))


# -- workloads --------------------------------------------------------------------------------


#: how the stored JSON of an `owed` wait begins (`wait_to_json` writes the kind first)
OWED_WAIT_PREFIX = '{"kind":"owed",'


def wait_to_json(w: Wait) -> str:
    """A scheduler Wait as the JSON text stored in `workloads.pending_wait`."""
    return json.dumps(
        {
            "kind": str(w.kind),
            "owed_milli": w.owed_milli,
            "victims": list(w.victims),
            "until": w.until,
            "node": w.node,
            "expected_start": w.expected_start,
        },
        separators=(",", ":"),
    )


def wait_from_json(text: str | None) -> Wait | None:
    """The Wait stored by `wait_to_json` (None for NULL or a kind this version does not know)."""
    if not text:
        return None
    d = json.loads(text)
    try:
        kind = WaitKind(d["kind"])
    except (KeyError, ValueError):
        return None
    return Wait(
        kind,
        owed_milli=int(d.get("owed_milli") or 0),
        victims=tuple(d.get("victims") or ()),
        until=d.get("until"),
        node=d.get("node"),
        expected_start=d.get("expected_start"),
    )


def workload_to_domain(row: WorkloadRow) -> Workload:
    return Workload(
        id=row.id,
        tenant=row.tenant,
        owner=row.owner,
        request=request_of(row, nodes=row.nodes, engine=row.engine, node_labels=row.node_labels),
        kind=WorkloadKind(row.kind),
        priority=row.priority,
        preemptible=row.preemptible,
        requeue_on_preemption=row.requeue_on_preemption,
        checkpointing=bool(row.checkpointing),
        max_runtime_s=row.max_runtime_s,
        submitted_at=row.submitted_at,
        state=WorkloadState(row.state),
        command=tuple(str(c) for c in row.command or ()),
        profile=row.profile,
        admitted_at=row.admitted_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        exit_code=row.exit_code,
        reason=row.reason,
        preemptions=row.preemptions,
        start_attempts=row.start_attempts or 0,
        retry_at=row.retry_at,
    )


#: the columns a state transition (`gpupool.domain.transition`) may change: what both writers
#: of workload states set from the new `Workload` (`WorkloadRepo.change_state` through
#: `workload_to_row`, `AdmissionRepo.admit` for a batch through `lifecycle_values`)
LIFECYCLE_FIELDS = (
    "state",
    "admitted_at",
    "started_at",
    "finished_at",
    "exit_code",
    "reason",
    "preemptions",
    "start_attempts",
    "retry_at",
)


def lifecycle_values(w: Workload) -> dict[str, Any]:
    """`LIFECYCLE_FIELDS` of `w` as column values (`state` as its stored text)."""
    return {
        "state": str(w.state),
        "admitted_at": w.admitted_at,
        "started_at": w.started_at,
        "finished_at": w.finished_at,
        "exit_code": w.exit_code,
        "reason": w.reason,
        "preemptions": w.preemptions,
        "start_attempts": w.start_attempts,
        "retry_at": w.retry_at,
    }


def workload_to_row(w: Workload, row: WorkloadRow | None = None) -> WorkloadRow:
    """Copy every domain field of `w` onto `row` (a new row when None)."""
    row = row or WorkloadRow(id=w.id)
    row.tenant = w.tenant
    row.owner = w.owner
    set_request(row, w.request)
    row.kind = str(w.kind)
    row.priority = w.priority
    row.preemptible = w.preemptible
    row.requeue_on_preemption = w.requeue_on_preemption
    row.checkpointing = w.checkpointing
    row.max_runtime_s = w.max_runtime_s
    row.submitted_at = w.submitted_at
    row.command = list(w.command)
    row.profile = w.profile
    for k, v in lifecycle_values(w).items():
        setattr(row, k, v)
    return row


def share_to_domain(row: ShareRow) -> Share:
    return Share(
        node=row.node,
        gpu_index=row.gpu_index,
        gpu_uuid=row.gpu_uuid,
        milli=row.milli,
        memory_mib=row.memory_mib,
        enforcement=Enforcement(row.enforcement),
        mig_profile=row.mig_profile,
        mig_start=row.mig_start,
    )


def allocation_to_domain(row: AllocationRow, shares: tuple[Share, ...] | None = None) -> Allocation:
    """`row` may be a plain row of the allocation's columns; its `shares` are then given."""
    return Allocation(
        workload_id=row.workload_id,
        node=row.node,
        shares=shares if shares is not None else tuple(share_to_domain(s) for s in row.shares),
        since=row.since,
        cpu_milli=row.cpu_milli,
        memory_mib=row.memory_mib,
    )


def allocation_values(a: Allocation) -> dict[str, Any]:
    """The columns of `a`'s allocation row (its shares: `share_values`)."""
    return {
        "workload_id": a.workload_id,
        "node": a.node,
        "since": a.since,
        "cpu_milli": a.cpu_milli,
        "memory_mib": a.memory_mib,
    }


def share_values(s: Share) -> dict[str, Any]:
    """The columns of a share row, but its allocation id."""
    return {
        "gpu_uuid": s.gpu_uuid,
        "node": s.node,
        "gpu_index": s.gpu_index,
        "milli": s.milli,
        "memory_mib": s.memory_mib,
        "enforcement": str(s.enforcement),
        "mig_profile": s.mig_profile,
        "mig_start": s.mig_start,
    }


def allocation_to_row(a: Allocation) -> AllocationRow:
    return AllocationRow(
        **allocation_values(a), shares=[ShareRow(**share_values(s)) for s in a.shares]
    )


def event_to_domain(row: EventRow) -> Event:
    return Event(
        at=row.at,
        kind=row.kind,
        message=row.message,
        workload_id=row.workload_id,
        tenant=row.tenant,
        user=row.user,
        data=MappingProxyType(dict(row.data or {})),
    )


def event_values(e: Event) -> dict[str, Any]:
    """The columns of `e`'s event row."""
    return {
        "at": e.at,
        "kind": e.kind,
        "message": e.message,
        "workload_id": e.workload_id,
        "tenant": e.tenant,
        "user": e.user,
        "data": dict(e.data),
    }


def event_to_row(e: Event) -> EventRow:
    return EventRow(**event_values(e))


# -- profiles ---------------------------------------------------------------------------------


def profile_to_domain(row: ProfileRow) -> Profile:
    return Profile(
        name=row.name,
        description=row.description,
        kind=WorkloadKind(row.kind),
        image=row.image,
        tenants=tuple(str(t) for t in row.tenants or ()),
        request=request_of(row),
        default_runtime_s=row.default_runtime_s,
        max_runtime_s=row.max_runtime_s,
    )


def profile_to_row(p: Profile, row: ProfileRow | None = None) -> ProfileRow:
    row = row or ProfileRow(name=p.name)
    row.description = p.description
    row.kind = str(p.kind)
    row.image = p.image
    row.tenants = list(p.tenants)
    row.default_runtime_s = p.default_runtime_s
    row.max_runtime_s = p.max_runtime_s
    set_request(row, p.request)
    return row


def forecast_to_json(f: Forecast) -> str:
    """A start-time forecast as the JSON text stored in `workloads.pending_forecast`."""
    return json.dumps(dataclasses.asdict(f), separators=(",", ":"))


def forecast_from_json(text: str | None) -> Forecast | None:
    """The Forecast stored by `forecast_to_json` (None for NULL or an unreadable one)."""
    if not text:
        return None
    try:
        return Forecast(**json.loads(text))
    except (TypeError, ValueError):
        return None
