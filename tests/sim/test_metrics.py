"""Metric definitions and the reference fair share."""

from __future__ import annotations

import pytest

from gpupool.domain import Quota, Tenant, TenantTree
from gpupool.scheduler.fairshare import water_fill
from gpupool.sim.fairshare import reference_fair_shares
from gpupool.sim.metrics import compute_metrics, jain, percentile

from .builders import job, node, run, scenario, tenant


def test_percentile_interpolates():
    assert percentile([], 50) is None
    assert percentile([5], 99) == 5
    assert percentile([0, 10], 50) == 5
    assert percentile(list(range(101)), 95) == 95


@pytest.mark.parametrize(
    "xs,expected",
    [([1, 1, 1], 1.0), ([1, 0], 0.5), ([2, 0, 0, 0], 0.25), ([0, 0], 1.0), ([], None)],
)
def test_jain_index(xs, expected):
    assert jain(xs) == expected


def test_water_fill_guarantees_first_then_weights_capped_at_demand():
    got = water_fill(
        10_000,
        guarantees={"a": 2000, "b": 2000, "c": 0},
        caps={"a": 8000, "b": 1000, "c": 10_000},
        weights={"a": 1, "b": 1, "c": 3},
    )
    # guarantees: a 2000, b 1000 (capped at its demand); 7000 left split 1:3 between a and c
    assert got == pytest.approx({"a": 2000 + 1750, "b": 1000, "c": 5250})


def test_hierarchical_fair_share_splits_per_level():
    tree = TenantTree(
        [
            Tenant("phys", Quota.gpus(guaranteed=6)),
            Tenant("phys/a", Quota.gpus(guaranteed=2)),
            Tenant("phys/b"),
            Tenant("bio", Quota.gpus(guaranteed=2)),
        ]
    )
    got = reference_fair_shares(tree, {"phys/a": 8000, "phys/b": 8000, "bio": 8000}, 8000)
    # roots: phys 6 + bio 2 (guarantees fill the cluster); inside phys: a 2, then 4 split 1:1
    assert got == pytest.approx({"phys/a": 4000, "phys/b": 2000, "bio": 2000})


def test_limits_cap_fair_share():
    tree = TenantTree([Tenant("a", Quota.gpus(limit=1)), Tenant("b")])
    got = reference_fair_shares(tree, {"a": 4000, "b": 4000}, 4000)
    assert got == pytest.approx({"a": 1000, "b": 3000})


def test_the_yardstick_is_the_schedulers_fair_share():
    """The simulator's reference fair shares are the scheduler's own, leaf by leaf."""
    from gpupool.scheduler.fairshare import fair_shares

    tree = TenantTree(
        [
            Tenant("phys", Quota.gpus(guaranteed=3, limit=6, weight=2)),
            Tenant("phys/a", Quota.gpus(guaranteed=1)),
            Tenant("phys/b", Quota.gpus(weight=3)),
            Tenant("bio", Quota.gpus(guaranteed=1)),
            Tenant("chem", Quota.gpus(limit=2)),
        ]
    )
    for demand in (
        {"phys/a": 5000, "phys/b": 2500, "bio": 700, "chem": 9000},
        {"phys/a": 0, "phys/b": 12000, "bio": 12000, "chem": 0},
        {"phys/a": 333, "phys/b": 0, "bio": 0, "chem": 4000},
    ):
        ours = fair_shares(tree, 10_000, demand)
        assert reference_fair_shares(tree, demand, 10_000) == {t: ours[t] for t in demand}


def test_utilization_share_and_waits_on_a_hand_computed_scenario():
    # 4 GPUs; a runs 2 GPUs for 100 s; b waits 50 s for 4 GPUs and runs 100 s
    data = scenario(
        tenants=[tenant("a"), tenant("b")],
        workloads=[
            job("a1", tenant="a", gpus=2, duration=100),
            job("b1", tenant="b", gpus=4, submit=50, duration=100),
        ],
    )
    m = compute_metrics(run(data))
    assert m["makespan"] == 200
    assert m["gpu_utilization"] == pytest.approx((2 * 100 + 4 * 100) / (4 * 200))
    assert (m["avg_wait"], m["p50_wait"], m["avg_jct"]) == (25, 25, 125)
    assert m["per_tenant"]["a"]["gpu_hours"] == pytest.approx(200 / 3600, abs=1e-3)
    assert m["per_tenant"]["a"]["share"] == pytest.approx(0.25)
    assert m["per_tenant"]["b"]["share"] == pytest.approx(0.5)
    assert m["per_tenant"]["b"]["avg_wait"] == 50
    assert m["allocation_ratio"] == 0.5  # right after the cycle at the last submission
    assert m["states"] == {"succeeded": 2}
    assert m["scheduler"]["cycles"] >= 2


def test_fair_share_integral_and_guarantee_attainment():
    # b has a guarantee of 2 but its work is stuck behind non-preemptible a for 100 s
    data = scenario(
        nodes=[node(gpus=2)],
        tenants=[tenant("a"), tenant("b", guaranteed_gpus=2)],
        workloads=[
            job("a1", tenant="a", gpus=2, duration=100, preemptible=False),
            job("b1", tenant="b", gpus=2, duration=100, submit=1),
        ],
    )
    m = compute_metrics(run(data))
    pt = m["per_tenant"]
    # busy span 0..200; b owed 2 GPUs from 1 to 200 (199 s) and got them from 100 to 200
    assert pt["b"]["guarantee_attainment"] == pytest.approx(100 / 199, abs=1e-4)
    # fair share: a holds the cluster's fair share only for its first second, b for the rest
    assert pt["a"]["fair_share"] == pytest.approx(1 / 200, abs=1e-4)
    assert pt["b"]["fair_share"] == pytest.approx(199 / 200, abs=1e-4)
    assert pt["a"]["share"] == pytest.approx(0.5)
    xa, xb = 0.5 / (1 / 200), 0.5 / (199 / 200)
    assert m["jain_fairness"] == pytest.approx((xa + xb) ** 2 / (2 * (xa**2 + xb**2)), abs=1e-3)


def test_guarantee_kept_owes_only_work_that_fits_within_the_guarantee():
    # b is guaranteed 2 GPUs; its 4-GPU job has no claim on them (it would borrow), its
    # 1-GPU job does. Both wait behind non-preemptible a until 100; b1 then runs to 150,
    # b4 from 150 to 250.
    data = scenario(
        nodes=[node(gpus=4)],
        tenants=[tenant("a"), tenant("b", guaranteed_gpus=2)],
        workloads=[
            job("a1", tenant="a", gpus=4, duration=100, preemptible=False),
            job("b4", tenant="b", gpus=4, duration=100, submit=1),
            job("b1", tenant="b", gpus=1, duration=50, submit=1),
        ],
    )
    pt = compute_metrics(run(data))["per_tenant"]
    # owed = min(2, demand): 2 from 1 to 250; met 0 until 100, 1 until 150, then 2
    assert pt["b"]["guarantee_attainment"] == pytest.approx(250 / 498, abs=1e-4)
    # owed within the guarantee: b1's GPU from 1 to 150 (met from 100), 2 while b4 runs
    assert pt["b"]["guarantee_kept"] == pytest.approx(250 / 349, abs=1e-4)
    assert pt["a"]["guarantee_kept"] is None  # no guarantee, nothing owed
