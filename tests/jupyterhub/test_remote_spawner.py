"""`wait_endpoint`, the remote spawner's wait for a notebook run by the engine, against the
real gpupool app (in process, the fake executor in the engine's place): it returns the
endpoint the executor reported, None when the work went back to the queue, and fails with
the reason when the work ended or never served. (End to end with a real hub and real Slurm:
tests/slurm/test_slurm_notebooks.py.)"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from tornado import web

from gpupool.domain import WorkloadState
from gpupool.jupyterhub.client import GpupoolClient
from gpupool.jupyterhub.remote import wait_endpoint
from gpupool.server.loops.reconciler import ReconcilerLoop
from gpupool.server.services import lifecycle
from tests.server.conftest import world  # noqa: F401  (the real app over a real store)


def client_of(w, role: str = "member") -> GpupoolClient:  # noqa: ANN001
    return GpupoolClient("http://gpupool", w.tokens[role], transport=httpx.ASGITransport(app=w.app))


def wait(w, wid: str, timeout_s: float = 5.0):  # noqa: ANN001, ANN201
    said: list[str] = []

    async def go():  # noqa: ANN202
        c = client_of(w)
        try:
            return await wait_endpoint(
                c, wid, timeout_s=timeout_s, poll_s=0.01, progress=lambda p, m: said.append(m)
            )
        finally:
            await c.aclose()

    return asyncio.run(go()), said


def notebook(w) -> str:  # noqa: ANN001
    nb = w.submit(kind="notebook", gpus=1, command=["jupyterhub-singleuser"])
    w.scheduler.run_once()
    return nb["id"]


def test_the_endpoint_the_executor_reported_is_returned(world):  # noqa: F811
    wid = notebook(world)
    world.executor.process(wid).endpoint = "http://node7:41234"
    ReconcilerLoop(world.ctx).run_once()
    url, _ = wait(world, wid)
    assert url == "http://node7:41234"


def test_running_without_an_endpoint_yet_times_out_saying_so(world):  # noqa: F811
    wid = notebook(world)
    ReconcilerLoop(world.ctx).run_once()
    with pytest.raises(web.HTTPError) as e:
        wait(world, wid, timeout_s=0.05)
    assert e.value.status_code == 503 and "did not start serving" in e.value.log_message


def test_work_given_back_to_the_queue_is_waited_for_again(world):  # noqa: F811
    wid = notebook(world)
    lifecycle.request_stop(world.ctx, wid, WorkloadState.PREEMPTED, "reclaimed")
    ReconcilerLoop(world.ctx).run_once()
    assert world.get("member", f"/workloads/{wid}").json()["state"] == "pending"
    url, _ = wait(world, wid)
    assert url is None  # the spawner goes back to waiting in the queue


def test_work_that_ended_fails_the_spawn_with_the_reason(world):  # noqa: F811
    wid = notebook(world)
    world.executor.finish(wid, 3)
    ReconcilerLoop(world.ctx).run_once()
    with pytest.raises(web.HTTPError) as e:
        wait(world, wid)
    assert e.value.status_code == 409 and "ended before it served" in e.value.log_message
