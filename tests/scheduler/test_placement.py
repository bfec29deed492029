"""Placement: one node, best fit, model selectors, fractions only on shared GPUs, CPU/memory fit."""

import pytest

from gpupool.domain import Enforcement
from gpupool.scheduler import SchedulerConfig, cycle
from tests.scheduler.builders import GIB, job, node, placed, running, snapshot, tenant

T = [tenant("lab-a")]


def one(nodes, pending, run=(), config=SchedulerConfig()):
    return cycle(snapshot(nodes, T, run), pending, 0.0, config)


def test_multi_gpu_work_lands_on_one_node_or_not_at_all():
    # 4 + 4 free GPUs on two nodes, but no node has 6: nothing is admitted
    a, b = node("a", gpus=4), node("b", gpus=4)
    d = one([a, b], [job("j", gpus=6)])
    assert d.admissions == ()
    assert "j" in d.unschedulable  # no node has 6 GPUs at all
    d = one([node("a", gpus=8), b], [job("j", gpus=6)])
    ((nd, shares),) = placed(d).values()
    assert nd == "a" and len(shares) == 6


def test_best_fit_picks_the_node_with_the_fewest_free_gpus_that_suffice():
    a, b, c = node("a"), node("b"), node("c")
    holders = [
        running(job("x", gpus=6), a, range(6)),  # a: 2 free
        running(job("y", gpus=5), b, range(5)),  # b: 3 free
    ]
    d = one([a, b, c], [job("j", gpus=3)], holders)
    assert placed(d)["j"][0] == "b"  # c stays whole for an 8-GPU job
    d = one([a, b, c], [job("j", gpus=2)], holders)
    assert placed(d)["j"][0] == "a"


def test_gpu_model_selector():
    h, a = node("h", model="H100"), node("a", model="A100", gpu_gib=40)
    d = one([h, a], [job("j", gpus=1, model="A100")])
    assert placed(d)["j"][0] == "a"
    d = one([h, a], [job("j", gpus=1, model="H100")])
    assert placed(d)["j"][0] == "h"


def test_gpu_memory_is_a_minimum_per_whole_gpu():
    small, big = node("small", gpu_gib=24), node("big", gpu_gib=80)
    d = one([small, big], [job("j", gpus=1, gpu_gib=40)])
    assert placed(d)["j"][0] == "big"


def test_fractions_only_on_shared_gpus():
    ex = node("ex", gpus=2)
    d = one([ex], [job("f", fraction=0.5, gpu_gib=10)])
    assert d.admissions == () and "f" in d.unschedulable
    assert "shared" in d.unschedulable["f"]
    sh = node("sh", gpus=2, sharing="shared")
    d = one([ex, sh], [job("f", fraction=0.5, gpu_gib=10)])
    assert placed(d)["f"] == ("sh", ((0, 500),))


def test_fractions_pack_best_fit_so_whole_gpus_stay_whole():
    sh = node("sh", gpus=4, sharing="shared")
    run = [
        running(job("x"), sh, fraction=(0, 500, 40 * GIB)),  # GPU 0: 0.5 left
        running(job("y"), sh, fraction=(1, 750, 20 * GIB)),  # GPU 1: 0.25 left
    ]
    d = one([sh], [job("f", fraction=0.25, gpu_gib=10)], run)
    assert placed(d)["f"] == ("sh", ((1, 250),))  # the tightest fit, not a fresh GPU
    d = one([sh], [job("f", fraction=0.5, gpu_gib=10)], run)
    assert placed(d)["f"] == ("sh", ((0, 500),))
    d = one([sh], [job("f", fraction=0.5, gpu_gib=50)], run)
    assert placed(d)["f"] == ("sh", ((2, 500),))  # GPU 0 lacks memory: a whole one is used


def test_several_fractions_in_one_cycle_share_a_gpu():
    sh = node("sh", gpus=2, sharing="shared")
    pending = [job(f"f{i}", fraction=0.25, gpu_gib=10, submit=i) for i in range(4)]
    d = one([sh], pending)
    assert {s for _, s in placed(d).values()} == {((0, 250),)}


