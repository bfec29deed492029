"""Real-GPU path (marked `gpu`; skipped where no NVIDIA GPU answers NVML)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpupool.telemetry import Attributor, Sampler
from gpupool.telemetry.exporter import render
from gpupool.telemetry.nvml import NVMLSource
from gpupool.telemetry.source import NoGPUError


def _has_gpu() -> bool:
    try:
        NVMLSource.open().close()
    except (NoGPUError, Exception):  # noqa: BLE001 - any failure means "no usable GPU"
        return False
    return True


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _has_gpu(), reason="no NVIDIA GPU answers NVML here"),
]
WORKER = Path(__file__).resolve().parents[2] / "bench" / "telemetry_gpu_worker.py"


def test_real_gpus_are_discovered_with_identity_and_memory():
    src = NVMLSource.open()
    try:
        snap = src.snapshot()
    finally:
        src.close()
    assert snap.gpus and not snap.simulated
    assert snap.driver_version
    for g in snap.gpus:
        assert g.healthy, g.errors
        assert g.uuid.startswith(("GPU-", "MIG-"))
        assert g.name and g.name != "N/A"
        assert g.memory_total_bytes and g.memory_total_bytes > 2**30
        assert g.memory_used_bytes is not None
        # the DCGM dashboard's fields: every GPU since Volta reports them
        assert g.sm_clock_mhz and g.mem_clock_mhz and g.sm_clock_mhz < 5000
        assert g.energy_mj is not None and g.energy_mj > 0


def test_torch_process_is_attributed_and_exported(tmp_path):
    pytest.importorskip("torch")
    ready = tmp_path / "ready"
    env = {**os.environ, "GPUPOOL_WORKLOAD_ID": "w-gpu-test"}
    cmd = [sys.executable, str(WORKER), "--mem-gib", "1", "--seconds", "60", "--ready", str(ready)]
    proc = subprocess.Popen(cmd, env=env)
    src = NVMLSource.open()
    try:
        deadline = time.time() + 120  # waits on a real process starting CUDA, not on timing
        while not ready.exists():
            assert proc.poll() is None, "GPU worker exited early"
            assert time.time() < deadline, "GPU worker did not start in time"
            time.sleep(0.2)
        owners = {"w-gpu-test": ("alice", "physics/lab-a")}
        sampler = Sampler(src, attributor=Attributor(resolve_workload=owners))
        frame = sampler.sample_once()
        mine = [p for p in frame.snapshot.processes if p.pid == proc.pid]
        assert mine, f"pid {proc.pid} not among {[p.pid for p in frame.snapshot.processes]}"
        assert (mine[0].used_memory_bytes or 0) >= 2**30
        owner = frame.owners[proc.pid]
        assert (owner.workload_id, owner.user, owner.tenant) == (
            "w-gpu-test",
            "alice",
            "physics/lab-a",
        )
        fams = {f.name: f for f in text_string_to_metric_families(render(frame))}
        samples = fams["gpupool_gpu_process_memory_bytes"].samples
        assert any(s.labels["workload"] == "w-gpu-test" for s in samples)
    finally:
        src.close()
        proc.terminate()
        proc.wait(30)
