"""A pool of engines: `PoolExecutor` routes each call to the engine that owns the work (also
after a restart), and `EngineSet` labels each engine's nodes and refuses a node two engines
offer. Pure: fake executors over fake worlds."""

from __future__ import annotations

import pytest

from gpupool.clock import ManualClock
from gpupool.domain import Allocation, Enforcement, Node, Share, Workload
from gpupool.domain.placement import ENGINE_LABEL, MPS_LABEL, MULTI_NODE_LABEL
from gpupool.engines.common.engine import EngineError
from gpupool.engines.common.engineset import EngineSet
from gpupool.engines.common.executor import (
    ExecState,
    ExecutorWithMultiNode,
    ExecutorWithNotebooks,
    ExecutorWithSharedGPUs,
    StartError,
)
from gpupool.engines.common.pool import PoolExecutor, pool_executor
from gpupool.engines.fake.engine import FakeEngine
from gpupool.engines.fake.executor import FakeExecutor, OneNodeExecutor


def _wl(i: str) -> Workload:
    return Workload(id=i, tenant="lab", owner="alice", command=("python", "train.py"))


def _alloc(i: str, *nodes: str) -> Allocation:
    shares = tuple(Share(n, 0, f"GPU-{n}", 1000, 81920) for n in nodes)
    return Allocation(i, nodes[0], shares, since=0.0)


class Two:
    """Engines `a` (node na) and `b` (node nb), over worlds that outlive the executors."""

    def __init__(self) -> None:
        self.clock = ManualClock(100.0)
        self.a = FakeExecutor(self.clock)
        self.b = OneNodeExecutor(self.clock)
        #: workload id -> engine of its last allocation's node (the system reads the store)
        self.located: dict[str, str] = {}
        self.pool = self.make(self.a, self.b)

    def make(self, a: FakeExecutor, b: OneNodeExecutor) -> PoolExecutor:
        pool = pool_executor({"a": a, "b": b}, locate=self.located.get)
        assert isinstance(pool, PoolExecutor)
        pool.assign("a", {"na": ("GPU-na",)})
        pool.assign("b", {"nb": ("GPU-nb",)})
        return pool

    def restart(self) -> PoolExecutor:
        self.a, self.b = self.a.reborn(), self.b.reborn()  # type: ignore[assignment]
        self.pool = self.make(self.a, self.b)
        return self.pool


def test_start_goes_to_the_engine_of_the_allocations_node_and_the_rest_follows():
    t = Two()
    h = t.pool.start(_wl("w1"), _alloc("w1", "nb"))
    assert t.b.launches_of("w1") == 1 and t.a.launches_of("w1") == 0
    assert h.executor == "fake"
    assert t.pool.poll("w1").state is ExecState.RUNNING
    t.b.write_log("w1", "hello from b\n")
    assert t.pool.logs("w1") == "hello from b\n"  # type: ignore[attr-defined]
    t.pool.stop("w1", "cancelled", 0.0)
    assert [c[0] for c in t.b.stop_calls] == ["w1"] and t.a.stop_calls == []
    assert t.pool.poll("w1").state is ExecState.FAILED


def test_work_without_gpus_goes_where_its_allocation_is_else_to_the_default():
    t = Two()
    t.located["cpu1"] = "b"
    t.pool.start(_wl("cpu1"), None)
    t.pool.start(_wl("cpu2"), None)
    assert t.b.launches_of("cpu1") == 1 and t.a.launches_of("cpu2") == 1


def test_a_gang_over_two_engines_is_refused_for_good():
    t = Two()
    with pytest.raises(StartError, match="a gang runs within one engine") as e:
        t.pool.start(_wl("g"), _alloc("g", "na", "nb"))
    assert e.value.permanent and t.a.launches_of("g") == t.b.launches_of("g") == 0
    assert t.pool.poll("g").state is ExecState.UNKNOWN


def test_after_a_restart_running_work_is_found_by_listing_and_ended_work_by_its_node():
    t = Two()
    t.pool.start(_wl("ra"), _alloc("ra", "na"))
    t.pool.start(_wl("rb"), _alloc("rb", "nb"))
    t.pool.start(_wl("done"), _alloc("done", "nb"))
    t.b.finish("done", 0)
    pool = t.restart()
    t.located["done"] = "b"  # its allocation's node is b's
    assert pool.poll("ra").state is ExecState.RUNNING
    assert pool.poll("rb").state is ExecState.RUNNING
    st = pool.poll("done")
    assert (st.state, st.exit_code) == (ExecState.SUCCEEDED, 0)
    assert pool.poll("never").state is ExecState.UNKNOWN
    assert sorted(r.workload_id for r in pool.list_running()) == ["ra", "rb"]
    pool.stop("rb", "preempted", 0.0)
    assert [c[0] for c in t.b.stop_calls] == ["rb"] and t.a.stop_calls == []
    assert t.a.world.launches == ["ra"] and t.b.world.launches == ["rb", "done"]


def test_a_stop_of_work_no_engine_knows_reaches_every_engine():
    t = Two()
    t.pool.stop("ghost", "orphaned", 5.0)
    assert t.a.stop_calls == t.b.stop_calls == [("ghost", "orphaned", 5.0)]


