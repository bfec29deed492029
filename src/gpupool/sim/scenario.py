"""Scenario files: a YAML description of a cluster, its tenants, the workloads to replay and
the scheduler settings, parsed and validated into domain objects.

`load_scenario(path)` and `parse_scenario(data)` return a `Scenario` or raise `ScenarioError`,
whose message names the item and field at fault (e.g. ``workloads[3] (id j4): duration must
be >= 0``). The format and every default are documented in docs/scenarios.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpupool.domain import (
    GPU,
    MILLI_PER_GPU,
    Node,
    Quota,
    Request,
    SharingMode,
    Tenant,
    TenantTree,
    Workload,
    WorkloadKind,
)
from gpupool.domain.budgets import Budget
from gpupool.domain.errors import ValidationError as DomainValidationError
from gpupool.domain.mig import layout_for_gpu
from gpupool.domain.placement import ENGINE_LABEL, MPS_LABEL, MULTI_NODE_LABEL
from gpupool.domain.reservations import Reservation
from gpupool.scheduler.feasibility import never_runs
from gpupool.scheduler.limits import TENANT
from gpupool.scheduler.reasons import Hardware
from gpupool.scheduler.types import Policy, SchedulerConfig
from gpupool.sim.bookings import ReservationSpec, build_reservations
from gpupool.sim.budgets import BudgetSpec, build_budgets
from gpupool.sim.scenario_errors import ScenarioError, validate

MIB_PER_GIB = 1024


# --------------------------------------------------------------------------- file models


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)


class NodeSpec(_Strict):
    """One node, or `count` identical nodes named `<name>-0`, `<name>-1`, ..."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    count: int = Field(default=1, ge=1, le=100_000)
    gpus: int = Field(default=8, ge=0, le=64)
    gpu_model: str = Field(default="GPU", min_length=1)
    gpu_memory_gib: float = Field(default=80, gt=0)
    cpus: float = Field(default=64, ge=0)
    memory_gib: float = Field(default=512, ge=0)
    sharing: SharingMode = SharingMode.EXCLUSIVE
    #: with sharing `mig`: the MIG layout its GPUs are cut into (docs/mig.md), e.g. all-1g.10gb
    mig_layout: str | None = Field(default=None, min_length=1, max_length=255)
    labels: dict[str, str] = Field(default_factory=dict)
    #: the engine that runs it (label gpupool.io/engine); None: unlabelled, counts as any
    engine: str | None = Field(default=None, min_length=1, max_length=63)
    #: (with `engine`) its engine runs multi-node work / enforces fractions with CUDA MPS
    multi_node: bool = False
    mps: bool = False


class ClusterSpec(_Strict):
    #: at least one (`parse_scenario`, `parse_cluster_file`), unless node pools may bring them
    nodes: list[NodeSpec] = Field(default_factory=list)


#: a cluster file or scenario without nodes (and without node pools)
NO_NODES = "cluster.nodes: give at least one node"


class TenantSpec(_Strict):
    """A tenant; `name` may be a path (`physics/lab-a`) that builds the tree."""

    name: str = Field(min_length=1)
    guaranteed_gpus: float = Field(default=0, ge=0)
    limit_gpus: float | None = Field(default=None, ge=0)
    weight: float = Field(default=1.0, gt=0)
    max_gpus_per_user: float | None = Field(default=None, gt=0)
    guaranteed_by_model: dict[str, float] = Field(default_factory=dict)


