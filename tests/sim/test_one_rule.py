"""Every caller answers "could this request ever run?" the same way (issue 32, one home per
rule): the scheduler's cycle (it fails such work as unschedulable on an empty cluster), a
scenario file's validation, a trace replay's load, and the rule itself
(`gpupool.scheduler.feasibility.never_runs`), for the same request, cluster, tenants and
policy. The submit API's side is tests/server/test_submit_rules.py.

Before the one module, the simulator refused a fraction on exclusive GPUs under `fifo`,
which the `fifo` cycle admits as one whole GPU, and accepted a request over its tenant's
limit under `fair`, which the cycle then failed."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError as PydanticValidationError

from gpupool.domain import Request, Workload
from gpupool.domain.errors import ValidationError as DomainValidationError
from gpupool.scheduler import SchedulerConfig, Snapshot, cycle
from gpupool.scheduler.types import Policy
from gpupool.sim.scenario import (
    ClusterFile,
    WorkloadSpec,
    build_nodes,
    build_tenants,
    parse_cluster_file,
    parse_scenario,
)
from gpupool.sim.scenario_errors import ScenarioError
from gpupool.sim.trace import TraceJob, trace_scenario

GIB = 1024


def _node(name: str, **kw: Any) -> dict:
    return {"name": name, "gpus": 4, "gpu_model": "H100", "cpus": 32, "memory_gib": 256, **kw}


CLUSTERS = {
    "exclusive": [_node("e", count=2)],
    "shared": [_node("e"), _node("s", sharing="shared")],
    "mig": [_node("m", gpus=1, sharing="mig", mig_layout="all-1g.10gb")],
}
#: a tenant with a limit, one under a parent that caps each user, one without either
TENANTS = [
    {"name": "lim", "guaranteed_gpus": 1, "limit_gpus": 2},
    {"name": "dept", "max_gpus_per_user": 1},
    {"name": "dept/team"},
    {"name": "free"},
]
REQUESTS: dict[str, dict[str, Any]] = {
    "1 GPU": {"gpus": 1},
    "3 GPUs": {"gpus": 3},
    "5 GPUs": {"gpus": 5},
    "half": {"gpu_fraction": 0.5},
    "half, 100 GiB": {"gpu_fraction": 0.5, "gpu_memory_gib": 100},
    "tenth": {"gpu_fraction": 0.1},
    "A100": {"gpus": 1, "gpu_model": "A100"},
    "cpus only": {"cpus": 8},
    "too many cpus": {"gpus": 1, "cpus": 64},
    "2 nodes x 4": {"nodes": 2, "gpus_per_node": 4},
    "3 nodes x 4": {"nodes": 3, "gpus_per_node": 4},
    "1g.10gb": {"mig": "1g.10gb"},
    "7g.80gb": {"mig": "7g.80gb"},
}
#: the trace format has no MIG and no multi-node pins
IN_TRACES = {"1 GPU", "3 GPUs", "5 GPUs", "half", "half, 100 GiB", "tenth", "A100", "cpus only"}


def _request(spec: dict[str, Any]) -> Request:
    """The domain request of a scenario workload (as gpupool.sim.scenario builds it)."""
    w = WorkloadSpec.model_validate({"id": "w", "tenant": "x", "duration": 1, **spec})
    return Request(
        gpus=w.total_gpus,
        nodes=w.nodes,
        gpu_milli=0 if w.gpu_fraction is None else int(round(w.gpu_fraction * 1000)),
        gpu_memory_mib=int(round(w.gpu_memory_gib * GIB)),
        gpu_model=w.gpu_model,
        cpu_milli=int(round(w.cpus * 1000)),
        memory_mib=int(round(w.memory_gib * GIB)),
        mig=w.mig,
    )


def _cycle_says(cluster: str, tenant: str, spec: dict, policy: Policy) -> bool:
    """True if the cycle fails the request as unschedulable on the empty cluster."""
    cf = parse_cluster_file({"cluster": {"nodes": CLUSTERS[cluster]}, "tenants": TENANTS})
    nodes = build_nodes(cf.cluster)
    tree = build_tenants(cf.tenants)
    w = Workload(id="w", tenant=tenant, owner="u", request=_request(spec))
    d = cycle(Snapshot(nodes, tree), [w], 0.0, SchedulerConfig(policy=policy))
    return "w" in d.unschedulable


def _scenario_says(cluster: str, tenant: str, spec: dict, policy: Policy) -> bool:
    """True if a scenario file with the request is refused as one that can never run."""
    data = {
        "cluster": {"nodes": CLUSTERS[cluster]},
        "tenants": TENANTS,
        "workloads": [{"id": "w", "tenant": tenant, "user": "u", "duration": 1, **spec}],
    }
    try:
        parse_scenario(data, policy)
    except ScenarioError as e:
        assert "request can never run" in str(e), e
        return True
    return False


def _trace_says(cluster: str, tenant: str, spec: dict, policy: Policy) -> bool:
    """True if a trace replay marks the job unschedulable when it loads."""
    r = _request(spec)
    job = TraceJob(
        "w", 0.0, 1.0, tenant, "u", r.gpus, r.gpu_milli, r.gpu_memory_mib, r.gpu_model,
        r.cpu_milli, r.memory_mib,
    )  # fmt: skip
    cf = ClusterFile.model_validate({"cluster": {"nodes": CLUSTERS[cluster]}, "tenants": TENANTS})
    scen = trace_scenario([job], cf, policy=policy, multi_node=False)
    return "w" in scen.unschedulable


CASES = [
    pytest.param(c, t, r, p, id=f"{c}-{t}-{r}-{p}")
    for c, t, r, p in itertools.product(CLUSTERS, ("lim", "dept/team", "free"), REQUESTS, Policy)
    if r != "7g.80gb" or c != "mig"  # a profile the layout lacks: see the last test
]


@pytest.mark.parametrize("cluster,tenant,name,policy", CASES)
def test_every_caller_gives_the_same_answer(cluster, tenant, name, policy):
    spec = REQUESTS[name]
    said = {
        "cycle": _cycle_says(cluster, tenant, spec, policy),
        "scenario": _scenario_says(cluster, tenant, spec, policy),
    }
    if name in IN_TRACES:
        said["trace"] = _trace_says(cluster, tenant, spec, policy)
    assert len(set(said.values())) == 1, said


@pytest.mark.parametrize("policy", list(Policy))
def test_the_rule_is_the_cycles_answer(policy):
    """feasibility.never_runs gives the cycle's answer, and its reason, for every case."""
    from gpupool.scheduler.feasibility import never_runs

    for cluster, tenant, name in itertools.product(CLUSTERS, ("lim", "dept/team"), REQUESTS):
        if cluster == "mig" and name == "7g.80gb":
            continue
        cf = parse_cluster_file({"cluster": {"nodes": CLUSTERS[cluster]}, "tenants": TENANTS})
        nodes, tree = build_nodes(cf.cluster), build_tenants(cf.tenants)
        w = Workload(id="w", tenant=tenant, owner="u", request=_request(REQUESTS[name]))
        d = cycle(Snapshot(nodes, tree), [w], 0.0, SchedulerConfig(policy=policy))
        never = never_runs(w.request, tenant, tree, nodes, policy)
        assert (never.why if never else None) == d.unschedulable.get("w"), (cluster, name)


