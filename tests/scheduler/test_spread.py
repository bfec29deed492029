"""Placement's written-out spread searches (`_spread_whole`, `_spread_fraction`) answer as
`BucketIndex.find_spread` with the balance scores they replace (issue 32: the same decisions,
cheaper): checked on random clusters large enough that buckets are probed, not read whole."""

from __future__ import annotations

import dataclasses
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupool.domain import MILLI_PER_GPU
from gpupool.scheduler.balance import (
    CANDIDATES,
    WHOLE_CANDIDATES,
    fraction_score,
    whole_free_gpu,
    whole_imbalance,
)
from gpupool.scheduler.capacity import FRACTION, WHOLE, CapacityIndex, Shape
from gpupool.scheduler.placement import (
    Placement,
    _find,
    _spread_fraction,
    _spread_whole,
    place_on_node,
    share_memory,
)
from tests.scheduler.builders import node

GIB = 1024


def _cluster(seed: int, models: tuple[str, ...] = ("H100",)) -> CapacityIndex:
    """400-500 nodes, some shared, with random free CPUs, memory and GPU milli/memory."""
    rng = random.Random(seed)
    nodes = tuple(
        node(
            f"n{i}",
            gpus=rng.choice([4, 8]),
            model=rng.choice(models),
            gpu_gib=rng.choice([40, 80]),
            cpus=rng.choice([32, 64, 128]),
            memory_gib=rng.choice([256, 512]),
            sharing="shared" if rng.random() < 0.4 else "exclusive",
        )
        for i in range(rng.randrange(400, 500))
    )
    cap = CapacityIndex(nodes)
    for n in range(len(nodes)):
        cap.free_cpu[n] = rng.randrange(0, cap.cpu_total[n] + 1, 1000)
        cap.free_mem[n] = rng.randrange(0, cap.mem_total[n] + 1, GIB)
        for g in cap.node_gpus[n]:
            if rng.random() < 0.1:
                cap.free_milli[g] = rng.choice([0, 250, 500, 750])
                cap.free_gmem[g] = rng.randrange(0, cap.gpu_total_mem[g] + 1, GIB)
        cap._refile(n)
    return cap


def _reference_whole(cap: CapacityIndex, idx, s: Shape):
    def pred(n: int) -> bool:
        fits = cap.node_fits_host(n, s)
        return fits and (not s.gpu_memory_mib or place_on_node(cap, n, s) is not None)

    def score(n: int, key: int) -> float:
        return whole_imbalance(cap, n, key - s.count, s.cpu_milli, s.memory_mib)

    return idx.find_spread(s.count, pred, score, limit=WHOLE_CANDIDATES)


def _reference_fraction(cap: CapacityIndex, idx, s: Shape):
    def pred(g: int) -> bool:
        n = cap.gpu_node[g]
        return cap.node_fits_host(n, s) and cap.free_gmem[g] >= share_memory(cap, g, s)

    seen: dict[int, float] = {}

    def score(g: int, _key) -> float:
        n = cap.gpu_node[g]
        if n not in seen:
            seen[n] = fraction_score(cap, g, s.milli, s.cpu_milli, s.memory_mib) + (
                1 if whole_free_gpu(cap, g) else 0
            )
        return seen[n] - (1 if whole_free_gpu(cap, g) else 0)

    lo = s.gpu_memory_mib
    return idx.find_spread((s.milli, lo), pred, score, lambda k: k[1] >= lo, CANDIDATES)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 10_000),
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from([0, 40 * GIB, 80 * GIB]),
    st.integers(0, 64),
    st.integers(0, 256),
)
def test_whole_spread_answers_as_find_spread(seed, count, gpu_mem, cpus, mem_gib):
    cap = _cluster(seed)
    s = Shape(WHOLE, count, 0, gpu_mem, "H100", cpus * 1000, mem_gib * GIB)
    for idx in (cap.whole["H100"], cap.whole_unshared["H100"]):
        assert _spread_whole(cap, idx, s) == _reference_whole(cap, idx, s)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 10_000),
    st.sampled_from([100, 250, 500, 750, MILLI_PER_GPU]),
    st.sampled_from([0, 10 * GIB, 20 * GIB]),
    st.integers(0, 64),
    st.integers(0, 256),
)
def test_fraction_spread_answers_as_find_spread(seed, milli, gpu_mem, cpus, mem_gib):
    cap = _cluster(seed)
    s = Shape(FRACTION, 0, milli, gpu_mem, "H100", cpus * 1000, mem_gib * GIB)
    idx = cap.frac["H100"]
    assert _spread_fraction(cap, idx, s) == _reference_fraction(cap, idx, s)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 10_000),
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from([100, 250, 500]),
    st.integers(0, 64),
    st.integers(0, 256),
)
def test_a_search_over_every_model_stops_where_no_later_model_can_win(
    seed, count, milli, cpus, mem_gib
):
    """`_find` without a model bounds each later model's search by the best key so far: it
    answers as the best (key, item) of the models searched each without a bound."""
    cap = _cluster(seed, models=("A100", "H100", "L4"))
    for s, indexes, spread in (
        (Shape(WHOLE, count, 0, 0, None, cpus * 1000, mem_gib * GIB), cap.whole, _spread_whole),
        (
            Shape(FRACTION, 0, milli, 0, None, cpus * 1000, mem_gib * GIB),
            cap.frac,
            _spread_fraction,
        ),
    ):
        hits = []
        for m in cap.models:
            ms = s._replace(model=m) if s.kind == WHOLE else s
            hit = spread(cap, indexes[m], ms)
            if hit is not None:
                hits.append((hit[1], hit[0]))
        p = _find(cap, s, indexes)
        if not hits:
            assert p is None
            continue
        key, item = min(hits)
        assert p is not None
        if s.kind == WHOLE:
            assert p.node == item
        else:
            assert p.takes[0][0] == item


