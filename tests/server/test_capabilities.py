"""The server checks an executor's optional powers with isinstance (the `ExecutorWith*`
mixins of gpupool.engines.common.executor) and, for an executor without one, answers as an
engine without that power: no logs (404 that says so), no multi-node (422 at submit), no
template (422 at submit), no attribution (a process is its Unix user's), no run times (the
allocation's), no enforcement report (nothing to correct), nothing to prune."""

from __future__ import annotations

import pytest

from gpupool.agent.attribute import ProcessTags
from gpupool.agent.report import build_report
from gpupool.domain import Enforcement
from gpupool.engines.common.executor import (
    CAPABILITIES,
    Executor,
    ExecutorWithLogs,
    ExecutorWithSubmitChecks,
)
from gpupool.engines.fake.executor import FakeExecutor
from gpupool.server.loops.reconciler import ReconcilerLoop
from gpupool.store import AllocationRepo
from gpupool.telemetry.simulated import SimulatedSource
from tests.server.conftest import API


class Bare(Executor):
    """Runs work through a fake, with none of the capabilities."""

    name = "bare"

    def __init__(self, inner: FakeExecutor) -> None:
        self.inner = inner

    def start(self, workload, allocation, *, env=None, unix_user=None):
        return self.inner.start(workload, allocation, env=env, unix_user=unix_user)

    def poll(self, workload_id):
        return self.inner.poll(workload_id)

    def stop(self, workload_id, reason, grace_s=30.0):
        self.inner.stop(workload_id, reason, grace_s)

    def list_running(self):
        return self.inner.list_running()


@pytest.fixture
def bare(world) -> Bare:
    ex = Bare(world.executor)
    assert not any(isinstance(ex, cap) for cap in CAPABILITIES)
    world.ctx.executor = ex
    return ex


def _running(world) -> str:
    wid = world.submit("member", gpus=1)["id"]
    assert world.scheduler.run_once().admitted == [wid]
    return wid


def test_an_engine_without_logs_gets_a_clear_404_in_every_form(world, bare):
    wid = _running(world)
    world.executor.write_log(wid, "kept by the fake, not offered by the engine\n")
    for params in ({}, {"tail": 5}, {"offset": 0}):
        r = world.get("member", f"/workloads/{wid}/logs", params=params)
        assert r.status_code == 404, (params, r.text)
        assert r.json()["detail"] == "the bare executor does not keep logs", params
    assert isinstance(world.executor, ExecutorWithLogs)  # with the power: the text
    world.ctx.executor = world.executor
    got = world.get("member", f"/workloads/{wid}/logs").json()
    assert got["text"].startswith("kept by the fake")


def test_an_engine_without_multi_node_or_templates_refuses_them_at_submit(world, bare):
    world.submit(gpus=1)  # plain work is taken
    wide = {"command": ["x"], "nodes": 2, "gpus_per_node": 1}
    r = world.post("member", "/workloads", json=wide)
    assert r.status_code == 422 and "with the bare engine, on one node" in r.json()["detail"]
    nb = {
        "kind": "notebook",
        "tenant": "lab",
        "pod_spec": {"spec": {"containers": [{"image": "x"}]}},
    }
    r = world.client.post(f"{API}/workloads", json=nb, headers=_vouched(world))
    assert r.status_code == 422, r.text
    assert "bare engine takes no notebook template (pod_spec)" in r.json()["detail"]


class Refuses(Bare, ExecutorWithSubmitChecks):
    """Refuses notebooks at submit, and takes no template (the mixin's default)."""

    def refusal(self, workload):
        return "this engine runs no notebooks" if workload.kind == "notebook" else None


