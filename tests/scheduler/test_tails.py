"""The queue summary kept across cycles (tails.LastKeys) against one built afresh."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpupool.scheduler.queues import _changed_queue
from gpupool.scheduler.tails import LastKeys, Tail

#: a few shapes, compared by value (equal tuples that are distinct objects included)
SHAPES = [("a",), ("b",), ("c",), ("d",)]


def _entry(k: int, s: int) -> tuple:
    return ((k % 3, k), f"w{k}", tuple(SHAPES[s]), 1000 * (s + 1))


def _fresh(q: list) -> tuple[dict, dict]:
    count: dict = {}
    last: dict = {}
    for e in q:
        count[e[2]] = count.get(e[2], 0) + 1
        last[e[2]] = e[0]
    return count, last


@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 3)), max_size=40), st.data())
def test_kept_across_cycles_equals_a_fresh_build(first: list, data: st.DataObject) -> None:
    """Random drops and adds, cycle after cycle (a shape's last entry dropped, a shape gone
    and back, work re-keyed): counts, last keys and `shapes_from` at every position are
    those of the queue built afresh."""
    next_key = 1000
    lk = LastKeys()
    q: list = []
    add = [_entry(k, s) for k, s in dict(first).items()]
    rekeyed: list = []
    for _ in range(data.draw(st.integers(1, 6))):
        drop = data.draw(st.lists(st.sampled_from(q), unique=True) if q else st.just([]))
        drop += [e for e in rekeyed if e not in drop]
        if data.draw(st.booleans()):
            drop.sort()
        q = _changed_queue(q, drop, add)
        lk.update(q, drop, add)
        assert (lk.count, lk.last) == _fresh(q)
        tail = Tail(q, lk.last)
        for i in range(len(q)):
            assert set(tail.shapes_from(i)) == {e[2] for e in q[i:]}
            assert set(Tail(q).shapes_from(i)) == {e[2] for e in q[i:]}
        n = data.draw(st.integers(0, 8))
        add = [_entry(next_key + j, data.draw(st.integers(0, 3))) for j in range(n)]
        next_key += n
        rekeyed = []
        if q and data.draw(st.booleans()):  # one re-keyed (LAS): dropped and added anew
            e = data.draw(st.sampled_from(q))
            rekeyed = [e]
            add.append(((e[0][0] - 1, e[0][1]), *e[1:]))
