"""Workload traces (CSV) as simulation scenarios.

Two formats, told apart by the header:
- **generic**: `submit_time` (seconds, or a timestamp such as `2017-10-03 14:00:00`),
  `duration` (s), `num_gpus`, `tenant`, and optional `id`, `user`, `gpu_milli` or
  `gpu_fraction`, `gpu_memory_mib`, `gpu_model`, `cpu_milli`, `memory_mib`, `priority`,
  `preemptible`;
- **philly**: the Philly per-job summary as published (`timestamp, duration, num_gpus,
  gpu_time, cluster`); the tenant is the `cluster` (virtual cluster) column.

Times are shifted so that the first kept submission is at 0. Rows that no node could ever
hold are kept and reported as unschedulable (they fail at submission), never dropped silently.
The cluster and tenants come from a cluster file or from defaults (docs/simulate.md).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gpupool.domain import MILLI_PER_GPU, Request, Workload
from gpupool.domain.errors import ValidationError as DomainValidationError
from gpupool.scheduler.reasons import Hardware
from gpupool.scheduler.types import Policy
from gpupool.sim.scenario import (
    ClusterFile,
    ClusterSpec,
    NodeSpec,
    Scenario,
    ScenarioError,
    SchedulerSpec,
    SimWorkload,
    TenantSpec,
    build_nodes,
    build_tenants,
    never_runs_problem,
    parse_cluster_file,
    read_yaml,
    scheduler_config,
)

GENERIC_REQUIRED = ("submit_time", "duration", "num_gpus", "tenant")
PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "cluster")
#: without a cluster file, trace replay runs the scheduler at most once a minute of trace time
DEFAULT_TRACE_CYCLE_GAP_S = 60.0
#: ... and gives each cycle the first 64 waiting workloads of each tenant
DEFAULT_TRACE_PENDING_WINDOW = 64


@dataclass(frozen=True, slots=True)
class TraceJob:
    id: str
    submit: float  # seconds (absolute: epoch seconds or the file's own origin)
    duration: float
    tenant: str
    user: str
    gpus: int
    gpu_milli: int
    gpu_memory_mib: int = 0
    gpu_model: str | None = None
    cpu_milli: int = 0
    memory_mib: int = 0
    priority: int = 0
    preemptible: bool = True
    #: nodes the job spans (a generic trace's `nodes` column; 1 otherwise). A job wider than
    #: the largest node is made multi-node by `trace_scenario` (`wide_request`)
    nodes: int = 1

    @property
    def gpu_demand_milli(self) -> int:
        return self.gpus * MILLI_PER_GPU if self.gpus else self.gpu_milli


def parse_time(text: str) -> float:
    """Seconds as a number, or a timestamp (ISO 8601, UTC unless it says otherwise)."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    dt = datetime.fromisoformat(text)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def _int(row: dict, key: str, default: int = 0) -> int:
    v = row.get(key)
    if v is None or v.strip() == "":
        return default
    return int(round(float(v)))


def _bool(row: dict, key: str, default: bool = True) -> bool:
    v = (row.get(key) or "").strip().lower()
    if not v:
        return default
    if v in ("1", "true", "yes", "y"):
        return True
    if v in ("0", "false", "no", "n"):
        return False
    raise ValueError(f"{key} must be true or false, got {v!r}")


