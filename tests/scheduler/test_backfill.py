"""Backfill: smaller work may start behind a blocked request only where it does not delay it.

Guaranteed work that does not fit (and cannot reclaim) reserves the node where it is closest
to fitting; nothing walked after it may be placed there in that cycle. Work that would borrow
reserves nothing. (At now=0 no running work has reached the minimum runtime, so no reclaim.)
"""

import pytest

from gpupool.scheduler import SchedulerConfig, cycle
from tests.scheduler.builders import job, node, placed, running, snapshot, tenant

N0, N1 = node("n0"), node("n1")
TENANTS = [tenant("lab-a", 8), tenant("lab-b"), tenant("lab-c")]
# lab-c holds 2 GPUs on n0 (6 free) and 4 on n1 (4 free)
RUN = [
    running(job("c0", "lab-c", "carl", gpus=2), N0, [0, 1], since=0),
    running(job("c1", "lab-c", "carl", gpus=4), N1, [0, 1, 2, 3], since=0),
]


def test_blocked_head_reserves_the_node_it_is_closest_to_fitting_on():
    pending = [job("big", "lab-a", gpus=8)] + [
        job(f"b{i}", "lab-b", "bob", gpus=1, submit=i) for i in range(6)
    ]
    d = cycle(snapshot([N0, N1], TENANTS, RUN), pending, 0.0)
    where = placed(d)
    assert sorted(where) == ["b0", "b1", "b2", "b3"]
    assert {nd for nd, _ in where.values()} == {"n1"}  # n0 is kept for big
    assert d.pending["big"].reason.startswith(
        "no node has 8 free GPUs on one host; the most is 6 (10 are free in all, spread over "
        "nodes); lab-a is owed 8 GPUs"
    )
    assert d.pending["big"].wait.node == "n0"
    assert d.pending["b4"].reason.startswith("waiting behind higher-priority work of lab-a")


def test_backfill_inside_a_tenant_uses_other_nodes():
    pending = [job("big", gpus=8), job("small", gpus=2, submit=1)]
    d = cycle(snapshot([N0, N1], TENANTS, RUN), pending, 0.0)
    assert placed(d)["small"][0] == "n1"


def test_without_backfill_a_blocked_head_stops_its_tenant():
    pending = [job("big", gpus=8), job("small", gpus=2, submit=1)]
    cfg = SchedulerConfig(backfill=False)
    d = cycle(snapshot([N0, N1], TENANTS, RUN), pending, 0.0, cfg)
    assert d.admissions == ()
    assert d.pending["small"].reason.startswith("waiting behind big")
    # other tenants still run on the capacity big cannot use
    pending.append(job("b", "lab-b", "bob", gpus=1))
    d = cycle(snapshot([N0, N1], TENANTS, RUN), pending, 0.0, cfg)
    assert placed(d)["b"][0] == "n1"


def test_work_that_would_borrow_reserves_nothing():
    # lab-a has no guarantee: its blocked 8-GPU job keeps nothing, lab-b fills both nodes
    t = [tenant("lab-a"), tenant("lab-b"), tenant("lab-c")]
    pending = [job("big", "lab-a", gpus=8)] + [
        job(f"b{i}", "lab-b", "bob", gpus=1, submit=i) for i in range(10)
    ]
    d = cycle(snapshot([N0, N1], t, RUN), pending, 0.0)
    assert len(d.admissions) == 10
    assert d.pending["big"].reason.startswith("no node has 8 free GPUs on one host")


def test_guaranteed_work_reserves_with_preemption_off_too():
    pending = [job("big", gpus=8)] + [
        job(f"b{i}", "lab-b", "bob", gpus=1, submit=i) for i in range(10)
    ]
    cfg = SchedulerConfig(preemption=False)
    d = cycle(snapshot([N0, N1], TENANTS, RUN), pending, 1e6, cfg)
    assert {nd for nd, _ in placed(d).values()} == {"n1"}


# -- CPU-only work and reservations (issue 17) ------------------------------------------------

GPU_NODE = node("gpu", gpus=2, cpus=16, memory_gib=64)
LABS = [tenant("lab-a"), tenant("lab-b", 2)]
# lab-a borrows 1 GPU, 4 CPUs, 16 GiB: 12 CPUs and 48 GiB stay free
BORROWED = [running(job("a-train", "lab-a", "dave", gpus=1, cpus=4, memory_gib=16), GPU_NODE, [0])]
PAIR = job("b-pair", "lab-b", "bob", gpus=2, cpus=8, memory_gib=32, submit=10)


def test_cpu_only_work_is_not_held_back_by_a_gpu_reservation():
    nb = job("nb", "lab-a", "alice", cpus=2, memory_gib=4, submit=20)
    gpu_job = job("g", "lab-a", "dave", gpus=1, cpus=1, memory_gib=1, submit=21)
    d = cycle(snapshot([GPU_NODE], LABS, BORROWED), [PAIR, nb, gpu_job], 20.0)
    assert placed(d) == {"nb": ("gpu", ())}
    assert d.pending["b-pair"].wait.node == "gpu"  # b-pair holds the node ...
    assert d.pending["g"].reason.startswith("waiting behind higher-priority work of lab-b")


@pytest.mark.parametrize(
    "cpus, memory_gib, admitted",
    [
        (4, 16, True),  # leaves 8 CPUs and 32 GiB: what b-pair asks for
        (5, 16, False),  # would leave 7 CPUs
        (4, 17, False),  # would leave 31 GiB
    ],
)
def test_cpu_only_work_leaves_the_cpus_and_memory_a_reservation_asks_for(
    cpus, memory_gib, admitted
):
    nb = job("nb", "lab-a", "alice", cpus=cpus, memory_gib=memory_gib, submit=20)
    d = cycle(snapshot([GPU_NODE], LABS, BORROWED), [PAIR, nb], 20.0)
    assert ("nb" in placed(d)) is admitted
    if not admitted:
        assert d.pending["nb"].reason == (
            "waiting behind higher-priority work of lab-b (b-pair holds a reservation on gpu, "
            "and the CPUs and memory this would use there are kept for it)"
        )


def test_cpu_only_work_prefers_a_free_node_to_a_held_one():
    cpu_node = node("cpu", gpus=0, cpus=8, memory_gib=32)
    nb = job("nb", "lab-a", "alice", cpus=2, memory_gib=4, submit=20)
    d = cycle(snapshot([GPU_NODE, cpu_node], LABS, BORROWED), [PAIR, nb], 20.0)
    assert placed(d) == {"nb": ("cpu", ())}
