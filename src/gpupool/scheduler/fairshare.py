"""Hierarchical fair shares by water-filling.

At each level of the tenant tree the budget of the parent (the whole capacity at the top) is
split among its children:

1. each child first gets its guarantee, capped at its demand and its limit (if the guarantees
   add up to more than the budget they are scaled down proportionally);
2. what is left is poured out by weight among the children whose demand (capped at their
   limit) is not met yet; a child that fills up drops out and the rest is poured again.

Each child's result is then the budget for its own children. Demand of a tenant is the GPU
milli its subtree holds plus what it asks for in pending work. Shares are in milli (floats).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from gpupool.domain import Allocation, Node, TenantTree, Workload
from gpupool.domain.resources import Capacity

EPS = 1e-9


def water_fill(
    budget: float,
    guarantees: Mapping[str, float],
    caps: Mapping[str, float],
    weights: Mapping[str, float],
) -> dict[str, float]:
    """Split `budget` among names: guarantees (capped) first, then the rest by weight up to caps."""
    names = sorted(caps)
    if budget <= 0 or not names:
        return {n: 0.0 for n in names}
    share = {n: max(0.0, min(guarantees.get(n, 0.0), caps[n])) for n in names}
    total = sum(share.values())
    if total >= budget:
        scale = budget / total if total else 0.0
        return {n: v * scale for n, v in share.items()}
    left = budget - total
    active = [n for n in names if caps[n] - share[n] > EPS]
    while left > EPS and active:
        wsum = sum(weights[n] for n in active)
        full = [n for n in active if caps[n] - share[n] <= left * weights[n] / wsum + EPS]
        if not full:
            for n in active:
                share[n] += left * weights[n] / wsum
            left = 0.0
            break
        for n in full:
            left -= caps[n] - share[n]
            share[n] = caps[n]
        active = [n for n in active if n not in full]
    return share


def fair_shares(tree: TenantTree, capacity: float, demand: Mapping[str, float]) -> dict[str, float]:
    """Fair share in milli of every tenant in `tree` (inner tenants included).

    `demand` maps tenants (leaves; inner ones are summed from their leaves) to milli.
    """
    subtree: dict[str, float] = {}
    for t in tree:
        if tree.is_leaf(t.name):
            d = float(demand.get(t.name, 0.0))
            for a in tree.ancestors(t.name):
                subtree[a] = subtree.get(a, 0.0) + d
    out: dict[str, float] = {}

    def split(parent: str | None, budget: float) -> None:
        kids = tree.children(parent)
        if not kids:
            return
        g, caps, w = {}, {}, {}
        for k in kids:
            q = tree.get(k).quota
            lim = float("inf") if q.limit_milli is None else float(q.limit_milli)
            caps[k] = min(subtree.get(k, 0.0), lim)
            g[k] = float(q.guaranteed_milli)
            w[k] = q.weight
        shares = water_fill(budget, g, caps, w)
        for k in kids:
            out[k] = shares[k]
            split(k, shares[k])

    split(None, float(capacity))
    return out


def current_fair_shares(
    tree: TenantTree,
    nodes: Sequence[Node],
    running: Iterable[tuple[Workload, Allocation]],
    pending: Iterable[Workload],
) -> dict[str, int]:
    """Fair share (milli, rounded) of every tenant now, for reports and the dashboard: the
    whole capacity of `nodes`, demand = GPU milli held by `running` + asked for by `pending`."""
    demand: dict[str, float] = {}
    for w, a in running:
        demand[w.tenant] = demand.get(w.tenant, 0.0) + a.gpu_milli
    for w in pending:
        demand[w.tenant] = demand.get(w.tenant, 0.0) + w.request.total_gpu_milli
    shares = fair_shares(tree, Capacity.of(list(nodes)).gpu_milli, demand)
    return {t: round(v) for t, v in shares.items()}
