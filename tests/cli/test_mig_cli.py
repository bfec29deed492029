"""MIG from the CLI against a real server: `gpupool gpu mig-layout`, `gpupool run --mig`,
`gpupool profile create --mig`, and `gpupool gpu ls` showing the instances."""

from __future__ import annotations

import json

from tests.cli.test_client import as_, env, gp, server  # noqa: F401 - fixtures


def test_layout_then_a_mig_job_runs_on_an_instance(env):  # noqa: F811
    _, ctx = env
    admin, ann = as_(ctx, "root"), as_(ctx, "ann")
    r = gp("gpu", "mig-layout", "n1:2", "all-3g.40gb", token=ann)
    assert r.exit_code == 1 and "admin" in r.output
    r = gp("gpu", "mig-layout", "n1:2", "3g.40gb@2", token=admin)
    assert r.exit_code == 1 and "needs start 0 or 4" in r.output
    r = gp("gpu", "mig-layout", "n1:2", "all-3g.40gb", token=admin)
    assert r.exit_code == 0, r.output
    assert "GPU 2 on n1 is cut into 3g.40gb@0, 3g.40gb@4" in r.output
    r = gp("run", "--mig", "3g.40gb", "--wait", "--poll", "0.05", "--", "echo", "sliced", token=ann)
    assert r.exit_code == 0, r.output
    assert "sliced" in r.output and "3g.40gb MIG instance" in r.output
    r = gp("run", "--mig", "1g.10gb", "--gpus", "1", "--", "x", token=ann)
    assert r.exit_code == 2 and "use --mig or --gpus / --gpu-fraction, not both" in r.output
    out = gp("gpu", "ls", token=ann).output
    assert "mig 2/2 free" in out
    assert all(len(line) <= 80 for line in out.splitlines())
    wide = gp("gpu", "ls", "-o", "wide", token=ann).output
    assert "all-3g.40gb" in wide
    gs = json.loads(gp("gpu", "ls", "--json", token=ann).output)
    (g,) = [g for g in gs if g["index"] == 2]
    assert [i["start"] for i in g["mig_instances"]] == [0, 4]
    r = gp("gpu", "mig-layout", "n1:2", "none", token=admin)
    assert r.exit_code == 0 and "handed out whole" in r.output


def test_profile_with_a_mig_instance(env):  # noqa: F811
    _, ctx = env
    admin = as_(ctx, "root")
    r = gp("profile", "create", "slice", "--mig", "1g.10gb", "--kind", "job", token=admin)
    assert r.exit_code == 0, r.output
    assert "a 1g.10gb MIG instance" in r.output
