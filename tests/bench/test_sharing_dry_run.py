"""bench/sharing.py end to end without a GPU (--dry-run): the real local executor, barriers,
the stand-in MPS daemon, the telemetry library policing a simulated GPU, and the reports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_dry_run_measures_every_mode_and_proves_isolation(tmp_path, job_tmp):
    out = tmp_path / "out"
    cmd = [sys.executable, str(ROOT / "bench" / "sharing.py"), "--dry-run", "--out", str(out)]
    cmd += ["--counts", "1,2", "--duration", "0.3", "--warmup", "0.1"]
    cmd += ["--isolation-tenants", "2", "--kill-after", "0.3", "--interval", "0.1"]
    cmd += ["--after-s", "0.1", "--work-dir", str(job_tmp / "work")]  # jobs' account reaches it
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    res = json.loads((out / "sharing.json").read_text())
    got = {(m["mode"], m["n"], m["workload"]) for m in res["measurements"]}
    assert got == {
        (mode, n, w)
        for mode, n in [("exclusive", 1), ("timeslice", 2), ("mps", 2)]
        for w in ("small", "matmul")
    }
    mps2 = next(g for g in res["groups"] if g["tag"] == "mps-n2")
    env = mps2["tenants"][0]["worker"]["env"]
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=40779M"  # half of a simulated 80 GB
    assert env["GPUPOOL_WORKLOAD_ID"] == "mps-n2-t0"
    ts2 = next(g for g in res["groups"] if g["tag"] == "timeslice-n2")
    assert "CUDA_MPS_PIPE_DIRECTORY" not in ts2["tenants"][0]["worker"]["env"]
    assert res["isolation"]["mps"]["verdict"]["ok"]
    assert res["isolation"]["mps"]["offender"]["status"]["exit_code"] == 3
    policed = res["isolation"]["policed"]
    assert policed["verdict"]["ok"]
    assert [e["what"] for e in policed["agent"]["events"]] == ["warn", "killed"]
    assert res["mps_daemon"]["stopped"] is True
    md = (out / "sharing.md").read_text()
    assert "DRY RUN" in md and "| matmul | 2 |" in md


def test_bad_arguments_get_a_clear_error_not_a_traceback(tmp_path):
    cmd = [sys.executable, str(ROOT / "bench" / "sharing.py"), "--counts", "1,x"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "tenant counts must be integers" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_render_rewrites_the_report_of_a_recorded_run_and_keeps_its_data(tmp_path):
    rec = ROOT / "bench" / "results" / "sharing_h100" / "sharing.json"
    copy = tmp_path / "sharing.json"
    copy.write_text(rec.read_text())
    cmd = [sys.executable, str(ROOT / "bench" / "sharing.py"), "--render", str(copy)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    before, after = json.loads(rec.read_text()), json.loads(copy.read_text())
    assert after["groups"] == before["groups"]
    assert [m["rates"] for m in after["measurements"]] == [
        m["rates"] for m in before["measurements"]
    ]
    assert "NVIDIA H100" in (tmp_path / "sharing.md").read_text()


def test_render_of_a_missing_file_says_so(tmp_path):
    cmd = [sys.executable, str(ROOT / "bench" / "sharing.py"), "--render", str(tmp_path / "x")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "cannot read" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_without_a_gpu_it_says_so_and_exits_2(monkeypatch, capsys, tmp_path):
    import gpupool.telemetry.opening as opening
    import gpupool.telemetry.source as source

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import sharing

    def no_gpu(*_a, **_k):
        raise source.NoGPUError("no NVIDIA driver")

    monkeypatch.setattr(opening, "open_source", no_gpu)
    assert sharing.main(["--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "no usable NVIDIA GPU" in err and "GPU machine" in err
    assert not (tmp_path / "o").exists()
