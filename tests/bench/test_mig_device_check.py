"""bench/mig_device_check.py without a GPU (--simulate): MIG modes read through the telemetry,
`mig` sharing refused on the GPU whose MIG mode is off, results written as JSON and markdown."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_simulated_run_refuses_mig_off_and_offers_mig_on(tmp_path):
    out = tmp_path / "out"
    spec = "1xH100-80GB,1xH100-80GB:mig=all-3g.40gb"
    cmd = [sys.executable, str(ROOT / "bench" / "mig_device_check.py"), str(out)]
    proc = subprocess.run(cmd + ["--simulate", spec], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "GPU 0 NVIDIA H100 80GB HBM3" in proc.stdout and "MIG mode disabled" in proc.stdout
    res = json.loads((out / "mig_device_check.json").read_text())
    assert res["ok"] and res["host"]["simulated"]
    assert [g["mig_enabled"] for g in res["gpus"]] == [False, True]
    off, on = res["checks"]
    assert off["status"] == 409 and "nvidia-smi -i 0 -mig 1" in off["detail"]
    assert off["sharing_after"] == off["sharing_before"] == "exclusive"
    assert on["sharing"] == "mig" and on["mig_layout"] == "all-3g.40gb"
    assert "**PASS**" in (out / "mig_device_check.md").read_text()
