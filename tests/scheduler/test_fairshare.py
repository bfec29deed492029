"""Fair shares: guarantees first (capped at demand), then idle capacity by weight, per level."""

import pytest

from gpupool.scheduler import cycle
from gpupool.scheduler.fairshare import fair_shares, water_fill
from tests.scheduler.builders import job, node, snapshot, tenant, tree


@pytest.mark.parametrize(
    "budget, guarantees, caps, weights, expected",
    [
        # guarantees met, the rest split 1:1 among tenants with unmet demand
        (10, {"a": 2, "b": 2}, {"a": 10, "b": 10}, {"a": 1, "b": 1}, {"a": 5, "b": 5}),
        # weights 1:3 on the idle part
        (10, {"a": 0, "b": 0}, {"a": 10, "b": 10}, {"a": 1, "b": 3}, {"a": 2.5, "b": 7.5}),
        # a guarantee is capped at demand; its unused part goes to the other
        (10, {"a": 8, "b": 0}, {"a": 1, "b": 20}, {"a": 1, "b": 1}, {"a": 1, "b": 9}),
        # a tenant that fills up (demand/limit) drops out and the rest is poured again
        (12, {}, {"a": 2, "b": 100, "c": 100}, {"a": 1, "b": 1, "c": 1}, {"a": 2, "b": 5, "c": 5}),
        # guarantees above the budget are scaled down proportionally
        (6, {"a": 6, "b": 3}, {"a": 10, "b": 10}, {"a": 1, "b": 1}, {"a": 4, "b": 2}),
        # no demand, no share
        (10, {"a": 5}, {"a": 0, "b": 0}, {"a": 1, "b": 1}, {"a": 0, "b": 0}),
    ],
)
def test_water_fill(budget, guarantees, caps, weights, expected):
    got = water_fill(budget, guarantees, caps, weights)
    assert got == pytest.approx(expected)


def test_tree_levels_split_the_parent_share_among_children():
    # physics and bio split 16 GPUs 1:1 (both want more than 8); inside physics, lab-a has
    # a guarantee of 6 and lab-b only weight: lab-a 6 + half of nothing left = 6, lab-b 2.
    t = tree(
        tenant("physics", 0),
        tenant("physics/lab-a", 6),
        tenant("physics/lab-b", 0),
        tenant("bio/lab-c", 0),
    )
    demand = {"physics/lab-a": 20_000, "physics/lab-b": 20_000, "bio/lab-c": 20_000}
    fs = fair_shares(t, 16_000, demand)
    assert fs["physics"] == pytest.approx(8000)
    assert fs["bio"] == pytest.approx(8000)
    assert fs["physics/lab-a"] == pytest.approx(7000)  # 6 guaranteed + 1 of the 2 left
    assert fs["physics/lab-b"] == pytest.approx(1000)
    assert fs["bio/lab-c"] == pytest.approx(8000)


def test_inner_limit_caps_the_whole_subtree():
    t = tree(tenant("physics", 0, limit=4), tenant("physics/lab-a"), tenant("bio"))
    fs = fair_shares(t, 16_000, {"physics/lab-a": 10_000, "bio": 30_000})
    assert fs["physics"] == pytest.approx(4000)
    assert fs["physics/lab-a"] == pytest.approx(4000)
    assert fs["bio"] == pytest.approx(12_000)


def test_cycle_reports_fair_shares_from_demand():
    snap = snapshot([node("a-0", gpus=8)], [tenant("lab-a", 6), tenant("lab-b", 0)])
    pending = [job("a1", "lab-a", gpus=2), job("b1", "lab-b", gpus=8)]
    d = cycle(snap, pending, 0.0)
    # lab-a's guarantee is capped at its demand (2); lab-b gets the other 6
    assert d.fair_shares == {"lab-a": 2000, "lab-b": 6000}