class WorkloadSpec(_Strict):
    """A workload to submit. With `count` > 1 it is repeated as `<id>-0`, `<id>-1`, ...,
    submitted `every` seconds apart."""

    id: str = Field(min_length=1)
    tenant: str = Field(min_length=1)
    user: str = "user"
    submit: float = Field(default=0, ge=0)
    duration: float = Field(ge=0)
    gpus: int = Field(default=0, ge=0)
    gpu_fraction: float | None = Field(default=None, gt=0, lt=1)
    #: a multi-node request: `nodes` nodes with `gpus_per_node` whole GPUs each (then leave
    #: `gpus` out, or give nodes x gpus_per_node)
    nodes: int = Field(default=1, ge=1, le=4096)
    gpus_per_node: int | None = Field(default=None, ge=1, le=64)
    gpu_memory_gib: float = Field(default=0, ge=0)
    gpu_model: str | None = None
    #: one MIG instance of this profile (e.g. 1g.10gb) on a node with a MIG layout
    mig: str | None = None
    #: run it on this engine's nodes only (None: any), and only on nodes with these labels
    engine: str | None = None
    node_labels: dict[str, str] = Field(default_factory=dict)
    cpus: float = Field(default=0, ge=0)
    memory_gib: float = Field(default=0, ge=0)
    kind: WorkloadKind = WorkloadKind.JOB
    priority: int = 0
    preemptible: bool = True
    requeue: bool = True
    #: saves its progress when stopped: a preemption loses only `checkpoint_loss_s` of it
    checkpointing: bool = False
    count: int = Field(default=1, ge=1, le=1_000_000)
    every: float = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _one_gpu_kind(self) -> WorkloadSpec:
        if self.gpus and self.gpu_fraction is not None:
            raise ValueError(
                "ask for either whole GPUs (gpus) or a fraction of one (gpu_fraction), not both"
            )
        if self.gpus_per_node is not None:
            total = self.nodes * self.gpus_per_node
            if self.gpus and self.gpus != total:
                raise ValueError(
                    f"gpus {self.gpus} is not nodes x gpus_per_node ({total}); give one or the "
                    "other"
                )
        elif self.nodes > 1:
            raise ValueError(f"nodes: {self.nodes} needs gpus_per_node (whole GPUs on each)")
        return self

    @property
    def total_gpus(self) -> int:
        """Whole GPUs in all (nodes x gpus_per_node for a multi-node request)."""
        if self.gpus_per_node is not None:
            return self.nodes * self.gpus_per_node
        return self.gpus


class SchedulerSpec(_Strict):
    policy: Policy = Policy.FAIR
    preemption: bool = True
    min_runtime_s: float = Field(default=300.0, ge=0)
    #: guaranteed work reclaims borrowed GPUs only after waiting this long (SchedulerConfig)
    reclaim_after_s: float = Field(default=600.0, ge=0)
    #: before that, reclaim borrowed work that declares checkpointing at once (SchedulerConfig)
    reclaim_checkpointing_at_once: bool = True
    backfill: bool = True
    #: while work waits, run a cycle at least this often (virtual seconds) when time alone can
    #: change the outcome (e.g. running work passing min_runtime_s); 0 disables
    cycle_interval_s: float = Field(default=10.0, ge=0)
    #: coalesce events: no two cycles closer than this (virtual seconds); 0 = a cycle at every
    #: event time
    min_cycle_gap_s: float = Field(default=0.0, ge=0)
    max_admissions_per_cycle: int | None = Field(default=None, ge=1)
    #: simulator only: give each cycle at most this many pending workloads per tenant, the
    #: first in the tenant's order (priority, then submit time); none = all of them
    pending_window: int | None = Field(default=None, ge=1)
    #: node label keys for multi-node placement, closest first (SchedulerConfig)
    topology_keys: list[str] | None = None
    #: how many blocked multi-node requests may hold nodes in one cycle (SchedulerConfig)
    gang_reservations: int = Field(default=1, ge=0)
    #: (fair) service levels inside a tenant: thresholds of attained GPU-seconds (SchedulerConfig)
    service_levels_s: list[float] = Field(
        default_factory=lambda: list(SchedulerConfig().service_levels_s)
    )
    #: (fair) service levels relative to the pool's run lengths: multiples of a quantile of
    #: them, GPU-seconds (SchedulerConfig, gpupool.scheduler.levelscale); empty: absolute
    service_levels_relative: list[float] = Field(
        default_factory=lambda: list(SchedulerConfig().service_levels_relative)
    )
    service_levels_quantile: float = Field(
        default=SchedulerConfig().service_levels_quantile, gt=0, le=1
    )
    service_levels_hysteresis: float = Field(
        default=SchedulerConfig().service_levels_hysteresis, ge=1
    )
    service_levels_window: int = Field(default=SchedulerConfig().service_levels_window, ge=1)
    #: (fair) waiting work preempts its tenant's own work only this many levels above it
    preempt_levels_apart: int = Field(default=2, ge=1)
    #: (fair) work owed whole GPUs may have smaller checkpointing work moved (SchedulerConfig)
    defrag_moves: bool = True
    #: (fair) borrowed checkpointing work may run on nodes held for a gang (SchedulerConfig)
    gang_hold_backfill: bool = True
    #: (fair) a gang within its guarantee stops checkpointing work to start (SchedulerConfig)
    gang_clears_nodes: bool = True
    #: (fair, service levels) waiting checkpointing work takes its siblings' level:
    #: same tenant, owner and GPU request, submitted within this many seconds; 0: off
    service_levels_siblings_s: float = Field(
        default=SchedulerConfig().service_levels_siblings_s, ge=0
    )
    #: (fair, service levels) inside a level, the least served waiting work first
    service_levels_fine_order: bool = True
    #: (fair) reclaim takes checkpointing victims first, the most served first
    reclaim_checkpointing_by_service: bool = True
    #: simulator only: run time a preempted `checkpointing` workload loses (saving and
    #: loading its checkpoint); it keeps the rest of its progress
    checkpoint_loss_s: float = Field(default=60.0, ge=0)


