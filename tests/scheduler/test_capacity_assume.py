"""`CapacityIndex.assume` brings a node's index entries up to date from the GPUs it takes only
(capacity.py, `_take_refiled`): the result must be what refiling the node from its GPUs gives.
The bulk load and the refile of a node of one GPU model are written out too: all three must
equal the general refile (the one for nodes of several models)."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.domain import GPUHealth, NodeState
from gpupool.scheduler.capacity import CapacityIndex
from tests.scheduler.builders import node


def _nodes() -> tuple:
    a = node("a", gpus=4, model="A100", gpu_gib=40)
    b = node("b", gpus=4, model="H100", sharing="shared")
    c = node("c", gpus=2, model="H100", state="down")
    mixed = node("m", gpus=2, model="A100")
    h100 = dataclasses.replace(mixed.gpus[1], model="H100", uuid="m-h100")
    sick = node("s", gpus=3, model="A100", sharing="shared")
    bad = dataclasses.replace(sick.gpus[0], health=GPUHealth.UNHEALTHY)
    return (
        a,
        b,
        c,
        dataclasses.replace(mixed, gpus=(mixed.gpus[0], h100)),
        dataclasses.replace(sick, gpus=(bad, *sick.gpus[1:])),
    )


def _state(cap: CapacityIndex) -> tuple:
    def buckets(indexes: dict) -> dict:
        out = {}
        for m, idx in indexes.items():
            keys = idx.keys()  # a BucketIndex, not a dict
            out[m] = [(k, idx.items_under(k)) for k in keys]
        return out

    return (
        list(cap.free_milli),
        list(cap.free_gmem),
        list(cap.node_free_milli),
        list(cap.node_whole_free),
        buckets(cap.whole),
        buckets(cap.whole_unshared),
        buckets(cap.frac),
    )


def _general_refile(cap: CapacityIndex) -> tuple:
    """The state after refiling every node through `_refile`'s general path (as if every node
    had several GPU models), the written-out paths put back afterwards."""
    tables = cap._st
    one_model = tables.node_model
    tables.node_model = [None] * len(one_model)
    try:
        cap.refile(set(range(len(cap.nodes))))
        return _state(cap)
    finally:
        tables.node_model = one_model


OPS = st.lists(
    st.tuples(
        st.sampled_from(["assume", "unassume", "hold"]),
        st.integers(0, 4),  # node
        st.lists(st.tuples(st.integers(0, 3), st.sampled_from([250, 500, 1000])), max_size=3),
        st.sampled_from([0, 10 * 1024, 40 * 1024, 80 * 1024]),
    ),
    max_size=25,
)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_assume_leaves_the_index_as_a_refile_of_the_node_would(ops):
    cap = CapacityIndex(_nodes())
    assert NodeState.DOWN is cap.nodes[2].state
    assert _state(cap) == _general_refile(cap), "the bulk load"
    for what, n, picks, gmem in ops:
        gpus = cap.node_gpus[n]
        takes = [(gpus[i % len(gpus)], milli, gmem) for i, milli in picks]
        if what == "assume":
            cap.assume(n, takes, 1000, 1024)
        elif what == "unassume":
            cap.unassume(n, takes, 1000, 1024)
        else:
            cap.hold(n)
        seen = _state(cap)
        cap.refile(set(range(len(cap.nodes))))
        assert _state(cap) == seen, f"after {what} on node {n}"
        assert _general_refile(cap) == seen, f"after {what} on node {n}, the general refile"
