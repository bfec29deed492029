"""bench/k8s_native.py at a tiny size: every queued pod is released, none stays gated, and an
idle minute makes no API request (the watches serve every pass)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("kubernetes")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from k8s_native import run  # noqa: E402


def test_the_bench_runs_and_an_idle_minute_makes_no_request(tmp_path):
    r = run(nodes=3, pods=10, queued=3, tmp=tmp_path)
    assert (r["admitted"], r["released"]) == (3, 3)
    assert r["api_requests_per_idle_minute"] == 0 and r["idle_request_kinds"] == []
    assert r["initial_sync_s"] < 10
