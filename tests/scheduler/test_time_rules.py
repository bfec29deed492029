"""Budgets and advance reservations in the pure cycle (gpupool.scheduler.timed)."""

from __future__ import annotations

import dataclasses

import pytest

from gpupool.domain import ValidationError
from gpupool.domain.budgets import Budget, BudgetMode, BudgetPeriod, period_bounds
from gpupool.domain.reservations import Reservation
from gpupool.scheduler import SchedulerConfig, cycle
from gpupool.scheduler.advance import assign, shortfall
from gpupool.scheduler.timed import cycle_timed
from gpupool.scheduler.timerules import BudgetState, TimeRules, held_capacity, held_tenants
from tests.scheduler.builders import job, node, running, snapshot, tenant

NOW = 1_764_000_000.0  # 2025-11-24 16:00 UTC
HOUR = 3600.0
N = node("n", gpus=4)
TENANTS = [tenant("lab-a", 2), tenant("lab-b", 2)]


def spent(t: str, mode: str, used: float = 120.0, limit: float = 100.0, model=None):
    b = Budget(t, BudgetPeriod.MONTH, limit, BudgetMode(mode), model)
    return BudgetState(b, used, period_bounds(b.period, NOW))


# -- periods and validation ------------------------------------------------------------


def test_period_bounds_are_utc_calendar_months_and_quarters():
    m = period_bounds("month", NOW)
    assert (m.label, m.first_day, m.last_day) == ("2025-11", "2025-11-01", "2025-11-30")
    q = period_bounds("quarter", NOW)
    assert (q.label, q.first_day, q.last_day) == ("2025-Q4", "2025-10-01", "2025-12-31")
    assert period_bounds("month", q.end - 1).end == q.end  # Dec 31 23:59:59 -> Jan 1
    assert period_bounds("quarter", q.end).label == "2026-Q1"


def test_bad_budgets_and_windows_are_refused():
    with pytest.raises(ValidationError, match=">= 0"):
        Budget("lab-a", BudgetPeriod.MONTH, -1)
    with pytest.raises(ValidationError, match="no length"):
        Reservation("r", "lab-a", 1, NOW, NOW)
    with pytest.raises(ValidationError, match="1 or more"):
        Reservation("r", "lab-a", 0, NOW, NOW + 1)


# -- budgets -----------------------------------------------------------------------------


def test_hold_budget_keeps_new_work_out_with_the_reset_time_and_warn_changes_nothing():
    pend = [job("a1", "lab-a", gpus=1, submit=1), job("b1", "lab-b", gpus=1, submit=2)]
    snap = snapshot([N], TENANTS, [])
    d = cycle_timed(snap, pend, NOW, rules=TimeRules((spent("lab-a", "hold"),)))
    assert [a.workload_id for a in d.admissions] == ["b1"]
    why = d.pending["a1"].reason
    assert "used 120 of its 100 GPU-hours for 2025-11" in why
    assert "resets at 2025-12-01 00:00 UTC" in why
    warn = cycle_timed(snap, pend, NOW, rules=TimeRules((spent("lab-a", "warn"),)))
    assert warn == cycle(snap, pend, NOW)
    under = cycle_timed(snap, pend, NOW, rules=TimeRules((spent("lab-a", "hold", used=10),)))
    assert sorted(a.workload_id for a in under.admissions) == ["a1", "b1"]


def test_hold_on_one_model_holds_only_work_that_asks_for_it():
    a100 = job("x", "lab-a", gpus=1, model="A100")
    h100 = job("y", "lab-a", gpus=1, model="H100")
    d = cycle_timed(
        snapshot([N], TENANTS, []),
        [a100, h100],
        NOW,
        rules=TimeRules((spent("lab-a", "hold", model="A100"),)),
    )
    assert [a.workload_id for a in d.admissions] == ["y"]
    assert "on A100" in d.pending["x"].reason
    assert held_tenants(TimeRules((spent("lab-a", "hold", model="A100"),)))[0].model == "A100"


