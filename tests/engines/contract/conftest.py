"""`engine_under_test`: every test of the contract suite runs once per engine (README.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engines.contract.adapter import EngineUnderTest
from tests.engines.contract.processes import (
    LocalUnderTest,
    SlurmUnderTest,
    slurm_missing,
)
from tests.engines.contract.scripted import (
    FakeUnderTest,
    KubernetesUnderTest,
    TemplateUnderTest,
)

ENGINES = [
    "fake",
    "local",
    "kubernetes",
    pytest.param("slurm", marks=pytest.mark.slurm),
    "template",
]


@pytest.fixture(params=ENGINES)
def engine_under_test(
    request: pytest.FixtureRequest, tmp_path: Path, job_tmp: Path
) -> Iterator[EngineUnderTest]:
    """The adapter of one engine, opened over an injected clock; closed (its work ended)
    after the test."""
    name = request.param
    eut: EngineUnderTest
    if name == "fake":
        eut = FakeUnderTest()
    elif name == "local":
        eut = LocalUnderTest(tmp_path / "data", job_tmp)
    elif name == "kubernetes":
        pytest.importorskip("kubernetes")
        eut = KubernetesUnderTest()
    elif name == "slurm":
        why = slurm_missing()
        if why:
            pytest.skip(why)
        eut = SlurmUnderTest(job_tmp / "slurm-output", job_tmp)
    else:
        eut = TemplateUnderTest()
    try:
        yield eut
    finally:
        eut.close()
