"""`gpupool queue` and `gpupool show` show the start-time forecast (issue 35 part 1) within 80
columns; `gpupool tenant set` sets the runtime policy (part 5) and refuses bad durations."""

from __future__ import annotations

from gpupool.clock import ManualClock
from gpupool.server.loops.forecast import ForecastLoop
from gpupool.server.loops.scheduler import SchedulerLoop
from tests.cli.test_logs_requeued import gp, served  # noqa: F401 - the fixture


def test_queue_and_show_give_the_forecast(served):  # noqa: F811
    ctx, executor = served
    loop = ctx.loops.get("scheduler")
    assert isinstance(loop, SchedulerLoop) and isinstance(executor.clock, ManualClock)
    for _ in range(4):
        gp(ctx, "ann", "run", "--gpus", "1", "--max-runtime", "7200", "--", "python3", "a.py")
    loop.run_once()
    wid = gp(ctx, "ann", "run", "--gpus", "1", "--", "python3", "b.py").output.strip()
    loop.run_once()
    ForecastLoop(ctx).run_once()
    r = gp(ctx, "ann", "queue")
    assert r.exit_code == 0, r.output
    assert "STARTS" in r.output and max(len(line) for line in r.output.splitlines()) <= 80
    r = gp(ctx, "ann", "ls")
    (row,) = [line for line in r.output.splitlines() if line.startswith(wid)]
    assert "pending, now" in row  # the manual clock is in the past: expected already
    r = gp(ctx, "ann", "show", wid)
    text = " ".join(r.output.split())
    assert "starts expected to start around" in text
    assert "rests on when 3 workloads ahead of it end: 3 from declared max runtimes" in text
    assert "It runs about 1h: a default of 1 h (no past runs of 1-GPU jobs)" in text


def test_tenant_set_runtime_policy(served):  # noqa: F811
    ctx, _ = served
    r = gp(ctx, "root", "tenant", "set", "lab", "--default-runtime", "8h", "--max-runtime", "2d")
    assert r.exit_code == 0, r.output
    assert "lab: default runtime 8h, max runtime 2d" in r.output
    r = gp(ctx, "ann", "run", "--gpus", "1", "--max-runtime", "200000", "--", "python3", "x.py")
    assert r.exit_code != 0 and "maximum of 48 h" in r.output
    r = gp(ctx, "root", "tenant", "set", "lab", "--max-runtime", "soon")
    assert r.exit_code == 2 and "give a duration above 0" in r.output
    r = gp(ctx, "root", "tenant", "set", "lab", "--no-default-runtime")
    assert "default runtime none, max runtime 2d" in r.output
