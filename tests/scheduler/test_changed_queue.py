"""A tenant's sorted queue brought up to date with the work gone and new (queues.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpupool.scheduler.queues import _changed_queue


@given(
    st.sets(st.integers(0, 200), max_size=60),
    st.data(),
)
def test_equals_sorting_what_is_left_with_what_is_new(keys: set[int], data: st.DataObject) -> None:
    q = [((-(k % 3), k), f"w{k}") for k in sorted(keys)]
    q.sort()
    drop = data.draw(st.lists(st.sampled_from(q), unique=True) if q else st.just([]))
    new = data.draw(st.sets(st.integers(201, 400), max_size=30))
    add = [((-(k % 3), k), f"w{k}") for k in new]
    want = sorted([e for e in q if e not in drop] + add)
    before = list(q)
    assert _changed_queue(q, list(drop), list(add)) == want
    assert q == before  # the queue handed in is never changed