def _row_job(row: dict, line: int, philly: bool) -> TraceJob:
    if philly:
        return TraceJob(
            id=f"j{line - 1}",
            submit=parse_time(row["timestamp"]),
            duration=float(row["duration"]),
            tenant=row["cluster"].strip(),
            user=(row.get("user") or "").strip() or row["cluster"].strip(),
            gpus=_int(row, "num_gpus"),
            gpu_milli=0,
        )
    gpus = _int(row, "num_gpus")
    nodes = _int(row, "nodes", 1) or 1
    per_node = _int(row, "gpus_per_node")
    if per_node:
        if gpus and gpus != nodes * per_node:
            raise ValueError(f"num_gpus {gpus} is not nodes x gpus_per_node ({nodes * per_node})")
        gpus = nodes * per_node
    milli = _int(row, "gpu_milli")
    if not milli and (row.get("gpu_fraction") or "").strip():
        milli = int(round(float(row["gpu_fraction"]) * MILLI_PER_GPU))
    if milli >= MILLI_PER_GPU and not gpus:  # "1000 milli" is a whole GPU
        gpus, milli = math.ceil(milli / MILLI_PER_GPU), 0
    if gpus and milli:
        milli = 0  # a row with both: num_gpus wins
    tenant = row["tenant"].strip()
    return TraceJob(
        id=(row.get("id") or "").strip() or f"j{line - 1}",
        submit=parse_time(row["submit_time"]),
        duration=float(row["duration"]),
        tenant=tenant,
        user=(row.get("user") or "").strip() or tenant,
        gpus=gpus,
        gpu_milli=milli,
        gpu_memory_mib=_int(row, "gpu_memory_mib"),
        gpu_model=(row.get("gpu_model") or "").strip() or None,
        cpu_milli=_int(row, "cpu_milli"),
        memory_mib=_int(row, "memory_mib"),
        priority=_int(row, "priority"),
        preemptible=_bool(row, "preemptible"),
        nodes=nodes,
    )


def read_trace(path: str | Path) -> list[TraceJob]:
    """Read a generic or Philly CSV trace; bad rows raise ScenarioError naming the line."""
    p = Path(path)
    try:
        fh = p.open(newline="", encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError([f"trace file not found: {p}"]) from None
    except OSError as exc:
        raise ScenarioError([f"cannot read {p}: {exc.strerror or exc}"]) from None
    with fh:
        reader = csv.DictReader(fh)
        header = [h.strip() for h in (reader.fieldnames or [])]
        reader.fieldnames = header
        philly = all(c in header for c in PHILLY_COLUMNS) and "tenant" not in header
        if not philly:
            missing = [c for c in GENERIC_REQUIRED if c not in header]
            if missing:
                raise ScenarioError(
                    [
                        f"missing column(s) {', '.join(missing)}; a trace needs "
                        f"{', '.join(GENERIC_REQUIRED)} (or the Philly columns "
                        f"{', '.join(PHILLY_COLUMNS)})"
                    ],
                    str(p),
                )
        jobs: list[TraceJob] = []
        problems: list[str] = []
        for line, row in enumerate(reader, start=2):
            try:
                job = _row_job(row, line, philly)
                if job.duration < 0:
                    raise ValueError(f"duration must be >= 0, got {job.duration:g}")
                if job.gpus < 0 or job.gpu_milli < 0:
                    raise ValueError("num_gpus and gpu_milli must be >= 0")
                if not job.tenant:
                    raise ValueError("tenant is empty")
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                problems.append(f"line {line}: {exc}")
                if len(problems) >= 10:
                    problems.append("(stopped after 10 bad rows)")
                    break
                continue
            jobs.append(job)
    if problems:
        raise ScenarioError(problems, str(p))
    return jobs


def filter_jobs(
    jobs: Sequence[TraceJob],
    start: str | None = None,
    end: str | None = None,
    tenants: str | None = None,
) -> list[TraceJob]:
    """Keep jobs submitted in [start, end) and of the chosen tenants.

    start/end: seconds after the first submission (`86400`, `7d`, `12h`) or a timestamp.
    tenants: a comma-separated list of names, or `top:N` for the N tenants with most jobs.
    """
    if not jobs:
        return []
    origin = min(j.submit for j in jobs)
    lo = _bound(start, origin, "--from") if start else -math.inf
    hi = _bound(end, origin, "--to") if end else math.inf
    keep = [j for j in jobs if lo <= j.submit < hi]
    if tenants:
        chosen = _tenant_set(jobs, tenants)
        keep = [j for j in keep if j.tenant in chosen]
    return keep


def _bound(text: str, origin: float, flag: str) -> float:
    t = text.strip()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    try:
        if t and t[-1] in units and t[:-1].replace(".", "", 1).isdigit():
            return origin + float(t[:-1]) * units[t[-1]]
        return origin + float(t)
    except ValueError:
        pass
    try:
        return parse_time(t)
    except ValueError:
        raise ScenarioError(
            [
                f"{flag} {text!r}: give seconds after the trace start (86400, 7d, 12h) "
                "or a date/time (2017-10-01, 2017-10-01 12:00:00)"
            ]
        ) from None


def _tenant_set(jobs: Sequence[TraceJob], spec: str) -> set[str]:
    if spec.startswith("top:"):
        try:
            n = int(spec[4:])
        except ValueError:
            raise ScenarioError([f"--tenants {spec!r}: use top:N, e.g. top:5"]) from None
        counts: dict[str, int] = {}
        for j in jobs:
            counts[j.tenant] = counts.get(j.tenant, 0) + 1
        return {t for t, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]}
    names = {s.strip() for s in spec.split(",") if s.strip()}
    known = {j.tenant for j in jobs}
    unknown = sorted(names - known)
    if unknown:
        raise ScenarioError(
            [
                f"--tenants: unknown tenant(s) {', '.join(unknown)}; the trace has "
                f"{', '.join(sorted(known))}"
            ]
        )
    return names


