"""Prometheus metrics: `gpupool_*` series from the store (computed at scrape time) and from the
loops (cycle durations, decisions). Each app has its own registry; a telemetry collector
(DCGM-compatible GPU series) is registered beside them when given."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpupool.store import AllocationRepo, Store, WorkloadRepo

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


class Metrics:
    def __init__(self, store: Store, telemetry: Any = None):
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(StoreCollector(store))
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
        if telemetry is not None:
            self.add_collector(telemetry)

    def add_collector(self, collector: Any) -> None:
        """Register a prometheus collector (anything with `collect()`), e.g. telemetry's."""
        if hasattr(collector, "collect"):
            self.registry.register(collector)
