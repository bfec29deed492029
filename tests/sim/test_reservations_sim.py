"""Advance reservations in scenarios (issue 35 part 4): parsed and checked like the API's,
replayed through the same pure code, and their cost shows in others' waits."""

from __future__ import annotations

import pytest

from gpupool.sim import ScenarioError, parse_scenario, simulate

BASE = {
    "cluster": {"nodes": [{"name": "n", "gpus": 4, "gpu_model": "H100"}]},
    "tenants": [
        {"name": "course", "guaranteed_gpus": 2},
        {"name": "lab", "guaranteed_gpus": 2},
    ],
    "workloads": [
        # lab: four 1-GPU jobs of 2 h at t=0, not preemptible (they may not run into the
        # window unless they end before it)
        {
            "id": "lab",
            "tenant": "lab",
            "gpus": 1,
            "duration": 7200,
            "count": 4,
            "preemptible": False,
        },
        # the course's students arrive at the window's start
        {
            "id": "student",
            "tenant": "course",
            "gpus": 1,
            "duration": 1800,
            "count": 2,
            "submit": 3600,
            "preemptible": False,
        },
    ],
}
WINDOW = {
    "id": "ml101",
    "tenant": "course",
    "gpus": 2,
    "gpu_model": "H100",
    "start": 3600,
    "duration": 7200,
}


def test_the_reservation_costs_others_wait_and_holders_start_at_once():
    plain = simulate(parse_scenario(BASE))
    booked = simulate(parse_scenario({**BASE, "reservations": [WINDOW]}))
    # without the reservation, the students wait for the lab's jobs to end (t=7200)
    assert plain.records["student-0"].first_start == 7200
    # with it, two lab jobs cannot start before the window ends (they would run into it),
    # and the students start at the window's start
    assert booked.records["student-0"].first_start == 3600
    assert booked.records["student-1"].first_start == 3600
    waits = sorted(booked.records[f"lab-{i}"].first_start for i in range(4))
    assert waits == [0, 0, 7200, 7200]
    assert sum(waits) > sum(plain.records[f"lab-{i}"].first_start for i in range(4))


def test_preemptible_work_borrows_the_gpus_and_is_stopped_at_the_start():
    data = {**BASE, "reservations": [WINDOW]}
    data["workloads"] = [{**BASE["workloads"][0], "preemptible": True}, BASE["workloads"][1]]
    r = simulate(parse_scenario(data))
    assert all(r.records[f"lab-{i}"].first_start == 0 for i in range(4))
    assert r.records["student-0"].first_start == 3600
    assert r.preemptions >= 2


@pytest.mark.parametrize(
    ("window", "text"),
    [
        ({**WINDOW, "duration": 0}, "no length"),
        ({**WINDOW, "gpus": 3}, "guarantee"),
        ({**WINDOW, "tenant": "nope"}, "unknown tenant"),
        ({**WINDOW, "end": 9000}, "give end or duration"),
    ],
)
def test_bad_reservations_are_refused_with_where_and_why(window, text):
    with pytest.raises(ScenarioError, match=text) as e:
        parse_scenario({**BASE, "reservations": [window]})
    assert "reservations[0] (id ml101)" in str(e.value)


def test_overlapping_reservations_on_the_same_gpus_are_refused():
    data = {
        **BASE,
        "tenants": [
            {"name": "course", "guaranteed_gpus": 2},
            {"name": "lab", "guaranteed_gpus": 3},
        ],
        "reservations": [
            WINDOW,
            {**WINDOW, "id": "other", "tenant": "lab", "gpus": 3, "start": 7000},
        ],
    }
    with pytest.raises(ScenarioError, match="overlaps"):
        parse_scenario(data)
