"""A workload's telemetry joined over the nodes its allocation spans (`AllocationTelemetry`):
each node's telemetry is asked about its own shares only; idle is the least idle node (None
when a node knows nothing), busy the milli-weighted mean of the nodes that know, memory the
sum. Per-node readers are fakes with fixed figures (the real loop is tested beside it)."""

from __future__ import annotations

import pytest

from gpupool.domain import Allocation, Share
from gpupool.server.loops.telemetry_join import AllocationTelemetry, parts_by_node


class FakeNode:
    """One node's telemetry with fixed figures; records which shares it was asked about."""

    def __init__(
        self,
        idle: float | None = None,
        busy: float | None = None,
        memory: float = 0,
        estimated: float = 0.0,
    ):
        self.idle, self.busy, self.memory, self.estimated = idle, busy, memory, estimated
        self.asked: list[tuple[str, ...]] = []
        self.since: list[float | None] = []

    def idle_seconds(self, allocation: Allocation) -> float | None:
        self.asked.append(allocation.gpu_uuids)
        return self.idle

    def busy_fraction(self, allocation: Allocation, since: float | None = None) -> float | None:
        self.asked.append(allocation.gpu_uuids)
        self.since.append(since)
        return self.busy

    def estimated_fraction(self, allocation: Allocation, since: float | None = None) -> float:
        return self.estimated

    def memory_mib(self, allocation: Allocation) -> float:
        self.asked.append(allocation.gpu_uuids)
        return self.memory


def share(node: str, i: int, milli: int = 1000) -> Share:
    return Share(node, i, f"GPU-{node}-{i}", milli, 81920 * milli // 1000)


def gang(*per_node_gpus: tuple[str, int]) -> Allocation:
    """An allocation with `count` whole GPUs on each `node`, the first node rank 0."""
    shares = tuple(share(n, i) for n, count in per_node_gpus for i in range(count))
    return Allocation("w1", per_node_gpus[0][0], shares, since=0.0, cpu_milli=4000)


def test_each_node_is_asked_about_its_own_shares_only():
    a, b = FakeNode(idle=10), FakeNode(idle=20)
    AllocationTelemetry({"a": a, "b": b}).idle_seconds(gang(("a", 2), ("b", 1)))
    assert a.asked == [("GPU-a-0", "GPU-a-1")]
    assert b.asked == [("GPU-b-0",)]


def test_per_node_parts_keep_rank_order_and_the_per_node_figures():
    alloc = gang(("b", 1), ("a", 2))
    parts = parts_by_node(alloc)
    assert [n for n, _ in parts] == ["b", "a"]
    assert all(p.node == n and p.workload_id == "w1" for n, p in parts)
    assert [p.gpu_milli for _, p in parts] == [1000, 2000]
    assert all(p.cpu_milli == 4000 and p.since == 0.0 for _, p in parts)


def test_idle_is_the_least_idle_node():
    join = AllocationTelemetry({"a": FakeNode(idle=600), "b": FakeNode(idle=90)})
    assert join.idle_seconds(gang(("a", 2), ("b", 2))) == 90
    busy = AllocationTelemetry({"a": FakeNode(idle=600), "b": FakeNode(idle=0)})
    assert busy.idle_seconds(gang(("a", 2), ("b", 2))) == 0  # rank 1 is busy


def test_idle_is_unknown_when_any_node_knows_nothing():
    alloc = gang(("a", 2), ("b", 2))
    not_sampled = AllocationTelemetry({"a": FakeNode(idle=600), "b": FakeNode(idle=None)})
    assert not_sampled.idle_seconds(alloc) is None
    no_loop = AllocationTelemetry({"a": FakeNode(idle=600)})  # b reports by its agent
    assert no_loop.idle_seconds(alloc) is None
    assert AllocationTelemetry({}).idle_seconds(alloc) is None


def test_busy_is_the_milli_weighted_mean_of_the_nodes_that_know():
    a, b = FakeNode(busy=0.2), FakeNode(busy=0.8)
    join = AllocationTelemetry({"a": a, "b": b})
    # a holds 3 GPUs, b 1: (0.2 x 3000 + 0.8 x 1000) / 4000
    assert join.busy_fraction(gang(("a", 3), ("b", 1)), 5.0) == pytest.approx(0.35)
    assert a.since == [5.0] and b.since == [5.0]  # the accounting window reaches each node
    half = AllocationTelemetry({"a": FakeNode(busy=0.2), "b": FakeNode(busy=None)})
    assert half.busy_fraction(gang(("a", 3), ("b", 1))) == pytest.approx(0.2)
    none = AllocationTelemetry({"a": FakeNode(busy=None)})
    assert none.busy_fraction(gang(("a", 3), ("b", 1))) is None


def test_the_estimated_part_is_weighted_like_busy_over_the_nodes_that_know():
    est = AllocationTelemetry({"a": FakeNode(busy=0.5, estimated=1.0), "b": FakeNode(busy=0.8)})
    assert est.estimated_fraction(gang(("a", 3), ("b", 1))) == pytest.approx(0.75)
    unknown_b = AllocationTelemetry(
        {"a": FakeNode(busy=0.5, estimated=1.0), "b": FakeNode(busy=None, estimated=0.0)}
    )
    assert unknown_b.estimated_fraction(gang(("a", 3), ("b", 1))) == 1.0  # b adds no busy
    assert AllocationTelemetry({}).estimated_fraction(gang(("a", 1))) == 0.0


def test_memory_is_the_sum_over_the_nodes():
    join = AllocationTelemetry({"a": FakeNode(memory=1000), "b": FakeNode(memory=3000)})
    assert join.memory_mib(gang(("a", 2), ("b", 2))) == 4000
    only_a = AllocationTelemetry({"a": FakeNode(memory=1000)})
    assert only_a.memory_mib(gang(("a", 2), ("b", 2))) == 1000
    assert AllocationTelemetry({}).memory_mib(gang(("a", 2), ("b", 2))) == 0


def test_a_one_node_allocation_goes_to_its_node_unchanged():
    alloc = Allocation("w1", "a", (share("a", 0), share("a", 1, milli=300)), since=0.0)
    a, other = FakeNode(idle=42, busy=0.123456789, memory=77.5), FakeNode(idle=1, busy=1.0)
    join = AllocationTelemetry({"a": a, "b": other})
    assert join.idle_seconds(alloc) == 42
    assert join.busy_fraction(alloc, 3.0) == 0.123456789  # exactly its node's figure
    assert join.memory_mib(alloc) == 77.5
    assert a.asked == [alloc.gpu_uuids] * 3 and other.asked == []
    lone = AllocationTelemetry({"b": other})  # its node has no loop: no evidence
    assert lone.idle_seconds(alloc) is None and lone.busy_fraction(alloc) is None
    assert lone.memory_mib(alloc) == 0
