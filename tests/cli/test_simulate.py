"""`gpupool simulate` through Typer's CliRunner: output, JSON schema, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpupool.cli.main import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()

WORKLOAD_KEYS = {
    "id",
    "tenant",
    "user",
    "submit",
    "start",
    "end",
    "state",
    "node",
    "gpus",
    "preemptions",
}
METRIC_KEYS = {
    "avg_wait",
    "p50_wait",
    "p95_wait",
    "p99_wait",
    "avg_jct",
    "makespan",
    "gpu_utilization",
    "allocation_ratio",
    "jain_fairness",
    "preemptions",
    "per_tenant",
    "scheduler",
}
TENANT_KEYS = {"gpu_hours", "avg_wait", "share", "fair_share"}


def invoke(*args: str):
    return runner.invoke(app, ["simulate", *args])


def write(tmp_path: Path, data) -> str:
    p = tmp_path / "s.yaml"
    p.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return str(p)


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_every_example_runs(example):
    res = invoke(str(EXAMPLES / example))
    assert res.exit_code == 0, res.output
    if "node_pools:" in (EXAMPLES / example).read_text():
        # a scenario with node pools compares fixed pools with pools grown on demand
        assert "fixed" in res.output and "on demand" in res.output, res.output
    else:
        assert "Summary" in res.output and "Per tenant" in res.output


def test_json_output_has_the_documented_shape():
    res = invoke(str(EXAMPLES / "two-labs.yaml"), "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert set(out) == {"workloads", "metrics"}
    assert out["workloads"] and all(set(w) >= WORKLOAD_KEYS for w in out["workloads"])
    for w in out["workloads"]:
        assert all(isinstance(i, int) and 0 < m <= 1000 for i, m in w["gpus"])
        assert w["state"] == "succeeded" and w["end"] >= w["start"] >= w["submit"]
    m = out["metrics"]
    assert set(m) >= METRIC_KEYS
    assert set(m["scheduler"]) >= {"cycles", "total_ms", "p99_cycle_ms"}
    assert set(m["per_tenant"]) == {"lab-a", "lab-b"}
    assert all(set(v) >= TENANT_KEYS for v in m["per_tenant"].values())
    assert 0 < m["gpu_utilization"] <= 1 and 0 < m["jain_fairness"] <= 1
    assert m["preemptions"] > 0  # the example shows a reclaim


def test_policy_flag_overrides_the_file_and_changes_the_outcome():
    fair = json.loads(invoke(str(EXAMPLES / "two-labs.yaml"), "--json").stdout)
    fifo = json.loads(invoke(str(EXAMPLES / "two-labs.yaml"), "--json", "--policy", "fifo").stdout)
    assert fifo["metrics"]["preemptions"] == 0
    assert fair["workloads"] != fifo["workloads"]


def test_same_input_same_output():
    a = json.loads(invoke(str(EXAMPLES / "two-labs.yaml"), "--json").stdout)
    b = json.loads(invoke(str(EXAMPLES / "two-labs.yaml"), "--json").stdout)
    for out in (a, b):
        out["metrics"].pop("scheduler")
        out["metrics"].pop("replay_wall_s")
    assert a == b


BASE = {
    "cluster": {"nodes": [{"name": "n", "gpus": 4}]},
    "tenants": [{"name": "a"}],
    "workloads": [{"id": "j1", "tenant": "a", "duration": 10, "gpus": 1}],
}


def _with_workload(**kw):
    return {**BASE, "workloads": [{**BASE["workloads"][0], **kw}]}


@pytest.mark.parametrize(
    "data,expected",
    [
        ({**BASE, "colour": "red"}, "unknown field 'colour'"),
        (_with_workload(duration=-1), "workloads[0] (id j1): duration must be >= 0"),
        (_with_workload(tenant="zz"), "workloads[0] (id j1): tenant: unknown tenant 'zz'"),
        (_with_workload(gpus=64), "workloads[0] (id j1): request can never run"),
        ("cluster: [\n", "YAML syntax error"),
    ],
    ids=["unknown-key", "negative-duration", "unknown-tenant", "never-fits", "yaml-syntax"],
)
def test_bad_scenarios_exit_2_with_a_message_and_no_traceback(tmp_path, data, expected):
    res = invoke(write(tmp_path, data))
    assert res.exit_code == 2
    text = " ".join(res.output.split())  # Rich may wrap long lines
    assert expected in text
    assert "Traceback" not in res.output


def test_missing_file_and_bad_flag_combinations_exit_2(tmp_path):
    res = invoke(str(tmp_path / "nope.yaml"))
    assert res.exit_code == 2 and "file not found" in res.output
    res = invoke(str(EXAMPLES / "two-labs.yaml"), "--from", "1d")
    assert res.exit_code == 2 and "only applies with --trace" in res.output
    res = invoke("--policy", "sjf", str(EXAMPLES / "two-labs.yaml"))
    assert res.exit_code == 2


def test_help_explains_the_command():
    res = invoke("--help")
    assert res.exit_code == 0
    for word in ("--policy", "--json", "--trace", "--cluster", "--tenants"):
        assert word in res.output


def test_trace_replay_with_a_generic_csv_and_a_cluster_file(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text(
        "submit_time,duration,num_gpus,tenant,gpu_fraction\n"
        "0,100,1,lab-a,\n5,50,0,lab-b,0.5\n6,50,0,lab-b,0.5\n7,10,2,lab-a,\n"
    )
    cluster = tmp_path / "c.yaml"
    cluster.write_text(
        yaml.safe_dump(
            {
                "cluster": {"nodes": [{"name": "g", "gpus": 2, "sharing": "shared"}]},
                "tenants": [{"name": "lab-a", "guaranteed_gpus": 1}, {"name": "lab-b"}],
            }
        )
    )
    res = invoke("--trace", str(trace), "--cluster", str(cluster), "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert [w["state"] for w in out["workloads"]] == ["succeeded"] * 4
    fr = [w for w in out["workloads"] if w["tenant"] == "lab-b"]
    assert all(w["gpus"][0][1] == 500 for w in fr)
    res = invoke("--trace", str(trace), "--gpus", "8", "--tenants", "lab-a", "--policy", "fifo")
    assert res.exit_code == 0, res.output
    assert "Per tenant" in res.output and "lab-b" not in res.output


def test_trace_errors_exit_2(tmp_path):
    res = invoke("--trace", str(tmp_path / "nope.csv"))
    assert res.exit_code == 2 and "trace file not found" in res.output
    bad = tmp_path / "b.csv"
    bad.write_text("submit_time,duration,num_gpus,tenant\n0,-5,1,a\n")
    res = invoke("--trace", str(bad))
    assert res.exit_code == 2 and "line 2" in res.output


def test_progress_bar_on_request_does_not_disturb_json(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n"
        + "".join(f"2017-10-01 00:{i:02d}:00,600,{1 + i % 2},0,vc{i % 3}\n" for i in range(30))
    )
    res = invoke("--trace", str(trace), "--gpus", "8", "--progress", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert len(out["workloads"]) == 30
    assert set(out["metrics"]["per_tenant"]) == {"vc0", "vc1", "vc2"}


def test_cpu_only_notebook_starts_beside_a_gpu_reservation():
    """Issue 17: b-pair (2 GPUs, within lab-b's guarantee) reserves the only node from 10 s
    until its reclaim at 610 s; the CPU-only notebook submitted at 20 s used to start at 610 s
    with it. It asks for no GPU, so it starts at once."""
    res = invoke(str(EXAMPLES / "cpu-notebook-beside-reservation.yaml"), "--json")
    assert res.exit_code == 0, res.output
    start = {w["id"]: (w["submit"], w["start"]) for w in json.loads(res.stdout)["workloads"]}
    assert start["nb-cpu"] == (20, 20)
    assert start["b-pair"] == (10, 610)  # the reservation still stands for the GPU work


def test_trace_replay_with_checkpointing_resumes_preempted_jobs(tmp_path):
    # one tenant, one GPU: a 5 h job, then a 10 min one at 2 h; with --checkpointing the
    # long job (past 1 GPU-hour, level 1, one level up is enough here) makes room and resumes
    # afterwards
    trace = tmp_path / "t.csv"
    trace.write_text("submit_time,duration,num_gpus,tenant\n0,18000,1,lab\n7200,600,1,lab\n")
    cluster = tmp_path / "c.yaml"
    cluster.write_text(
        yaml.safe_dump(
            {
                "cluster": {"nodes": [{"name": "g", "gpus": 1}]},
                "tenants": [{"name": "lab", "guaranteed_gpus": 1}],
                "scheduler": {"service_levels_s": [3600, 36000], "preempt_levels_apart": 1},
            }
        )
    )
    plain = invoke("--trace", str(trace), "--cluster", str(cluster), "--json")
    ckpt = invoke("--trace", str(trace), "--cluster", str(cluster), "--checkpointing", "--json")
    assert plain.exit_code == 0 and ckpt.exit_code == 0, plain.output + ckpt.output
    short = {
        r: next(w for w in json.loads(r.stdout)["workloads"] if w["submit"] == 7200)
        for r in (plain, ckpt)
    }
    assert short[plain]["start"] == 18000
    assert short[ckpt]["start"] < 7200 + 60
    assert json.loads(ckpt.stdout)["metrics"]["preemptions"] == 1
    res = invoke(str(EXAMPLES / "two-labs.yaml"), "--checkpointing")
    assert res.exit_code == 2 and "only applies with --trace" in res.output
