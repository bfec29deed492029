"""GPU history repository on SQLite and PostgreSQL: merge, rollup, prune, buckets."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect

from gpupool.store import GpuPeriod, HistoryRepo, Retention

H = 3600
T0 = 1_780_000_000 - 1_780_000_000 % 86400  # a midnight


def minute(t: int, util: float | None, mem: float | None = 1000.0, n: int = 6, uuid="GPU-a"):
    return GpuPeriod(
        uuid,
        t,
        n,
        util=util,
        util_max=None if util is None else util + 5,
        memory_mib=mem,
        memory_mib_max=None if mem is None else mem + 10,
        power_w=100.0,
        temperature_c=40.0,
        node="n1",
    )


def test_the_table_exists_after_migration(store):
    assert "gpu_history" in inspect(store.engine).get_table_names()


def test_add_merges_a_minute_already_stored_weighted_by_samples(store):
    with store.write() as s:
        assert HistoryRepo(s).add([minute(T0, 10.0, n=1)]) == 1
    with store.write() as s:
        HistoryRepo(s).add([minute(T0, 40.0, n=3), minute(T0 + 60, None, None)])
    with store.read() as s:
        got = HistoryRepo(s).periods("GPU-a", 60)
    assert [p.t for p in got] == [T0, T0 + 60]
    assert got[0].samples == 4 and got[0].util == pytest.approx(32.5)
    assert got[0].util_max == 45.0 and got[0].memory_mib_max == 1010.0
    assert got[1].util is None and got[1].memory_mib is None
    with store.write() as s, pytest.raises(ValueError, match="multiple of 60"):
        HistoryRepo(s).add([minute(T0 + 1, 1.0)])


def test_rollup_weights_means_keeps_maxima_and_is_idempotent(store):
    pts = [minute(T0 + 60 * i, float(i), mem=100.0 * i, n=1 + i % 2) for i in range(60)]
    pts += [minute(T0 + H, 99.0)]  # the next hour: not in the range rolled up
    pts += [minute(T0 + 60 * i, None, None, uuid="GPU-b") for i in range(3)]
    with store.write() as s:
        HistoryRepo(s).add(pts)
    for _ in range(2):
        with store.write() as s:
            assert HistoryRepo(s).rollup(T0 + 17, T0 + H + 59) == 2
    with store.read() as s:
        (a,) = HistoryRepo(s).periods("GPU-a", H)
        (b,) = HistoryRepo(s).periods("GPU-b", H)
    weights = [1 + i % 2 for i in range(60)]
    assert a.t == T0 and a.samples == sum(weights) and a.node == "n1"
    assert a.util == pytest.approx(
        sum(i * w for i, w in zip(range(60), weights, strict=True)) / sum(weights)
    )
    assert a.memory_mib == pytest.approx(100 * a.util)
    assert a.util_max == 64.0 and a.memory_mib_max == 5910.0 and a.temperature_c == 40.0
    assert b.util is None and b.memory_mib is None and b.samples == 18


def test_prune_keeps_each_resolution_for_its_retention(store):
    ret = Retention(fine_keep_s=2 * H, coarse_keep_s=5 * H)
    with store.write() as s:
        repo = HistoryRepo(s)
        repo.add([minute(T0 + 60 * i, 1.0) for i in range(10 * 60)])
        repo.rollup(T0, T0 + 10 * H)
        now = T0 + 10 * H
        assert repo.prune(now, ret) == (10 * 60 - 2 * 60) + (10 - 5)
    with store.read() as s:
        repo = HistoryRepo(s)
        assert repo.oldest(60) == now - 2 * H and repo.oldest(H) == now - 5 * H
        assert repo.rows_per_gpu() == {"GPU-a": {60: 120, H: 5}}


def test_buckets_average_rows_per_slot_on_both_databases(store):
    with store.write() as s:
        HistoryRepo(s).add([minute(T0 + 60 * i, float(10 * i), n=1) for i in range(6)])
    with store.read() as s:
        got = HistoryRepo(s).buckets(
            ["GPU-a", "GPU-x"], start=T0, width=180, count=4, resolution_s=60
        )
    assert list(got) == ["GPU-a"]
    assert [(p[0], p[1]) for p in got["GPU-a"]] == [(T0 + 90.0, 10.0), (T0 + 270.0, 40.0)]
    with store.read() as s:
        late = HistoryRepo(s).buckets(
            ["GPU-a"], start=T0, width=180, count=4, resolution_s=60, since=T0 + 120, until=T0 + 300
        )
    assert [p[1] for p in late["GPU-a"]] == [20.0, 35.0]


def test_retention_states_its_bound():
    assert Retention().rows_per_gpu == 2 * 1440 + 90 * 24 + 2
    with pytest.raises(ValueError):
        Retention(fine_keep_s=60)
