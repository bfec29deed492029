"""Energy for chargeback (issue 35 part 3): the GPUs' energy counters, read by a real sampler
over simulated GPUs, split between the holders by share, written per workload and UTC day,
and summed by the chargeback report."""

from __future__ import annotations

import time

import pytest

from gpupool.domain import Allocation, Share
from gpupool.server.loops.energy import EnergyLoop
from gpupool.telemetry.sampler import Sampler
from gpupool.telemetry.simulated import SimulatedSource


def test_energy_is_apportioned_by_share_and_summed_in_the_chargeback(world):
    src = SimulatedSource("2xH100", world.clock, hostname="sim")
    whole = world.submit(gpus=1)["id"]  # ann (lab): GPU 0 whole
    half = world.submit("outsider", tenant="other", gpus=1)["id"]  # otto: half of GPU 1
    since = world.clock.now()
    allocs = [
        Allocation(whole, "sim", (Share("sim", 0, src.uuid(0), 1000, 1024),), since),
        Allocation(half, "sim", (Share("sim", 1, src.uuid(1), 500, 1024),), since),
    ]
    sampler = Sampler(src, world.clock, allocations=lambda: allocs)
    loop = EnergyLoop(world.ctx, [sampler])
    src.set_utilization(0, 100.0)
    src.set_utilization(1, 50.0)
    first = sampler.sample_once().snapshot
    world.clock.advance(600)
    last = sampler.sample_once().snapshot
    assert loop.run_once() == 2

    def joules(i: int) -> float:
        return (last.gpus[i].energy_mj - first.gpus[i].energy_mj) / 1000

    assert joules(0) > 0 and joules(1) > 0
    from gpupool.store import EnergyRepo, UsageRepo

    with world.ctx.store.read() as s:
        got = {w: j for w, _, _, j in EnergyRepo(s).rows()}
    assert got[whole] == pytest.approx(joules(0))
    assert got[half] == pytest.approx(joules(1) / 2)  # half the GPU: half its energy
    day = time.strftime("%Y-%m-%d", time.gmtime(world.clock.now()))
    with world.ctx.store.write() as s:  # their GPU-hours, as the accounting loop writes them
        for wid, tenant, user in ((whole, "lab", "ann"), (half, "other", "otto")):
            UsageRepo(s).add(
                workload_id=wid, tenant=tenant, user=user, day=day, gpu_seconds_allocated=600
            )
    rep = world.get("admin", "/usage/chargeback?by=user").json()
    kwh = {r["key"]: r["energy_kwh"] for r in rep["rows"]}
    assert kwh["ann"] == pytest.approx(joules(0) / 3.6e6)
    assert kwh["otto"] == pytest.approx(joules(1) / 2 / 3.6e6)
    assert rep["total"]["energy_kwh"] == pytest.approx(kwh["ann"] + kwh["otto"])
    csv = world.get("admin", "/usage/chargeback?by=tenant&format=csv").text
    assert "n/a" not in csv