def test_borrow_only_tenant_cannot_reclaim_and_is_preempted_first():
    cfg = SchedulerConfig(reclaim_after_s=0, min_runtime_s=0)
    # lab-a (guarantee 2) holds 3, lab-b (guarantee 2) holds 1; lab-b wants 1 more: its
    # guarantee lets it reclaim lab-a's borrowed GPU; with lab-a borrow-only, both of lab-a's
    # within-guarantee jobs become reclaimable too, and go first (lowest priority)
    run = [
        running(job("a1", "lab-a", gpus=1, priority=9), N, [0], since=1),
        running(job("a2", "lab-a", gpus=1, priority=9), N, [1], since=2),
        running(job("a3", "lab-a", gpus=1, priority=9), N, [2], since=3),
        running(job("b1", "lab-b", gpus=1, priority=0), N, [3], since=4),
    ]
    want = [job("b2", "lab-b", gpus=1, submit=5)]
    snap = snapshot([N], TENANTS, run)
    d = cycle_timed(snap, want, NOW, cfg, rules=TimeRules((spent("lab-a", "borrow-only"),)))
    assert [p.workload_id for p in d.preemptions] and all(
        p.workload_id.startswith("a") for p in d.preemptions
    )
    # lab-a's own new work within its (now set aside) guarantee reclaims nothing
    N2 = node("m", gpus=2)
    run2 = [
        running(job("b1", "lab-b", gpus=1), N2, [0], since=1),
        running(job("b2", "lab-b", gpus=1), N2, [1], since=1),
        running(job("b3", "lab-b", gpus=1), N, [0], since=1),
        running(job("b4", "lab-b", gpus=1), N, [1], since=1),
        running(job("b5", "lab-b", gpus=1), N, [2], since=1),
        running(job("b6", "lab-b", gpus=1), N, [3], since=1),
    ]
    snap2 = snapshot([N, N2], TENANTS, run2)
    mine = [job("a9", "lab-a", gpus=1, submit=1)]
    assert cycle(snap2, mine, NOW, cfg).preemptions  # without a budget: it reclaims
    d2 = cycle_timed(snap2, mine, NOW, cfg, rules=TimeRules((spent("lab-a", "borrow-only"),)))
    assert not d2.preemptions
    assert "runs only on idle GPUs and is preempted first" in d2.pending["a9"].reason


# -- reservations ------------------------------------------------------------------------


def booking(gpus=2, start=NOW + HOUR, hours=2.0, tenant="lab-b", **kw) -> Reservation:
    return Reservation(kw.pop("id", "r1"), tenant, gpus, start, start + hours * HOUR, **kw)


def test_assignment_is_stable_and_overlaps_are_refused():
    r1 = booking(gpus=3)
    assert assign([r1], [N]) == {"r1": (("n", 0), ("n", 1), ("n", 2))}
    r2 = booking(gpus=2, id="r2", start=NOW + 2 * HOUR)
    why = shortfall(r2, [r1], [N])
    assert why is not None and "overlaps" in why and "r1" in why
    later = booking(gpus=4, id="r3", start=NOW + 3 * HOUR)
    assert shortfall(later, [r1], [N]) is None  # r1 has ended by then
    assert "book at most 4" in (shortfall(booking(gpus=5, id="r4"), [], [N]) or "")
    held = held_capacity(TimeRules(reservations=(r1,)), (N,), NOW)
    assert held[0].gpus == (("n", 0), ("n", 1), ("n", 2)) and held[0].start == r1.start


def test_before_the_window_only_work_that_ends_in_time_or_may_be_stopped_takes_reserved_gpus():
    r = booking(gpus=2)  # GPUs 0 and 1 kept from NOW + 1h
    rules = TimeRules(reservations=(r,))
    busy = [running(job("other", "lab-b", gpus=2), N, [2, 3], since=NOW - 60)]
    snap = snapshot([N], TENANTS, busy)
    long = job("long", "lab-a", gpus=2, preemptible=False)  # no max runtime: runs into it
    d = cycle_timed(snap, [long], NOW, rules=rules)
    assert cycle(snap, [long], NOW).admissions and not d.admissions
    assert "kept for reservation r1" in d.pending["long"].reason
    late = dataclasses.replace(long, id="late", max_runtime_s=2 * HOUR)
    assert not cycle_timed(snap, [late], NOW, rules=rules).admissions
    short = dataclasses.replace(long, id="short", max_runtime_s=HOUR / 2)
    d = cycle_timed(snap, [short], NOW, rules=rules)
    assert [a.workload_id for a in d.admissions] == ["short"]
    pre = job("pre", "lab-a", gpus=2)  # preemptible: may use them, stopped at the start
    d = cycle_timed(snap, [pre], NOW, rules=rules)
    assert [a.workload_id for a in d.admissions] == ["pre"]


