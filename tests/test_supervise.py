"""The supervisor of `gpupool up`'s child processes: the restart budget on an injected clock,
and a stop that escalates to SIGKILL for a child that ignores the polite request and SIGTERM
(the API workers' and the hub's own cases are in tests/server/test_workers.py and
tests/server/test_hub_keeper.py)."""

from __future__ import annotations

import subprocess
import sys

from gpupool.supervise import RestartBudget, Supervisor
from tests.support import wait_for


def test_restart_budget_slides_with_the_clock():
    now = [0.0]
    budget = RestartBudget(2, clock=lambda: now[0])
    assert budget.take() and budget.take() and not budget.take()
    now[0] = 59.9
    assert not budget.take()
    now[0] = 60.0
    assert budget.take() and budget.take() and not budget.take()


def test_stop_asks_then_terminates_then_kills(tmp_path):
    ready = tmp_path / "ready"
    stubborn = (
        "import pathlib, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"pathlib.Path({str(ready)!r}).write_text('x')\n"
        "sys.stdin.read()\n"  # the polite request (stdin closed) is ignored too
        "time.sleep(600)\n"
    )
    asked: list[int] = []

    def ask(proc: subprocess.Popen) -> None:
        asked.append(proc.pid)
        proc.stdin.close()

    sup = Supervisor(
        1,
        lambda _: subprocess.Popen(
            [sys.executable, "-c", stubborn], stdin=subprocess.PIPE, start_new_session=True
        ),
        ask=ask,
        grace_s=0.5,  # a bound on each wait, not a duration the test relies on
    )
    sup.start(watch=False)
    proc = sup.procs[1]
    wait_for(ready.exists, "the child to ignore SIGTERM")
    sup.stop()
    assert asked == [proc.pid]
    assert proc.returncode == -9  # only SIGKILL ended it


def test_exits_are_reported_and_all_gone_is_called_once_past_the_budget():
    seen: list[tuple[int, int, bool]] = []
    gone: list[bool] = []
    sup = Supervisor(
        2,
        lambda i: subprocess.Popen(
            [sys.executable, "-c", f"raise SystemExit({i})"], start_new_session=True
        ),
        on_exit=lambda i, code, restarted: seen.append((i, code, restarted)),
        on_all_gone=lambda: gone.append(True),
        budget=RestartBudget(1, clock=lambda: 0.0),
    )
    sup.start(watch=False)
    for _ in range(2):
        for proc in list(sup.procs.values()):
            proc.wait()
        sup.check()
    assert seen == [(1, 1, True), (2, 2, False), (1, 1, False)]
    assert sup.procs == {} and gone == [True]
