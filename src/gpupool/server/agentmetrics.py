"""/metrics for node agents: their GPUs' series beside the local engine's, in one family each.

The exposition format allows one block per metric name, so the local telemetry collector's
families and those rendered from each agent's latest report (`TelemetryCollector` over a
frame rebuilt from the report) are merged by name. Plus, per node with an agent:
`gpupool_node_agent_report_age_seconds` and `gpupool_node_agent_lost` (1 once the node is
`unknown`; its GPU series are then left out rather than repeated stale).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpupool.server.context import AppContext
from gpupool.server.services.agents import node_telemetry, report_frames
from gpupool.telemetry.exporter import TelemetryCollector
from gpupool.telemetry.sampler import Frame, Sampler

log = logging.getLogger(__name__)


def merge_families(collectors: list[Any]) -> list[Metric]:
    """The families of `collectors`, one per name, samples concatenated in order."""
    merged: dict[str, Metric] = {}
    for c in collectors:
        for fam in c.collect():
            into = merged.get(fam.name)
            if into is None:
                into = Metric(fam.name, fam.documentation, fam.type, fam.unit)
                merged[fam.name] = into
            into.samples.extend(fam.samples)
    return list(merged.values())


def _latest(sampler: Sampler) -> Callable[[], Frame | None]:
    return lambda: sampler.latest


class AgentTelemetryCollector(Collector):
    """The local telemetry collector (if any) merged with every reporting agent's series."""

    def __init__(self, ctx: AppContext, local: Collector | None = None):
        self.ctx = ctx
        #: this host's GPU series; None: those of this process's samplers (`ctx.samplers`)
        self.local = local

    def _agents(self) -> list[Callable[[], Any]]:
        return [lambda f=f: f for f in report_frames(self.ctx)]

    def collect(self) -> Iterator[Metric]:
        collectors: list[Any] = (
            [self.local]
            if self.local is not None
            else [TelemetryCollector(_latest(s)) for s in self.ctx.samplers]
        )
        age = GaugeMetricFamily(
            "gpupool_node_agent_report_age_seconds",
            "Seconds since the node's agent last reported.",
            labels=["node"],
        )
        lost = GaugeMetricFamily(
            "gpupool_node_agent_lost",
            "1 when the node's agent stopped reporting (node state unknown), else 0.",
            labels=["node"],
        )
        try:
            collectors += [TelemetryCollector(f) for f in self._agents()]
            for node, t in sorted(node_telemetry(self.ctx).items()):
                age.add_metric([node], t.age_s)
                lost.add_metric([node], 1.0 if t.lost else 0.0)
        except Exception:  # noqa: BLE001 - a scrape must not fail because the DB hiccups
            log.exception("metrics: reading the agents' reports failed")
        yield from merge_families(collectors)
        yield age
        yield lost
