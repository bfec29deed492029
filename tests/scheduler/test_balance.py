"""Balanced placement (gpupool.scheduler.balance): among placements tied on GPU fit, the one
that strands the fewest GPUs."""

from gpupool.scheduler import cycle
from gpupool.scheduler.buckets import BucketIndex
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


def test_find_min_scores_the_first_passing_items_of_the_best_bucket_deterministically():
    idx = BucketIndex()
    for item, key in [(5, 1), (3, 1), (9, 1), (1, 2), (7, 1)]:
        idx.set(item, key)
    score = {3: 0.5, 5: 0.1, 7: 0.0, 9: 0.2}
    assert idx.find_min(1, lambda i: True, lambda i, k: score[i], limit=10) == (7, 1)
    assert idx.find_min(1, lambda i: True, lambda i, k: score[i], limit=2) == (5, 1)  # 3, 5
    assert idx.find_min(1, lambda i: i != 5, lambda i, k: score[i], limit=2) == (7, 1)  # 3, 7
    assert idx.find_min(1, lambda i: i == 1, lambda i, k: 0.0) == (1, 2)
    assert idx.find_min(1, lambda i: False, lambda i, k: 0.0) is None
    # the same items under the same keys, filed in another order and with stale entries
    other = BucketIndex()
    for item, key in [(7, 2), (9, 1), (7, 1), (1, 2), (5, 1), (3, 1)]:
        other.set(item, key)
    assert other.find_min(1, lambda i: True, lambda i, k: score[i], limit=2) == (5, 1)
    # more items than 4 * limit fail: the lowest passing id further on, as find()
    many = BucketIndex()
    for i in range(100):
        many.set(i, 0)
    assert many.find_min(0, lambda i: i >= 50, lambda i, k: 0.0, limit=2) == (50, 0)
