from __future__ import annotations

import pytest

pytest.importorskip("kubernetes")

from gpupool.clock import ManualClock  # noqa: E402
from gpupool.engines.kubernetes.client import KubeApi  # noqa: E402
from tests.kubernetes.fakeapi import FakeKube  # noqa: E402
from tests.kubernetes.rbac_rules import allowed  # noqa: E402


@pytest.fixture
def kube():
    """The fake API server; at the end, every request the test made must be one the chart's
    RBAC grants (tests/kubernetes/rbac_rules.py)."""
    k = FakeKube().start()
    try:
        yield k
    finally:
        k.stop()
    denied = sorted({(m, p) for m, p in k.requests if not allowed(m, p)})
    assert not denied, f"requests the chart's RBAC does not grant: {denied}"


@pytest.fixture
def api(kube):
    return KubeApi(kube.client())


@pytest.fixture
def clock():
    return ManualClock(1_780_000_000.0)
