"""Scenario parsing: the issue's example, defaults, and every kind of bad input."""

from __future__ import annotations

import pytest

from gpupool.domain import SharingMode, WorkloadKind
from gpupool.scheduler.types import Policy
from gpupool.sim.scenario import ScenarioError, load_scenario, parse_scenario

from .builders import job, node, scenario, tenant

ISSUE_EXAMPLE = """
cluster:
  nodes:
    - {name: a, count: 2, gpus: 8, gpu_model: H100, gpu_memory_gib: 80, cpus: 64, memory_gib: 512, sharing: exclusive}
    - {name: s, gpus: 4, gpu_model: A100, gpu_memory_gib: 40, cpus: 32, memory_gib: 256, sharing: shared}
tenants:
  - {name: lab-a, guaranteed_gpus: 8, limit_gpus: 16, weight: 1}
  - {name: lab-b, guaranteed_gpus: 4, weight: 2, max_gpus_per_user: 2}
workloads:
  - {id: j1, tenant: lab-a, user: alice, submit: 0, duration: 3600, gpus: 4, cpus: 8, memory_gib: 64}
  - {id: n1, tenant: lab-b, user: bob, submit: 30, duration: 600, gpu_fraction: 0.25, gpu_memory_gib: 10, kind: notebook, priority: 10, preemptible: false, gpu_model: A100}
"""  # noqa: E501


