"""The shipped Grafana dashboard queries only series gpupool really emits (a quick check that
needs no Prometheus; tests/server/test_prometheus.py runs every query on a real one)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpupool.server.metrics import Metrics
from gpupool.store import open_store
from gpupool.telemetry import Attribution, Sampler, SimulatedSource, Via
from gpupool.telemetry.exporter import render

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "gpupool.json"
_NAME = re.compile(r"\b((?:DCGM|gpupool)_[A-Za-z0-9_]+)")


def _exprs(node) -> list[str]:
    if isinstance(node, dict):
        found = [node["expr"]] if isinstance(node.get("expr"), str) else []
        found += [node["query"]["query"]] if isinstance(node.get("query"), dict) else []
        return found + [e for v in node.values() for e in _exprs(v)]
    if isinstance(node, list):
        return [e for v in node for e in _exprs(v)]
    return []


def test_dashboard_uses_only_emitted_series_and_labels(tmp_path):
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] == "gpupool" and dash["panels"]
    sim = SimulatedSource("H100")
    sim.add_process(0, 1, 100, 10)

    class Owners:
        def attribute_all(self, pids):
            return {1: Attribution(1, Via.ENV, "w", "u", "t")}

    text = render(Sampler(sim, attributor=Owners()).sample_once())  # type: ignore[arg-type]
    store = open_store(f"sqlite:///{tmp_path / 'g.db'}")
    try:
        metrics = Metrics(store)
        metrics.wait_seconds.labels("t", "job").observe(1.0)
        text += generate_latest(metrics.registry).decode()
    finally:
        store.close()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    labels = {k for f in fams.values() for s in f.samples for k in s.labels}
    used = {re.sub(r"_(bucket|count|sum)$", "", m) for e in _exprs(dash) for m in _NAME.findall(e)}
    assert used and used <= set(fams), used - set(fams)
    for expr in _exprs(dash):
        for label in re.findall(r"by \(([^)]*)\)", expr):
            assert {x.strip() for x in label.split(",")} <= labels | {"le"}, expr
