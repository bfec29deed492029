"""The reference fair share the simulator measures every policy against.

Hierarchical water-filling, per level of the tenant tree, starting with the whole cluster
capacity at the roots:
1. each child gets its guarantee, capped at its demand (and its limit);
   if the guarantees do not fit, the amount is split in proportion to them;
2. what is left is split by weight among children whose demand is not yet met, repeatedly,
   each capped at its demand and limit (water-filling);
3. each inner tenant's amount is split among its children the same way.

A leaf's demand is what it holds plus what it waits for (milli-GPU); an inner tenant's demand
is the sum of its leaves'. The same numbers are used for every policy, so `fifo`, `fair` and
`las` are compared against one yardstick.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpupool.domain import TenantTree

_EPS = 1e-9


def water_fill(
    amount: float,
    demand: Mapping[str, float],
    guarantee: Mapping[str, float],
    weight: Mapping[str, float],
) -> dict[str, float]:
    """Split `amount` among keys of `demand`: guarantees first, then by weight (see module).

    The weighted part raises one water level L: each key gets min(unmet demand, L × weight);
    keys are visited in order of the level at which they are satisfied."""
    g = {k: min(guarantee.get(k, 0.0), d) for k, d in demand.items()}
    total_g = sum(g.values())
    if total_g >= amount:
        if total_g <= 0:
            return dict.fromkeys(demand, 0.0)
        return {k: amount * g[k] / total_g for k in demand}
    left = amount - total_g
    unmet = [
        ((demand[k] - g[k]) / weight.get(k, 1.0), k) for k in demand if demand[k] - g[k] > _EPS
    ]
    unmet.sort()
    wsum = sum(weight.get(k, 1.0) for _, k in unmet)
    level = 0.0
    for ratio, k in unmet:
        cost = (ratio - level) * wsum
        if cost > left:
            level += left / wsum
            break
        left -= cost
        level = ratio
        wsum -= weight.get(k, 1.0)
    out = dict(g)
    for ratio, k in unmet:
        out[k] = g[k] + min(ratio, level) * weight.get(k, 1.0)
    return out


class FairShares:
    """Reference fair shares for one tenant tree; the tree's shape is read once."""

    def __init__(self, tree: TenantTree):
        self.names = [t.name for t in tree]
        self.leaves = tree.leaves()
        self.ancestors = {leaf: tree.ancestors(leaf) for leaf in self.leaves}
        self.children = {n: tree.children(n) for n in [None, *self.names]}
        self.limit = {t.name: t.quota.limit_milli for t in tree}
        self.guarantee = {t.name: float(t.quota.guaranteed_milli) for t in tree}
        self.weight = {t.name: t.quota.weight for t in tree}

    def __call__(self, leaf_demand: Mapping[str, float], capacity_milli: float) -> dict:
        """Fair share in milli-GPU of each leaf tenant, given each leaf's demand."""
        capped = dict.fromkeys(self.names, 0.0)
        for leaf, d in leaf_demand.items():
            for anc in self.ancestors[leaf]:
                capped[anc] += d
        for n, lim in self.limit.items():
            if lim is not None and capped[n] > lim:
                capped[n] = float(lim)
        out: dict[str, float] = {}
        stack: list[tuple[tuple[str, ...], float]] = [(self.children[None], float(capacity_milli))]
        while stack:
            kids, amount = stack.pop()
            shares = water_fill(amount, {c: capped[c] for c in kids}, self.guarantee, self.weight)
            for c in kids:
                if self.children[c]:
                    stack.append((self.children[c], shares[c]))
                else:
                    out[c] = shares[c]
        return {leaf: out.get(leaf, 0.0) for leaf in leaf_demand}


def reference_fair_shares(
    tree: TenantTree, leaf_demand: Mapping[str, float], capacity_milli: float
) -> dict[str, float]:
    """Fair share in milli-GPU of each leaf tenant, given each leaf's demand."""
    return FairShares(tree)(leaf_demand, capacity_milli)
