from __future__ import annotations

import pytest

pytest.importorskip("kubernetes")

from gpupool.clock import ManualClock  # noqa: E402
from gpupool.engines.kubernetes.client import KubeApi  # noqa: E402
from tests.kubernetes.fakeapi import FakeKube  # noqa: E402


@pytest.fixture
def kube():
    k = FakeKube().start()
    try:
        yield k
    finally:
        k.stop()


@pytest.fixture
def api(kube):
    return KubeApi(kube.client())


@pytest.fixture
def clock():
    return ManualClock(1_780_000_000.0)
