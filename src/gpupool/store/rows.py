"""SQLAlchemy rows: the database shape of gpupool's concepts.

Rows are persistence only; code above the store works with domain types through
`gpupool.store.convert`. Times are float seconds since the epoch (the injected clock's time).
GPU amounts are milli (1000 = one GPU), memory MiB, CPU milli-CPU.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    cast,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class NodeRow(Base):
    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(String(253), primary_key=True)
    cpu_milli: Mapped[int] = mapped_column(Integer, default=0)
    memory_mib: Mapped[int] = mapped_column(Integer, default=0)
    labels: Mapped[dict[str, Any]] = mapped_column(default=dict)
    state: Mapped[str] = mapped_column(String(16), default="ready")
    last_heartbeat: Mapped[float | None] = mapped_column(Float)

    gpus: Mapped[list[GpuRow]] = relationship(
        back_populates="node_row",
        cascade="all, delete-orphan",
        order_by="GpuRow.index",
        lazy="selectin",
    )


class GpuRow(Base):
    __tablename__ = "gpus"
    __table_args__ = (UniqueConstraint("node", "index", name="uq_gpus_node_index"),)

    uuid: Mapped[str] = mapped_column(String(128), primary_key=True)
    node: Mapped[str] = mapped_column(ForeignKey("nodes.name", ondelete="CASCADE"), index=True)
    index: Mapped[int] = mapped_column(Integer)
    model: Mapped[str] = mapped_column(String(128))
    memory_mib: Mapped[int] = mapped_column(Integer)
    sharing: Mapped[str] = mapped_column(String(16), default="exclusive")
    health: Mapped[str] = mapped_column(String(16), default="healthy")
    #: who holds it outside gpupool ({"ref", "user", "since"}); None: nobody
    outside: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    # the MIG layout of a `mig` GPU (gpupool.domain.mig); NULL: handed out whole
    mig_layout: Mapped[str | None] = mapped_column(String(255))

    node_row: Mapped[NodeRow] = relationship(back_populates="gpus")


class TenantRow(Base):
    __tablename__ = "tenants"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    parent: Mapped[str | None] = mapped_column(
        ForeignKey("tenants.name", ondelete="RESTRICT"), index=True
    )
    guaranteed_milli: Mapped[int] = mapped_column(Integer, default=0)
    limit_milli: Mapped[int | None] = mapped_column(Integer)
    weight: Mapped[float] = mapped_column(Float, default=1.0)
    max_milli_per_user: Mapped[int | None] = mapped_column(Integer)
    guaranteed_by_model: Mapped[dict[str, Any]] = mapped_column(default=dict)
    idle_timeout_s: Mapped[float | None] = mapped_column(Float)
    default_runtime_s: Mapped[float | None] = mapped_column(Float)
    max_runtime_s: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float, default=0.0)


class UserRow(Base):
    __tablename__ = "users"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    password_hash: Mapped[str | None] = mapped_column(String(255))
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    unix_user: Mapped[str | None] = mapped_column(String(64))
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float, default=0.0)

    memberships: Mapped[list[MembershipRow]] = relationship(
        cascade="all, delete-orphan", order_by="MembershipRow.tenant", lazy="select"
    )


class MembershipRow(Base):
    __tablename__ = "memberships"

    user: Mapped[str] = mapped_column(
        ForeignKey("users.name", ondelete="CASCADE"), primary_key=True
    )
    tenant: Mapped[str] = mapped_column(
        ForeignKey("tenants.name", ondelete="CASCADE"), primary_key=True, index=True
    )
    role: Mapped[str] = mapped_column(String(16), default="member")


class TokenRow(Base):
    """An API token. Only the SHA-256 of the secret is stored; the secret is shown once."""

    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user: Mapped[str] = mapped_column(ForeignKey("users.name", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(128), default="")
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float | None] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float)
    last_used_at: Mapped[float | None] = mapped_column(Float)


class WorkloadRow(Base):
    __tablename__ = "workloads"
    __table_args__ = (
        Index("ix_workloads_state_submitted", "state", "submitted_at"),
        Index("ix_workloads_tenant_state", "tenant", "state"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str | None] = mapped_column(String(128))
    tenant: Mapped[str] = mapped_column(ForeignKey("tenants.name", ondelete="RESTRICT"))
    owner: Mapped[str] = mapped_column(ForeignKey("users.name", ondelete="RESTRICT"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    state: Mapped[str] = mapped_column(String(16))
    gpus: Mapped[int] = mapped_column(Integer, default=0)
    gpu_milli: Mapped[int] = mapped_column(Integer, default=0)
    gpu_memory_mib: Mapped[int] = mapped_column(Integer, default=0)
    gpu_model: Mapped[str | None] = mapped_column(String(128))
    cpu_milli: Mapped[int] = mapped_column(Integer, default=0)
    memory_mib: Mapped[int] = mapped_column(Integer, default=0)
    mig: Mapped[str | None] = mapped_column(String(32))
    # Nodes a multi-node request spans (`gpus` in all, gpus / nodes on each); 1: one node.
    nodes: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    # Placement pins (gpupool.domain.placement): the engine whose nodes may run it (NULL:
    # any), and the labels a node must have as a JSON object text sorted by key (NULL: none;
    # text, not JSON, so a row's values stay hashable for the API's JSON memo).
    engine: Mapped[str | None] = mapped_column(String(64))
    node_labels: Mapped[str | None] = mapped_column(Text)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    preemptible: Mapped[bool] = mapped_column(Boolean, default=True)
    requeue_on_preemption: Mapped[bool] = mapped_column(Boolean, default=True)
    checkpointing: Mapped[bool] = mapped_column(Boolean, default=False)
    max_runtime_s: Mapped[float | None] = mapped_column(Float)
    submitted_at: Mapped[float] = mapped_column(Float)
    command: Mapped[list[Any]] = mapped_column(default=list)
    profile: Mapped[str | None] = mapped_column(String(128))
    admitted_at: Mapped[float | None] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    reason: Mapped[str | None] = mapped_column(Text)
    preemptions: Mapped[int] = mapped_column(Integer, default=0)
    # The latest why-pending from the scheduler (cleared on admission).
    pending_reason: Mapped[str | None] = mapped_column(Text)
    # Its structured part (scheduler.Wait as JSON text; see store.convert.wait_to_json), for
    # waits that end at a known time or event; NULL otherwise.
    pending_wait: Mapped[str | None] = mapped_column(Text)
    #: the start-time forecast of pending work (gpupool.sim.forecast.Forecast as JSON)
    pending_forecast: Mapped[str | None] = mapped_column(Text)
    queue_position: Mapped[int | None] = mapped_column(Integer)
    tenant_position: Mapped[int | None] = mapped_column(Integer)
    # The executor's reference to the launched work (pid, pod, Slurm job id).
    executor_ref: Mapped[str | None] = mapped_column(String(255))
    # A stop asked of the executor and not yet confirmed: why, and what the workload becomes
    # once the work has ended ("preempted", "cancelled", "culled"). The allocation is held
    # until then, so a GPU is never handed out while the old work may still use it.
    stop_state: Mapped[str | None] = mapped_column(String(16))
    stop_reason: Mapped[str | None] = mapped_column(Text)
    stop_requested_at: Mapped[float | None] = mapped_column(Float)
    # Failed starts in a row, and the time before which pending work is not tried again
    # (gpupool.domain.retries): kept here so a restart neither resets nor forgets them.
    start_attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    retry_at: Mapped[float | None] = mapped_column(Float)
    # Where the workload's server listens ("http://host:port"), as the executor reports it
    # for work it runs away from the hub (notebooks on a cluster); cleared when it ends.
    endpoint: Mapped[str | None] = mapped_column(String(255))
    # Counts the writes of the row's domain columns (`DOMAIN_KEYS`): raised by a trigger of
    # the database on every UPDATE that sets one of them (migration 0021), and by
    # `AllocationRepo.set_enforcement` for its shares; never set by the ORM. Equal versions:
    # equal domain columns (the scheduler loop's reader converts only rows whose version
    # moved). The notes columns (`NOTE_KEYS`) do not raise it.
    version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class WorkloadEnvRow(Base):
    """The environment a workload declared (it may hold secrets, such as a notebook's hub
    token): in its own table, so no listing ever reads it; deleted when the workload ends."""

    __tablename__ = "workload_env"

    workload_id: Mapped[str] = mapped_column(
        ForeignKey("workloads.id", ondelete="CASCADE"), primary_key=True
    )
    env: Mapped[dict[str, Any]] = mapped_column(default=dict)


class WorkloadPodRow(Base):
    """The pod a notebook runs as on Kubernetes, as the hub's KubeSpawner-based spawner built
    it (image, volumes, ports; `gpupool.jupyterhub.kubespawner`): in its own table, never
    returned by the API; deleted when the workload ends."""

    __tablename__ = "workload_pod"

    workload_id: Mapped[str] = mapped_column(
        ForeignKey("workloads.id", ondelete="CASCADE"), primary_key=True
    )
    spec: Mapped[dict[str, Any]] = mapped_column(default=dict)


class AllocationRow(Base):
    """Shares held by a workload, on `node` (a multi-node allocation: its shares name their
    nodes, `node` is rank 0; CPUs and memory are per node). Active while `released_at` is
    NULL."""

    __tablename__ = "allocations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    workload_id: Mapped[str] = mapped_column(
        ForeignKey("workloads.id", ondelete="CASCADE"), index=True
    )
    node: Mapped[str] = mapped_column(String(253))
    since: Mapped[float] = mapped_column(Float)
    released_at: Mapped[float | None] = mapped_column(Float, index=True)
    # The state its workload moved to when it was released ("preempted", "succeeded",
    # "pending" for a start that did not take, ...): which attempts ended in a preemption
    # (gpupool.store.attained). NULL while active, and for releases before revision 0013
    # that no event identifies.
    released_as: Mapped[str | None] = mapped_column(String(16))
    cpu_milli: Mapped[int] = mapped_column(Integer, default=0)
    memory_mib: Mapped[int] = mapped_column(Integer, default=0)

    shares: Mapped[list[ShareRow]] = relationship(
        cascade="all, delete-orphan", order_by="ShareRow.gpu_index", lazy="selectin"
    )


class ShareRow(Base):
    __tablename__ = "shares"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    allocation_id: Mapped[int] = mapped_column(
        ForeignKey("allocations.id", ondelete="CASCADE"), index=True
    )
    gpu_uuid: Mapped[str] = mapped_column(String(128), index=True)
    node: Mapped[str] = mapped_column(String(253))
    gpu_index: Mapped[int] = mapped_column(Integer)
    milli: Mapped[int] = mapped_column(Integer)
    memory_mib: Mapped[int] = mapped_column(Integer)
    enforcement: Mapped[str] = mapped_column(String(16))
    mig_profile: Mapped[str | None] = mapped_column(String(32))
    mig_start: Mapped[int | None] = mapped_column(Integer)


class EventRow(Base):
    """Append-only: rows are inserted, never updated or deleted."""

    __tablename__ = "events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Float, index=True)
    kind: Mapped[str] = mapped_column(String(64), index=True)
    message: Mapped[str] = mapped_column(Text)
    workload_id: Mapped[str | None] = mapped_column(String(32), index=True)
    tenant: Mapped[str | None] = mapped_column(String(255), index=True)
    user: Mapped[str | None] = mapped_column(String(128))
    data: Mapped[dict[str, Any]] = mapped_column(default=dict)


class UsageRow(Base):
    """Accounting per workload and UTC day; the accounting loop adds to it."""

    __tablename__ = "usage"
    __table_args__ = (UniqueConstraint("workload_id", "day", name="uq_usage_workload_day"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    workload_id: Mapped[str] = mapped_column(String(32), index=True)
    tenant: Mapped[str] = mapped_column(String(255), index=True)
    user: Mapped[str] = mapped_column(String(128), index=True)
    day: Mapped[str] = mapped_column(String(10), index=True)  # YYYY-MM-DD (UTC)
    gpu_seconds_allocated: Mapped[float] = mapped_column(Float, default=0.0)
    gpu_seconds_busy: Mapped[float] = mapped_column(Float, default=0.0)
    #: the part of gpu_seconds_allocated for which telemetry gave a busy fraction
    gpu_seconds_measured: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    #: the part of gpu_seconds_allocated whose busy fraction was estimated (MPS), not measured
    gpu_seconds_estimated: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    gpu_memory_mib_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    gpu_memory_mib_max: Mapped[int] = mapped_column(Integer, default=0)


class GpuHistoryRow(Base):
    """GPU utilization and memory over time: one row per GPU, resolution and period.

    `resolution_s` is 60 (one row per minute, kept two days) or 3600 (one row per hour, rolled
    up from the minutes, kept 90 days); `t` is the period's start (epoch seconds, a multiple of
    the resolution). Means are over the period's samples; `samples` weights them in rollups."""

    __tablename__ = "gpu_history"
    __table_args__ = (Index("ix_gpu_history_resolution_t", "resolution_s", "t"),)

    gpu_uuid: Mapped[str] = mapped_column(String(128), primary_key=True)
    resolution_s: Mapped[int] = mapped_column(Integer, primary_key=True)
    t: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    node: Mapped[str] = mapped_column(String(253), default="")
    samples: Mapped[int] = mapped_column(Integer, default=0)
    util: Mapped[float | None] = mapped_column(Float)
    util_max: Mapped[float | None] = mapped_column(Float)
    memory_mib: Mapped[float | None] = mapped_column(Float)
    memory_mib_max: Mapped[float | None] = mapped_column(Float)
    power_w: Mapped[float | None] = mapped_column(Float)
    temperature_c: Mapped[float | None] = mapped_column(Float)