class ScenarioFile(_Strict):
    cluster: ClusterSpec
    tenants: list[TenantSpec] = Field(min_length=1)
    workloads: list[WorkloadSpec] = Field(default_factory=list)
    scheduler: SchedulerSpec = Field(default_factory=SchedulerSpec)
    #: advance reservations (gpupool.sim.bookings)
    reservations: list[ReservationSpec] = Field(default_factory=list)
    #: GPU-hour budgets per tenant and calendar period (gpupool.sim.budgets)
    budgets: list[BudgetSpec] = Field(default_factory=list)


class ClusterFile(_Strict):
    """A cluster + tenants + scheduler file without workloads (used with `--trace`).
    `tenants` may be omitted: trace replay then derives them (docs/simulate.md)."""

    cluster: ClusterSpec
    tenants: list[TenantSpec] = Field(default_factory=list)
    scheduler: SchedulerSpec = Field(default_factory=SchedulerSpec)


# --------------------------------------------------------------------------- domain result


@dataclass(frozen=True, slots=True)
class SimWorkload:
    """A workload to replay: the domain workload (state pending, submitted_at set) and how
    long it runs once started."""

    workload: Workload
    duration: float


@dataclass(slots=True)
class Scenario:
    """Everything a simulation needs, as domain objects."""

    nodes: tuple[Node, ...]
    tenants: TenantTree
    workloads: list[SimWorkload]
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    cycle_interval_s: float = 10.0
    min_cycle_gap_s: float = 0.0
    #: pass at most this many pending workloads per tenant to each cycle (None: all of them)
    pending_window: int | None = None
    #: workloads the loader already knows can never run: id -> reason (trace replay only;
    #: scenario files reject them instead)
    unschedulable: dict[str, str] = field(default_factory=dict)
    #: run time a preempted checkpointing workload loses (the rest of its progress is kept)
    checkpoint_loss_s: float = 60.0
    #: advance reservations kept during the replay (gpupool.sim.bookings)
    reservations: tuple[Reservation, ...] = ()
    #: GPU-hour budgets metered during the replay (gpupool.sim.budgets)
    budgets: tuple[Budget, ...] = ()

    @property
    def capacity_milli(self) -> int:
        return sum(MILLI_PER_GPU for n in self.nodes for _ in n.gpus)


