"""Submit with placement pins (issue 31, several engines in one pool): `engine` and
`node_labels` are stored, shown, refused when no node of the pool could ever satisfy them
(naming the engines it has), and honoured by the scheduler."""

from __future__ import annotations

import dataclasses

from gpupool.domain import GPU, Node
from gpupool.domain.placement import ENGINE_LABEL, MULTI_NODE_LABEL
from gpupool.scheduler import cycle
from gpupool.store import NodeRepo


def _two_engines(world) -> None:
    """n1 (the seed's) runs on the fake engine; n2 on slurm, in zone a."""
    with world.ctx.store.write() as s:
        repo = NodeRepo(s)
        n1 = repo.get("n1")
        repo.upsert(dataclasses.replace(n1, labels=((ENGINE_LABEL, "fake"),)))
        repo.upsert(
            Node(
                "n2",
                tuple(GPU(i, f"GPU-n2-{i}", "H100", 81920) for i in range(2)),
                cpu_milli=32000,
                memory_mib=256000,
                labels=((ENGINE_LABEL, "slurm"), (MULTI_NODE_LABEL, "true"), ("zone", "a")),
            )
        )


def test_pins_are_stored_shown_and_honoured(world):
    _two_engines(world)
    w = world.submit(gpus=1, engine="slurm", node_labels={"zone": "a"})
    assert w["request"]["engine"] == "slurm"
    assert w["request"]["node_labels"] == {"zone": "a"}
    shown = world.get("member", f"/workloads/{w['id']}").json()
    assert (shown["request"]["engine"], shown["request"]["node_labels"]) == ("slurm", {"zone": "a"})
    plain = world.submit(gpus=1)
    assert (plain["request"]["engine"], plain["request"]["node_labels"]) == (None, {})
    snap, pending = world.scheduler.snapshot()
    d = cycle(snap, pending, world.clock.now(), world.ctx.settings.scheduler)
    by_id = {a.workload_id: a.allocation.node for a in d.admissions}
    assert by_id[w["id"]] == "n2"


def test_an_engine_this_pool_has_no_node_of_is_refused_naming_its_engines(world):
    _two_engines(world)
    r = world.post("member", "/workloads", json={"command": ["x"], "gpus": 1, "engine": "nomad"})
    assert r.status_code == 422, r.text
    assert (
        "pinned to engine nomad: no node of it is registered (the engines here: fake, slurm)"
        in r.json()["detail"]
    )
    r = world.post(
        "member", "/workloads", json={"command": ["x"], "gpus": 1, "node_labels": {"zone": "b"}}
    )
    assert r.status_code == 422, r.text
    assert "needs node label zone=b: no node has it" in r.json()["detail"]


def test_malformed_pins_are_a_clear_422(world):
    for body, said in (
        ({"engine": "Slurm!"}, "is not an engine name"),
        ({"node_labels": {"bad key": "a"}}, "node label key 'bad key'"),
        ({"node_labels": {"zone": "a b"}}, "a value must be empty or 1 to 63"),
    ):
        r = world.post("member", "/workloads", json={"command": ["x"], "gpus": 1, **body})
        assert r.status_code == 422, r.text
        assert said in r.json()["detail"]


def test_hub_notebooks_are_pinned_to_the_default_engine_of_a_mixed_pool(world):
    """The hub's single-user command is the default engine's: its notebooks run there, unless
    pinned otherwise; jobs stay free."""
    _two_engines(world)
    world.ctx.hub, world.ctx.notebook_engine = True, "fake"
    world.ctx.notebook_owner = None
    nb = world.submit(gpus=1, kind="notebook")
    assert nb["request"]["engine"] == "fake"
    pinned = world.submit(gpus=1, kind="notebook", engine="slurm")
    assert pinned["request"]["engine"] == "slurm"
    job = world.submit(gpus=1)
    assert job["request"]["engine"] is None
    world.ctx.notebook_engine = None  # one engine: nothing pinned
    assert world.submit(gpus=1, kind="notebook")["request"]["engine"] is None