@pytest.mark.parametrize(
    "policy,refused", [(Policy.FIFO, False), (Policy.LAS, True), (Policy.FAIR, True)]
)
def test_a_fraction_on_exclusive_gpus_runs_only_under_fifo(policy, refused):
    """The disagreement the review found: `fifo` hands a fraction out as one whole GPU."""
    half = REQUESTS["half"]
    assert _scenario_says("exclusive", "free", half, policy) is refused
    assert _cycle_says("exclusive", "free", half, policy) is refused


@pytest.mark.parametrize(
    "policy,refused", [(Policy.FIFO, False), (Policy.LAS, False), (Policy.FAIR, True)]
)
def test_a_request_over_its_limit_never_runs_only_under_fair(policy, refused):
    """Only `fair` applies tenant limits; the scenario accepted it under `fair` before."""
    over = REQUESTS["3 GPUs"]
    assert _scenario_says("exclusive", "lim", over, policy) is refused
    assert _cycle_says("exclusive", "lim", over, policy) is refused


@pytest.mark.parametrize("policy", list(Policy))
def test_a_profile_no_layout_has_waits_on_a_server_but_not_in_a_replay(policy):
    """The one difference kept on purpose: a server's layouts change (an admin, or the
    idle re-layout), so its cycle keeps a MIG request that the model has a profile for
    waiting; the simulator never changes a layout, so a scenario refuses it
    (feasibility.never_runs with fixed_mig_layouts)."""
    from gpupool.scheduler.feasibility import never_runs

    spec = REQUESTS["7g.80gb"]
    assert not _cycle_says("mig", "free", spec, policy)
    assert _scenario_says("mig", "free", spec, policy)
    cf = parse_cluster_file({"cluster": {"nodes": CLUSTERS["mig"]}, "tenants": TENANTS})
    nodes, tree = build_nodes(cf.cluster), build_tenants(cf.tenants)
    request = _request(spec)
    assert never_runs(request, "free", tree, nodes, policy) is None
    never = never_runs(request, "free", tree, nodes, policy, fixed_mig_layouts=True)
    assert never is not None and never.field == "mig"


