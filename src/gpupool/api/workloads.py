"""Schemas for workloads, the queue, events, usage and profiles."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Field, StringConstraints

from gpupool.api.base import INT32_MAX, In, Out

Kind = Literal["notebook", "job"]
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=128)]
#: a command's argument, kept exactly as sent (the models strip blanks from other strings)
Arg = Annotated[str, StringConstraints(strip_whitespace=False)]
#: kept exactly as sent (the models strip blanks from other strings; a value's blanks are data)
EnvValue = Annotated[str, StringConstraints(max_length=32_768, strip_whitespace=False)]
State = Literal[
    "pending",
    "admitted",
    "starting",
    "running",
    "succeeded",
    "failed",
    "cancelled",
    "preempted",
    "culled",
    "lost",
]


class ResourcesIn(In):
    """What to run on. Either `gpus` (whole GPUs), `gpu_fraction` (0 < f < 1 of one GPU) or
    `mig` (one MIG instance of that profile, e.g. `1g.10gb`, on a GPU in `mig` mode).
    Across several nodes: `nodes` and `gpus_per_node` (whole GPUs on each; `gpus` may be left
    out or be nodes x gpus_per_node); `cpus` and `memory_mib` are then per node."""

    gpus: int = Field(default=0, ge=0, le=1024)
    gpu_fraction: float | None = Field(default=None, gt=0, lt=1)
    nodes: int = Field(default=1, ge=1, le=1024)
    gpus_per_node: int | None = Field(default=None, ge=1, le=1024)
    gpu_memory_mib: int = Field(default=0, ge=0, le=1 << 24)
    gpu_model: str | None = Field(default=None, min_length=1, max_length=128)
    cpus: float = Field(default=0, ge=0, le=100_000)
    memory_mib: int = Field(default=0, ge=0, le=INT32_MAX)
    mig: str | None = Field(default=None, min_length=1, max_length=32)


class WorkloadIn(ResourcesIn):
    kind: Kind = "job"
    #: the engine whose nodes may run it (`local`, `slurm`, `kubernetes`, ...); null: the
    #: scheduler chooses. One this pool has no node of is refused, naming the ones it has.
    engine: str | None = Field(default=None, min_length=1, max_length=63)
    #: labels a node must have, every one (e.g. {"topology.kubernetes.io/zone": "a"}); with
    #: a profile too, they narrow where the profile's request runs
    node_labels: dict[str, str] = Field(default_factory=dict, max_length=32)
    tenant: str | None = Field(default=None, min_length=1, max_length=255)
    name: str | None = Field(default=None, max_length=128)
    command: list[Arg] = Field(default_factory=list, max_length=1024)
    profile: str | None = Field(default=None, min_length=1, max_length=128)
    priority: int = Field(default=0, ge=-1000, le=1000)
    preemptible: bool = True
    requeue_on_preemption: bool = True
    #: it saves its progress when stopped and resumes from there: cheap to preempt, and with
    #: service levels configured the tenant's newer work may preempt it once it has run long
    checkpointing: bool = False
    max_runtime_s: float | None = Field(default=None, gt=0, le=366 * 86400)
    #: Environment variables for the work (names as in POSIX shells; at most 64). Kept apart
    #: from the workload and never returned by the API; deleted when the workload ends.
    env: dict[EnvName, EnvValue] = Field(default_factory=dict, max_length=64)
    #: A notebook's pod on Kubernetes (a Pod manifest, as JupyterHub's gpupool KubeSpawner
    #: builds it). Accepted only with the hub's admin token in X-Gpupool-Service-Token (a
    #: pod template is cluster access); never returned by the API; deleted when it ends.
    pod_spec: dict[str, Any] | None = None


class RequestOut(Out):
    #: whole GPUs in all (nodes x gpus_per_node)
    gpus: int
    gpu_fraction: float | None
    nodes: int = 1
    gpus_per_node: int = 0
    gpu_memory_mib: int
    gpu_model: str | None
    cpus: float
    memory_mib: int
    mig: str | None = None
    #: the engine it is pinned to (null: any)
    engine: str | None = None
    #: labels a node must have
    node_labels: dict[str, str] = Field(default_factory=dict)
    description: str


class ShareOut(Out):
    node: str
    gpu_index: int
    gpu_uuid: str
    milli: int
    memory_mib: int
    enforcement: Literal["hardware", "mps", "policed", "none"]
    #: the MIG instance (profile and start slot) of a share on a GPU with a MIG layout
    mig_profile: str | None = None
    mig_start: int | None = None


class AllocationOut(Out):
    #: rank 0's node (a multi-node allocation: `nodes` lists all, rank order)
    node: str
    nodes: list[str] = Field(default_factory=list)
    since: float
    released_at: float | None = None
    gpu_uuids: list[str]
    shares: list[ShareOut]


class WaitOut(Out):
    """The structured part of a why-pending, for waits that end at a known time or event.

    kind: `owed` (its tenant is owed the GPUs within its guarantee: unless they free up first,
    they are taken from `victims` at `until`), `reclaiming` (`victims` were preempted for it;
    it starts once they have stopped), `reserved` (it holds a reservation on `node`)."""

    kind: Literal["owed", "reclaiming", "reserved"]
    #: GPUs its tenant is owed (kind `owed`)
    owed_gpus: float | None = None
    #: workloads the GPUs are (or will be) taken from
    victims: list[str] = Field(default_factory=list)
    #: ISO 8601 UTC: when the GPUs are reclaimed unless freed before (kind `owed`)
    until: str | None = None
    #: the node reserved for it
    node: str | None = None
    #: ISO 8601 UTC: by when it can start at the latest, when the running work in its way
    #: reaches its max runtime (unless work ahead of it comes first); null when unknown
    expected_start: str | None = None


class ForecastOut(Out):
    """When pending work is expected to start: the scheduler run forward on a copy of the
    cluster with estimated run times (docs/scheduler.md, "Forecasts"). `expected`: with
    typical (p50) run times; `latest`: with long (p90) ones; null: not before `until`, the
    end of the forecast's horizon. Renewed by a background pass every 30 s on a small
    cluster, less often as a pass grows costly (about every 20-30 min at 1,000 nodes with
    10,000 pending); work submitted meanwhile has none until the next pass (`made_at`:
    when it last changed)."""

    #: ISO 8601 UTC
    expected: str | None = None
    latest: str | None = None
    until: str
    made_at: str
    #: "expected to start around 12:28 UTC, by 12:40 UTC at the latest (p90)"
    text: str
    #: what the forecast rests on: how the run times of the work ahead were estimated
    basis: str
    #: how long this workload is expected to run once started (seconds), and from what
    runtime_s: float
    runtime_basis: str


class PendingOut(Out):
    reason: str
    position: int
    tenant_position: int
    wait: WaitOut | None = None
    #: when it is expected to start (null until the forecast loop has seen it)
    forecast: ForecastOut | None = None


class PreemptionOut(Out):
    """Running work a waiting tenant is owed (the other side of that work's `owed` wait):
    unless GPUs free up first, the scheduler preempts it at `at` so that `for_workload` of
    `for_tenant` gets its guaranteed share."""

    #: ISO 8601 UTC: when it will be preempted (the `until` of the owed wait)
    at: str
    for_tenant: str
    for_workload: str
    #: "will be preempted at 03:52 UTC for lab-b's guarantee unless GPUs free up"
    reason: str


class EventOut(Out):
    id: int
    at: float
    kind: str
    message: str
    workload_id: str | None
    tenant: str | None
    user: str | None
    data: dict[str, Any]


class WorkloadOut(Out):
    id: str
    name: str | None
    tenant: str
    owner: str
    kind: Kind
    state: State
    request: RequestOut
    command: list[str]
    profile: str | None
    priority: int
    preemptible: bool
    requeue_on_preemption: bool
    checkpointing: bool = False
    max_runtime_s: float | None
    submitted_at: float
    admitted_at: float | None
    started_at: float | None
    finished_at: float | None
    exit_code: int | None
    reason: str | None
    preemptions: int
    #: GPU-hours it has attained (read-only): the earlier attempts it kept (only work that
    #: declares `checkpointing` keeps them when requeued after a preemption; other work
    #: restarts from scratch, at 0) plus the current attempt while it holds GPUs, or its
    #: last attempt once it has ended. What service levels order a tenant's work by.
    attained_gpu_hours: float = 0.0
    pending: PendingOut | None
    allocation: AllocationOut | None = None
    #: where the workload's server listens ("http://host:port"), once its executor says so
    endpoint: str | None = None
    #: active work a reclaim will take unless GPUs free up first: when, and for whom
    preemption: PreemptionOut | None = None


class WorkloadDetailOut(WorkloadOut):
    events: list[EventOut]


class QueueEntryOut(Out):
    position: int
    tenant_position: int
    reason: str
    #: the structured part of `reason` (as `workload.pending.wait`), or null
    wait: WaitOut | None = None
    #: when it is expected to start (as `workload.pending.forecast`), or null
    forecast: ForecastOut | None = None
    workload: WorkloadOut


class LogsOut(Out):
    """A workload's output. `offset`/`next_offset`: for a page (`?offset=`) only, byte
    offsets in the log where this page starts and the next one does. `runs`: how many runs
    the output covers (one more after each preemption and requeue; each rerun starts after a
    `--- requeued after preemption ...` line); `note`: what a reader should know about them
    (a preempted workload waiting to run again), else null."""

    workload_id: str
    state: State
    runs: int = 0
    note: str | None = None
    text: str
    offset: int | None = None
    next_offset: int | None = None


class UsageOut(Out):
    key: str
    gpu_hours_allocated: float
    gpu_hours_busy: float
    gpu_seconds_allocated: float
    gpu_seconds_busy: float
    #: GPU-seconds telemetry measured; 0: busy time, efficiency and memory are unknown
    gpu_seconds_measured: float = 0.0
    #: GPU-seconds whose busy time telemetry estimated (MPS shares split by size), not
    #: measured; busy time and efficiency count them, memory is not known for them
    gpu_seconds_estimated: float = 0.0
    efficiency: float | None
    gpu_memory_mib_max: int
    gpu_memory_gib_hours: float
    workloads: int


class UsageReportOut(Out):
    group_by: Literal["user", "tenant", "day"]
    from_day: str | None = Field(
        default=None, serialization_alias="from", validation_alias=AliasChoices("from_day", "from")
    )
    to_day: str | None = Field(
        default=None, serialization_alias="to", validation_alias=AliasChoices("to_day", "to")
    )
    rows: list[UsageOut]


class ProfileSpecIn(ResourcesIn):
    description: str = Field(default="", max_length=2000)
    kind: Kind = "notebook"
    image: str | None = Field(default=None, max_length=512)
    tenants: list[str] = Field(default_factory=list, max_length=256)
    #: the max runtime of work started from it that declares none (seconds); null: the
    #: tenant's policy
    default_runtime_s: float | None = Field(default=None, gt=0, le=366 * 86400)
    #: the most such work may declare; null: the tenant's policy
    max_runtime_s: float | None = Field(default=None, gt=0, le=366 * 86400)


class ProfileIn(ProfileSpecIn):
    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.-]+$")


class ProfileOut(Out):
    name: str
    description: str
    kind: Kind
    image: str | None
    tenants: list[str]
    request: RequestOut
    default_runtime_s: float | None = None
    max_runtime_s: float | None = None