class ProfileRow(Base):
    __tablename__ = "profiles"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    description: Mapped[str] = mapped_column(Text, default="")
    kind: Mapped[str] = mapped_column(String(16), default="notebook")
    gpus: Mapped[int] = mapped_column(Integer, default=0)
    gpu_milli: Mapped[int] = mapped_column(Integer, default=0)
    gpu_memory_mib: Mapped[int] = mapped_column(Integer, default=0)
    gpu_model: Mapped[str | None] = mapped_column(String(128))
    cpu_milli: Mapped[int] = mapped_column(Integer, default=0)
    memory_mib: Mapped[int] = mapped_column(Integer, default=0)
    mig: Mapped[str | None] = mapped_column(String(32))
    image: Mapped[str | None] = mapped_column(String(512))
    tenants: Mapped[list[Any]] = mapped_column(default=list)
    default_runtime_s: Mapped[float | None] = mapped_column(Float)
    max_runtime_s: Mapped[float | None] = mapped_column(Float)


class LoginThrottleRow(Base):
    """Failed logins of one account or one client address (`key`: `account:NAME`,
    `client:ADDRESS`), kept by `gpupool.server.throttle`. `level` is the recent failures (it
    drains over time); logins with this key are refused until `blocked_until`."""

    __tablename__ = "login_throttle"

    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    level: Mapped[float] = mapped_column(Float, default=0.0)
    last_failure_at: Mapped[float] = mapped_column(Float)
    blocked_until: Mapped[float] = mapped_column(Float, default=0.0)


