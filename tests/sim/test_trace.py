"""CSV traces: generic and Philly formats, filters, defaults, unschedulable rows."""

from __future__ import annotations

import pickle

import pytest

from gpupool.domain import WorkloadState
from gpupool.scheduler.types import Policy
from gpupool.sim.engine import simulate
from gpupool.sim.scenario import ScenarioError, parse_cluster_file
from gpupool.sim.trace import (
    default_tenants,
    filter_jobs,
    gpus_for_load,
    read_trace,
    trace_scenario,
)

PHILLY = """timestamp,duration,num_gpus,gpu_time,cluster
2017-10-09 07:01:55,66.0,1,66.0,11cb48
2017-10-09 06:13:03,2951.0,1,2951.0,6214e9
2017-10-09 06:13:36,2759.0,2,5518.0,6214e9
2017-10-10 06:13:36,100.0,16,1600.0,6214e9
2017-10-16 06:13:36,100.0,4,400.0,103959
"""

GENERIC = """submit_time,duration,num_gpus,tenant,user,gpu_fraction,gpu_memory_mib,priority
0,100,1,lab-a,alice,,,0
10,50,0,lab-b,bob,0.25,8192,5
20,30,2,lab-a,carol,,,0
"""


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_philly_rows_become_jobs_with_the_cluster_as_tenant(tmp_path):
    jobs = read_trace(write(tmp_path, "p.csv", PHILLY))
    assert len(jobs) == 5
    j = jobs[0]
    assert (j.id, j.tenant, j.user, j.gpus, j.duration) == ("j1", "11cb48", "11cb48", 1, 66.0)
    assert jobs[1].submit - j.submit == -(48 * 60 + 52)


def test_generic_rows_with_fractions_users_and_priorities(tmp_path):
    jobs = read_trace(write(tmp_path, "g.csv", GENERIC))
    b = jobs[1]
    assert (b.tenant, b.user, b.gpus, b.gpu_milli, b.gpu_memory_mib, b.priority) == (
        "lab-b",
        "bob",
        0,
        250,
        8192,
        5,
    )


@pytest.mark.parametrize(
    "text,expected",
    [
        ("submit_time,duration,tenant\n0,1,a\n", "missing column(s) num_gpus"),
        ("submit_time,duration,num_gpus,tenant\n0,-1,1,a\n", "line 2: duration must be >= 0"),
        ("submit_time,duration,num_gpus,tenant\nyesterday,1,1,a\n", "line 2"),
        ("submit_time,duration,num_gpus,tenant\n0,1,one,a\n", "line 2"),
    ],
)
def test_bad_trace_rows_name_the_line(tmp_path, text, expected):
    with pytest.raises(ScenarioError) as err:
        read_trace(write(tmp_path, "bad.csv", text))
    assert expected in str(err.value)


def test_missing_trace_file(tmp_path):
    with pytest.raises(ScenarioError, match="trace file not found"):
        read_trace(tmp_path / "nope.csv")


def test_filters_by_time_window_and_tenants(tmp_path):
    jobs = read_trace(write(tmp_path, "p.csv", PHILLY))
    assert len(filter_jobs(jobs, end="1d")) == 3
    assert len(filter_jobs(jobs, start="2017-10-10", end="2017-10-11")) == 1
    assert {j.tenant for j in filter_jobs(jobs, tenants="top:1")} == {"6214e9"}
    assert len(filter_jobs(jobs, tenants="103959,11cb48")) == 2
    with pytest.raises(ScenarioError, match="unknown tenant"):
        filter_jobs(jobs, tenants="nobody")
    with pytest.raises(ScenarioError, match="--from"):
        filter_jobs(jobs, start="last tuesday")


def test_default_cluster_and_tenants(tmp_path):
    jobs = read_trace(write(tmp_path, "p.csv", PHILLY))
    assert gpus_for_load(jobs, 1.0) % 8 == 0
    ts = {t.name: t.guaranteed_gpus for t in default_tenants(jobs, 100)}
    assert set(ts) == {"11cb48", "6214e9", "103959"}
    assert sum(ts.values()) <= 100 and ts["6214e9"] > ts["103959"] > ts["11cb48"]


