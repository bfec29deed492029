"""Fragmentation-aware placement (gpupool.scheduler.fragmentation): where CPUs or memory can
strand GPUs, work goes where it leaves the most free GPU usable by the work that runs."""

from gpupool.scheduler import cycle
from gpupool.scheduler.capacity import CapacityIndex
from gpupool.scheduler.fragmentation import _whole_growth, fragmentation, growth, out_of_step
from gpupool.scheduler.mix import ShapeMix, class_key
from tests.scheduler.builders import job, node, running, snapshot, tenant

T = [tenant("lab-a")]
GIB = 1024


def placed(d, wid):
    return next(a.allocation for a in d.admissions if a.workload_id == wid)


def _cpu_hungry_cluster():
    """`rich`: 2 GPUs and 64 CPUs, one GPU taken by a 1-CPU job; `poor`: 2 GPUs, 8 CPUs;
    `busy`: runs the typical work, halves of a GPU asking 12 CPUs each (24 per GPU)."""
    rich = node("a-rich", gpus=2, cpus=64, sharing="shared")
    poor = node("b-poor", gpus=2, cpus=8, sharing="shared")
    busy = node("c-busy", gpus=4, cpus=128, sharing="shared")
    run = [running(job("r0", gpus=1, cpus=1), rich, [0])]
    run += [
        running(job(f"f{i}", fraction=0.5, cpus=12), busy, fraction=(i // 2, 500, 40 * GIB))
        for i in range(6)
    ]
    return [rich, poor, busy], run


def test_a_gpu_job_with_few_cpus_goes_where_cpus_are_scarce():
    # Best fit alone takes the last GPU of a-rich (the fewest whole free GPUs), leaving its
    # 63 CPUs without a GPU, while b-poor's 8 CPUs can feed only a third of a GPU of the
    # typical work (24 CPUs per GPU): 1.7 of its GPUs unusable. On b-poor the job uses a GPU
    # that the typical work could not, and a-rich keeps a GPU with the CPUs to run it.
    nodes, run = _cpu_hungry_cluster()
    d = cycle(snapshot(nodes, T, run), [job("w", gpus=1, cpus=2)], 0.0)
    assert placed(d, "w").node == "b-poor"


def test_cpu_hungry_work_goes_where_the_cpus_are():
    nodes, run = _cpu_hungry_cluster()
    d = cycle(snapshot(nodes, T, run), [job("w", fraction=0.5, cpus=12)], 0.0)
    assert placed(d, "w").node in ("a-rich", "c-busy")  # b-poor has 8 CPUs: not even a fit
    d = cycle(snapshot(nodes, T, run), [job("w", fraction=0.25, cpus=6)], 0.0)
    assert placed(d, "w").node != "b-poor"  # would leave 2 CPUs beside 1.75 free GPUs


def test_where_cpus_never_strand_gpus_best_fit_decides_as_before():
    # every node has 64 CPUs per GPU, more than any running work asks: the scoring is off
    # and the whole-GPU job takes the node with the fewest whole free GPUs that suffice
    a = node("a", gpus=2, cpus=128, sharing="shared")
    b = node("b", gpus=2, cpus=128, sharing="shared")
    run = [running(job("r0", gpus=1, cpus=4), b, [0])]
    d = cycle(snapshot([a, b], T, run), [job("w", gpus=1, cpus=2)], 0.0)
    assert placed(d, "w").node == "b"
    cap = CapacityIndex(tuple([a, b]), tuple(run))
    assert cap.mix.classes() and not cap.mix.active(cap)


def test_the_mix_follows_the_running_work_and_forgets_what_ended():
    mix = ShapeMix()
    k = class_key([(0, 1000, 80 * GIB)], 8000, 64 * GIB, 1000)
    f = class_key([(1, 250, 20 * GIB)], 4000, 16 * GIB, 250)
    assert k != f and class_key([], 4000, GIB, 0) == ()
    mix.add(k, 1000, 8000, 64 * GIB, 1)
    mix.add(f, 250, 4000, 16 * GIB, 1)
    assert [round(c[0], 2) for c in mix.classes()] == [0.8, 0.2]  # weighted by GPUs held
    assert mix.classes()[1][1:3] == (0, 250) and mix.classes()[1][3] == 16.0  # CPU per milli
    mix.add(k, 1000, 8000, 64 * GIB, -1)
    mix.add(f, 250, 4000, 16 * GIB, -1)
    assert mix.classes() == ()


def test_fragmentation_counts_gpus_the_cpus_cannot_feed():
    whole_8cpu = ((1.0, 1, 0, 8.0, 0.0),)  # 1-GPU work asking 8 CPUs per GPU
    assert fragmentation(whole_8cpu, [1000, 1000], 2, 16000, 0) == 0.0
    assert fragmentation(whole_8cpu, [1000, 1000], 2, 8000, 0) == 1000.0
    assert fragmentation(whole_8cpu, [1000, 500], 1, 64000, 0) == 500.0  # half a GPU
    halves = ((1.0, 0, 500, 0.0, 0.0),)
    assert fragmentation(halves, [1000, 400], 1, 0, 0) == 400.0


def test_remembered_fragmentation_is_the_fragmentation_of_the_node_state():
    # the memo (kept for a cycle's mix) answers what a fresh computation answers, whole GPUs
    # read from the index's counts or partly used GPUs listed one by one
    nodes, run = _cpu_hungry_cluster()
    cap = CapacityIndex(tuple(nodes), tuple(run))
    mix = cap.mix.active(cap)
    assert mix
    memo: dict = {}
    for n in range(len(nodes)):
        for count in (1, 2):
            if cap.node_whole_free[n] >= count:
                first = _whole_growth(cap, n, mix, count, 2000, GIB, memo)
                assert first == _whole_growth(cap, n, mix, count, 2000, GIB, memo)
                assert first == _whole_growth(cap, n, mix, count, 2000, GIB, {})
        for g in cap.node_gpus[n]:
            if cap.free_milli[g] >= 250:
                take = ((g, 250, GIB),)
                assert growth(cap, n, mix, take, 6000, GIB, memo) == growth(
                    cap, n, mix, take, 6000, GIB
                )


def _lean_and_rich():
    """`a-lean`: 2 GPUs, 16 CPUs; `b-rich`: 2 GPUs, 104 CPUs; on each half a GPU is taken
    with 6 CPUs; `c-busy` runs whole GPUs with 4 CPUs each."""
    lean = node("a-lean", gpus=2, cpus=16, sharing="shared")
    rich = node("b-rich", gpus=2, cpus=104, sharing="shared")
    busy = node("c-busy", gpus=4, cpus=64, sharing="shared")
    run = [
        running(job("l0", fraction=0.5, cpus=6), lean, fraction=(0, 500, 8 * GIB)),
        running(job("r0", fraction=0.5, cpus=6), rich, fraction=(0, 500, 8 * GIB)),
    ]
    run += [running(job(f"g{i}", gpus=1, cpus=4), busy, [i]) for i in range(4)]
    return [lean, rich, busy], run


def test_a_cpu_hungry_fraction_leaves_the_node_whose_cpus_would_run_out_first():
    # A tenth of a GPU with 4 CPUs strands no GPU on a-lean by itself (growth ties, and the
    # old order took a-lean, the first), but leaves it 1.4 free GPUs beside 6 CPUs: GPUs
    # that CPU-hungry work cannot use. b-rich has CPUs to spare (issue 32, packing).
    nodes, run = _lean_and_rich()
    d = cycle(snapshot(nodes, T, run), [job("w", fraction=0.1, cpus=4)], 0.0)
    assert placed(d, "w").node == "b-rich"


def test_out_of_step_weighs_gpus_left_without_cpus_above_cpus_left_without_gpus():
    nodes, run = _lean_and_rich()
    cap = CapacityIndex(tuple(nodes), tuple(run))
    lean, rich = cap.node_ids["a-lean"], cap.node_ids["b-rich"]
    assert out_of_step(cap, lean, 100, 4000, 1024) > 0  # its GPUs get ahead of its CPUs
    assert out_of_step(cap, rich, 100, 4000, 1024) < out_of_step(cap, lean, 100, 4000, 1024)
    assert out_of_step(cap, rich, 0, 0, 0) == 0.0