# --------------------------------------------------------------------------- loading


def read_yaml(path: str | Path) -> Any:
    """Read a YAML file; a missing file or a syntax error becomes a ScenarioError."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError([f"file not found: {p}"]) from None
    except OSError as exc:
        raise ScenarioError([f"cannot read {p}: {exc.strerror or exc}"]) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ScenarioError([f"YAML syntax error{where}: {problem}"], str(p)) from None


def load_scenario(path: str | Path, policy: Policy | None = None) -> Scenario:
    """Read and validate a scenario file (under `policy`, if given, instead of its own)."""
    data = read_yaml(path)
    try:
        return parse_scenario(data, policy)
    except ScenarioError as exc:
        raise ScenarioError(exc.problems, str(path)) from None


def build_nodes(cluster: ClusterSpec) -> tuple[Node, ...]:
    nodes: list[Node] = []
    seen: set[str] = set()
    problems: list[str] = []
    for i, spec in enumerate(cluster.nodes):
        names = [spec.name] if spec.count == 1 else [f"{spec.name}-{k}" for k in range(spec.count)]
        for name in names:
            if name in seen:
                problems.append(
                    f"cluster.nodes[{i}] (name {spec.name}): node {name} is defined twice"
                )
                continue
            seen.add(name)
            mem = int(round(spec.gpu_memory_gib * MIB_PER_GIB))
            if spec.mig_layout is not None:
                why = _layout_problem(spec, mem)
                if why:
                    problems.append(f"cluster.nodes[{i}] (name {spec.name}): mig_layout: {why}")
                    break
            gpus = tuple(
                GPU(
                    index=g,
                    uuid=f"GPU-{name}-{g}",
                    model=spec.gpu_model,
                    memory_mib=int(round(spec.gpu_memory_gib * MIB_PER_GIB)),
                    sharing=spec.sharing,
                    mig_layout=spec.mig_layout,
                )
                for g in range(spec.gpus)
            )
            nodes.append(
                Node(
                    name=name,
                    gpus=gpus,
                    cpu_milli=int(round(spec.cpus * 1000)),
                    memory_mib=int(round(spec.memory_gib * MIB_PER_GIB)),
                    labels=_node_labels(spec),
                )
            )
    if problems:
        raise ScenarioError(problems)
    return tuple(nodes)


def _node_labels(spec: NodeSpec) -> tuple[tuple[str, str], ...]:
    """A node's labels: its own, and those its engine sets (gpupool.domain.placement)."""
    labels = dict(spec.labels)
    if spec.engine is not None:
        labels[ENGINE_LABEL] = spec.engine
        if spec.multi_node:
            labels[MULTI_NODE_LABEL] = "true"
        if spec.mps:
            labels[MPS_LABEL] = "true"
    return tuple(sorted(labels.items()))


def _layout_problem(spec: NodeSpec, memory_mib: int) -> str | None:
    """Why `spec`'s MIG layout cannot be used, or None."""
    if spec.sharing is not SharingMode.MIG:
        return "a MIG layout needs sharing: mig"
    try:
        layout_for_gpu(spec.gpu_model, memory_mib, spec.mig_layout or "")
    except DomainValidationError as exc:
        return str(exc)
    return None


def build_tenants(specs: Sequence[TenantSpec]) -> TenantTree:
    problems: list[str] = []
    tenants: list[Tenant] = []
    for i, t in enumerate(specs):
        where = f"tenants[{i}] (name {t.name})"
        try:
            quota = Quota.gpus(
                guaranteed=t.guaranteed_gpus,
                limit=t.limit_gpus,
                weight=t.weight,
                max_per_user=t.max_gpus_per_user,
                by_model=t.guaranteed_by_model,
            )
            tenants.append(Tenant(t.name, quota))
        except DomainValidationError as exc:
            problems.append(f"{where}: {_field_name(exc.field)}: {exc}")
    if problems:
        raise ScenarioError(problems)
    try:
        return TenantTree(tenants)
    except DomainValidationError as exc:
        raise ScenarioError([f"tenants: {exc}"]) from None


