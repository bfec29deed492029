"""Budget metrics (issue 35): `gpupool_budget_used_gpu_hours` and `gpupool_budget_gpu_hours`
per budget (labels `tenant`, `period`, `model` ('' for every model) and `mode`), and
`gpupool_budget_over` (1 once the budget is spent this period), computed at scrape time."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpupool.store import BudgetRepo, Store

log = logging.getLogger(__name__)
LABELS = ["tenant", "period", "model", "mode"]


class BudgetCollector(Collector):
    def __init__(self, store: Store, now: Callable[[], float]):
        self.store = store
        self.now = now

    def collect(self) -> Iterator[Metric]:
        used = GaugeMetricFamily(
            "gpupool_budget_used_gpu_hours", "GPU-hours used this period", labels=LABELS
        )
        limit = GaugeMetricFamily(
            "gpupool_budget_gpu_hours", "GPU-hours allowed per period", labels=LABELS
        )
        over = GaugeMetricFamily(
            "gpupool_budget_over", "1 if the budget is spent this period", labels=LABELS
        )
        try:
            with self.store.read() as s:
                states = BudgetRepo(s).states(self.now())
        except Exception:  # noqa: BLE001 - a scrape must not fail because the DB hiccups
            log.exception("metrics: reading the budgets failed")
            return
        for _, st in states:
            b = st.budget
            lab = [b.tenant, str(b.period), b.model or "", str(b.mode)]
            used.add_metric(lab, st.used_gpu_hours)
            limit.add_metric(lab, b.gpu_hours)
            over.add_metric(lab, 1.0 if st.over else 0.0)
        yield used
        yield limit
        yield over
