"""The pure parts of bench/sharing.py: share sizes, throughput ratios, goals, the table."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from sharing_report import (  # noqa: E402
    Measurement,
    exclusive_rates,
    goals,
    isolation_verdict,
    jain,
    markdown_table,
    parse_counts,
    parse_pct_overrides,
    render_md,
    rows,
    share_size,
    thread_pct_table,
)

from gpupool.domain import Enforcement, Share  # noqa: E402
from gpupool.engines.local.mps import limits_for  # noqa: E402


def test_share_size_splits_compute_and_memory_evenly_rounding_down():
    assert share_size(1, 81559) == (1000, 81559)
    assert share_size(2, 81559) == (500, 40779)
    assert share_size(8, 81559) == (125, 10194)
    assert share_size(3, 100) == (333, 33)


@pytest.mark.parametrize("n", [0, -1, 1001])
def test_share_size_rejects_impossible_counts(n):
    with pytest.raises(ValueError, match="tenant"):
        share_size(n, 1000)


def test_share_of_eight_gets_mps_limits_that_never_undercut_it():
    milli, mem = share_size(8, 81559)
    lim = limits_for(Share("n", 0, "GPU-x", milli, mem, Enforcement.MPS))
    assert lim.active_thread_percentage == 13  # ceil(12.5)
    assert lim.pinned_mem_limit == "0=10194M"


def test_parse_counts_sorts_dedupes_and_explains_bad_input():
    assert parse_counts("8,1,2,4,2") == [1, 2, 4, 8]
    with pytest.raises(ValueError, match="integers"):
        parse_counts("1,two")
    with pytest.raises(ValueError, match=">= 1"):
        parse_counts("0,2")
    with pytest.raises(ValueError, match=">= 1"):
        parse_counts(",")


def test_jain_index_is_one_for_equal_and_one_over_n_for_a_monopoly():
    assert jain([5.0, 5.0, 5.0, 5.0]) == pytest.approx(1.0)
    assert jain([8.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert jain([]) is None
    assert jain([0.0, 0.0]) is None


def ms() -> list[Measurement]:
    return [
        Measurement("exclusive", 1, "matmul", (100.0,), ("hardware",)),
        Measurement("exclusive", 1, "matmul", (96.0,), ("hardware",)),  # end-of-run re-check
        Measurement("exclusive", 1, "small", (1000.0,), ("hardware",)),
        Measurement("timeslice", 2, "matmul", (45.0, 45.0), ("policed", "policed")),
        Measurement("mps", 2, "matmul", (49.0, 47.0), ("mps", "mps")),
        Measurement("mps", 8, "matmul", (12.0,) * 8, ("mps",) * 8),
        Measurement("mps", 8, "small", (700.0,) * 8, ("mps",) * 8),
        Measurement("timeslice", 8, "small", (150.0,) * 8, ("policed",) * 8),
    ]


def test_exclusive_rate_is_the_mean_of_all_exclusive_runs():
    assert exclusive_rates(ms()) == {"matmul": 98.0, "small": 1000.0}


def test_rows_give_aggregate_relative_to_exclusive():
    by = {(r.workload, r.n, r.mode): r for r in rows(ms())}
    assert by[("matmul", 2, "mps")].aggregate == 96.0
    assert by[("matmul", 2, "mps")].relative == pytest.approx(96.0 / 98.0)
    assert by[("matmul", 2, "timeslice")].relative == pytest.approx(90.0 / 98.0)
    assert by[("small", 8, "mps")].relative == pytest.approx(5.6)
    assert by[("small", 8, "mps")].enforcement == "mps"
    assert ("matmul", 1, "exclusive") not in by


def test_goals_judge_mps_rows_at_every_n():
    g = goals(rows(ms()))
    assert g["matmul_mps_relative_by_n"] == {2: pytest.approx(96 / 98), 8: pytest.approx(96 / 98)}
    assert g["matmul_met"] is True
    assert g["small_mps_relative_n8"] == pytest.approx(5.6)
    assert g["small_met"] is True


def test_goals_fail_when_one_n_misses_or_small_is_missing():
    data = [m for m in ms() if m.workload != "small"]
    data.append(Measurement("mps", 4, "matmul", (20.0,) * 4, ("mps",) * 4))  # 80/98 < 0.95
    g = goals(rows(data))
    assert g["matmul_met"] is False
    assert g["small_mps_relative_n8"] is None
    assert g["small_met"] is False


def test_an_mps_row_that_fell_back_to_policed_does_not_count_for_the_goals():
    data = [m for m in ms() if m.mode != "mps"]
    data.append(Measurement("mps", 8, "small", (700.0,) * 8, ("policed",) * 8))
    g = goals(rows(data))
    assert g["small_met"] is False
    assert "ran as policed!" in markdown_table(data)


def test_markdown_table_lists_every_n_with_ratios_and_marks_missing_runs():
    table = markdown_table(ms())
    lines = table.splitlines()
    assert lines[0].startswith("| work | N |")
    matmul2 = next(ln for ln in lines if ln.startswith("| matmul | 2 |"))
    assert "(**0.92**)" in matmul2 and "(**0.98**)" in matmul2
    assert "| matmul | 1 |" in table and "= exclusive" in table
    small2 = next(ln for ln in lines if ln.startswith("| small | 2 |"))
    assert "not run" in small2


def test_pct_overrides_parse_pairs_and_reject_nonsense():
    assert parse_pct_overrides("") == []
    assert parse_pct_overrides("8:14, 4:26") == [(8, 14), (4, 26)]
    for bad in ("8", "8:x", "1:50", "8:0", "8:101"):
        with pytest.raises(ValueError):
            parse_pct_overrides(bad)


def test_thread_pct_table_counts_the_sms_all_clients_get_and_marks_overrides():
    data = [
        Measurement("exclusive", 1, "matmul", (100.0,), ("hardware",)),
        Measurement(
            "mps", 8, "matmul", (11.75,) * 8, ("mps",) * 8, {"thread_pct": "13", "sms_seen": 16}
        ),
        Measurement(
            "mps",
            8,
            "matmul",
            (12.5,) * 8,
            ("mps",) * 8,
            {"thread_pct": "100", "sms_seen": 132, "override": True},
        ),
    ]
    lines = thread_pct_table(data).splitlines()
    assert lines[2] == "| matmul | 8 | 13 | 16 | 128 | 94.0 | 0.94 | gpupool |"
    assert lines[3] == "| matmul | 8 | 100 | 132 | 1056 | 100.0 | 1.00 | override |"
    assert thread_pct_table(data[:1]) == ""


def victim(ok: bool = True, exit_code: int = 0) -> dict:
    return {"workload": "v", "status": {"exit_code": exit_code}, "worker": {"ok": ok}}


def mps_rec(**offender_worker) -> dict:
    worker = {"state": "out_of_memory", "allocated_mib": 19968, **offender_worker}
    return {
        "mode": "mps",
        "tenants": 4,
        "share_memory_mib": 20389,
        "offender_target_mib": 30583,
        "victims": [victim(), victim()],
        "offender": {"workload": "off", "enforcement": "mps", "worker": worker},
    }


def test_mps_isolation_holds_only_for_an_oom_within_the_share_under_real_mps():
    assert isolation_verdict(mps_rec())["ok"]
    assert not isolation_verdict(mps_rec(allocated_mib=20480))["offender_stopped"]
    assert not isolation_verdict(mps_rec(state="holding"))["offender_stopped"]
    fell_back = mps_rec()
    fell_back["offender"]["enforcement"] = "policed"
    assert not isolation_verdict(fell_back)["ok"]


def test_isolation_fails_when_a_victim_is_wrong_or_died():
    for bad in (victim(ok=False), victim(exit_code=1)):
        rec = mps_rec()
        rec["victims"].append(bad)
        v = isolation_verdict(rec)
        assert v["offender_stopped"] and not v["victims_exact"] and not v["ok"]


def policed_rec(events: list[dict], killed: bool = True, exit_code: int = 137) -> dict:
    return {
        "mode": "policed",
        "tenants": 2,
        "share_memory_mib": 1000,
        "offender_target_mib": 1500,
        "victims": [victim()],
        "offender": {"workload": "off", "status": {"exit_code": exit_code}, "worker": {}},
        "agent": {"events": events, "killed": killed},
    }


def test_policed_isolation_needs_the_flag_the_kill_and_no_one_else_flagged():
    over = {"what": "warn", "kind": "over_memory", "workload": "off", "at_s": 1, "message": "m"}
    assert isolation_verdict(policed_rec([over]))["ok"]
    assert not isolation_verdict(policed_rec([]))["ok"]  # never flagged
    assert not isolation_verdict(policed_rec([over], killed=False, exit_code=0))["ok"]
    other = {**over, "workload": "v"}
    assert not isolation_verdict(policed_rec([over, other]))["ok"]


def test_markdown_report_states_device_goals_and_isolation_outcome():
    res = {
        "environment": {"gpu_name": "NVIDIA H100 80GB HBM3", "command": "x", "dry_run": False},
        "measurements": [],
        "table": markdown_table(ms()),
        "goals": goals(rows(ms())),
        "isolation": {"mps": {**mps_rec(), "verdict": isolation_verdict(mps_rec())}},
    }
    md = render_md(res)
    assert "**NVIDIA H100 80GB HBM3**" in md and "DRY RUN" not in md
    assert "small work ≥ 5.0x at N = 8: 5.60 -> **met**" in md
    assert "**mps**" in md and "**PASS**" in md
