"""The capabilities the suite checks, by the executor's declared mixins (`isinstance`, as the
server does): a test of a capability runs for every engine that declares it and is skipped,
with the reason, for those that do not."""

from __future__ import annotations

import pytest

from gpupool.engines.common.executor import (
    ExecutorWithAdoption,
    ExecutorWithAttribution,
    ExecutorWithLogs,
    ExecutorWithMultiNode,
    ExecutorWithNodePools,
    ExecutorWithNotebooks,
    ExecutorWithPruning,
    ExecutorWithRunTimes,
    ExecutorWithSharedGPUs,
    ExecutorWithSubmitChecks,
)
from tests.engines.contract.adapter import EngineUnderTest

CAPABILITIES: dict[str, type] = {
    "logs": ExecutorWithLogs,
    "adoption": ExecutorWithAdoption,
    "multi-node": ExecutorWithMultiNode,
    "shared GPUs": ExecutorWithSharedGPUs,
    "notebooks": ExecutorWithNotebooks,
    "submit checks": ExecutorWithSubmitChecks,
    "attribution": ExecutorWithAttribution,
    "run times": ExecutorWithRunTimes,
    "pruning": ExecutorWithPruning,
    "node pools": ExecutorWithNodePools,
}


def has(eut: EngineUnderTest, capability: str) -> bool:
    return isinstance(eut.executor, CAPABILITIES[capability])


def need(eut: EngineUnderTest, *capabilities: str) -> None:
    """Skip unless the engine runs work here and its executor declares `capabilities`."""
    if eut.cannot_run:
        pytest.skip(eut.cannot_run)
    for c in capabilities:
        if not has(eut, c):
            pytest.skip(f"the {eut.name} executor does not declare {CAPABILITIES[c].__name__}")
