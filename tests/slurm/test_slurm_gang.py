"""A multi-node job on a real Slurm of two nodes (two slurmd on this host: Debian's Slurm is
built with multiple-slurmd; start_slurm with GPUPOOL_TEST_SLURM_NODES=2). Slurm's own view
(`sacct`) and the job's output are the truth: one job on the two nodes gpupool chose, GPUs
per node, the command once per node with its rank, the state of the whole job."""

from __future__ import annotations

import pytest

from tests.slurm.conftest import sacct, sh

pytestmark = pytest.mark.slurm


def _idle_nodes() -> list[str]:
    return [n for n in sh("sinfo", "-h", "-N", "-o", "%N %t").split("\n") if n.endswith(" idle")]


def test_a_gang_runs_once_per_node_on_the_nodes_gpupool_chose(make_world):
    w = make_world()
    if len(_idle_nodes()) < 2:
        pytest.skip("one Slurm node: start_slurm with GPUPOOL_TEST_SLURM_NODES=2 for this test")
    cmd = 'echo "rank=$NODE_RANK of=$NNODES world=$WORLD_SIZE on=$SLURMD_NODENAME m=$MASTER_ADDR"'
    wid = w.submit("slbob", nodes=2, gpus_per_node=2, command=["sh", "-c", cmd])["id"]
    w.schedule()
    got = w.get("slbob", wid)
    chosen = got["allocation"]["nodes"]
    assert len(chosen) == 2
    done = w.settle(wid, {"succeeded", "failed", "lost"}, user="slbob")
    assert done["state"] == "succeeded", done
    job = sacct(w.job_id(wid))
    # Slurm's node list of the job: the two nodes gpupool chose
    assert set(sh("scontrol", "show", "hostnames", job["nodes"]).split()) == set(chosen)
    gres = [t for t in job["tres"]["allocated"] if t["type"] == "gres" and t["name"] == "gpu"]
    assert gres and gres[0]["count"] == 4  # 2 per node
    lines = sorted(x for x in w.engine.executor.logs(wid).splitlines() if x.startswith("rank="))
    assert len(lines) == 2, lines
    ons = set()
    for rank, line in enumerate(lines):
        f = dict(kv.split("=", 1) for kv in line.split())
        assert f["rank"] == str(rank) and f["of"] == "2" and f["world"] == "4", line
        ons.add(f["on"])
        assert f["m"] in chosen
    assert ons == set(chosen)
