"""`gpupool show` and `gpupool ls` tell the owner of running work that a reclaim will take it
(issue 30 item 6): when, and for whose guarantee; `ls` in a short form within 80 columns."""

from __future__ import annotations

from datetime import UTC, datetime

from gpupool.clock import ManualClock
from gpupool.domain import Quota, Tenant
from gpupool.server.loops.scheduler import SchedulerLoop
from gpupool.store import TenantRepo
from tests.cli.test_logs_requeued import gp, served  # noqa: F401 - the fixture


def test_show_and_ls_say_when_a_borrowing_job_will_be_preempted(served):  # noqa: F811
    ctx, executor = served
    loop = ctx.loops.get("scheduler")
    assert isinstance(loop, SchedulerLoop)
    clock = executor.clock
    assert isinstance(clock, ManualClock)
    with ctx.store.write() as s:
        TenantRepo(s).save(Tenant("other", Quota.gpus(1, 4)), 0, create=False)
    big = gp(ctx, "otto", "run", "--gpus", "4", "--", "python3", "train.py").output.strip()
    loop.run_once()
    clock.advance(3600)
    small = gp(ctx, "ann", "run", "--gpus", "2", "--", "python3", "eval.py").output.strip()
    assert loop.run_once().preempted == []
    due = clock.now() - 1 + ctx.settings.scheduler.reclaim_after_s  # submitted 1 s ago
    hhmm = datetime.fromtimestamp(due, UTC).strftime("%H:%M")

    r = gp(ctx, "otto", "show", big)
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())  # long values wrap under their column
    assert (
        f"preemption will be preempted at {hhmm} UTC for lab's guarantee unless GPUs "
        f"free up (for {small})"
    ) in text
    r = gp(ctx, "otto", "ls")
    assert r.exit_code == 0, r.output
    (row,) = [line for line in r.output.splitlines() if line.startswith(big)]
    assert f"running, preempt {hhmm}" in row
    assert max(len(line) for line in r.output.splitlines()) <= 80
    r = gp(ctx, "ann", "show", small)  # the waiting side: nothing planned against it
    assert "preemption" not in r.output
