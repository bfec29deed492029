"""bench/multi_gpu_check.py works for any GPU count >= 1 (it assumed exactly two: FAIL on a
4-GPU host where every functional check passed). Dry runs on simulated GPUs: the API, CLI,
tenants, submissions and MPS daemons (stand-in) run for real; criteria that need a GPU are
recorded, not counted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="the check runs jobs as the jobs account (nobody): root only"
)


def _dry_run(out: Path, gpus: int) -> tuple[subprocess.CompletedProcess, dict]:
    cmd = [sys.executable, str(ROOT / "bench" / "multi_gpu_check.py"), "--dry-run"]
    cmd += ["--simulate-gpus", str(gpus), "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400, cwd=ROOT)
    return proc, json.loads((out / "multi_gpu_check.json").read_text())


def test_on_one_gpu_the_multi_gpu_checks_say_skip_and_mps_runs_on_it(tmp_path):
    proc, res = _dry_run(tmp_path, 1)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    verdicts = dict(line.split()[:2][::-1] for line in proc.stdout.splitlines()
                    if line.split()[:1] in (["PASS"], ["FAIL"], ["SKIP"]))  # fmt: skip
    assert verdicts == {
        "0_preflight": "PASS",
        "0_setup": "PASS",
        "1a_two_gpu_job_sees_its_gpus": "SKIP",
        "1b_two_tenants_own_gpus": "SKIP",
        "3_telemetry_attribution": "SKIP",
        "4_ddp_two_gpus": "SKIP",
        "2_shared_mps_limits": "PASS",
    }
    assert res["passed"] and res["checks"]["4_ddp_two_gpus"]["skipped"] == (
        "needs 2 GPUs, this host has 1"
    )
    mps = res["checks"]["2_shared_mps_limits"]["criteria"]
    assert mps["1 GPU(s) shared"] and mps["2 half-GPU jobs run together, 2 per shared GPU"]
    assert mps["one live MPS control daemon per GPU"]


@pytest.mark.slow
def test_on_four_gpus_every_check_runs_and_passes(tmp_path):
    proc, res = _dry_run(tmp_path, 4)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert res["passed"] and "SKIP" not in proc.stdout
    assert res["checks"]["0_setup"]["evidence"]["gpu_count"] == 4
    mps = res["checks"]["2_shared_mps_limits"]["criteria"]
    assert mps["2 GPU(s) shared"] and mps["4 half-GPU jobs run together, 2 per shared GPU"]
    assert mps["one live MPS control daemon per GPU"]  # only the shared GPUs have daemons
