"""The Reclaimer's victim order (gpupool.scheduler.preemption): every preemptible running
workload that is not stopping, once per node of the snapshot it runs on (a gang on each of its
nodes), lowest priority first, then least progress lost (GPU milli-seconds since it started),
then id, then node; each node's own list in the same order. Checked against that definition
written out here, over random running sets with gangs, fractions, ties, stopping, young and
non-preemptible work, nodes the snapshot does not list, and one-share allocations whose
share is on another node than the allocation's own (listed on both, as a gang is)."""

import dataclasses
import random

import pytest

from gpupool.domain import MILLI_PER_GPU, Allocation, Share, WorkloadState
from gpupool.scheduler.capacity import CapacityIndex
from gpupool.scheduler.limits import Usage
from gpupool.scheduler.preemption import Reclaimer
from gpupool.scheduler.types import RunningWorkload
from tests.scheduler.builders import job, node, tenant, tree

NOW = 10_000.0
MIN_RUNTIME = 600.0


def _running(rng: random.Random, i: int, names: list[str]) -> RunningWorkload:
    """A random running workload on one to three of `names` (some not in the snapshot)."""
    spread = rng.choice([1, 1, 1, 2, 3])
    on = rng.sample(names, spread)
    since = rng.choice([0.0, 5_000.0, 9_700.0, NOW, NOW + 50.0])  # ties, young, not yet started
    shares: list[Share] = []
    for name in on:
        if spread == 1 and rng.random() < 0.4:
            milli = rng.choice([250, 500])
            shares.append(Share(name, rng.randrange(4), f"{name}-g", milli, 1024))
        else:
            for g in rng.sample(range(4), rng.choice([1, 2])):
                shares.append(Share(name, g, f"{name}-g{g}", MILLI_PER_GPU, 80 * 1024))
    w = job(
        f"w{rng.randrange(40):02d}-{i}",
        tenant=rng.choice(["a", "b"]),
        priority=rng.choice([0, 0, 1, 5]),
        preemptible=rng.random() < 0.85,
    )
    started = since if rng.random() < 0.8 else None
    w = dataclasses.replace(w, state=WorkloadState.RUNNING, started_at=started)
    head = on[0]
    if len(shares) == 1 and rng.random() < 0.3:  # its one share on another node than its own
        head = rng.choice([n for n in names if n != on[0]])
    alloc = Allocation(w.id, head, tuple(shares), since, w.request.cpu_milli, 1024)
    return RunningWorkload(w, alloc, rng.random() < 0.1)


@pytest.mark.parametrize("seed", range(40))
def test_victims_are_ordered_by_priority_then_progress_lost_then_id_on_every_node(seed):
    rng = random.Random(seed)
    listed = [node(f"n{i}", gpus=4) for i in range(6)]
    names = [n.name for n in listed] + ["gone-1", "gone-2"]
    run = tuple(_running(rng, i, names) for i in range(rng.randrange(0, 40)))
    cap = CapacityIndex(tuple(listed))
    t = tree(tenant("a", 4), tenant("b", 4))
    rc = Reclaimer(cap, t, Usage(t), run, NOW, MIN_RUNTIME)

    ids = cap.node_ids
    expected = []
    young = {}
    stopping: dict[int, list[int]] = {}
    first_seen: list[int] = []  # nodes with victims, in the order the running work names them
    for rw in run:
        a = rw.allocation
        gang = [a.node, *sorted({s.node for s in a.shares} - {a.node})]
        on = [ids[name] for name in gang if name in ids]
        for n in on:
            if rw.stopping:
                stopping.setdefault(n, []).append(id(rw))
            elif rw.workload.preemptible:
                if n not in first_seen:
                    first_seen.append(n)
                lost = max(0.0, NOW - a.since) * sum(s.milli for s in a.shares)
                expected.append(((rw.workload.priority, lost, rw.workload.id, n), rw))
                start = rw.workload.started_at
                start = a.since if start is None else start
                if NOW - start < MIN_RUNTIME:
                    young[rw.workload.id] = start + MIN_RUNTIME
    expected.sort(key=lambda e: e[0])
    assert [(n, id(rw)) for n, rw in rc.order] == [(k[3], id(rw)) for k, rw in expected]
    per_node: dict[int, list[int]] = {}
    for k, rw in expected:
        per_node.setdefault(k[3], []).append(id(rw))
    assert {n: [id(rw) for rw in lst] for n, lst in rc.victims.items()} == per_node
    assert list(rc.victims) == first_seen  # (defragmentation walks the nodes in this order)
    assert {n: [id(rw) for rw in lst] for n, lst in rc.stopping.items()} == stopping
    assert rc.young == young
    # the key's progress lost is the one `lost` reports (used to compare victim sets)
    assert all(k[1] == rc.lost(rw) for k, rw in expected)


def test_a_one_share_allocation_off_its_own_node_is_listed_on_both():
    """Allocation.node n0, its only share on n1 (Reclaimer's one-share branch, share off the
    head): a victim on n0 and on n1, as a gang is on each of its nodes; progress lost counts
    its one share. Its twin on n1 with n1 as its node is listed on n1 only."""
    listed = [node("n0", gpus=4), node("n1", gpus=4)]
    cap = CapacityIndex(tuple(listed))
    t = tree(tenant("a", 4))

    def one_share(wid: str, head: str) -> RunningWorkload:
        w = dataclasses.replace(job(wid), state=WorkloadState.RUNNING, started_at=0.0)
        share = Share("n1", 2, "n1-g2", 500, 1024)
        return RunningWorkload(w, Allocation(wid, head, (share,), 0.0, 1000, 1024), False)

    off, on = one_share("w-off", "n0"), one_share("w-on", "n1")
    rc = Reclaimer(cap, t, Usage(t), (off, on), NOW, MIN_RUNTIME)
    n0, n1 = cap.node_ids["n0"], cap.node_ids["n1"]
    assert [(n, rw.workload.id) for n, rw in rc.order] == [
        (n0, "w-off"), (n1, "w-off"), (n1, "w-on")
    ]  # fmt: skip
    assert {n: [rw.workload.id for rw in v] for n, v in rc.victims.items()} == {
        n0: ["w-off"], n1: ["w-off", "w-on"]
    }  # fmt: skip
    assert rc.lost(off) == NOW * 500
    # stopping, it is counted as stopping on both nodes too
    gone = dataclasses.replace(off, stopping=True)
    rc = Reclaimer(cap, t, Usage(t), (gone,), NOW, MIN_RUNTIME)
    assert rc.stopping == {n0: [gone], n1: [gone]} and rc.order == []
