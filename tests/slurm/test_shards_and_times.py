"""Fractional GPUs as gres/shard, Slurm's own run times, Slurm job ids -> workloads, and the
prune of old output, over the scripted Slurm of test_executor_logic (no Slurm needed). The
real-Slurm tests check the same end to end."""

from __future__ import annotations

import os

import pytest

from gpupool.domain import Allocation, Enforcement, Request, Share, Workload
from gpupool.engines.common.executor import StartError
from gpupool.engines.slurm.inventory import to_node, with_shards
from gpupool.engines.slurm.shards import parse_shards, shards_for
from tests.slurm.test_executor_logic import make, start


def frac(ex, wid: str = "f-1", milli: int = 250, node: str = "n1") -> None:  # noqa: ANN001
    share = Share(node, 3, f"slurm-{node}-gpu3", milli, 4096, Enforcement.POLICED)
    w = Workload(wid, "lab", "ann", Request(gpu_milli=milli), command=("python", "t.py"))
    ex.start(w, Allocation(wid, node, (share,), since=0.0))


def test_shards_are_read_from_sinfos_gres():
    assert parse_shards("gpu:fake:4,shard:fake:16(S:0)") == 16
    assert parse_shards("gpu:a100:4") == 0
    raw = {"name": "n1", "gres": "gpu:fake:4,shard:fake:16", "cpus": 8, "real_memory": 1000}
    node, per_gpu = with_shards(to_node(raw, 16384), raw)
    assert per_gpu == 4 and ("slurm.shards-per-gpu", "4") in node.labels
    plain = {"name": "n2", "gres": "gpu:fake:4", "cpus": 8, "real_memory": 1000}
    assert with_shards(to_node(plain, 16384), plain)[1] == 0


def test_fractions_round_up_to_whole_shards():
    assert shards_for(250, 4) == 1 and shards_for(500, 4) == 2
    assert shards_for(300, 4) == 2  # never less than gpupool allocated
    assert shards_for(1, 4) == 1 and shards_for(999, 4) == 4


def test_a_fraction_is_submitted_as_shards_and_labelled_unenforced(tmp_path):
    slurm, _, ex = make(tmp_path)
    ex.shards_per_gpu["n1"] = 4
    frac(ex, milli=500)
    (sbatch,) = [c for c in slurm.calls if c[0] == "sbatch"]
    assert "--gres=shard:2" in sbatch and not any(a.startswith("--gres=gpu") for a in sbatch)
    # Slurm only counts shards: never claim more than `none`
    assert ex.enforcement_of("f-1") == {"slurm-n1-gpu3": Enforcement.NONE}
    start(ex, "w-2", gpus=1)
    # whole GPUs: nothing polices them on Slurm unless its cgroups constrain devices
    assert ex.enforcement_of("w-2") == {"slurm-n1-gpu0": Enforcement.NONE}


def test_a_fraction_on_a_node_without_shards_is_refused_saying_what_to_do(tmp_path):
    slurm, _, ex = make(tmp_path)
    with pytest.raises(StartError) as e:
        frac(ex)
    assert e.value.permanent and "gres/shard" in str(e.value) and "whole GPUs" in str(e.value)
    assert not [c for c in slurm.calls if c[0] == "sbatch"]


def test_run_times_are_slurms_not_when_gpupool_noticed(tmp_path):
    slurm, clock, ex = make(tmp_path)
    start(ex, "w-1", gpus=1)
    assert ex.run_times("w-1") == (None, None)  # pending in Slurm: not started
    slurm.set("w-1", job_state="RUNNING", start_time=1_234)
    ex.poll("w-1")
    assert ex.run_times("w-1") == (1234.0, None)
    clock.advance(500)
    slurm.set("w-1", job_state="COMPLETED", exit_code=0, end_time=1_300)
    ex.poll("w-1")
    assert ex.run_times("w-1") == (1234.0, 1300.0)


def test_slurm_job_ids_map_to_workloads_and_other_jobs_to_none(tmp_path):
    slurm, _, ex = make(tmp_path)
    start(ex, "w-1", gpus=1)
    slurm.jobs["other"] = {"job_id": 7, "name": "not-gpupool", "job_state": "RUNNING"}
    ex.refresh()
    mine = ex._jobs["w-1"].job_id
    jobs = ex.owners("slurm-job", [mine, "7", "8"])
    assert jobs == {mine: "w-1", "7": None}  # job 8: unknown, left out
    assert ex.owners("pod", [mine]) == {}  # a kind it runs none of


def test_prune_removes_old_output_of_ended_jobs_only(tmp_path):
    slurm, clock, ex = make(tmp_path)
    start(ex, "old", gpus=1)
    start(ex, "live", gpus=1)
    slurm.set("old", job_state="COMPLETED", exit_code=0)
    slurm.set("live", job_state="RUNNING", start_time=900)
    day = 86400
    for wid in ("old", "live"):
        os.utime(ex.output_dir / f"{wid}.out", (clock.now() - 31 * day,) * 2)
    (ex.output_dir / "recent.out").touch()
    os.utime(ex.output_dir / "recent.out", (clock.now() - day,) * 2)
    assert ex.prune(30 * day) == ["old"]
    assert not (ex.output_dir / "old.out").exists()
    assert (ex.output_dir / "live.out").exists() and (ex.output_dir / "recent.out").exists()
    assert "old" not in ex._jobs
