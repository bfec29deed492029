"""GPUs used outside gpupool: taken (nothing placed there, not in the capacity), healthy, and
named in the reasons of the work that waits for them."""

from __future__ import annotations

import dataclasses

import pytest

from gpupool.domain import GPU, GPUHealth, Node, OutsideUse, ValidationError
from gpupool.domain.resources import Capacity
from gpupool.scheduler import cycle
from gpupool.scheduler.cache import SchedulerCache
from tests.scheduler.builders import job, node, placed, running, snapshot, tenant

SLURM = OutsideUse("slurm job 4711", "bob", since=100.0)


def outside(n: Node, *indexes: int, use: OutsideUse = SLURM) -> Node:
    gpus = tuple(dataclasses.replace(g, outside=use) if g.index in indexes else g for g in n.gpus)
    return dataclasses.replace(n, gpus=gpus)


def test_an_outside_gpu_is_healthy_but_not_schedulable():
    g = GPU(0, "u0", "H100", 81920, outside=SLURM)
    assert g.health is GPUHealth.HEALTHY and not g.schedulable
    assert SLURM.text == "slurm job 4711 (bob)"
    assert OutsideUse("pod team-x/train-0").text == "pod team-x/train-0"
    with pytest.raises(ValidationError):
        OutsideUse("")


def test_capacity_leaves_out_gpus_used_outside_gpupool():
    n = outside(node("a", gpus=4), 2, 3)
    assert Capacity.of([n]).gpu_milli == 2000


def test_nothing_is_placed_on_an_outside_gpu():
    n = outside(node("a", gpus=4), 0, 1)
    d = cycle(snapshot([n], [tenant("lab-a")]), [job("j", gpus=2)], 0.0)
    assert placed(d)["j"] == ("a", ((2, 1000), (3, 1000)))


def test_the_reason_names_who_holds_the_gpus_outside_gpupool():
    n = outside(node("node-a", gpus=4), 2)
    d = cycle(snapshot([n], [tenant("lab-a")]), [job("j", gpus=4)], 0.0)
    assert d.pending["j"].reason == (
        "no node has 4 free GPUs on one host; the most is 3; "
        "GPU 2 on node-a is used outside gpupool by slurm job 4711 (bob)"
    )


def test_many_outside_gpus_are_summed_up_after_two():
    n = outside(node("node-a", gpus=4), 0, 1, 2, 3)
    d = cycle(snapshot([n], [tenant("lab-a")]), [job("j", gpus=1)], 0.0)
    assert d.pending["j"].reason.endswith(
        "; GPU 0 on node-a is used outside gpupool by slurm job 4711 (bob)"
        "; GPU 1 on node-a is used outside gpupool by slurm job 4711 (bob)"
        "; 2 more GPUs are used outside gpupool"
    )


def test_outside_gpus_of_another_model_are_not_named():
    a = outside(node("a", gpus=2, model="A100"), 0, 1)
    h = node("h", gpus=2, model="H100")
    run = [running(job("x", gpus=1), h, [0])]
    d = cycle(snapshot([a, h], [tenant("lab-a")], run), [job("j", gpus=2, model="H100")], 0.0)
    assert d.pending["j"].reason == "no node has 2 free H100 GPUs on one host; the most is 1"


def test_a_kept_cache_learns_a_gpu_went_outside_and_came_back():
    cache = SchedulerCache()
    free = node("a", gpus=2)
    t = [tenant("lab-a")]
    d = cycle(snapshot([free], t), [job("j", gpus=2)], 0.0, cache=cache)
    assert "j" in placed(d)
    taken = outside(free, 1)
    d = cycle(snapshot([taken], t), [job("k", gpus=2)], 1.0, cache=cache)
    assert "k" not in placed(d)
    assert "GPU 1 on a is used outside gpupool by slurm job 4711 (bob)" in d.pending["k"].reason
    d = cycle(snapshot([free], t), [job("k", gpus=2)], 2.0, cache=cache)
    assert "k" in placed(d)