class IdempotencyKeyRow(Base):
    """A submission's `Idempotency-Key`, per user: a retried `POST /workloads` with the same
    key answers with `workload_id` instead of submitting again. `request_hash` is the SHA-256
    of the request body, so the same key with another body is refused."""

    __tablename__ = "idempotency_keys"

    user: Mapped[str] = mapped_column(
        ForeignKey("users.name", ondelete="CASCADE"), primary_key=True
    )
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    request_hash: Mapped[str] = mapped_column(String(64))
    workload_id: Mapped[str] = mapped_column(
        ForeignKey("workloads.id", ondelete="CASCADE"), index=True
    )
    created_at: Mapped[float] = mapped_column(Float)


#: Every column of the workloads table: `select(*WORKLOAD_COLUMNS)` gives rows with the same
#: attribute names as `WorkloadRow`, without the ORM's per-object bookkeeping.
WORKLOAD_COLUMNS = tuple(WorkloadRow.__table__.c)
#: the column names of a plain row, in order
ROW_KEYS = tuple(c.key for c in WORKLOAD_COLUMNS)


def by_name(keys: Sequence[str], values: Sequence[object]) -> Any:
    """`values` (a plain row, in the order of `keys`) as an object with those attributes:
    reading them is about twice as fast as reading a SQLAlchemy Row's (it matters for lists of
    hundreds). `keys` and `values` must be the same length."""
    return SimpleNamespace(**dict(zip(keys, values, strict=True)))


