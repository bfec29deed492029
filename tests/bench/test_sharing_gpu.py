"""On a real NVIDIA GPU (marked `gpu`): a short bench/sharing.py run must prove isolation.

Skipped where there is no GPU, driver or PyTorch. The recorded full run is in
bench/results/sharing_h100/; this is the quick version (about a minute)."""

from __future__ import annotations

import ctypes
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def _has_gpu() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return shutil.which("nvidia-smi") is not None and importlib.util.find_spec("torch") is not None


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not _has_gpu(), reason="needs an NVIDIA GPU, its driver and PyTorch"),
]
ROOT = Path(__file__).resolve().parents[2]


def test_short_sharing_run_isolates_memory_under_mps_and_policing(tmp_path):
    modes = "mps" if shutil.which("nvidia-cuda-mps-control") else ""
    iso = "policed,mps" if modes else "policed"
    cmd = [sys.executable, str(ROOT / "bench" / "sharing.py"), "--out", str(tmp_path)]
    cmd += ["--counts", "2", "--duration", "1", "--warmup", "0.5", "--modes", modes]
    cmd += ["--isolation", iso, "--kill-after", "1", "--interval", "0.25", "--after-s", "0.5"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    res = json.loads((tmp_path / "sharing.json").read_text())
    assert not res["errors"], res["errors"]
    for mode in iso.split(","):
        assert res["isolation"][mode]["verdict"]["ok"], res["isolation"][mode]
    if modes:
        assert {m["mode"] for m in res["measurements"]} == {"exclusive", "mps"}
        assert res["mps_daemon"]["stopped"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
