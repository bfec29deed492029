"""Metrics of a replay, and the `--json` object of `gpupool simulate`.

Definitions (also in docs/scenarios.md):
- wait of a finished workload: time it spent not running between submit and end
  (`end - submit - run time of all attempts`; without preemption `start - submit`);
- JCT: `end - submit`; both over workloads that succeeded;
- busy span: first submission to last completion; `makespan` is its length;
- gpu_utilization: allocated GPU-time ÷ (capacity × busy span);
- allocation_ratio: allocated GPUs ÷ capacity right after the cycle at the last submission;
- per tenant `share`: its allocated GPU-time ÷ (capacity × busy span); `fair_share`: the
  time-average of its reference fair share (gpupool.sim.fairshare) ÷ capacity;
  `guarantee_attainment`: ∫min(allocated, owed) ÷ ∫owed with owed = min(guarantee, demand);
  `guarantee_kept`: the same with owed = min(guarantee, allocated + the waiting work that
  fits in the rest of the guarantee) — what the scheduler promises (gpupool.sim.owed);
- jain_fairness: Jain's index (Σx)² ÷ (n·Σx²) over x = share ÷ fair_share of the n tenants
  with a non-zero fair share; 1.0 means every tenant got exactly its fair share.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from gpupool.domain import WorkloadState
from gpupool.sim.result import SimResult

S = WorkloadState


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation; None for no values."""
    if not values:
        return None
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def jain(xs: Sequence[float]) -> float | None:
    """Jain's fairness index of `xs`; None for an empty list."""
    if not xs:
        return None
    sq = sum(x * x for x in xs)
    return 1.0 if sq == 0 else (sum(xs) ** 2) / (len(xs) * sq)


def waits(result: SimResult) -> dict[str, float]:
    """Wait (queueing delay) per succeeded workload id."""
    out = {}
    for wid, r in result.records.items():
        w = r.workload
        if w.state is S.SUCCEEDED and w.finished_at is not None:
            out[wid] = max(0.0, w.finished_at - w.submitted_at - r.run_time)
    return out


def compute_metrics(result: SimResult) -> dict[str, Any]:
    recs = result.records
    wait = waits(result)
    jct = [
        r.workload.finished_at - r.workload.submitted_at
        for r in recs.values()
        if r.workload.state is S.SUCCEEDED and r.workload.finished_at is not None
    ]
    span = 0.0
    if result.first_submit is not None and result.last_end is not None:
        span = max(0.0, result.last_end - result.first_submit)
    cap_time = result.capacity_milli * span
    alloc_total = sum(tl.allocated for tl in result.integrals.values())
    per_tenant: dict[str, Any] = {}
    xs = []
    tenant_waits: dict[str, list[float]] = {t: [] for t in result.tenants}
    for wid, w in wait.items():
        tenant_waits[recs[wid].workload.tenant].append(w)
    for t in result.tenants:
        tl = result.integrals[t]
        share = tl.allocated / cap_time if cap_time else 0.0
        fair = tl.fair / cap_time if cap_time else 0.0
        if fair > 1e-12:
            xs.append(share / fair)
        per_tenant[t] = {
            "gpu_hours": _r(tl.allocated / 1000 / 3600),
            "avg_wait": _r(_mean(tenant_waits[t])),
            "share": _r(share, 4),
            "fair_share": _r(fair, 4),
            "guarantee_attainment": _r(tl.owed_met / tl.owed, 4) if tl.owed else None,
            "guarantee_kept": _r(tl.owed_fit_met / tl.owed_fit, 4) if tl.owed_fit else None,
            "workloads": sum(1 for r in recs.values() if r.workload.tenant == t),
        }
    counts: dict[str, int] = {}
    for r in recs.values():
        counts[str(r.state)] = counts.get(str(r.state), 0) + 1
    cms = result.cycle_ms
    return {
        "avg_wait": _r(_mean(list(wait.values()))),
        "p50_wait": _r(percentile(list(wait.values()), 50)),
        "p95_wait": _r(percentile(list(wait.values()), 95)),
        "p99_wait": _r(percentile(list(wait.values()), 99)),
        "avg_jct": _r(_mean(jct)),
        "makespan": _r(span),
        "gpu_utilization": _r(alloc_total / cap_time, 4) if cap_time else None,
        "allocation_ratio": _r(result.allocation_ratio_at_last_submit, 4),
        "jain_fairness": _r(jain(xs), 4),
        "preemptions": result.preemptions,
        "capacity_gpus": result.capacity_milli / 1000,
        "workloads": len(recs),
        "states": dict(sorted(counts.items())),
        "per_tenant": per_tenant,
        "scheduler": {
            "cycles": len(cms),
            "total_ms": _r(sum(cms), 1),
            "p99_cycle_ms": _r(percentile(cms, 99)),
            "max_cycle_ms": _r(max(cms) if cms else None),
        },
        "replay_wall_s": _r(result.wall_s),
    }


def workload_rows(result: SimResult) -> list[dict[str, Any]]:
    """One dict per workload, in submission order, as `--json` prints them."""
    rows = []
    for r in result.records.values():
        w = r.workload
        alloc = r.allocation
        rows.append(
            {
                "id": w.id,
                "tenant": w.tenant,
                "user": w.owner,
                "submit": w.submitted_at,
                "start": r.first_start,
                "end": w.finished_at if w.terminal else None,
                "state": str(w.state),
                "node": alloc.node if alloc else None,
                "nodes": list(alloc.nodes) if alloc else [],
                "gpus": [[s.gpu_index, s.milli] for s in alloc.shares] if alloc else [],
                "preemptions": w.preemptions,
                "reason": r.reason if w.state in (S.FAILED, S.PENDING) else None,
            }
        )
    return rows


def to_json(result: SimResult) -> dict[str, Any]:
    """The object `gpupool simulate --json` prints."""
    return {"workloads": workload_rows(result), "metrics": compute_metrics(result)}