def test_at_the_start_others_are_stopped_and_holders_get_the_gpus():
    r = booking(gpus=2)
    rules = TimeRules(reservations=(r,))
    a = job("pre", "lab-a", gpus=2)
    run = [running(a, N, [0, 1], since=NOW - HOUR)]
    t = r.start + 1
    holders = [job("course", "lab-b", "bob", gpus=2, submit=t)]
    d = cycle_timed(snapshot([N], TENANTS, run), holders, t, rules=rules)
    assert [p.workload_id for p in d.preemptions] == ["pre"]
    assert "reservation r1" in d.preemptions[0].reason
    # next cycle: the stop has ended; the holder gets the reserved GPUs
    d = cycle_timed(snapshot([N], TENANTS, []), holders, t + 5, rules=rules)
    (adm,) = d.admissions
    assert {s.gpu_index for s in adm.allocation.shares} == {0, 1}
    # others wait during the window (not preemptible work), and get them after it
    other = [job("x", "lab-a", gpus=4, preemptible=False)]
    d = cycle_timed(snapshot([N], TENANTS, []), other, t, rules=rules)
    assert not d.admissions and "reserved for r1" in d.pending["x"].reason
    d = cycle_timed(snapshot([N], TENANTS, []), other, r.end, rules=rules)
    assert [x.workload_id for x in d.admissions] == ["x"]


def test_idle_reserved_gpus_are_lent_preemptibly_and_taken_back_when_a_holder_waits():
    r = booking(gpus=2)
    rules = TimeRules(reservations=(r,))
    t = r.start + 10
    lent = job("lent", "lab-a", gpus=2)
    busy = [running(job("other", "lab-a", gpus=2), N, [2, 3], since=t - 60)]
    d = cycle_timed(snapshot([N], TENANTS, busy), [lent], t, rules=rules)
    assert [a.workload_id for a in d.admissions] == ["lent"]
    assert {s.gpu_index for s in d.admissions[0].allocation.shares} == {0, 1}
    run = [*busy, running(lent, N, [0, 1], since=t)]
    holder = [job("h", "lab-b", "bob", gpus=1, submit=t + 20)]
    d = cycle_timed(snapshot([N], TENANTS, run), holder, t + 30, rules=rules)
    assert [p.workload_id for p in d.preemptions] == ["lent"]


def test_reservation_for_named_users_only():
    r = booking(gpus=2, users=("bob",), start=NOW - 1)
    rules = TimeRules(reservations=(r,))
    nope = job("carol", "lab-b", "carol", gpus=4, preemptible=False)
    d = cycle_timed(snapshot([N], TENANTS, []), [nope], NOW, rules=rules)
    assert not d.admissions
    yes = job("bob", "lab-b", "bob", gpus=2, preemptible=False)
    d = cycle_timed(snapshot([N], TENANTS, []), [yes], NOW, rules=rules)
    assert [a.workload_id for a in d.admissions] == ["bob"]


def test_work_a_reservation_will_stop_is_known_ahead():
    from gpupool.scheduler.advance import planned_stops

    r = booking(gpus=2)  # GPUs 0 and 1 of n from NOW + 1h
    pre = running(job("pre", "lab-a", gpus=1), N, [0], since=NOW - 60)
    short = running(
        dataclasses.replace(job("short", "lab-a", gpus=1), max_runtime_s=HOUR / 2),
        N,
        [1],
        since=NOW,
    )
    fixed = running(job("fixed", "lab-a", gpus=1, preemptible=False), N, [2], since=NOW)
    holder = running(job("mine", "lab-b", gpus=1), N, [3], since=NOW)
    stops = planned_stops([r], [N], [pre, short, fixed, holder], NOW)
    assert [(rw.workload.id, x.id) for rw, x in stops] == [("pre", "r1")]
    assert planned_stops([r], [N], [pre], NOW, within_s=600) == []  # not within 10 min yet