def test_issue_example_parses_into_domain_objects(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text(ISSUE_EXAMPLE)
    s = load_scenario(p)
    assert [n.name for n in s.nodes] == ["a-0", "a-1", "s"]
    assert len(s.nodes[0].gpus) == 8 and s.nodes[0].gpus[0].memory_mib == 80 * 1024
    assert s.nodes[2].gpus[0].sharing is SharingMode.SHARED
    assert s.nodes[0].cpu_milli == 64_000 and s.nodes[0].memory_mib == 512 * 1024
    assert s.capacity_milli == 20_000
    a = s.tenants.get("lab-a").quota
    assert (a.guaranteed_milli, a.limit_milli, a.weight) == (8000, 16000, 1)
    b = s.tenants.get("lab-b").quota
    assert (b.max_milli_per_user, b.weight, b.limit_milli) == (2000, 2, None)
    j1, n1 = (sw.workload for sw in s.workloads)
    assert j1.request.gpus == 4 and j1.request.cpu_milli == 8000 and j1.owner == "alice"
    assert n1.request.gpu_milli == 250 and n1.request.gpu_memory_mib == 10 * 1024
    assert n1.kind is WorkloadKind.NOTEBOOK and not n1.preemptible and n1.priority == 10
    assert n1.submitted_at == 30 and s.workloads[1].duration == 600
    assert s.config.policy is Policy.FAIR and s.config.preemption


def test_defaults_tenant_paths_count_and_policy_override():
    data = scenario(
        nodes=[{"name": "x"}],
        tenants=[tenant("physics/lab-a", guaranteed_gpus=2), tenant("physics/lab-b")],
        workloads=[job("w", tenant="physics/lab-a", count=3, every=5, submit=10)],
        policy="fifo",
        min_runtime_s=60,
    )
    s = parse_scenario(data)
    n = s.nodes[0]
    assert len(n.gpus) == 8 and n.gpus[0].model == "GPU" and n.gpus[0].sharing == "exclusive"
    assert "physics" in s.tenants and s.tenants.children("physics") == (
        "physics/lab-a",
        "physics/lab-b",
    )
    assert [(sw.workload.id, sw.workload.submitted_at) for sw in s.workloads] == [
        ("w-0", 10),
        ("w-1", 15),
        ("w-2", 20),
    ]
    assert s.workloads[0].workload.owner == "user"
    assert s.config.policy is Policy.FIFO and s.config.min_runtime_s == 60
    assert parse_scenario(data, Policy.LAS).config.policy is Policy.LAS


BAD = [
    pytest.param(
        scenario(workloads=[job("j1"), job("j2"), job("j3"), job("j4", duration=-5)]),
        ["workloads[3] (id j4): duration must be >= 0"],
        id="negative-duration",
    ),
    pytest.param(
        scenario(workloads=[job("j1", colour="red")]),
        ["workloads[0] (id j1): unknown field 'colour'", "allowed fields:"],
        id="unknown-workload-key",
    ),
    pytest.param(
        {**scenario(), "extra": 1},
        ["unknown field 'extra'"],
        id="unknown-top-key",
    ),
    pytest.param(
        scenario(nodes=[node(gpu_count=3)]),
        ["cluster.nodes[0] (name n): unknown field 'gpu_count'"],
        id="unknown-node-key",
    ),
    pytest.param(
        scenario(workloads=[job("j1", tenant="nobody")]),
        ["workloads[0] (id j1): tenant: unknown tenant 'nobody'"],
        id="unknown-tenant",
    ),
    pytest.param(
        scenario(workloads=[job("big", gpus=5)]),
        ["workloads[0] (id big): request can never run", "the most any node has is 4"],
        id="never-fits-gpus",
    ),
    pytest.param(
        scenario(workloads=[job("f", gpus=0, gpu_fraction=0.5)]),
        ["workloads[0] (id f): request can never run", "sharing: shared"],
        id="fraction-without-shared-gpu",
    ),
    pytest.param(
        scenario(workloads=[job("m", gpu_model="A100")]),
        ["workloads[0] (id m): request can never run", "A100"],
        id="unknown-model",
    ),
    pytest.param(
        scenario(workloads=[job("c", cpus=1000)]),
        ["workloads[0] (id c): request can never run"],
        id="too-many-cpus",
    ),
    pytest.param(
        scenario(workloads=[job("b", gpu_fraction=0.5)]),
        ["workloads[0] (id b)", "not both"],
        id="gpus-and-fraction",
    ),
    pytest.param(
        scenario(workloads=[job("x"), job("x")]),
        ["workloads[1] (id x): id: 'x' is already used by workloads[0]"],
        id="duplicate-id",
    ),
    pytest.param(
        scenario(tenants=[tenant("a", guaranteed_gpus=4, limit_gpus=2)]),
        ["tenants[0] (name a): limit_gpus", "below guaranteed"],
        id="limit-below-guarantee",
    ),
    pytest.param(
        scenario(tenants=[tenant("a", weight=0)]),
        ["tenants[0] (name a): weight must be > 0"],
        id="zero-weight",
    ),
    pytest.param(
        scenario(workloads=[job("j", submit="soon")]),
        ["workloads[0] (id j): submit", "valid number"],
        id="submit-not-a-number",
    ),
    pytest.param(
        scenario(tenants=[tenant("phys/a"), tenant("phys/b")], workloads=[job("j", tenant="phys")]),
        ["workloads[0] (id j): tenant: 'phys' has sub-tenants"],
        id="inner-tenant",
    ),
    pytest.param(
        {"tenants": [tenant("a")]},
        ["cluster is required"],
        id="missing-cluster",
    ),
    pytest.param(["not", "a", "mapping"], ["must be a mapping"], id="not-a-mapping"),
    pytest.param(
        scenario(policy="sjf"),
        ["scheduler.policy: ", "'fair', 'fifo' or 'las'"],
        id="unknown-policy",
    ),
]


@pytest.mark.parametrize("data,expected", BAD)
def test_bad_input_names_item_and_field(data, expected):
    with pytest.raises(ScenarioError) as err:
        parse_scenario(data)
    for text in expected:
        assert text in str(err.value)


def test_all_problems_are_reported_at_once():
    data = scenario(workloads=[job("j1", duration=-1), job("j2", tenant="zz", duration=1)])
    with pytest.raises(ScenarioError) as err:
        parse_scenario(data)
    # pydantic errors come first; the tenant check runs once the shape is valid
    assert "workloads[0] (id j1): duration must be >= 0" in str(err.value)


def test_yaml_syntax_error_and_missing_file(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("cluster:\n  nodes: [ {name: a\n")
    with pytest.raises(ScenarioError, match=r"YAML syntax error at line \d+"):
        load_scenario(p)
    with pytest.raises(ScenarioError, match="file not found"):
        load_scenario(tmp_path / "nope.yaml")


def test_multi_node_workloads_in_scenarios():
    data = scenario(
        nodes=[{"name": "x", "count": 3}],
        tenants=[tenant("lab", guaranteed_gpus=16)],
        workloads=[
            job("g", tenant="lab", gpus=0, nodes=2, gpus_per_node=8),
            job("h", tenant="lab", gpus=0, nodes=4, gpus_per_node=8),
        ],
    )
    with pytest.raises(
        ScenarioError, match="needs 4 nodes with 8 GPUs each; only 3 nodes could ever hold that"
    ):
        parse_scenario(data)
    data["workloads"].pop()
    s = parse_scenario(data)
    r = s.workloads[0].workload.request
    assert (r.nodes, r.gpus_per_node, r.gpus) == (2, 8, 16)
    bad = scenario(
        nodes=[{"name": "x", "count": 2}],
        tenants=[tenant("lab")],
        workloads=[
            job("g", tenant="lab", gpus=0, nodes=2),
            job("k", tenant="lab", gpus=3, nodes=2, gpus_per_node=2),
        ],
    )
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(bad)
    assert "needs gpus_per_node" in str(exc.value) and "nodes x gpus_per_node" in str(exc.value)
