"""Reclaim on a real Slurm, through the API: a tenant within its guarantee takes back a GPU
that another tenant borrowed; the borrowing job gets SIGTERM in Slurm, goes back to
gpupool's queue and later runs again as a new Slurm job under the same name."""

from __future__ import annotations

import pytest

from tests.slurm.conftest import sacct, sh

pytestmark = pytest.mark.slurm


def jobs_named(name: str) -> list[tuple[str, str]]:
    """(job id, state) of every Slurm job of that name, oldest first (squeue keeps ended ones
    for MinJobAge)."""
    out = sh("squeue", "-h", "-t", "all", "--name", name, "-o", "%i %T")
    return sorted((tuple(line.split()) for line in out.splitlines()), key=lambda r: int(r[0]))  # type: ignore[misc]


def test_reclaim_preempts_a_borrowing_job_which_requeues_and_runs_again(make_world):
    w = make_world()
    # "other" (guaranteed 1, limit 4) borrows all four GPUs
    bob = [w.submit("slbob", gpus=1, command=["sleep", "300"])["id"] for _ in range(4)]
    w.schedule()
    for wid in bob:
        w.settle(wid, {"running"}, user="slbob")
    w.clock.advance(w.ctx.settings.scheduler.min_runtime_s + 1)
    ann = w.submit("slann", gpus=1, command=["sleep", "300"])["id"]  # within lab's guarantee
    w.schedule()
    assert w.get("slann", ann)["state"] == "pending"
    w.clock.advance(w.ctx.settings.scheduler.reclaim_after_s)
    w.schedule()
    victims = [wid for wid in bob if _stopping(w, wid)]
    assert len(victims) == 1, [w.get("slbob", b) for b in bob]
    victim = victims[0]
    first_job = w.job_id(victim)
    back = w.settle(victim, {"pending"}, user="slbob")  # ended in Slurm, requeued in gpupool
    assert back["preemptions"] == 1
    kinds = [e["kind"] for e in back["events"]]
    assert "workload.preempted" in kinds
    rec = sacct(first_job)  # SIGTERM through scancel, within the grace
    assert rec["state"]["current"] in ("CANCELLED", "FAILED"), rec["state"]
    w.schedule()
    w.settle(ann, {"running"})
    assert sacct(w.job_id(ann), final=False)["account"] == "gp.lab"
    assert w.get("slbob", victim)["state"] == "pending"  # no GPU for it now
    w.client.delete(f"/api/v1/workloads/{ann}", headers=w.h("slann"))
    w.settle(ann, {"cancelled"})
    w.schedule()
    again = w.settle(victim, {"running"}, user="slbob")
    second_job = w.job_id(victim)
    assert second_job != first_job and again["preemptions"] == 1
    states = dict(jobs_named(f"gpupool-{victim}"))
    assert set(states) == {first_job, second_job}  # submitted once per run, no more
    assert states[second_job] == "RUNNING" and states[first_job] != "RUNNING"


def _stopping(w, wid: str) -> bool:  # noqa: ANN001
    return any(e["kind"] == "workload.stopping" for e in w.get("slbob", wid)["events"])