def offered_gpu_seconds(jobs: Iterable[TraceJob]) -> float:
    return sum(j.gpu_demand_milli / MILLI_PER_GPU * j.duration for j in jobs)


def gpus_for_load(
    jobs: Sequence[TraceJob], load: float, gpus_per_node: int = 8, multi_node: bool = True
) -> int:
    """Whole nodes of `gpus_per_node` GPUs so that offered load ≈ `load` over the submit span
    (offered GPU-time ÷ (GPUs × span from first to last submission)); with `multi_node` off,
    jobs wider than a node are left out, since they can never run then."""
    if not jobs:
        return gpus_per_node
    span = max(j.submit for j in jobs) - min(j.submit for j in jobs)
    span = max(span, 1.0)
    fits = [j for j in jobs if multi_node or (j.gpus <= gpus_per_node and j.nodes == 1)]
    gpus = offered_gpu_seconds(fits) / (span * load)
    return max(1, math.ceil(gpus / gpus_per_node)) * gpus_per_node


def default_tenants(jobs: Sequence[TraceJob], capacity_gpus: int) -> list[TenantSpec]:
    """Guarantees proportional to each tenant's share of offered GPU-time (whole GPUs, rounded
    down), weight 1, no limit."""
    gpu_time: dict[str, float] = {}
    for j in jobs:
        gpu_time[j.tenant] = gpu_time.get(j.tenant, 0.0) + j.gpu_demand_milli * j.duration
    total = sum(gpu_time.values()) or 1.0
    return [
        TenantSpec(name=t, guaranteed_gpus=math.floor(capacity_gpus * g / total))
        for t, g in sorted(gpu_time.items())
    ]


def wide_request(gpus: int, largest_node: int) -> tuple[int, int]:
    """(nodes, gpus per node) for a job of `gpus` whole GPUs wider than `largest_node`: as few
    nodes as hold it, the GPUs spread evenly (rounded up to whole GPUs per node)."""
    nodes = math.ceil(gpus / largest_node)
    return nodes, math.ceil(gpus / nodes)


