"""Prometheus metrics: `gpupool_*` series from the store (computed at scrape time) and from the
loops (cycle durations, decisions, wait times). Each app has its own registry; a telemetry
collector (DCGM-compatible GPU series) is registered beside them when given.

Per tenant, for an admin's fairness dashboard (as KAI Scheduler and Kueue export per queue):
`gpupool_tenant_guaranteed_gpus`, `gpupool_tenant_limit_gpus` (only where a limit is set),
`gpupool_tenant_fair_share_gpus` (what the scheduler's water-filling gives it now),
`gpupool_tenant_allocated_gpus`, `gpupool_tenant_pending_workloads` and
`gpupool_tenant_pending_gpus`, labelled `tenant`, for every tenant of the tree (an inner
tenant's values cover its subtree; its guarantee and limit are its own quota); and the
histogram `gpupool_workload_wait_seconds` (submission to admission) by `tenant` and `kind`.

Per GPU used outside gpupool (a plain Slurm job, someone else's pod): `gpupool_gpu_outside`
= 1 with `gpu`, `UUID`, `Hostname`, `holder` ("slurm job 4711") and `user`."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpupool.scheduler.fairshare import current_fair_shares
from gpupool.store import AllocationRepo, NodeRepo, Store, TenantRepo, WorkloadRepo

log = logging.getLogger(__name__)


class StoreCollector(Collector):
    """Workloads by state and tenant, allocated GPUs per tenant, queue length."""

    def __init__(self, store: Store):
        self.store = store

    def collect(self) -> Iterator[Metric]:
        by_state = GaugeMetricFamily(
            "gpupool_workloads", "Workloads by state and tenant", labels=["state", "tenant"]
        )
        allocated = GaugeMetricFamily(
            "gpupool_allocated_gpus", "GPUs allocated per tenant", labels=["tenant"]
        )
        queue = GaugeMetricFamily("gpupool_queue_length", "Pending workloads")
        try:
            with self.store.read() as s:
                counts = WorkloadRepo(s).count_by_state_tenant()
                running = AllocationRepo(s).running()
        except Exception:  # noqa: BLE001 - a scrape must not fail because the DB hiccups
            log.exception("metrics: reading the store failed")
            return
        for state, tenant, n in counts:
            by_state.add_metric([state, tenant], n)
        per_tenant: dict[str, int] = {}
        for r in running:
            per_tenant[r.workload.tenant] = (
                per_tenant.get(r.workload.tenant, 0) + r.allocation.gpu_milli
            )
        for tenant, milli in sorted(per_tenant.items()):
            allocated.add_metric([tenant], milli / 1000)
        queue.add_metric([], sum(n for state, _, n in counts if state == "pending"))
        yield by_state
        yield allocated
        yield queue


class OutsideCollector(Collector):
    """`gpupool_gpu_outside` = 1 for each GPU that work gpupool did not create holds (a plain
    Slurm job, someone else's pod), labelled like `gpupool_gpu_healthy` plus who holds it."""

    def __init__(self, store: Store):
        self.store = store

    def collect(self) -> Iterator[Metric]:
        g = GaugeMetricFamily(
            "gpupool_gpu_outside",
            "1 for a GPU used outside gpupool (taken, but healthy), with its holder",
            labels=["gpu", "UUID", "Hostname", "holder", "user"],
        )
        try:
            with self.store.read() as s:
                nodes = NodeRepo(s).list()
        except Exception:  # noqa: BLE001 - a scrape must not fail because the DB hiccups
            log.exception("metrics: reading the nodes failed")
            return
        for n in nodes:
            for gpu in n.gpus:
                if gpu.outside is not None:
                    o = gpu.outside
                    g.add_metric([str(gpu.index), gpu.uuid, n.name, o.ref, o.user], 1)
        yield g


#: Wait-time buckets (seconds): from a free GPU at once to a day in the queue.
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400)


