"""`gpupool k8s gpu-operator-config` against a real server: the GPUs come from
GET /api/v1/gpus through the CLI's API client."""

from __future__ import annotations

import json

import yaml
from typer.testing import CliRunner

from gpupool.cli.main import app


def _gpus():
    r = CliRunner().invoke(app, ["gpu", "ls", "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_gpu_operator_config_from_the_server(login):
    login("root")
    gpus = _gpus()
    nodes = {g["node"] for g in gpus}
    modes = {g["node"]: {g2["sharing"] for g2 in gpus if g2["node"] == g["node"]} for g in gpus}
    mixed = sorted(n for n, m in modes.items() if {"exclusive", "shared"} <= m)
    assert mixed, "the seeded cluster has a node with exclusive and shared GPUs"
    r = CliRunner().invoke(app, ["k8s", "gpu-operator-config"])
    assert r.exit_code == 2 and f"node {mixed[0]} has both" in r.output
    for g in gpus:
        if g["sharing"] == "exclusive":
            s = CliRunner().invoke(app, ["gpu", "set-sharing", g["uuid"], "shared"])
            assert s.exit_code == 0, s.output
    r = CliRunner().invoke(app, ["k8s", "gpu-operator-config", "--replicas", "6"])
    assert r.exit_code == 0, r.output
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    assert [d["kind"] for d in docs] == ["ConfigMap", "ConfigMap"]
    for node in nodes:
        assert f"kubectl label node {node} nvidia.com/device-plugin.config=" in r.stderr
    assert f"node {mixed[0]} nvidia.com/device-plugin.config=gpupool-timeslice-6" in r.stderr


def test_gpu_operator_config_needs_a_login(logged_out):
    r = CliRunner().invoke(app, ["k8s", "gpu-operator-config"])
    assert r.exit_code == 1 and "gpupool login" in r.output
