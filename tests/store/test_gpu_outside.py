"""A GPU's outside holder is stored with the GPU and cleared when the engine no longer reports
it (SQLite and PostgreSQL)."""

from __future__ import annotations

from gpupool.domain import GPU, Node, OutsideUse
from gpupool.store import NodeRepo


def _node(outside: OutsideUse | None) -> Node:
    return Node(
        "n1",
        (GPU(0, "GPU-0", "H100", 81920), GPU(1, "GPU-1", "H100", 81920, outside=outside)),
        cpu_milli=8000,
        memory_mib=64000,
    )


def test_outside_use_round_trips_and_clears(store):
    slurm = OutsideUse("slurm job 4711", "bob", since=1_700_000_000.5)
    with store.write() as s:
        NodeRepo(s).upsert(_node(slurm))
    with store.read() as s:
        listed = NodeRepo(s).list()[0]
        got = NodeRepo(s).get("n1")
        _, one = NodeRepo(s).gpu("GPU-1")
    assert listed == got == _node(slurm)
    assert one.outside == slurm and one.health.value == "healthy" and not one.schedulable
    pods = OutsideUse("pod team-x/train-0")
    with store.write() as s:
        NodeRepo(s).upsert(_node(pods))
    with store.read() as s:
        assert NodeRepo(s).list()[0].gpu(1).outside == pods
    with store.write() as s:
        NodeRepo(s).upsert(_node(None))
    with store.read() as s:
        assert NodeRepo(s).list()[0] == _node(None)
        assert NodeRepo(s).gpu("GPU-1")[1].schedulable
