"""`gpupool logs` of a job that was preempted and requeued (issue 30 item 4): it prints the
earlier run's output (it printed nothing and exited 0) and says on stderr that the job was
requeued after preemption. A real server on a loopback port, loops driven by the test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from gpupool.cli.main import app as cli
from gpupool.clock import ManualClock
from gpupool.engines.fake.engine import FakeEngine
from gpupool.engines.fake.executor import FakeExecutor
from gpupool.server.context import AppContext
from gpupool.server.loops.scheduler import SchedulerLoop
from gpupool.server.services.accounts import issue_token
from gpupool.server.settings import Settings
from gpupool.store import open_store
from gpupool.system import SystemSettings, build_system
from tests.server.conftest import seed
from tests.support import ServedApp


@pytest.fixture
def served(tmp_path, monkeypatch) -> Iterator[tuple[AppContext, FakeExecutor]]:
    store = open_store(f"sqlite:///{tmp_path / 'gpupool.db'}")
    clock = ManualClock(1_780_000_000.0)
    executor = FakeExecutor(clock)
    settings = Settings(database_url=store.url, start_loops=False)
    system = build_system(
        SystemSettings(server=settings), FakeEngine(executor), clock=clock, store=store
    )
    seed(system.ctx)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    try:
        with ServedApp(system.app) as url:
            monkeypatch.setenv("GPUPOOL_URL", url)
            yield system.ctx, executor
    finally:
        system.stop()
        store.close()


def gp(ctx: AppContext, user: str, *args: str):
    token = issue_token(ctx, user, "cli-test", None).token
    return CliRunner().invoke(cli, list(args), env={"GPUPOOL_TOKEN": token})


def test_logs_of_a_requeued_job_print_its_earlier_run_and_say_it_was_preempted(served):
    ctx, executor = served
    loop = ctx.loops.get("scheduler")
    assert isinstance(loop, SchedulerLoop)
    clock = executor.clock
    assert isinstance(clock, ManualClock)
    big = gp(ctx, "otto", "run", "--gpus", "4", "--", "python3", "train.py").output.strip()
    loop.run_once()
    executor.write_log(big, "epoch 1\nepoch 2\n")
    clock.advance(3600)
    gp(ctx, "ann", "run", "--gpus", "2", "--", "python3", "eval.py")
    clock.advance(ctx.settings.scheduler.reclaim_after_s)
    assert loop.run_once().preempted == [big]

    r = gp(ctx, "otto", "logs", big)
    assert r.exit_code == 0, r.output
    assert r.stdout == "epoch 1\nepoch 2\n"
    assert "note: " in r.stderr and f"{big} was preempted at " in r.stderr
    assert "requeued" in r.stderr and "waits to run again" in r.stderr
    r = gp(ctx, "otto", "logs", "--tail", "1", big)
    assert r.stdout == "epoch 2\n" and "requeued" in r.stderr