def test_submit_checks_refuse_with_the_executors_reason(world):
    world.ctx.executor = Refuses(world.executor)
    world.submit(gpus=1)  # a job: no refusal
    r = world.post("member", "/workloads", json={"kind": "notebook", "command": ["lab"]})
    assert r.status_code == 403 and r.json()["detail"] == "this engine runs no notebooks"
    nb = {"kind": "notebook", "tenant": "lab", "pod_spec": {"spec": {"containers": []}}}
    r = world.client.post(f"{API}/workloads", json=nb, headers=_vouched(world))
    assert r.status_code == 422 and "takes no notebook template" in r.json()["detail"]
    assert [e["field"] for e in r.json()["errors"]] == ["pod_spec"]


def _vouched(world) -> dict[str, str]:
    return world.h("admin") | {"X-Gpupool-Service-Token": world.tokens["admin"]}


def test_without_an_enforcement_report_there_is_nothing_to_correct(world, bare):
    world.executor.downgrade["GPU-n1-3"] = Enforcement.NONE  # would be corrected ...
    wid = world.submit("member", gpu_fraction=0.5)["id"]
    assert world.scheduler.run_once().admitted == [wid]
    loop = ReconcilerLoop(world.ctx)
    loop.run_once()
    with world.ctx.store.read() as s:
        (share,) = AllocationRepo(s).active_for(wid).shares
    assert share.enforcement is Enforcement.POLICED  # ... had the engine reported it
    world.ctx.executor = world.executor
    ReconcilerLoop(world.ctx).run_once()
    with world.ctx.store.read() as s:
        (share,) = AllocationRepo(s).active_for(wid).shares
    assert share.enforcement is Enforcement.NONE


def _report(world, tags) -> dict[int, dict]:
    sim = SimulatedSource("2xH100-80GB", clock=world.clock, hostname="gpu-a")
    for pid in tags:
        sim.add_process(0, pid, memory_mib=100)
    token = world.post("admin", "/nodes/gpu-a/tokens").json()["token"]
    body = build_report(sim.snapshot(), tags, interval_s=5.0, cpu_milli=8000)
    r = world.client.post(
        f"{API}/nodes/gpu-a/report", json=body, headers={"Authorization": f"Bearer {token}"}
    )
    assert r.status_code == 200, r.text
    procs = world.get("viewer", "/nodes/gpu-a").json()["telemetry"]["processes"]
    return {p["pid"]: p for p in procs}


def test_attribution_asks_owners_for_each_kind_of_container(world):
    """One generic path: the pod and the batch job the agent saw are both resolved by the
    executor's `owners(kind, ids)`; a container it does not start is outside gpupool."""
    a, b = world.submit(gpus=1)["id"], world.submit(gpus=1)["id"]
    world.executor.containers = {
        "pod": {"uid-a": a, "uid-x": None},
        "slurm-job": {"41": b, "42": None},
    }
    tags = {
        1: ProcessTags(1, unix_user="ann", containers={"pod": "uid-a"}),
        2: ProcessTags(2, unix_user="ann", containers={"slurm-job": "41"}),
        3: ProcessTags(3, workload_id=a, unix_user="eve", containers={"pod": "uid-x"}),
        4: ProcessTags(4, workload_id=b, containers={"slurm-job": "42"}),
        5: ProcessTags(5, workload_id=a, unix_user="eve", containers={"slurm-job": "43"}),
    }
    procs = _report(world, tags)
    got = {pid: (p["workload_id"], p["via"]) for pid, p in procs.items()}
    assert got == {
        1: (a, "pod"),
        2: (b, "slurm"),
        3: (None, "unix-user"),  # its own claim counts for nothing
        4: (None, "none"),
        5: (None, "unix-user"),  # a job the executor does not know: no workload's
    }
    assert procs[2]["slurm_job_id"] == "41" and procs[1]["pod_uid"] == "uid-a"


def test_an_engine_without_attribution_owns_no_container(world, bare):
    a = world.submit(gpus=1)["id"]
    world.executor.containers = {"pod": {"uid-a": a}}  # known to the fake, not offered
    procs = _report(world, {1: ProcessTags(1, unix_user="ann", containers={"pod": "uid-a"})})
    assert (procs[1]["workload_id"], procs[1]["via"]) == (None, "unix-user")