class TenantCollector(Collector):
    """Per tenant: guaranteed, limit, fair share, allocated and pending (see module doc)."""

    def __init__(self, store: Store):
        self.store = store

    def collect(self) -> Iterator[Metric]:
        try:
            with self.store.read() as s:
                tree = TenantRepo(s).tree()
                nodes = NodeRepo(s).list()
                running = [(r.workload, r.allocation) for r in AllocationRepo(s).running()]
                pending = WorkloadRepo(s).pending()
        except Exception:  # noqa: BLE001 - a scrape must not fail because the DB hiccups
            log.exception("metrics: reading the tenants failed")
            return
        fair = current_fair_shares(tree, nodes, running, pending)
        names = [t.name for t in tree]
        allocated = dict.fromkeys(names, 0.0)
        waiting = dict.fromkeys(names, 0.0)
        asked = dict.fromkeys(names, 0.0)

        def up(tenant: str, into: dict[str, float], value: float) -> None:
            parts = tenant.split("/")
            for i in range(1, len(parts) + 1):
                key = "/".join(parts[:i])
                if key in into:
                    into[key] += value

        for w, a in running:
            up(w.tenant, allocated, a.gpu_milli / 1000)
        for w in pending:
            up(w.tenant, waiting, 1)
            up(w.tenant, asked, w.request.total_gpu_milli / 1000)

        def family(name: str, doc: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=["tenant"])

        guaranteed = family("gpupool_tenant_guaranteed_gpus", "GPUs guaranteed to the tenant")
        limit = family("gpupool_tenant_limit_gpus", "Most GPUs the tenant may hold (borrowing)")
        share = family("gpupool_tenant_fair_share_gpus", "The tenant's fair share of GPUs now")
        held = family("gpupool_tenant_allocated_gpus", "GPUs the tenant's workloads hold")
        queued = family("gpupool_tenant_pending_workloads", "The tenant's workloads waiting")
        queued_gpus = family("gpupool_tenant_pending_gpus", "GPUs the waiting workloads ask for")
        for t in tree:
            q = t.quota
            guaranteed.add_metric([t.name], q.guaranteed_milli / 1000)
            if q.limit_milli is not None:
                limit.add_metric([t.name], q.limit_milli / 1000)
            share.add_metric([t.name], fair.get(t.name, 0) / 1000)
            held.add_metric([t.name], allocated[t.name])
            queued.add_metric([t.name], waiting[t.name])
            queued_gpus.add_metric([t.name], asked[t.name])
        yield from (guaranteed, limit, share, held, queued, queued_gpus)


class Metrics:
    def __init__(self, store: Store, telemetry: Any = None):
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(StoreCollector(store))
        self.registry.register(TenantCollector(store))
        self.registry.register(OutsideCollector(store))
        self.wait_seconds = Histogram(
            "gpupool_workload_wait_seconds",
            "Time from submission to admission of the workloads admitted, by tenant and kind",
            ["tenant", "kind"],
            buckets=WAIT_BUCKETS,
            registry=self.registry,
        )
        self.cycle_seconds = Histogram(
            "gpupool_scheduler_cycle_seconds",
            "Duration of a scheduling cycle (snapshot, decide, apply)",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=self.registry,
        )
        self.decisions = Counter(
            "gpupool_scheduler_decisions",
            "Scheduler decisions applied, by kind",
            ["kind"],
            registry=self.registry,
        )
        self.loop_errors = Counter(
            "gpupool_loop_errors", "Errors in background loops", ["loop"], registry=self.registry
        )
        self.forecast_seconds = Histogram(
            "gpupool_forecast_pass_seconds",
            "Duration of a start-time forecast pass (server/loops/forecast.py)",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=self.registry,
        )
        self.expected_wait = Gauge(
            "gpupool_tenant_expected_wait_seconds",
            "Median forecast wait (expected start - now) of the tenant's pending workloads at "
            "the last forecast pass; work not expected within the horizon counts as the horizon",
            ["tenant"],
            registry=self.registry,
        )
        if telemetry is not None:
            self.add_collector(telemetry)

    def add_collector(self, collector: Any) -> None:
        """Register a prometheus collector (anything with `collect()`), e.g. telemetry's."""
        if hasattr(collector, "collect"):
            self.registry.register(collector)
