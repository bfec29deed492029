"""End to end with API workers (`gpupool up --workers 2`): a real JupyterHub spawns real
notebooks through gpupool's worker processes. Submissions and queue reads are answered by
the workers, the scheduler and the local engine (which runs the notebooks) run in the
primary, and notebooks still get their own GPUs, queue when none is free and start by
themselves when one frees up.
"""

from __future__ import annotations

import shutil

import httpx
import pytest

from tests.jupyterhub.stack import Stack, build, events, wait_for
from tests.jupyterhub.test_hub_e2e import SPAWN_S

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("configurable-http-proxy") is None,
        reason="configurable-http-proxy missing; scripts/test installs it with npm",
    ),
]


@pytest.fixture
def stack(tmp_path) -> Stack:
    st = build(tmp_path / "hub", workers=2)
    yield st
    st.close()


def test_notebooks_spawn_queue_and_start_through_api_workers(stack):
    answered = {httpx.get(f"{stack.api_url}/healthz").json()["process"] for _ in range(20)}
    assert answered <= {"worker-1", "worker-2"}  # the public port is the workers'
    for user in ("alice", "bob", "carol"):
        stack.login(user)
    envs = stack.spawn_all_ready(("alice", "bob"), {"profile": "gpu"}, SPAWN_S)
    assert {e["CUDA_VISIBLE_DEVICES"] for e in envs.values()} == set(stack.gpu_uuids)

    assert stack.spawn("carol", {"profile": "gpu"}).status_code == 202
    seen = events(stack, "carol", lambda ev: "in line" in ev.get("message", ""))
    assert "Queued for a GPU: 1st in line for lab" in seen[-1]["message"]

    assert stack.hub_api("DELETE", "/users/alice/server").status_code in (202, 204)
    wait_for(lambda: stack.ready("carol"), "carol's notebook", SPAWN_S, 0.5)
    assert (
        stack.notebook_env("carol")["CUDA_VISIBLE_DEVICES"]
        == (envs["alice"]["CUDA_VISIBLE_DEVICES"])
    )
