"""The wire's names (gpupool.api, which imports nothing of gpupool.domain by design) spell
the domain's enums exactly: a state, mode or period added to one and not the other would be
refused by the API or fail to serialize (a 500) instead of failing here."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, get_args

import pytest

from gpupool.api.budgets import BudgetModeName, BudgetPeriodName
from gpupool.api.cluster import Sharing
from gpupool.api.nodepools import PoolNodeStateName
from gpupool.api.workloads import Kind, State
from gpupool.domain import SharingMode, WorkloadKind, WorkloadState
from gpupool.domain.budgets import BudgetMode, BudgetPeriod
from gpupool.domain.nodepools import PoolNodeState


@pytest.mark.parametrize(
    ("wire", "enum"),
    [
        (BudgetPeriodName, BudgetPeriod),
        (BudgetModeName, BudgetMode),
        (PoolNodeStateName, PoolNodeState),
        (Kind, WorkloadKind),
        (State, WorkloadState),
        (Sharing, SharingMode),
    ],
    ids=lambda x: getattr(x, "__name__", ""),
)
def test_wire_names_are_the_domain_values(wire: Any, enum: type[StrEnum]) -> None:
    assert set(get_args(wire)) == {str(v) for v in enum}