_FIELD_NAMES = {"guaranteed": "guaranteed_gpus", "limit": "limit_gpus"}


def _field_name(name: str | None) -> str:
    return _FIELD_NAMES.get(name or "", name or "value")


def never_runs_problem(
    request: Request, tenant: str, tenants: TenantTree, hardware: Hardware, policy: Policy
) -> str | None:
    """Why `request` of `tenant` can never run under `policy`, or None: the scheduler's own
    rule (`gpupool.scheduler.feasibility.never_runs`, with each GPU's MIG layout kept as
    given: the simulator does not change layouts), with what to change in the file."""
    never = never_runs(request, tenant, tenants, hardware, policy, fixed_mig_layouts=True)
    if never is None:
        return None
    hint = _FILE_HINTS.get(never.field, "")
    if never.limit is not None:
        key = "limit_gpus" if never.limit.scope == TENANT else "max_gpus_per_user"
        hint = f"; in a scenario: raise {key} of tenant {never.limit.tenant}"
    return never.why + hint


#: what to change in a scenario file, per request field at fault
_FILE_HINTS = {
    "gpu_fraction": "; in a scenario: give GPUs sharing: shared",
    "mig": "; in a scenario: give a node sharing: mig and a mig_layout with that instance",
}


def build_workloads(
    specs: Sequence[WorkloadSpec],
    tenants: TenantTree,
    nodes: Sequence[Node],
    policy: Policy = Policy.FAIR,
) -> list[SimWorkload]:
    """The workloads of a scenario file; refuses (ScenarioError) any that could never run
    under `policy` (`never_runs_problem`)."""
    hardware = Hardware(tuple(nodes))
    problems: list[str] = []
    out: list[SimWorkload] = []
    seen: dict[str, int] = {}
    leaves = set(tenants.leaves())
    for i, w in enumerate(specs):
        where = f"workloads[{i}] (id {w.id})"
        if w.tenant not in tenants:
            problems.append(
                f"{where}: tenant: unknown tenant {w.tenant!r}; define it under tenants "
                f"(known: {', '.join(sorted(leaves))})"
            )
            continue
        if w.tenant not in leaves:
            problems.append(
                f"{where}: tenant: {w.tenant!r} has sub-tenants; only leaf tenants hold work "
                f"(use one of {', '.join(c for c in sorted(leaves) if c.startswith(w.tenant))})"
            )
            continue
        try:
            request = Request(
                gpus=w.total_gpus,
                nodes=w.nodes,
                gpu_milli=0 if w.gpu_fraction is None else int(round(w.gpu_fraction * 1000)),
                gpu_memory_mib=int(round(w.gpu_memory_gib * MIB_PER_GIB)),
                gpu_model=w.gpu_model,
                cpu_milli=int(round(w.cpus * 1000)),
                memory_mib=int(round(w.memory_gib * MIB_PER_GIB)),
                mig=w.mig,
                engine=w.engine,
                node_labels=tuple(w.node_labels.items()),
            )
        except DomainValidationError as exc:
            problems.append(f"{where}: {exc.field or 'request'}: {exc}")
            continue
        reason = never_runs_problem(request, w.tenant, tenants, hardware, policy)
        if reason:
            problems.append(f"{where}: request can never run: {reason}")
            continue
        ids = [w.id] if w.count == 1 else [f"{w.id}-{k}" for k in range(w.count)]
        for k, wid in enumerate(ids):
            if wid in seen:
                problems.append(f"{where}: id: {wid!r} is already used by workloads[{seen[wid]}]")
                continue
            seen[wid] = i
            try:
                wl = Workload(
                    id=wid,
                    tenant=w.tenant,
                    owner=w.user,
                    request=request,
                    kind=w.kind,
                    priority=w.priority,
                    preemptible=w.preemptible,
                    requeue_on_preemption=w.requeue,
                    checkpointing=w.checkpointing,
                    submitted_at=w.submit + k * w.every,
                )
            except DomainValidationError as exc:
                problems.append(f"{where}: {exc.field or 'workload'}: {exc}")
                continue
            out.append(SimWorkload(wl, w.duration))
    if problems:
        raise ScenarioError(problems)
    out.sort(key=lambda s: s.workload.submitted_at)  # stable: file order breaks ties
    return out


