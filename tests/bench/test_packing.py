"""bench/packing.py: the generator asks for exactly the cluster's GPUs, the same seed gives the
same work, and the replay reports what the real scheduler placed."""

from __future__ import annotations

import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import packing  # noqa: E402


def test_the_generator_fills_the_gpus_exactly_and_is_seeded():
    nodes = packing.cluster(0.1)
    cap = sum(n["count"] * n["gpus"] for n in nodes)
    work = packing.workload_mix(random.Random(3), cap)
    asked = sum(w.get("gpus", 0) + w.get("gpu_fraction", 0) for w in work)
    assert abs(asked - cap) < 1e-6
    assert sum(1 for w in work if "gpu_fraction" in w) > len(work) / 2  # fractional-heavy
    assert work == packing.workload_mix(random.Random(3), cap)


def test_a_small_run_reports_the_allocation_the_scheduler_reached():
    r = packing.run_one(seed=1, scale=0.1)
    assert 0.8 < r["allocation_ratio"] <= 1.0
    assert r["allocation_ratio"] == round(r["allocated_gpus"] / r["capacity_gpus"], 4)
    assert abs(r["allocation_ratio_sim"] - r["allocation_ratio"]) < 1e-3
    assert r["placed"] <= r["workloads"]


def test_the_alibaba_shaped_mix_fills_the_gpus_exactly_mostly_with_shared_gpus():
    nodes = packing.cluster(0.1)
    cap = sum(n["count"] * n["gpus"] for n in nodes)
    work = packing.alibaba_mix(random.Random(3), cap)
    asked = sum(w.get("gpus", 0) + w.get("gpu_fraction", 0) for w in work)
    assert abs(asked - cap) < 1e-6
    shared = [w for w in work if "gpu_fraction" in w]
    multi = [w for w in work if w.get("gpus", 0) > 1]
    assert len(shared) > len(work) / 2 and len(multi) < len(work) / 10
    assert all(0 < w["gpu_fraction"] < 1 for w in shared)
    assert work == packing.alibaba_mix(random.Random(3), cap)
    r = packing.run_one(seed=1, scale=0.1, mix="alibaba")
    assert r["mix"] == "alibaba" and 0.8 < r["allocation_ratio"] <= 1.0


def test_the_generator_ends_on_a_larger_cluster():
    # at 3x the cluster (2,820 GPUs) floating-point dust left `rest` at 0 and the generator
    # appended empty requests forever (until memory ran out)
    nodes = packing.cluster(3)
    cap = sum(n["count"] * n["gpus"] for n in nodes)
    for seed in range(3):
        work = packing.workload_mix(random.Random(seed), cap, 0.6, 1.2)
        asked = sum(w.get("gpus", 0) + w.get("gpu_fraction", 0) for w in work)
        assert abs(asked - cap) < 1e-6 and len(work) < 2 * cap


def test_the_hard_mix_has_its_own_cluster_and_strands_gpus_by_cpus():
    # issue #32: GPU generations whose CPUs per GPU differ 6.5-fold, fractions asking for GPU
    # memory, whole and multi-GPU work asking several CPUs per GPU, CPU-only work
    nodes = packing.cluster(0.2, "hard")
    per_gpu = {n["cpus"] / n["gpus"] for n in nodes}
    assert max(per_gpu) / min(per_gpu) > 6 and len({n["gpu_model"] for n in nodes}) > 3
    cap = sum(n["count"] * n["gpus"] for n in nodes)
    work = packing.hard_mix(random.Random(3), cap)
    asked = sum(w.get("gpus", 0) + w.get("gpu_fraction", 0) for w in work)
    assert abs(asked - cap) < 1e-6
    fractions = [w for w in work if "gpu_fraction" in w]
    assert len(fractions) > len(work) / 2
    assert any("gpu_memory_gib" in w for w in fractions)
    assert any(w.get("gpus", 0) >= 4 for w in work) and any(
        "gpus" not in w and "gpu_fraction" not in w for w in work
    )
    assert work == packing.hard_mix(random.Random(3), cap)
    r = packing.run_one(seed=1, scale=0.2, mix="hard", cpu_scale=0.8)
    assert r["mix"] == "hard" and r["capacity_gpus"] == cap and 0.8 < r["allocation_ratio"] <= 1