@st.composite
def _specs(draw) -> dict[str, Any]:
    """A scenario workload: whole GPUs (maybe over several nodes), a fraction or a MIG
    instance, with or without GPU memory, a model, CPUs and memory."""
    kind = draw(st.sampled_from(["gpus", "fraction", "gang", "mig", "cpu"]))
    spec: dict[str, Any] = {}
    if kind == "gpus":
        spec["gpus"] = draw(st.integers(1, 9))
    elif kind == "fraction":
        spec["gpu_fraction"] = draw(st.sampled_from([0.1, 0.25, 0.5, 0.9]))
    elif kind == "gang":
        spec.update(nodes=draw(st.integers(2, 3)), gpus_per_node=draw(st.integers(1, 5)))
    elif kind == "mig":
        spec["mig"] = draw(st.sampled_from(["1g.10gb", "bad.profile"]))
    if kind in ("gpus", "fraction", "gang") and draw(st.booleans()):
        spec["gpu_memory_gib"] = draw(st.sampled_from([10, 80, 100]))
    if kind != "cpu" and draw(st.booleans()):
        spec["gpu_model"] = draw(st.sampled_from(["H100", "A100"]))
    spec["cpus"] = draw(st.sampled_from([0, 4, 32, 40]))
    spec["memory_gib"] = draw(st.sampled_from([0, 64, 300]))
    return spec


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cluster=st.sampled_from(sorted(set(CLUSTERS) - {"mig"})),
    tenant=st.sampled_from(["lim", "dept/team", "free"]),
    spec=_specs(),
    policy=st.sampled_from(list(Policy)),
)
def test_any_request_gets_the_same_answer_from_every_caller(cluster, tenant, spec, policy):
    """Property: for any request, cluster, tenant and policy, the cycle fails it as
    unschedulable iff a scenario file refuses it iff the rule says it never runs (clusters
    without MIG: there the simulator's fixed layouts differ on purpose)."""
    from gpupool.scheduler.feasibility import never_runs

    try:
        request = _request(spec)
    except (DomainValidationError, PydanticValidationError):
        return  # refused as bad input before any rule (a profile no GPU model has)
    cf = parse_cluster_file({"cluster": {"nodes": CLUSTERS[cluster]}, "tenants": TENANTS})
    nodes, tree = build_nodes(cf.cluster), build_tenants(cf.tenants)
    never = never_runs(request, tenant, tree, nodes, policy) is not None
    assert _cycle_says(cluster, tenant, spec, policy) == never
    assert _scenario_says(cluster, tenant, spec, policy) == never
