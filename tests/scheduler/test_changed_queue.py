"""A tenant's sorted queue brought up to date with the work gone and new (queues.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpupool.scheduler.queues import _changed_queue, _positions


@given(
    st.sets(st.integers(0, 200), max_size=80),
    st.data(),
)
def test_equals_sorting_what_is_left_with_what_is_new(keys: set[int], data: st.DataObject) -> None:
    q = [((-(k % 3), k), f"w{k}") for k in sorted(keys)]
    q.sort()
    drop = data.draw(st.lists(st.sampled_from(q), unique=True) if q else st.just([]))
    if data.draw(st.booleans()):
        drop.sort()  # in queue order (admitted work): each looked for after the one before
    new = data.draw(st.sets(st.integers(201, 400), max_size=30))
    add = [((-(k % 3), k), f"w{k}") for k in new]
    want = sorted([e for e in q if e not in drop] + add)
    before = list(q)
    assert _changed_queue(q, list(drop), list(add)) == want
    assert q == before  # the queue handed in is never changed


@given(st.integers(1, 300), st.data())
def test_positions_of_dropped_entries_in_queue_order_or_not(n: int, data: st.DataObject) -> None:
    """`_positions` finds each dropped entry after the one before (next to it, one further,
    or by binary search) when they come in queue order, and all by binary search when not."""
    q = sorted(((-(k % 3), k), f"w{k}") for k in range(n))
    at = data.draw(st.lists(st.integers(0, n - 1), unique=True, max_size=max(1, n // 4)))
    order = data.draw(st.sampled_from(["queue", "queue", "any"]))
    if order == "queue":
        at.sort()
    want = sorted(at)
    assert _positions(q, [q[i] for i in at]) == want
    left = [e for i, e in enumerate(q) if i not in want]
    assert _changed_queue(q, [q[i] for i in at], []) == left