def trace_scenario(
    jobs: Sequence[TraceJob],
    cluster: ClusterFile | None = None,
    *,
    policy: Policy | None = None,
    gpus: int | None = None,
    load: float | None = None,
    multi_node: bool = True,
    size_for_wide: bool = True,
    checkpointing: bool = False,
) -> Scenario:
    """A Scenario replaying `jobs`. Without a cluster file: nodes of 8 exclusive GPUs, as many
    as `gpus` (or as make offered load ≈ `load`, default 1.0); tenants from `default_tenants`.

    With `multi_node` (the default) a job wider than the largest node becomes a multi-node
    request (`wide_request`); without it, such a job is unschedulable (as before issue 19).
    With `size_for_wide` off the cluster is sized for `load` without the wide jobs (the
    cluster a replay without them gets: their effect on everyone else, on the same nodes).
    `checkpointing`: every job declares it (resumes from where it was preempted)."""
    if cluster is None:
        sized = multi_node and size_for_wide
        n_gpus = gpus or gpus_for_load(jobs, load or 1.0, multi_node=sized)
        cluster = ClusterFile(
            cluster=ClusterSpec(
                nodes=[NodeSpec(name="n", count=max(1, math.ceil(n_gpus / 8)), gpus=8)]
            ),
            scheduler=SchedulerSpec(
                min_cycle_gap_s=DEFAULT_TRACE_CYCLE_GAP_S,
                cycle_interval_s=60,
                pending_window=DEFAULT_TRACE_PENDING_WINDOW,
            ),
        )
    nodes = build_nodes(cluster.cluster)
    capacity_gpus = sum(len(n.gpus) for n in nodes)
    largest = max((len(n.gpus) for n in nodes), default=0)
    tenant_specs = list(cluster.tenants) or default_tenants(jobs, capacity_gpus)
    known = {t.name for t in tenant_specs}
    missing = sorted({j.tenant for j in jobs} - known)
    if missing and cluster.tenants:
        raise ScenarioError(
            [
                f"the trace has tenant(s) {', '.join(missing[:10])} that the cluster file does "
                "not define; add them under tenants or pick tenants with --tenants"
            ]
        )
    tree = build_tenants(tenant_specs)
    config = scheduler_config(cluster.scheduler, policy)
    hardware = Hardware(nodes)
    origin = min((j.submit for j in jobs), default=0.0)
    workloads: list[SimWorkload] = []
    unschedulable: dict[str, str] = {}
    fit_cache: dict[tuple, str | None] = {}
    seen: set[str] = set()
    for j in sorted(jobs, key=lambda j: j.submit):
        if j.id in seen:
            raise ScenarioError([f"workload id {j.id!r} appears twice in the trace"])
        seen.add(j.id)
        n_nodes, n_gpus_total = j.nodes, j.gpus
        if multi_node and n_nodes == 1 and largest and j.gpus > largest:
            n_nodes, per = wide_request(j.gpus, largest)
            n_gpus_total = n_nodes * per
        elif not multi_node:
            n_nodes = 1
        try:
            req = Request(
                gpus=n_gpus_total,
                nodes=n_nodes,
                gpu_milli=j.gpu_milli,
                gpu_memory_mib=j.gpu_memory_mib,
                gpu_model=j.gpu_model,
                cpu_milli=j.cpu_milli,
                memory_mib=j.memory_mib,
            )
            w = Workload(
                id=j.id,
                tenant=j.tenant,
                owner=j.user,
                request=req,
                priority=j.priority,
                preemptible=j.preemptible,
                checkpointing=checkpointing,
                submitted_at=j.submit - origin,
            )
        except DomainValidationError as exc:
            raise ScenarioError([f"workload {j.id}: {exc}"]) from None
        key = (
            j.tenant,
            req.gpus,
            req.nodes,
            req.gpu_milli,
            req.gpu_memory_mib,
            req.gpu_model,
            req.cpu_milli,
            req.memory_mib,
        )
        if key not in fit_cache:
            fit_cache[key] = never_runs_problem(req, j.tenant, tree, hardware, config.policy)
        if fit_cache[key]:
            unschedulable[j.id] = f"can never run: {fit_cache[key]}"
        workloads.append(SimWorkload(w, j.duration))
    spec = cluster.scheduler
    return Scenario(
        nodes=nodes,
        tenants=tree,
        workloads=workloads,
        config=config,
        cycle_interval_s=spec.cycle_interval_s,
        min_cycle_gap_s=spec.min_cycle_gap_s,
        pending_window=spec.pending_window,
        unschedulable=unschedulable,
        checkpoint_loss_s=spec.checkpoint_loss_s,
    )


def load_cluster_file(path: str | Path) -> ClusterFile:
    data = read_yaml(path)
    try:
        return parse_cluster_file(data)
    except ScenarioError as exc:
        raise ScenarioError(exc.problems, str(path)) from None