def test_capabilities_are_those_any_engine_has_and_route_to_it():
    t = Two()
    assert isinstance(t.pool, ExecutorWithMultiNode)  # a has it, b not
    assert isinstance(t.pool, ExecutorWithSharedGPUs)
    assert not isinstance(t.pool, ExecutorWithNotebooks)  # neither has it
    two_single = pool_executor({"x": OneNodeExecutor(t.clock), "y": OneNodeExecutor(t.clock)})
    assert not isinstance(two_single, ExecutorWithMultiNode)
    t.b.downgrade["GPU-nb"] = Enforcement.POLICED
    share = Share("nb", 0, "GPU-nb", 500, 1000, enforcement=Enforcement.MPS)
    t.pool.start(_wl("f"), Allocation("f", "nb", (share,), since=0.0))
    assert t.pool.enforcement_of("f") == {"GPU-nb": Enforcement.POLICED}  # type: ignore[attr-defined]
    t.b.times["f"] = (1.0, None)
    assert t.pool.run_times("f") == (1.0, None)  # type: ignore[attr-defined]
    t.a.containers["pod"] = {"uid-a": "wa"}
    t.b.containers["pod"] = {"uid-b": None}
    owners = t.pool.owners("pod", ["uid-a", "uid-b", "uid-c"])  # type: ignore[attr-defined]
    assert owners == {"uid-a": "wa", "uid-b": None}


def test_one_engine_is_its_own_executor_no_wrapper():
    ex = FakeExecutor(ManualClock())
    assert pool_executor({"fake": ex}) is ex


class Named(FakeEngine):
    def __init__(self, name: str, nodes: list[Node], executor=None) -> None:  # noqa: ANN001
        super().__init__(executor, nodes=nodes)
        self.name = name


def test_every_node_is_labelled_with_its_engine_and_capabilities():
    clock = ManualClock()
    from gpupool.engines.common.engine import EngineEnv

    a = Named("a", [Node("na", labels=(("zone", "x"), (ENGINE_LABEL, "stale")))])
    b = Named("b", [Node("nb")], OneNodeExecutor(clock))
    engines = EngineSet([a, b])
    engines.open(EngineEnv(clock))
    na, nb = engines.inventory()
    assert na.label_map == {"zone": "x", ENGINE_LABEL: "a", MULTI_NODE_LABEL: "true"}
    assert nb.label_map == {ENGINE_LABEL: "b"}
    assert MPS_LABEL not in nb.label_map  # the fake engine polices fractions
    assert isinstance(engines.executor, PoolExecutor)
    assert engines.executor.nodes == {"na": "a", "nb": "b"}
    lines = [line for line, _ in engines.describe()]
    assert lines[0].startswith("gpupool: 2 engines in one pool: a, b (default a)")
    assert any("engine b: node(s) nb (gpupool.io/engine=b)" in line for line in lines)


def test_two_engines_offering_one_node_name_are_refused():
    from gpupool.engines.common.engine import EngineEnv

    engines = EngineSet([Named("a", [Node("host")]), Named("b", [Node("host")])])
    engines.open(EngineEnv(ManualClock()))
    with pytest.raises(EngineError, match="node 'host' is offered by both the a and the b engine"):
        engines.inventory()


def test_an_engine_named_twice_is_refused():
    with pytest.raises(EngineError, match="--engine a given twice"):
        EngineSet([Named("a", []), Named("a", [])])


class WithMPS(Named):
    @property
    def shared_enforcement(self) -> Enforcement:
        return Enforcement.MPS


def test_fractions_are_recorded_as_the_strongest_engine_enforces_and_its_nodes_say_so():
    from gpupool.engines.common.engine import EngineEnv

    engines = EngineSet([Named("slurmish", [Node("s1")]), WithMPS("localish", [Node("ws")])])
    engines.open(EngineEnv(ManualClock()))
    labels = {n.name: n.label_map for n in engines.inventory()}
    # the scheduler records `mps` only on nodes labelled for it, `policed` elsewhere
    assert engines.shared_enforcement is Enforcement.MPS
    assert labels["ws"][MPS_LABEL] == "true" and MPS_LABEL not in labels["s1"]


def test_the_pool_is_named_after_its_engines():
    assert Two().pool.name == "a+b"


def test_node_pool_calls_go_to_the_engine_that_adds_the_pools_nodes():
    from gpupool.domain.nodepools import NodePool
    from gpupool.engines.common.executor import ExecutorError

    t = Two()  # engine a adds nodes to node pools; engine b cannot
    shape = {"gpus": 1, "gpu_model": "H100", "cpu_milli": 8000, "memory_mib": 65536}
    on_a, on_b = NodePool("pool-a", **shape), NodePool("pool-b", engine="b", **shape)
    rid = t.pool.request_nodes(on_a, 2, [], atomic=True)  # no engine named: the default's
    assert t.a.cloud.calls == [("request", rid, 2)]
    with pytest.raises(ExecutorError, match="the b engine of node pool pool-b adds no nodes"):
        t.pool.request_nodes(on_b, 1, [], atomic=False)
    states = t.pool.pool_states([on_a, on_b])
    assert {n.pool for n in states.nodes} == {"pool-a"} and len(states.nodes) == 2
    assert [r.request for r in states.requests] == [rid]
    t.pool.withdraw(rid)  # request ids are each engine's: every engine that has them hears it
    t.pool.release_node("nb")  # engine b's node: b adds none, so nobody is asked
    t.pool.release_node("pool-a-1")  # not registered yet: every engine that has pools
    assert t.a.cloud.calls[1:] == [("withdraw", rid), ("release", "pool-a-1")]