def plain_workload(values: Sequence[object]) -> WorkloadRow:
    """The values of `WORKLOAD_COLUMNS` (every column, `command` decoded, as
    `WorkloadRepo.rows` reads them) as an object with WorkloadRow's attributes. For readers
    of the notes columns too (`NOTE_KEYS`); `domain_workload` is for the others."""
    return by_name(ROW_KEYS, values)


#: the columns beside a workload that loops rewrite often (why-pending and positions: the
#: scheduler loop; the forecast: the forecast loop); no domain `Workload` field comes from them
NOTE_KEYS = (
    "pending_reason",
    "queue_position",
    "tenant_position",
    "pending_wait",
    "pending_forecast",
)
#: the column that counts writes of the others (`WorkloadRow.version`)
VERSION_KEY = "version"
#: every other column of the workloads table (`id` first) but the version, `command` as its
#: stored JSON text (decoded only for rows converted): what a `Workload` and whether it is
#: stopping are made of; rows equal in these make equal domain objects
DOMAIN_COLUMNS = tuple(
    cast(c, Text).label("command") if c.key == "command" else c
    for c in WORKLOAD_COLUMNS
    if c.key not in NOTE_KEYS and c.key != VERSION_KEY
)
#: the column names of `DOMAIN_COLUMNS`, in order
DOMAIN_KEYS = tuple(c.key for c in DOMAIN_COLUMNS)


def domain_workload(values: Sequence[object]) -> WorkloadRow:
    """The values of `DOMAIN_COLUMNS` as an object with WorkloadRow's attributes (those
    columns only), `command` decoded from its JSON text (NULL or empty: [])."""
    row = by_name(DOMAIN_KEYS, values)
    row.command = json.loads(row.command) if row.command else []
    return row
