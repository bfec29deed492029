"""MIG on Slurm: instances are GRES types named by profile; gpupool reads them into GPUs in
`mig` mode with a layout, and asks for one instance as `--gres=gpu:<type>:1` (scripted
Slurm, no daemons)."""

from __future__ import annotations

from gpupool.domain import Allocation, Request, Share, SharingMode, Workload
from gpupool.engines.slurm.inventory import to_node
from tests.slurm.test_executor_logic import make


def _node(gres: str):
    return to_node({"name": "n1", "gres": gres, "cpus": 8, "real_memory": 1000}, 81920)


def test_mig_gres_types_become_gpus_with_layouts():
    n = _node("gpu:h100:1,gpu:nvidia_h100_80gb_hbm3_1g.10gb:14")
    assert [(g.sharing, g.mig_layout) for g in n.gpus] == [
        (SharingMode.EXCLUSIVE, None),
        (SharingMode.MIG, "1g.10gb:7"),
        (SharingMode.MIG, "1g.10gb:7"),
    ]
    assert n.gpus[1].model == "nvidia_h100_80gb_hbm3"


def test_counts_that_do_not_split_evenly_give_one_gpu_per_instance():
    n = _node("gpu:nvidia_h100_80gb_hbm3_3g.40gb:2,gpu:nvidia_h100_80gb_hbm3_1g.10gb:1")
    assert sorted(g.mig_layout for g in n.gpus) == ["1g.10gb:1", "3g.40gb:1", "3g.40gb:1"]


def _start_mig(ex, model: str) -> list[str]:
    share = Share("n1", 1, "slurm-n1-gpu1", 428, 39936, mig_profile="3g.40gb", mig_start=4)
    ex.gpu_types[share.gpu_uuid] = model
    w = Workload("w-m", "lab", "ann", Request(mig="3g.40gb"), command=("python", "t.py"))
    ex.start(w, Allocation("w-m", "n1", (share,), since=0.0))
    return [c for c in ex.cli.runner.calls if c[0] == "sbatch"][-1]


def test_a_mig_share_asks_slurm_for_one_instance_of_its_type(tmp_path):
    _, _, ex = make(tmp_path)
    sbatch = _start_mig(ex, "nvidia_h100_80gb_hbm3")
    assert "--gres=gpu:nvidia_h100_80gb_hbm3_3g.40gb:1" in sbatch
    assert "--nodelist=n1" in sbatch
    sbatch = _start_mig(ex, "H100-80GB")  # Slurm named no model: the profile alone
    assert "--gres=gpu:3g.40gb:1" in sbatch