def _mixed_cluster(seed: int) -> CapacityIndex:
    """`_cluster` of A100 and H100 nodes where about one node in five has GPUs of both."""
    rng = random.Random(seed)
    cap = _cluster(seed, models=("A100", "H100"))
    nodes = list(cap.nodes)
    for i, n in enumerate(nodes):
        if rng.random() < 0.2:
            other = "A100" if n.gpus[0].model == "H100" else "H100"
            k = rng.randrange(1, len(n.gpus))
            gpus = [dataclasses.replace(g, model=other) for g in n.gpus[:k]] + list(n.gpus[k:])
            nodes[i] = dataclasses.replace(n, gpus=tuple(gpus))
    mixed = CapacityIndex(tuple(nodes))
    for n in range(len(nodes)):  # the same free resources as `_cluster` gave
        mixed.free_cpu[n], mixed.free_mem[n] = cap.free_cpu[n], cap.free_mem[n]
        for g in mixed.node_gpus[n]:
            mixed.free_milli[g], mixed.free_gmem[g] = cap.free_milli[g], cap.free_gmem[g]
        mixed._refile(n)
    return mixed


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(0, 10_000),
    st.sampled_from([1, 2, 3, 4, 8]),
    st.sampled_from([None, "A100", "H100"]),
    st.sampled_from([0, 40 * GIB, 80 * GIB]),
    st.integers(0, 64),
    st.integers(0, 256),
)
def test_whole_gpus_are_picked_on_the_node_found_as_place_on_node_picks_them(
    seed, count, model, gpu_mem, cpus, mem_gib
):
    """`_find` picks the GPUs on the node its spread found with `_whole_on_node` directly: the
    same as `place_on_node` there, for the model of the index that node was found in. And
    `place_on_node` (which skips the model census on a node of one model, and stops at the
    `count`-th exclusive GPU where there is none) picks as the rule says, on nodes of one or
    of two models."""
    cap = _mixed_cluster(seed)
    s = Shape(WHOLE, count, 0, gpu_mem, model, cpus * 1000, mem_gib * GIB)
    assert any(len(m) > 1 for m in cap.node_models)
    for indexes in (cap.whole_unshared, cap.whole):
        p = _find(cap, s, indexes)
        if p is None:
            continue
        found = cap.gpu_model[p.takes[0][0]]
        assert p == place_on_node(cap, p.node, s._replace(model=found))
    for n in range(len(cap.nodes)):  # and on every node, as the rule says
        assert place_on_node(cap, n, s) == _reference_whole_on_node(cap, n, s)


def _reference_whole_on_node(cap: CapacityIndex, n: int, s: Shape) -> Placement | None:
    """`count` whole free GPUs of one model on node `n`, exclusive ones first, then shared;
    without a model asked for, the model with the fewest such GPUs that suffice (then the
    first by name)."""
    if not cap.node_ready[n] or not cap.node_fits_host(n, s):
        return None
    by_model: dict[str, list[int]] = {}
    for shared in (False, True):
        for g in cap.node_gpus[n]:
            if cap.gpu_shared[g] is not shared or not cap.gpu_ok[g] or not cap.is_whole_free(g):
                continue
            if cap.gpu_total_mem[g] >= s.gpu_memory_mib and s.model in (None, cap.gpu_model[g]):
                by_model.setdefault(cap.gpu_model[g], []).append(g)
    enough = sorted((len(gs), m) for m, gs in by_model.items() if len(gs) >= s.count)
    if not enough:
        return None
    picks = by_model[enough[0][1]][: s.count]
    return Placement(n, tuple((g, MILLI_PER_GPU, cap.gpu_total_mem[g]) for g in picks))


def test_the_clusters_buckets_are_probed_not_read_whole():
    cap = _cluster(1)
    sizes = [len(items) for _, items in cap.whole["H100"].buckets_from(1)]
    assert max(sizes) > WHOLE_CANDIDATES
