"""The state the steps of a cycle share (gpupool.scheduler.cyclestate): a hold changes what
later candidates see, so it drops the failures that a hold can undo, and keeps those it
cannot (capacity only shrinks and usage only grows within a cycle). A run of a queue answered
from the memos where only shapes failed (`shape_run`) is what the general `memo_run` gives."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as hs

from gpupool.scheduler.cache import SchedulerCache
from gpupool.scheduler.cyclestate import CycleState, memo_run, shape_run
from gpupool.scheduler.limits import Usage
from gpupool.scheduler.placement import shape_of
from gpupool.scheduler.reservations import Hold
from gpupool.scheduler.waits import Waits

from .builders import job, node, tenant, tree


def _state() -> CycleState:
    t = tree(tenant("lab-a", guaranteed=4), tenant("lab-b"))
    cap = SchedulerCache().capacity((node("n0", gpus=4), node("n1", gpus=2)), ())
    return CycleState(cap, Usage(t), Usage(t), Waits(cap))


def test_a_hold_drops_what_it_may_undo_and_keeps_the_rest():
    st = _state()
    four = shape_of(job("w", gpus=4).request)
    eight = shape_of(job("x", gpus=8).request)
    memo = st.memo
    memo.nofit.add(eight)
    memo.failed_shape["lab-b"] = {four: "no room"}
    memo.not_due["lab-b"] = {four}
    memo.tenant_fail["lab-b"] = (2000, "at its limit")
    memo.user_fail["lab-b"] = {"bob": (1000, "at the cap")}
    st.blocked_reason(eight)
    epoch = memo.epoch

    st.hold(0, Hold("lab-a", "w", four))

    assert st.holds[0].workload_id == "w" and st.cap.node_held[0]
    assert memo.epoch == epoch + 1
    assert memo.failed_shape == {"lab-b": {}} and memo.not_due == {} and memo.blocked == {}
    assert memo.nofit == {eight}
    assert memo.tenant_fail == {"lab-b": (2000, "at its limit")}
    assert memo.user_fail == {"lab-b": {"bob": (1000, "at the cap")}}


def test_blocked_work_that_fits_only_on_a_held_node_waits_behind_its_holder():
    st = _state()
    four = shape_of(job("w", gpus=4).request)
    assert "holds a reservation" not in st.blocked_reason(four)  # memoized until a hold
    st.hold(0, Hold("lab-a", "w", four))
    why = st.blocked_reason(four)
    assert "lab-a" in why and "w holds a reservation" in why


#: a few distinct shapes (and an equal copy of the first, another object, as classification
#: may give from two cycles)
_SHAPES = [
    shape_of(job("s", gpus=1).request),
    shape_of(job("s", gpus=2, model="H100").request),
    shape_of(job("s", fraction=0.5, gpu_gib=20).request),
    shape_of(job("s", gpus=8, cpus=32).request),
]
_SHAPES.append(_SHAPES[0]._replace())


@settings(max_examples=300, deadline=None)
@given(
    hs.lists(hs.integers(0, len(_SHAPES) - 1), max_size=30),
    hs.sets(hs.integers(0, 3)),
    hs.integers(0, 32),
)
def test_a_run_of_failed_shapes_is_what_the_general_memo_run_gives(picks, failed, i):
    q = []
    for k, p in enumerate(picks):
        w = job(f"w{k}", user=f"u{k % 3}", gpus=1)
        q.append(((0, k), w, _SHAPES[p], _SHAPES[p].gpu_milli))
    failed_shape = {_SHAPES[f]: f"no fit {f}" for f in failed}
    general = memo_run(q, i, None, {}, failed_shape, None, 0.0, 0.0)
    assert shape_run(q, i, failed_shape) == general
