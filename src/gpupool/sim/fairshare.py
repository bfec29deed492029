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
`las` are compared against one yardstick. The water-filling itself is the scheduler's
(`gpupool.scheduler.fairshare.water_fill`); this module only keeps the tree's shape between
calls, as the replay asks for fair shares at every change of demand.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpupool.domain import TenantTree
from gpupool.scheduler.fairshare import water_fill


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
            shares = water_fill(amount, self.guarantee, {c: capped[c] for c in kids}, self.weight)
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
