"""examples/multi-node.yaml replayed: a gang holds the rack closest to fitting, work behind it
does not take the held nodes, and it starts on both nodes of that rack at once; without gang
reservations the later work takes the free node and the gang waits longer."""

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
    assert r.records["train"].first_start >= 3600