def test_a_job_wider_than_any_node_runs_across_nodes(tmp_path):
    jobs = read_trace(write(tmp_path, "p.csv", PHILLY))
    scen = trace_scenario(jobs, gpus=16, policy=Policy.FAIR)
    assert scen.workloads[0].workload.submitted_at == 0  # times start at the first submission
    r = simulate(scen)
    wide = r.records["j4"]
    assert wide.workload.request.nodes == 2 and wide.workload.request.gpus_per_node == 8
    assert wide.state is WorkloadState.SUCCEEDED
    assert set(wide.allocation.nodes) == {"n-0", "n-1"}
    assert all(rec.state is WorkloadState.SUCCEEDED for rec in r.records.values())


def test_a_job_wider_than_the_cluster_is_reported_unschedulable(tmp_path):
    jobs = read_trace(write(tmp_path, "p.csv", PHILLY))
    for scen in (
        trace_scenario(jobs, gpus=8, policy=Policy.FAIR),  # one node: no 2 x 8
        trace_scenario(jobs, gpus=16, policy=Policy.FAIR, multi_node=False),  # as before #19
    ):
        r = simulate(scen)
        wide = r.records["j4"]
        assert wide.state is WorkloadState.FAILED
        assert "16" in (wide.reason or "") or "2 nodes" in (wide.reason or "")
        assert all(
            rec.state is WorkloadState.SUCCEEDED for wid, rec in r.records.items() if wid != "j4"
        )


def test_generic_trace_nodes_and_gpus_per_node_columns(tmp_path):
    text = "submit_time,duration,num_gpus,tenant,nodes,gpus_per_node\n0,100,,a,2,4\n10,100,4,a,,\n"
    jobs = read_trace(write(tmp_path, "n.csv", text))
    assert (jobs[0].nodes, jobs[0].gpus) == (2, 8) and jobs[1].nodes == 1
    scen = trace_scenario(jobs, gpus=16, policy=Policy.FIFO)
    r = simulate(scen)
    gang = r.records[jobs[0].id]
    assert gang.state is WorkloadState.SUCCEEDED and len(gang.allocation.nodes) == 2
    bad = "submit_time,duration,num_gpus,tenant,nodes,gpus_per_node\n0,1,5,a,2,4\n"
    with pytest.raises(ScenarioError, match="nodes x gpus_per_node"):
        read_trace(write(tmp_path, "bad.csv", bad))


def test_cluster_file_tenants_must_cover_the_trace(tmp_path):
    jobs = read_trace(write(tmp_path, "g.csv", GENERIC))
    cf = parse_cluster_file(
        {
            "cluster": {"nodes": [{"name": "n", "gpus": 4, "sharing": "shared"}]},
            "tenants": [{"name": "lab-a"}],
        }
    )
    with pytest.raises(ScenarioError, match="lab-b"):
        trace_scenario(jobs, cf)
    cf = parse_cluster_file(
        {
            "cluster": {"nodes": [{"name": "n", "gpus": 4, "sharing": "shared"}]},
            "tenants": [{"name": "lab-a", "guaranteed_gpus": 2}, {"name": "lab-b"}],
            "scheduler": {"policy": "las"},
        }
    )
    scen = trace_scenario(jobs, cf)
    assert scen.config.policy is Policy.LAS
    r = simulate(scen)
    assert {rec.state for rec in r.records.values()} == {WorkloadState.SUCCEEDED}


def test_a_trace_error_survives_pickling_as_replays_in_worker_processes_raise_it():
    e = pickle.loads(pickle.dumps(ScenarioError(["trace file not found: x.csv"], "x.csv")))
    assert e.problems == ["trace file not found: x.csv"] and e.source == "x.csv"
    assert str(e) == "x.csv: trace file not found: x.csv"
