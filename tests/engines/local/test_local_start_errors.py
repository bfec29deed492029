"""The local executor says which start errors are permanent: a command the kernel can never
execute (a NUL byte, an argument over MAX_ARG_STRLEN) fails for good, with real processes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpupool.clock import ManualClock
from gpupool.domain import Workload
from gpupool.domain.commands import LINUX_MAX_ARG_STRLEN
from gpupool.engines.common.executor import ExecState, StartError
from gpupool.engines.local.executor import LocalExecutor


@pytest.fixture
def ex(tmp_path: Path) -> LocalExecutor:
    return LocalExecutor(tmp_path / "jobs", clock=ManualClock(1000), user_mode="single-user")


def test_a_nul_byte_in_an_argument_is_a_permanent_start_error(ex):
    with pytest.raises(StartError, match="null byte") as e:
        ex.start(Workload(id="w1", tenant="t", owner="a", command=("echo", "a\x00b")), None)
    assert e.value.permanent
    assert ex.poll("w1").state is ExecState.UNKNOWN


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="MAX_ARG_STRLEN is Linux's")
def test_an_argument_longer_than_the_kernel_takes_is_a_permanent_start_error(ex):
    long_arg = "x" * LINUX_MAX_ARG_STRLEN  # its NUL terminator makes it one byte too long
    with pytest.raises(StartError, match="too long") as e:
        ex.start(Workload(id="w1", tenant="t", owner="a", command=("echo", long_arg)), None)
    assert e.value.permanent
