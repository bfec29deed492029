"""The victim's side of a planned reclaim (issue 30 item 6): `planned_preemptions` turns the
`owed` waits of pending work around, so running work a reclaim will take can say when and
for whom. Pure; the cycle's decisions are not touched (it only reads `Decisions.pending`)."""

from gpupool.scheduler import cycle
from gpupool.scheduler.types import Wait, WaitKind
from gpupool.scheduler.waits import PlannedPreemption, planned_preemptions
from tests.scheduler.builders import job, node, running, snapshot, tenant

T0 = 1_795_000_000.0  # 2026-11-18 11:06:40 UTC
TWO = node("gpu", gpus=2, cpus=32, memory_gib=256)


def test_the_running_work_an_owed_wait_names_is_told_when_and_for_whom():
    # lab-a borrows 1 of 2 GPUs; lab-b, guaranteed 2, asks for 2 at T0 + 10: owed, due at
    # T0 + 610 (reclaim_after_s), and a-train is what the reclaim would take
    run = [running(job("a-train", "lab-a", "dave", gpus=1), TWO, [0], since=T0)]
    pending = [job("b-pair", "lab-b", "bob", gpus=2, submit=T0 + 10)]
    d = cycle(snapshot([TWO], [tenant("lab-a"), tenant("lab-b", 2)], run), pending, T0 + 20)
    waits = [(wid, "lab-b", info.wait) for wid, info in d.pending.items() if info.wait]
    plans = planned_preemptions(waits)
    assert plans == {"a-train": PlannedPreemption(T0 + 610, "lab-b", "b-pair")}
    assert plans["a-train"].reason == (
        "will be preempted at 11:16 UTC for lab-b's guarantee unless GPUs free up"
    )
    assert d.preemptions == ()  # told ahead, taken only when due (test_reasons holds that)


def test_the_earliest_wait_wins_and_other_waits_plan_nothing():
    owed = WaitKind.OWED
    plans = planned_preemptions(
        [
            ("late", "lab-b", Wait(owed, 1000, ("v1", "v2"), until=T0 + 900)),
            ("early", "lab-c", Wait(owed, 1000, ("v2",), until=T0 + 600)),
            ("tie", "lab-d", Wait(owed, 1000, ("v1",), until=T0 + 900)),
            ("stopping", "lab-e", Wait(WaitKind.RECLAIMING, victims=("v3",))),
            ("reserved", "lab-f", Wait(WaitKind.RESERVED, node="n1", expected_start=T0)),
            ("no-time", "lab-g", Wait(owed, 1000, ("v4",), until=None)),
        ]
    )
    assert plans == {
        "v1": PlannedPreemption(T0 + 900, "lab-b", "late"),  # a tie: the first in the queue
        "v2": PlannedPreemption(T0 + 600, "lab-c", "early"),
    }