def test_whole_gpu_requests_leave_shared_gpus_for_fractions():
    sh = node("sh", gpus=4, sharing="shared")
    ex = node("ex", gpus=8)
    d = one([sh, ex], [job("j", gpus=4)])
    assert placed(d)["j"][0] == "ex"  # although sh would be the tighter fit
    # but a fully free shared GPU may be used whole when nothing else fits
    d = one([sh], [job("j", gpus=1)])
    assert placed(d)["j"] == ("sh", ((0, 1000),))


def test_enforcement_recorded_on_shares():
    sh = node("sh", gpus=2, sharing="shared")
    cfg = SchedulerConfig(shared_enforcement=Enforcement.MPS)
    d = one([sh], [job("f", fraction=0.5, gpu_gib=10), job("w", gpus=1, submit=1)], config=cfg)
    by = {a.workload_id: a.allocation.shares[0] for a in d.admissions}
    assert by["f"].enforcement is Enforcement.MPS and by["f"].memory_mib == 10 * GIB
    # a whole GPU bound by CUDA_VISIBLE_DEVICES alone is watched, not enforced by hardware
    assert by["w"].enforcement is Enforcement.POLICED
    assert by["w"].milli == 1000 and by["w"].memory_mib == 80 * GIB  # all of its memory


def test_only_mig_gpus_are_hardware_enforced():
    ex, mig = node("ex", gpus=1), node("mig", gpus=1, sharing="mig")
    d = one([ex, mig], [job("a", gpus=1), job("b", gpus=1, submit=1)])
    by = {a.allocation.node: a.allocation.shares[0].enforcement for a in d.admissions}
    assert by == {"ex": Enforcement.POLICED, "mig": Enforcement.HARDWARE}


def test_fraction_without_memory_gets_its_proportion():
    sh = node("sh", gpus=1, gpu_gib=40, sharing="shared")
    d = one([sh], [job("f", fraction=0.25)])
    assert d.admissions[0].allocation.shares[0].memory_mib == 10 * GIB


@pytest.mark.parametrize(
    "cpus, memory_gib, where",
    [(8, 64, "small"), (32, 64, "big"), (8, 300, "big"), (100, 64, None)],
)
def test_cpus_and_memory_must_fit_too(cpus, memory_gib, where):
    small = node("small", gpus=2, cpus=16, memory_gib=128)
    big = node("big", gpus=8, cpus=64, memory_gib=512)
    d = one([small, big], [job("j", gpus=1, cpus=cpus, memory_gib=memory_gib)])
    got = placed(d).get("j", (None,))[0]
    assert got == where


def test_cpu_of_running_work_counts():
    n = node("n", gpus=8, cpus=16)
    d = one([n], [job("j", gpus=1, cpus=8)], [running(job("x", gpus=1, cpus=12), n, [0])])
    assert d.admissions == ()
    assert "CPU" in d.pending["j"].reason


def test_down_nodes_and_unhealthy_gpus_are_not_used():
    down = node("down", state="down")
    d = one([down], [job("j", gpus=1)])
    assert d.admissions == () and "j" in d.pending  # may come back: waits, not failed


def test_cpu_only_work_prefers_nodes_without_gpus():
    d = one([node("g", gpus=2), node("c", gpus=0)], [job("j", cpus=2)])
    assert placed(d)["j"] == ("c", ())


def test_admissions_in_one_cycle_never_overlap():
    n = node("n", gpus=8)
    pending = [job(f"j{i}", gpus=3, submit=i) for i in range(3)]
    d = one([n], pending)
    used = [s[0] for _, shares in placed(d).values() for s in shares]
    assert len(used) == 6 and len(set(used)) == 6
    assert d.pending["j2"].reason.startswith("no node has 3 free GPUs on one host; the most is 2")
