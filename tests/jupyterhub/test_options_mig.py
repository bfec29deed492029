"""The spawner's profile list for a MIG profile: free instances of its profile, and a MIG
notebook counts as asking for a GPU."""

from __future__ import annotations

from gpupool.jupyterhub.options import asks_gpu, gpu_availability


def test_mig_profile_counts_free_instances_of_its_profile():
    gpus = [
        {"model": "H100", "sharing": "mig", "memory_mib": 81559, "mig_instances": [
            {"profile": "3g.40gb", "start": 0, "workload_id": "w1"},
            {"profile": "3g.40gb", "start": 4, "workload_id": None},
        ]},
        {"model": "H100", "sharing": "mig", "memory_mib": 81559, "mig_instances": [
            {"profile": "1g.10gb", "start": 0, "workload_id": None},
        ]},
    ]  # fmt: skip
    profile = {"request": {"mig": "3g.40gb"}}
    assert gpu_availability(profile, gpus) == "1 free 3g.40gb MIG instance"
    assert gpu_availability({"request": {"mig": "2g.20gb"}}, gpus) == "0 free 2g.20gb MIG instances"
    assert asks_gpu({"request": {"mig": "1g.10gb"}})
    assert not asks_gpu({"request": {}})
