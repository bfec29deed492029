"""`gpupool run --engine NAME --node-label KEY=VALUE`: the pins reach the server, `gpupool
show` tells them, and a malformed label is refused in flag terms before anything is sent."""

from __future__ import annotations

import dataclasses
import json

from gpupool.store import NodeRepo
from tests.cli.test_client import as_, env, gp, server  # noqa: F401 - fixtures


def test_run_sends_pins_and_show_tells_them(env):  # noqa: F811
    _, ctx = env
    with ctx.store.write() as s:
        repo = NodeRepo(s)
        repo.upsert(dataclasses.replace(repo.get("n1"), labels=(("zone", "a"),)))
    t = as_(ctx, "ann")
    args = ["--engine", "fake", "--node-label", "zone=a", "--node-label", "zone = a"]
    r = gp("run", "--gpus", "1", *args, "--", "python", "x", token=t)
    assert r.exit_code == 0, r.output
    wid = r.output.strip()
    shown = json.loads(gp("show", wid, "--json", token=t).output)
    assert shown["request"]["engine"] == "fake"
    assert shown["request"]["node_labels"] == {"zone": "a"}
    text = " ".join(gp("show", wid, token=t).output.split())
    assert "runs on engine fake; nodes labelled zone=a" in text
    r = gp("run", "--gpus", "1", "--node-label", "zone=b", "--", "python", "x", token=t)
    assert r.exit_code != 0
    assert "needs node label zone=b: no node has it" in " ".join(r.output.split())


def test_run_refuses_a_label_without_a_value_before_sending(env):  # noqa: F811
    _, ctx = env
    r = gp("run", "--gpus", "1", "--node-label", "zone", "--", "x", token=as_(ctx, "ann"))
    assert r.exit_code == 2, r.output
    assert "--node-label: node label 'zone': write it as KEY=VALUE (e.g. zone=a)" in " ".join(
        r.output.split()
    )
