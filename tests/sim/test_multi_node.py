"""examples/multi-node.yaml replayed: a gang holds the rack closest to fitting, work behind it
does not take the held nodes, and it starts on both nodes of that rack at once; without gang
reservations the later work takes the free node and the gang has to preempt it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from gpupool.sim.engine import simulate
from gpupool.sim.scenario import load_scenario

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "multi-node.yaml"


def test_the_gang_holds_its_rack_and_starts_there_at_once():
    r = simulate(load_scenario(EXAMPLE))
    train = r.records["train"]
    assert train.first_start == 1800  # when r2-0's short jobs end
    assert set(train.allocation.nodes) == {"r2-0", "r2-1"}
    assert r.records["more-0"].first_start == 3600  # not on the held r2-1 meanwhile


def test_without_gang_reservations_small_work_takes_the_free_node():
    scen = load_scenario(EXAMPLE)
    scen.config = dataclasses.replace(scen.config, gang_reservations=0)
    r = simulate(scen)
    assert r.records["more-0"].first_start == 120
    # the gang, within its guarantee, then preempts both 4-GPU jobs on r2-1 when r2-0 frees
    assert r.records["train"].first_start == 1800
    assert sum(r.records[f"more-{i}"].workload.preemptions for i in range(2)) == 2


def test_a_gang_within_its_guarantee_reclaims_borrowed_gpus_on_two_nodes():
    # with lab-b's first jobs preemptible, lab-a's 2 x 8 gang (guaranteed 16) takes lab-b's
    # borrowed GPUs back once it has waited reclaim_after_s (600 s from its submission at
    # 60 s), instead of waiting for r2-0 to free up at 1800 s
    scen = load_scenario(EXAMPLE)
    scen.workloads = [
        dataclasses.replace(sw, workload=dataclasses.replace(sw.workload, preemptible=True))
        for sw in scen.workloads
    ]
    r = simulate(scen)
    train = r.records["train"]
    assert train.first_start == 660
    assert r.preemptions >= 1 and train.workload.preemptions == 0
