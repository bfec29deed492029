"""bench/scheduler_scale.py --baseline: the same scenario with two versions of the code in
alternating subprocesses, the ratio of their cycle times, and whether decisions are the same;
the CI gate (--max-ratio) fails on a slower scheduler."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import scheduler_scale  # noqa: E402

TINY = ["--nodes", "12", "--pending", "60", "--cycles", "3", "--tenants", "5"]


def _worktrees() -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True, check=True
    ).stdout


def test_the_same_code_on_both_sides_gives_the_same_decisions(capsys):
    rc = scheduler_scale.main(
        ["--baseline", f"src:{ROOT / 'src'}", "--rounds", "2", "--json", *TINY]
    )
    assert rc == 0
    r = json.loads(capsys.readouterr().out)
    assert r["same_decisions"] and r["same_reasons"] and r["deterministic"]
    assert r["first_different_cycle"] is None
    assert len(r["round_ratios"]) == 2 and r["ratio_p50"] > 0
    assert r["then"]["admissions"] == r["now"]["admissions"] > 0
    for side in ("then", "now"):
        assert r[side]["p50_ms"] <= r[side]["p99_ms"]
        assert r[side]["cold_ms"] > 0


def test_the_gate_fails_above_the_ratio_and_passes_below(capsys):
    args = ["--baseline", f"src:{ROOT / 'src'}", "--rounds", "1", "--json", *TINY]
    assert scheduler_scale.main([*args, "--max-ratio", "0.001"]) == 1
    assert "FAIL: the scheduler got slower" in capsys.readouterr().out
    assert scheduler_scale.main([*args, "--max-ratio", "1000"]) == 0
    assert "limit 1000.0: ok" in capsys.readouterr().out


def test_the_gate_judges_a_slowdown_seen_in_the_best_rounds_and_in_the_median():
    assert scheduler_scale.slowdown(1.36, 0.99) == 0.99  # one lucky baseline round (A/A run)
    assert scheduler_scale.slowdown(1.0, 1.4) == 1.0  # a busy stretch of the machine
    assert scheduler_scale.slowdown(1.5, 1.4) == 1.4  # slower in both: a slowdown


def test_a_commit_is_checked_out_in_a_worktree_that_is_removed_afterwards(capsys):
    before = _worktrees()
    rc = scheduler_scale.main(["--baseline", "HEAD", "--rounds", "1", "--json", *TINY])
    assert rc == 0
    r = json.loads(capsys.readouterr().out)
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert r["baseline"] == head
    assert _worktrees() == before


def test_a_baseline_missing_from_the_clone_is_skipped_loudly(capsys):
    rc = scheduler_scale.main(["--baseline", "0" * 40, "--max-ratio", "1.25", *TINY])
    assert rc == 0
    assert "scheduler speed gate: SKIPPED" in capsys.readouterr().out


def test_decisions_digest_covers_admissions_and_reasons():
    from gpupool.scheduler.types import Decisions, PendingInfo

    a = scheduler_scale.digest(Decisions(pending={"w1": PendingInfo("full", 1, 1)}))
    b = scheduler_scale.digest(Decisions(pending={"w1": PendingInfo("full", 2, 1)}))
    assert a[0] == b[0] and a[1] != b[1]


@pytest.mark.parametrize("bad", [["--rounds", "0"]])
def test_bad_arguments_are_refused(bad):
    with pytest.raises(SystemExit):
        scheduler_scale.main(["--baseline", "HEAD", *bad, *TINY])
