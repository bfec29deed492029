"""Node pools on Slurm's power saving, on the real Slurm (issue 34 part 3): two slurmd on this
host, the second defined ``State=CLOUD Features=gpupool-pool:cloud`` with a ResumeProgram
that starts its slurmd and a SuspendProgram that stops it (start_slurm with
GPUPOOL_TEST_SLURM_NODES=2 GPUPOOL_TEST_SLURM_CLOUD=1; SuspendTime 10 s).

A 1-GPU job for the pool waits (no node of the pool is up), gpupool's autoscale loop asks
Slurm to power the node up, the ResumeProgram runs (its log is the proof), the node joins
gpupool's inventory, the job runs there (Slurm's sacct says where), and after SuspendTime
idle Slurm powers it down again (the SuspendProgram's log); gpupool's view of the pool shows
each state. The times are printed (pytest -s) for docs/slurm.md."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gpupool.domain.nodepools import POOL_LABEL, NodePool, PoolNodeState, RequestState
from gpupool.server.loops.autoscale import AutoscaleLoop
from gpupool.server.loops.inventory import InventoryLoop
from gpupool.store import NodePoolRepo, NodeRepo
from tests.slurm.conftest import sacct, sh
from tests.support import wait_for

pytestmark = pytest.mark.slurm


def _power_dir() -> Path:
    d = os.environ.get("GPUPOOL_TEST_SLURM_POWER")
    if not d:
        pytest.skip(
            "no cloud node: start_slurm with GPUPOOL_TEST_SLURM_NODES=2 GPUPOOL_TEST_SLURM_CLOUD=1"
        )
    return Path(d)


def _cloud_node() -> str:
    for line in sh("sinfo", "-h", "-N", "-o", "%N %f").splitlines():
        name, _, features = line.partition(" ")
        if "gpupool-pool:cloud" in features:
            return name
    raise AssertionError("no node with feature gpupool-pool:cloud in sinfo")


def _lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_a_job_wakes_a_cloud_node_runs_there_and_the_node_powers_down_after(make_world):
    power = _power_dir()
    w = make_world()
    node = _cloud_node()
    pool = NodePool(
        "cloud",
        gpus=4,
        gpu_model="fake",
        cpu_milli=(os.cpu_count() or 1) * 1000,
        memory_mib=1000,
        engine="slurm",
        max_nodes=1,
        boot_seconds=30,
        idle_seconds=3600,  # Slurm's SuspendTime (10 s) powers it down first
        request_timeout_seconds=300,
    )
    with w.ctx.store.write() as s:
        NodePoolRepo(s).save(pool, create=True)
    inventory, autoscale = w.ctx.loops.get("inventory"), w.ctx.loops.get("autoscale")
    assert isinstance(inventory, InventoryLoop) and isinstance(autoscale, AutoscaleLoop)

    def pool_state() -> PoolNodeState | None:
        autoscale.run_once()
        with w.ctx.store.read() as s:
            return {n.name: n.state for n in NodePoolRepo(s).nodes("cloud")}.get(node)

    def read_inventory() -> None:
        w.clock.advance(inventory.every)  # due now
        assert node in inventory.run_once()

    def gpupool_node() -> tuple[str, dict[str, str]]:
        with w.ctx.store.read() as s:
            n = NodeRepo(s).get(node)
        return str(n.state), n.label_map

    # powered down at the start: gpupool sees it, in its pool, down (nothing placed there)
    read_inventory()
    assert pool_state() is PoolNodeState.POWERED_DOWN
    state, labels = gpupool_node()
    assert state == "down" and labels[POOL_LABEL] == "cloud", (state, labels)
    assert labels["slurm.power"] == "powered_down"
    resumed, suspended = (_lines(power / f).count(node) for f in ("resumed", "suspended"))

    t0 = time.monotonic()
    wid = w.submit("slbob", gpus=1, node_labels={POOL_LABEL: "cloud"}, command=["hostname"])["id"]
    w.schedule()
    got = w.get("slbob", wid)
    assert got["state"] == "pending"
    why = (got.get("pending") or {}).get("reason") or ""
    assert why.startswith("waiting for a node of pool cloud"), why

    # the autoscale loop asks Slurm for the node: its ResumeProgram runs, the node comes up
    autoscale.run_once()
    with w.ctx.store.read() as s:
        (req,) = NodePoolRepo(s).requests()
    assert req.pool == "cloud" and req.for_workloads == (wid,)
    woken = lambda: _lines(power / "resumed").count(node) > resumed  # noqa: E731
    wait_for(woken, "Slurm's ResumeProgram", timeout=30)
    wait_for(lambda: pool_state() is PoolNodeState.UP, f"{node} up", timeout=60)
    t_up = time.monotonic() - t0
    with w.ctx.store.read() as s:
        (req,) = NodePoolRepo(s).requests(open_only=False)
    assert req.state is RequestState.FULFILLED

    # it joins the inventory, gpupool places the job there
    read_inventory()
    assert gpupool_node()[0] == "ready"
    w.schedule()
    got = w.get("slbob", wid)
    assert got["allocation"]["nodes"] == [node], got
    done = w.settle(wid, {"succeeded", "failed", "lost"}, user="slbob")
    t_done = time.monotonic() - t0
    assert done["state"] == "succeeded", done
    assert sacct(w.job_id(wid))["nodes"] == node

    # idle for SuspendTime: Slurm's SuspendProgram powers it down, gpupool sees it go
    slept = lambda: _lines(power / "suspended").count(node) > suspended  # noqa: E731
    wait_for(slept, "Slurm's SuspendProgram", timeout=60)
    wait_for(lambda: pool_state() is PoolNodeState.POWERED_DOWN, f"{node} down", timeout=30)
    t_down = time.monotonic() - t0
    read_inventory()
    assert gpupool_node()[0] == "down"
    assert _lines(power / "resumed").count(node) == resumed + 1  # once: gpupool's request
    print(
        f"\nslurm power saving: submit -> node up {t_up:.1f} s, -> job done {t_done:.1f} s, "
        f"-> node powered down again {t_down:.1f} s"
    )
