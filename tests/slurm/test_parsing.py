"""The slurm engine's readers of Slurm's JSON (22.05 shapes, and 23+ where they differ);
no Slurm needed."""

from __future__ import annotations

from gpupool.domain import GPUHealth, NodeState, OutsideUse
from gpupool.engines.slurm.accounts import account_name
from gpupool.engines.slurm.executor import exit_code_of
from gpupool.engines.slurm.inventory import (
    foreign_jobs,
    mark_foreign,
    parse_gres,
    parse_indices,
    to_node,
)

NODE_2205 = {
    "name": "gpu01",
    "state": "mixed",
    "state_flags": [],
    "gres": "gpu:a100:4(S:0-1),gpu:t4:2,shard:8",
    "cpus": 64,
    "real_memory": 512000,
}


def test_gres_becomes_gpus_with_models_and_memory():
    node = to_node(NODE_2205, default_memory_mib=1234)
    assert [g.model for g in node.gpus] == ["a100"] * 4 + ["t4"] * 2
    assert node.gpus[0].memory_mib == 40960 and node.gpus[5].memory_mib == 15360
    assert node.gpus[5].uuid == "slurm-gpu01-gpu5" and node.state is NodeState.READY
    assert node.cpu_milli == 64000 and node.memory_mib == 512000
    assert parse_gres("gpu:2") == [("gpu", 2)] and parse_gres("(null)") == []


def test_drained_and_down_nodes():
    assert to_node({**NODE_2205, "state_flags": ["DRAIN"]}, 1).state is NodeState.DRAINING
    assert to_node({**NODE_2205, "state": "down"}, 1).state is NodeState.DOWN
    # Slurm 23+: state is a list, numbers are objects
    newer = {**NODE_2205, "state": ["IDLE", "DRAIN"], "cpus": {"set": True, "number": 8}}
    n = to_node(newer, 1)
    assert n.state is NodeState.DRAINING and n.cpu_milli == 8000


def test_foreign_jobs_take_their_gpus_but_never_gpupools():
    jobs = [
        {
            "job_id": 7,
            "name": "mine",
            "job_state": "RUNNING",
            "user_name": "eve",
            "account": "phys",
            "batch_host": "gpu01",
            "gres_detail": ["gpu:a100:2(IDX:0-1)"],
            "start_time": {"set": True, "number": 1795600800},
        },
        {
            "job_id": 8,
            "name": "gpupool-w-1",
            "job_state": "RUNNING",
            "batch_host": "gpu01",
            "gres_detail": ["gpu:a100:1(IDX:2)"],
        },
        {"job_id": 9, "name": "later", "job_state": "PENDING", "batch_host": "gpu01"},
    ]
    foreign = foreign_jobs(jobs, "gpupool-")
    assert [(f.job_id, f.user, f.gpus, f.indices) for f in foreign] == [("7", "eve", 2, (0, 1))]
    node = to_node(NODE_2205, 1)
    # gpupool thinks it holds gpu0 (Slurm's indices differ from gpupool's choice): another
    # free GPU is marked instead, so the free count is still right
    marked = mark_foreign(node, foreign, held={"slurm-gpu01-gpu0"})
    assert all(g.health is GPUHealth.HEALTHY for g in marked.gpus)  # taken, not unhealthy
    taken = [g.index for g in marked.gpus if g.outside is not None]
    assert len(taken) == 2 and 0 not in taken and 1 in taken
    job = OutsideUse("slurm job 7", "eve", since=1795600800.0)
    assert {marked.gpu(i).outside for i in taken} == {job}
    assert not any(marked.gpu(i).schedulable for i in taken)
    assert parse_indices(["gpu:a100:3(IDX:0,2-3)"]) == (0, 2, 3)


def test_exit_codes_from_sacct_and_squeue():
    assert exit_code_of({"exit_code": {"status": "SUCCESS", "return_code": 0}}) == 0
    assert exit_code_of({"exit_code": {"status": "FAILED", "return_code": 3}}) == 3
    signaled = {"status": "SIGNALED", "return_code": 0, "signal": {"signal_id": 9}}
    assert exit_code_of({"exit_code": signaled}) == 137
    assert exit_code_of({"exit_code": 256}) == 1  # squeue: a wait status
    assert exit_code_of({"exit_code": 9}) == 137  # killed by SIGKILL
    assert exit_code_of({"exit_code": 0}) == 0


def test_tenant_paths_become_account_names():
    assert account_name("physics/lab-a") == "gp.physics.lab-a"
    # upper case (Slurm folds it) is kept apart by a hash of the exact path (review F12)
    assert account_name("physics/Lab-A").startswith("gp.physics.lab-a.h")
    assert account_name("ml", prefix="x_") == "x_ml"
