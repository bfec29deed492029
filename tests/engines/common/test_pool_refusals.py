"""A pool whose engines differ in what they take (issue 31): work that engine `a` refuses and
engine `b` takes is pinned to `b` at submit and runs there only, though `a` is the default
and its smaller node is where packing puts one GPU; work every engine refuses is refused
(403); `start` never hands a refusing engine its work. A real system (API, store,
scheduler loop) over fake engines."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from gpupool.clock import ManualClock
from gpupool.domain import GPU, Allocation, Node, Share, Workload
from gpupool.engines.common.executor import ExecutorWithSubmitChecks, StartError, TemplateProblem
from gpupool.engines.common.pool import PoolExecutor
from gpupool.engines.fake.engine import FakeEngine
from gpupool.engines.fake.executor import FakeExecutor
from gpupool.server.settings import Settings
from gpupool.system import SystemSettings, build_system
from tests.server.conftest import API, World, seed, serving


class NoBurn(FakeExecutor, ExecutorWithSubmitChecks):
    """Refuses work whose command is `gpu-burn` (a site rule, say); takes everything else."""

    def refusal(self, workload: Workload) -> str | None:
        return "gpu-burn is not run here" if workload.command[:1] == ("gpu-burn",) else None


class TakesAll(FakeExecutor, ExecutorWithSubmitChecks):
    """Refuses nothing and takes every notebook template as given."""

    def refusal(self, workload: Workload) -> str | None:
        return None

    def template_problem(self, template: Mapping[str, Any], owner: str) -> TemplateProblem | None:
        return None


class Named(FakeEngine):
    def __init__(self, name: str, node: Node, executor: FakeExecutor) -> None:
        super().__init__(executor, nodes=[node])
        self.name = name


def _node(name: str, gpus: int) -> Node:
    return Node(
        name,
        tuple(GPU(i, f"GPU-{name}-{i}", "H100", 81920) for i in range(gpus)),
        cpu_milli=64000,
        memory_mib=512000,
    )


@pytest.fixture
def mixed(tmp_path) -> Iterator[tuple[World, NoBurn, TakesAll]]:
    """Engines `a` (default; node na, 1 GPU; refuses gpu-burn, takes no template) and `b`
    (node nb, 4 GPUs; takes everything)."""
    clock = ManualClock(1_780_000_000.0)
    a, b = NoBurn(clock), TakesAll(clock)
    settings = Settings(database_url=f"sqlite:///{tmp_path}/g.db", start_loops=False)
    engines = [Named("a", _node("na", 1), a), Named("b", _node("nb", 4), b)]
    system = build_system(SystemSettings(server=settings), engines, clock=clock)
    seed(system.app.state.ctx)
    with serving(system, clock, a) as w:
        yield w, a, b


def _engine_pin(w: World, wid: str) -> str | None:
    return w.get("member", f"/workloads/{wid}").json()["request"].get("engine")


def test_work_one_engine_refuses_runs_on_the_engine_that_takes_it(mixed):
    w, a, b = mixed
    burn = w.submit("member", gpus=1, command=["gpu-burn", "60"])["id"]
    plain = w.submit("member", gpus=1)["id"]
    admitted = w.scheduler.run_once().admitted
    assert burn in admitted and plain in admitted
    assert b.launches_of(burn) == 1 and a.launches_of(burn) == 0
    assert _engine_pin(w, burn) == "b" and _engine_pin(w, plain) is None
    assert a.launches_of(plain) + b.launches_of(plain) == 1


def test_work_every_engine_it_may_run_on_refuses_is_refused_at_submit(mixed):
    w, _, _ = mixed
    body = {"gpus": 1, "command": ["gpu-burn"], "engine": "a"}
    r = w.post("member", "/workloads", json=body)
    assert r.status_code == 403 and r.json()["detail"] == "gpu-burn is not run here", r.text


def test_a_notebook_template_goes_to_the_engine_that_takes_templates(mixed):
    w, _, _ = mixed
    vouched = w.h("admin") | {"X-Gpupool-Service-Token": w.tokens["admin"]}
    nb = {"kind": "notebook", "tenant": "lab", "pod_spec": {"spec": {"containers": []}}}
    r = w.client.post(f"{API}/workloads", json=nb, headers=vouched)
    assert r.status_code == 201, r.text
    assert r.json()["request"]["engine"] == "b"
    r = w.client.post(f"{API}/workloads", json=nb | {"engine": "a"}, headers=vouched)
    assert r.status_code == 422, r.text
    assert "no engine this notebook may run on takes its pod_spec (the a engine:" in r.text
    assert [e["field"] for e in r.json()["errors"]] == ["pod_spec"]


def test_start_never_hands_a_refusing_engine_its_work():
    clock = ManualClock()
    a, b = NoBurn(clock), FakeExecutor(clock)
    pool = PoolExecutor({"a": a, "b": b})
    pool.assign("a", {"na": ("GPU-na",)})
    wl = Workload(id="w1", tenant="lab", owner="ann", command=("gpu-burn",))
    on_a = Allocation("w1", "na", (Share("na", 0, "GPU-na", 1000, 81920),), since=0.0)
    with pytest.raises(StartError, match="the a engine refuses this workload") as e:
        pool.start(wl, on_a)
    assert not e.value.permanent  # engine b takes it: back to the queue
    assert a.launches_of("w1") == 0
    assert pool.on_takers(wl).request.engine == "b"
