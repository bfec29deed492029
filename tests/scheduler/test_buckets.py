"""The bucket index answers like a brute-force scan, whatever the sequence of changes."""

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.scheduler.buckets import BucketIndex

OPS = st.lists(st.tuples(st.integers(0, 15), st.one_of(st.none(), st.integers(0, 8))), max_size=60)


@settings(max_examples=200, deadline=None)
@given(OPS, st.integers(0, 9), st.sets(st.integers(0, 15)))
def test_find_matches_a_brute_force_scan(ops, lo, rejected):
    idx = BucketIndex()
    truth: dict[int, int] = {}
    for item, key in ops:
        idx.set(item, key)
        if key is None:
            truth.pop(item, None)
        else:
            truth[item] = key
    assert len(idx) == len(truth)
    assert idx.max_key() == (max(truth.values()) if truth else None)
    for key in set(truth.values()):
        assert idx.items_under(key) == sorted(i for i, k in truth.items() if k == key)
    ok = [(k, i) for i, k in truth.items() if k >= lo and i not in rejected]
    expected = min(ok) if ok else None
    got = idx.find(lo, lambda i: i not in rejected)
    assert (None if got is None else (got[1], got[0])) == expected


def test_key_ok_skips_whole_buckets():
    idx = BucketIndex()
    idx.set(1, (500, 10))
    idx.set(2, (500, 40))
    idx.set(3, (1000, 80))
    assert idx.find((400, 30), lambda i: True, lambda k: k[1] >= 30) == (2, (500, 40))
    assert idx.find((600, 0), lambda i: True) == (3, (1000, 80))


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.integers(0, 30), st.integers(0, 5)), OPS, st.integers(0, 6))
def test_load_then_changes_matches_brute_force(initial, ops, lo):
    idx = BucketIndex()
    idx.load(sorted(initial.items()))
    truth = dict(initial)
    for item, key in ops:
        idx.set(item, key)
        if key is None:
            truth.pop(item, None)
        else:
            truth[item] = key
    ok = [(k, i) for i, k in truth.items() if k >= lo]
    got = idx.find(lo, lambda i: True)
    assert (None if got is None else (got[1], got[0])) == (min(ok) if ok else None)
    assert len(idx) == len(truth)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3)), min_size=100, max_size=400))
def test_long_histories_stay_compact_and_answer_the_same(ops):
    """An index kept for many cycles sees many `set`s on few items: its heaps stay small
    (stale entries are compacted away) and it answers like a fresh one."""
    idx = BucketIndex()
    truth: dict[int, int] = {}
    for item, key in ops:
        idx.set(item, key)
        truth[item] = key
        assert all(len(h) <= 2 * idx._count[k] + 8 for k, h in idx._heaps.items())
    fresh = BucketIndex()
    fresh.load(sorted(truth.items()))
    keys = idx.keys()
    assert keys == fresh.keys()
    for key in keys:
        assert idx.items_under(key) == fresh.items_under(key)
    for lo in range(4):
        for banned in ({0}, {1, 2}, set()):
            assert idx.find(lo, lambda i, b=banned: i not in b) == fresh.find(
                lo, lambda i, b=banned: i not in b
            )
