"""Per-tenant scheduler series on /metrics (guaranteed, limit, fair share, allocated, pending,
wait-time histogram), parsed back with prometheus-client's parser."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpupool.domain import Quota, Tenant
from gpupool.store import TenantRepo


def scrape(world) -> dict[str, dict[tuple, float]]:
    text = world.scrape()
    out: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def by_tenant(series: dict[tuple, float]) -> dict[str, float]:
    return {dict(k)["tenant"]: v for k, v in series.items()}


def test_tenant_series_show_quota_fair_share_allocation_and_queue(world):
    with world.ctx.store.write() as s:
        TenantRepo(s).save(Tenant("dept", Quota.gpus(1)), 0)
        TenantRepo(s).save(Tenant("dept/x", Quota.gpus(1, 2)), 0)
    submitted = [world.submit(gpus=1)["submitted_at"] for _ in range(4)]  # lab's limit is 3
    world.clock.advance(30)
    world.scheduler.run_once()
    now = world.clock.now()
    m = scrape(world)
    assert by_tenant(m["gpupool_tenant_guaranteed_gpus"]) == {
        "lab": 2.0,
        "other": 1.0,
        "dept": 1.0,
        "dept/x": 1.0,
    }
    assert by_tenant(m["gpupool_tenant_limit_gpus"]) == {"lab": 3.0, "other": 4.0, "dept/x": 2.0}
    # lab asks for 4 GPUs and may hold 3: its fair share is 3; the others ask for nothing
    assert by_tenant(m["gpupool_tenant_fair_share_gpus"]) == {
        "lab": 3.0,
        "other": 0.0,
        "dept": 0.0,
        "dept/x": 0.0,
    }
    assert by_tenant(m["gpupool_tenant_allocated_gpus"])["lab"] == 3.0
    assert by_tenant(m["gpupool_tenant_pending_workloads"]) == {
        "lab": 1.0,
        "other": 0.0,
        "dept": 0.0,
        "dept/x": 0.0,
    }
    assert by_tenant(m["gpupool_tenant_pending_gpus"])["lab"] == 1.0
    key = (("kind", "job"), ("tenant", "lab"))
    assert m["gpupool_workload_wait_seconds_count"][key] == 3.0
    assert m["gpupool_workload_wait_seconds_sum"][key] == pytest.approx(
        sum(now - t for t in submitted[:3])
    )
    buckets = {dict(k)["le"]: v for k, v in m["gpupool_workload_wait_seconds_bucket"].items()}
    assert buckets["30.0"] == 0.0 and buckets["60.0"] == 3.0 and buckets["+Inf"] == 3.0


def test_an_inner_tenant_sums_its_subtree(world):
    from gpupool.domain import Membership, Role
    from gpupool.store import UserRepo

    with world.ctx.store.write() as s:
        TenantRepo(s).save(Tenant("dept", Quota.gpus(2)), 0)
        TenantRepo(s).save(Tenant("dept/x", Quota.gpus(1, 2)), 0)
        TenantRepo(s).save(Tenant("dept/y", Quota.gpus(1, 2)), 0)
        UserRepo(s).set_membership(Membership("otto", "dept/x", Role.MEMBER))
        UserRepo(s).set_membership(Membership("ann", "dept/y", Role.MEMBER))
    world.submit("outsider", gpus=1, tenant="dept/x")
    world.submit("member", gpus=1, tenant="dept/y")
    world.scheduler.run_once()
    m = scrape(world)
    held = by_tenant(m["gpupool_tenant_allocated_gpus"])
    assert held["dept/x"] == 1.0 and held["dept/y"] == 1.0 and held["dept"] == 2.0
    fair = by_tenant(m["gpupool_tenant_fair_share_gpus"])
    assert fair["dept"] == fair["dept/x"] + fair["dept/y"] == 2.0
