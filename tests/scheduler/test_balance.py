"""Balanced placement (gpupool.scheduler.balance): among placements tied on GPU fit, the one
that strands the fewest GPUs."""

from gpupool.scheduler import cycle
from tests.scheduler.builders import job, node, running, snapshot, tenant

T = [tenant("lab-a")]


def placed(d, wid):
    return next(a.allocation for a in d.admissions if a.workload_id == wid)


def test_a_fraction_opens_a_fresh_gpu_on_a_node_in_use_not_on_an_empty_one():
    empty = node("a-empty", gpus=4, sharing="shared")
    used = node("b-used", gpus=4, sharing="shared")
    run = [running(job("r", gpus=1), used, [0])]
    d = cycle(snapshot([empty, used], T, run), [job("f", fraction=0.5)], 0.0)
    assert placed(d, "f").node == "b-used"  # a-empty (lower id) stays whole for whole GPUs


def test_whole_gpus_go_where_cpus_stay_in_step_with_gpus():
    # both nodes have 4 whole free GPUs; on "a" most CPUs are taken, so its GPUs can only
    # serve work that asks for few CPUs: a 1-GPU job with few CPUs goes there, and "b"
    # keeps its CPUs for GPU work that needs them
    a = node("a", gpus=8, cpus=64)
    b = node("b", gpus=8, cpus=64)
    run = [
        running(job("ra", gpus=4, cpus=56), a, [0, 1, 2, 3]),
        running(job("rb", gpus=4, cpus=8), b, [0, 1, 2, 3]),
    ]
    d = cycle(snapshot([a, b], T, run), [job("w", gpus=1, cpus=2)], 0.0)
    assert placed(d, "w").node == "a"  # a: 3/8 GPUs vs 6/64 CPUs free; b: 3/8 vs 54/64
    d = cycle(snapshot([a, b], T, run), [job("w", gpus=1, cpus=30)], 0.0)
    assert placed(d, "w").node == "b"  # a has not the CPUs


def test_cpu_only_work_goes_where_it_strands_the_fewest_gpus():
    full = node("a-full", gpus=2, cpus=32)
    idle = node("b-idle", gpus=2, cpus=32)
    run = [running(job("r", gpus=2, cpus=2), full, [0, 1])]
    d = cycle(snapshot([full, idle], T, run), [job("c", cpus=16)], 0.0)
    assert placed(d, "c").node == "a-full"  # its GPUs are taken anyway


# -- tied candidates are compared across the whole bucket, not only its lowest ids ---------


def test_a_fraction_finds_the_nodes_in_use_behind_40_empty_nodes_registered_before_them():
    # the 40 empty nodes come first (lowest ids); a fraction that opens a fresh GPU still
    # goes to a node in use, so the empty ones stay whole. Comparing only the lowest ids
    # (the first 64 GPUs: 8 empty nodes) sent it to an empty node.
    empties = [node(f"a-{i:02d}", gpus=8, cpus=96, sharing="shared") for i in range(40)]
    used = [node(f"z-{i:02d}", gpus=8, cpus=96, sharing="shared") for i in range(40)]
    run = [running(job(f"r{i}", gpus=1), n, [0]) for i, n in enumerate(used)]
    d = cycle(snapshot([*empties, *used], T, run), [job("f", fraction=0.5)], 0.0)
    assert placed(d, "f").node.startswith("z-")


def test_whole_gpus_find_the_best_balanced_nodes_behind_70_others():
    # 70 nodes with many CPUs per GPU first, 10 with fewer last: a 1-GPU job that asks for
    # few CPUs goes to one of the last (its free GPU and CPU shares stay closest), keeping
    # the CPU-rich nodes for work that needs their CPUs
    rich = [node(f"a-{i:02d}", gpus=8, cpus=96) for i in range(70)]
    lean = [node(f"z-{i:02d}", gpus=8, cpus=64) for i in range(10)]
    d = cycle(snapshot([*rich, *lean], T, []), [job("w", gpus=1, cpus=2)], 0.0)
    assert placed(d, "w").node.startswith("z-")  # a-*: 7/8 vs 94/96 free; z-*: 7/8 vs 62/64