def scheduler_config(spec: SchedulerSpec, policy: Policy | None = None) -> SchedulerConfig:
    config = SchedulerConfig(
        policy=policy or spec.policy,
        preemption=spec.preemption,
        min_runtime_s=spec.min_runtime_s,
        reclaim_after_s=spec.reclaim_after_s,
        reclaim_checkpointing_at_once=spec.reclaim_checkpointing_at_once,
        backfill=spec.backfill,
        max_admissions_per_cycle=spec.max_admissions_per_cycle,
        gang_reservations=spec.gang_reservations,
        service_levels_s=tuple(sorted(spec.service_levels_s)),
        preempt_levels_apart=spec.preempt_levels_apart,
        defrag_moves=spec.defrag_moves,
        gang_hold_backfill=spec.gang_hold_backfill,
        gang_clears_nodes=spec.gang_clears_nodes,
        service_levels_siblings_s=spec.service_levels_siblings_s,
        service_levels_fine_order=spec.service_levels_fine_order,
        reclaim_checkpointing_by_service=spec.reclaim_checkpointing_by_service,
        service_levels_relative=tuple(sorted(x for x in spec.service_levels_relative if x > 0)),
        service_levels_quantile=spec.service_levels_quantile,
        service_levels_hysteresis=spec.service_levels_hysteresis,
        service_levels_window=spec.service_levels_window,
    )
    if spec.topology_keys is not None:
        config = dataclasses.replace(config, topology_keys=tuple(spec.topology_keys))
    return config


def parse_scenario(
    data: Any, policy: Policy | None = None, *, coming_nodes: Sequence[Node] = ()
) -> Scenario:
    """Validate parsed YAML (a dict) into a Scenario; raise ScenarioError on bad input.
    `coming_nodes`: nodes that may join later (a node pool's): every request must fit on
    the cluster's nodes or on them; they are not the scenario's nodes."""
    f: ScenarioFile = validate(ScenarioFile, data)
    if not f.cluster.nodes and not coming_nodes:
        raise ScenarioError([NO_NODES])
    nodes = build_nodes(f.cluster)
    tenants = build_tenants(f.tenants)
    could_run_on = (*nodes, *coming_nodes)
    workloads = build_workloads(f.workloads, tenants, could_run_on, policy or f.scheduler.policy)
    return Scenario(
        nodes=nodes,
        tenants=tenants,
        workloads=workloads,
        config=scheduler_config(f.scheduler, policy),
        cycle_interval_s=f.scheduler.cycle_interval_s,
        min_cycle_gap_s=f.scheduler.min_cycle_gap_s,
        pending_window=f.scheduler.pending_window,
        checkpoint_loss_s=f.scheduler.checkpoint_loss_s,
        reservations=build_reservations(f.reservations, tenants, nodes),
        budgets=build_budgets(f.budgets, tenants),
    )


def parse_cluster_file(data: Any) -> ClusterFile:
    """Validate a cluster file (cluster, optional tenants and scheduler) for trace replay."""
    f: ClusterFile = validate(ClusterFile, data)
    if not f.cluster.nodes:
        raise ScenarioError([NO_NODES])
    return f
