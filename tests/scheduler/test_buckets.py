"""The bucket index answers like a brute-force scan, whatever the sequence of changes."""

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.scheduler.buckets import BucketIndex, probe_ranges, probe_starts

OPS = st.lists(st.tuples(st.integers(0, 15), st.one_of(st.none(), st.integers(0, 8))), max_size=60)


def _apply(ops) -> tuple[BucketIndex, dict[int, int]]:
    """An index after `ops` ((item, key or None to drop)) and what it should hold."""
    idx = BucketIndex()
    truth: dict[int, int] = {}
    for item, key in ops:
        idx.set(item, key)
        if key is None:
            truth.pop(item, None)
        else:
            truth[item] = key
    return idx, truth


@settings(max_examples=200, deadline=None)
@given(OPS, st.integers(0, 9), st.sets(st.integers(0, 15)))
def test_find_matches_a_brute_force_scan(ops, lo, rejected):
    idx, truth = _apply(ops)
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
def test_long_histories_answer_the_same(ops):
    """An index kept for many cycles sees many `set`s on few items: it answers like a fresh
    one."""
    idx = BucketIndex()
    truth: dict[int, int] = {}
    for item, key in ops:
        idx.set(item, key)
        truth[item] = key
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


SCORES = st.dictionaries(st.integers(0, 40), st.integers(0, 3))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 40), st.one_of(st.none(), st.integers(0, 4))), max_size=80),
    st.integers(0, 4),
    st.sets(st.integers(0, 40)),
    SCORES,
    st.integers(1, 8),
)
def test_find_spread_answers_from_the_right_bucket_whatever_the_history(
    ops, lo, rejected, scores, limit
):
    """`find_spread` answers from the smallest key >= lo that has a passing item, always
    finds one there if there is one, takes the best score of all when the bucket has at
    most `limit` items, and answers like a fresh index with the same items."""
    idx, truth = _apply(ops)

    def ok(i: int) -> bool:
        return i not in rejected

    def score(i: int, _k: object) -> float:
        return scores.get(i, 2)

    got = idx.find_spread(lo, ok, score, limit=limit)
    passing = [(k, i) for i, k in truth.items() if k >= lo and ok(i)]
    if not passing:
        assert got is None
        return
    key = min(passing)[0]
    assert got is not None and got[1] == key and ok(got[0]) and truth[got[0]] == key
    bucket = [i for i, k in truth.items() if k == key]
    if len(bucket) <= limit:
        assert got[0] == min((score(i, key), i) for i in bucket if ok(i))[1]
    fresh = BucketIndex()
    fresh.load(sorted(truth.items()))
    assert fresh.find_spread(lo, ok, score, limit=limit) == got


def test_find_spread_compares_items_from_the_whole_bucket_not_its_lowest_ids():
    idx = BucketIndex()
    for i in range(1000):
        idx.set(i, 0)
    # only the last items score well: comparing the lowest ids only would miss them
    got = idx.find_spread(0, lambda i: True, lambda i, k: 0.0 if i >= 850 else 1.0, limit=8)
    assert got == (856, 0)  # probes at ranks 0, 142, ..., 856, 999: the first that scores 0
    # nothing passes where the probes look: the lowest passing id of the bucket
    assert idx.find_spread(0, lambda i: i == 3, lambda i, k: 0.0, limit=8) == (3, 0)


@given(st.integers(2, 300), st.integers(1, 70))
def test_probe_starts_reads_each_probe_ranges_first_rank_as_a_tuple(size, limit):
    live = [x * 7 for x in range(size)]
    got = probe_starts(size, limit)(live)
    assert got == tuple(live[start] for start, _ in probe_ranges(size, limit))
