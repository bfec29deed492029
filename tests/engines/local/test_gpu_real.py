"""On a real NVIDIA GPU: jobs see exactly their GPU, and an MPS share's memory limit holds.
Runs the same check as bench/gpu_local_executor.sh; skipped where there is no GPU."""

from __future__ import annotations

import ctypes
import importlib.util
import json
import shutil
from pathlib import Path

import pytest


def _has_gpu() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return shutil.which("nvidia-smi") is not None


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _has_gpu(), reason="needs an NVIDIA GPU and driver"),
]
BENCH = Path(__file__).parents[2] / "bench" / "gpu_local_executor.py"


def test_binding_and_mps_memory_limit_on_a_real_gpu(tmp_path):
    spec = importlib.util.spec_from_file_location("gpu_local_executor", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rc = mod.main(tmp_path)
    result = json.loads((tmp_path / "gpu_local_executor.json").read_text())
    assert result["binding_ok"], result["binding"]
    if shutil.which("nvidia-cuda-mps-control"):
        assert result["mps_limit_holds"], result["mps"]["over"]
        assert result["mps_within_ok"], result["mps"]["within"]
        assert rc == 0
