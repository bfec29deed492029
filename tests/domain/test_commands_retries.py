"""Pure rules: which commands an OS can execute (`domain.commands`), what a failed start
leads to (`domain.retries`), and new tenant and user names (`domain.tenancy`)."""

from __future__ import annotations

import pytest

from gpupool.domain import ValidationError, Workload, WorkloadState, transition
from gpupool.domain.commands import ArgLimits, check_command
from gpupool.domain.retries import StartRetryPolicy, backing_off, clock_time
from gpupool.domain.tenancy import check_tenant_name, check_user_name

S = WorkloadState
SMALL = ArgLimits(arg_max=200_000, arg_strlen_max=101)


def test_commands_the_kernel_takes_pass():
    check_command([], SMALL)  # whether one is needed is the caller's rule
    check_command(["python", "-c", "print(1)", ""], SMALL)  # empty later arguments are fine
    check_command(["echo", "x" * 100], SMALL)  # 100 bytes + NUL = the limit
    check_command(["echo", "x" * 10_000_000], ArgLimits(arg_max=1 << 25, arg_strlen_max=None))


@pytest.mark.parametrize(
    "command,words",
    [
        ([""], "command[0] is empty"),
        (["echo", "a\x00b"], "command[1] contains a NUL byte"),
        (["echo", "x" * 101], "command[1] is 101 bytes"),
        (["echo", "é" * 51], "command[1] is 102 bytes"),  # bytes, not characters
        (["echo"] + ["y" * 100] * 2000, "bytes in all"),
    ],
)
def test_commands_no_kernel_takes_are_refused_naming_the_element(command, words):
    with pytest.raises(ValidationError) as e:
        check_command(command, SMALL)
    assert words in str(e.value) and e.value.field == "command"


def test_the_environment_counts_too():
    with pytest.raises(ValidationError, match="NUL") as e:
        check_command(["x"], SMALL, env={"A": "b\x00"})
    assert e.value.field == "env"
    with pytest.raises(ValidationError, match="per variable"):
        check_command(["x"], SMALL, env={"A": "b" * 100})


def test_the_argv_budget_keeps_room_for_the_environment():
    assert ArgLimits(arg_max=2 << 20).argv_budget == (2 << 20) - 64 * 1024
    assert ArgLimits(arg_max=4096).argv_budget == 2048  # never less than half


def test_transient_failures_wait_doubling_then_give_up():
    p = StartRetryPolicy(max_attempts=4, backoff_s=10, max_backoff_s=25)
    now = 1_780_000_000.0
    first = p.after_failure(0, "busy", permanent=False, now=now)
    assert (first.attempts, first.retry_at) == (1, now + 10)
    assert (
        first.reason
        == f"could not start (attempt 1 of 4): busy; retrying after {clock_time(now + 10)}"
    )
    assert [p.wait_s(n) for n in (1, 2, 3, 4)] == [10, 20, 25, 25]
    last = p.after_failure(3, "busy", permanent=False, now=now)
    assert last.gives_up and last.reason == "could not start after 4 attempts; giving up: busy"


def test_a_permanent_failure_gives_up_at_once():
    out = StartRetryPolicy().after_failure(0, "no Unix account", permanent=True, now=0)
    assert out.gives_up and out.attempts == 1 and out.reason == "could not start: no Unix account"


def test_policy_and_backing_off_rules():
    with pytest.raises(ValidationError):
        StartRetryPolicy(max_attempts=0)
    with pytest.raises(ValidationError):
        StartRetryPolicy(backoff_s=10, max_backoff_s=5)
    assert backing_off(10.0, 9.9) and not backing_off(10.0, 10.0) and not backing_off(None, 0)
    assert clock_time(0) == "00:00:00 UTC"


def test_starting_or_a_requeue_after_preemption_clears_the_retry_state():
    w = Workload("w1", "lab", "ann", state=S.ADMITTED, start_attempts=2, retry_at=50.0)
    started, _ = transition(w, S.STARTING, 60, "started")
    assert (started.start_attempts, started.retry_at) == (0, None)
    preempted, _ = transition(w, S.PREEMPTED, 60, "preempted")
    requeued, _ = transition(preempted, S.PENDING, 61, "requeued")
    assert (requeued.start_attempts, requeued.retry_at) == (0, None)
    back, _ = transition(w, S.PENDING, 60, "could not start")  # the loop records the retry
    assert (back.start_attempts, back.retry_at) == (2, 50.0)


@pytest.mark.parametrize("name", ["lab", "physics/lab-a", "a.b/c_d", "_x/1"])
def test_good_new_tenant_names(name):
    assert check_tenant_name(name) == name


@pytest.mark.parametrize(
    "name", ["", ".", "..", "a/..", "a/./b", "-x", "a/-x", "a//b", "/a", "a/", "a..b", "é", "a\nb"]
)
def test_bad_new_tenant_names_say_the_rule(name):
    with pytest.raises(ValidationError, match="segments joined by '/'"):
        check_tenant_name(name)


@pytest.mark.parametrize("name", ["", ".", "..", "-x", ".x", "a..b", "@x", "a/b", "é", "a\n"])
def test_bad_new_user_names_say_the_rule(name):
    with pytest.raises(ValidationError, match="starts with a letter, digit or '_'"):
        check_user_name(name)
