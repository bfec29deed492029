"""Every waiting workload gets a readable reason; what can never run is reported as such."""

import dataclasses

import pytest

from gpupool.domain import GPU, Node, SharingMode
from gpupool.scheduler import SchedulerConfig, cycle
from gpupool.scheduler.types import Wait, WaitKind
from tests.scheduler.builders import job, node, running, snapshot, tenant, tree

EXCLUSIVE = SharingMode.EXCLUSIVE
H = [node("h-0", gpus=4, model="H100"), node("h-1", gpus=8, model="H100")]


def test_no_node_has_enough_free_gpus_of_the_model_on_one_host():
    run = [
        running(job("x", "lab-b", "bob", gpus=5), H[1], range(5)),
        running(job("y", "lab-b", "bob", gpus=2), H[0], range(2)),
    ]
    d = cycle(snapshot(H, [tenant("lab-a"), tenant("lab-b")], run), [job("j", gpus=4)], 0.0)
    assert d.pending["j"].reason == (
        "no node has 4 free GPUs on one host; the most is 3 (5 are free in all, spread over nodes)"
    )
    d = cycle(
        snapshot(H, [tenant("lab-a"), tenant("lab-b")], run),
        [job("j", gpus=4, model="H100")],
        0.0,
    )
    assert d.pending["j"].reason.startswith(
        "no node has 4 free H100 GPUs on one host; the most is 3 (5 are free in all"
    )


# -- reasons that say why (issue 30) ---------------------------------------------------------


def test_none_free_says_they_are_all_in_use_not_the_most_is_0():
    four = node("n", gpus=4)
    run = [running(job("x", "lab-b", "bob", gpus=4), four, range(4))]
    d = cycle(snapshot([four], [tenant("lab-a"), tenant("lab-b")], run), [job("j", gpus=1)], 0.0)
    assert d.pending["j"].reason == "no node has 1 free GPU on one host: all 4 GPUs are in use"


def test_a_whole_gpu_request_is_told_the_free_capacity_is_only_on_shared_gpus():
    # 2 exclusive GPUs in use; 2 shared GPUs with 0.75 of each taken by fractions
    n = Node(
        "n",
        tuple(
            GPU(i, f"n-gpu{i}", "H100", 80 * 1024, SharingMode.SHARED if i >= 2 else EXCLUSIVE)
            for i in range(4)
        ),
        cpu_milli=64000,
        memory_mib=512 * 1024,
    )
    run = [
        running(job("x", "lab-b", "bob", gpus=2), n, [0, 1]),
        running(job("f1", "lab-b", "bob", fraction=0.75, gpus=0), n, fraction=(2, 750, 40960)),
        running(job("f2", "lab-b", "bob", fraction=0.5, gpus=0), n, fraction=(3, 500, 20480)),
    ]
    d = cycle(snapshot([n], [tenant("lab-a"), tenant("lab-b")], run), [job("j", gpus=1)], 0.0)
    assert d.pending["j"].reason == (
        "no node has 1 free GPU on one host: all 4 GPUs are in use; 0.75 GPU is free but only "
        "as parts of shared GPUs, which whole-GPU work cannot use: a shared GPU is whole again "
        "when all the work sharing it has ended"
    )


def test_work_beyond_its_tenants_guarantee_is_told_why_it_has_no_reclaim_time():
    # lab-a (guaranteed 2) holds its 2 GPUs and asks for 2 more while lab-b borrows the rest:
    # lab-b's owed work gets a reclaim time; lab-a's says why it gets none
    four = node("n", gpus=4)
    run = [
        running(job("a", "lab-a", "alice", gpus=2), four, [0, 1], since=T0),
        running(job("b", "lab-b", "bob", gpus=2), four, [2, 3], since=T0),
    ]
    labs = [tenant("lab-a", 2), tenant("lab-b", 1), tenant("lab-c")]
    pending = [job("a2", "lab-a", "alice", gpus=2, submit=T0), job("c1", "lab-c", gpus=1)]
    d = cycle(snapshot([four], labs, run), pending, T0 + 20)
    assert d.pending["a2"].reason == (
        "no node has 2 free GPUs on one host: all 4 GPUs are in use; lab-a is guaranteed "
        "2 GPUs and holds 2 GPUs, so 2 GPUs more would be beyond its guarantee: it cannot "
        "reclaim them, and this waits for GPUs to free up"
    )
    assert d.pending["a2"].wait is None
    assert d.pending["c1"].reason.endswith(
        "; lab-c has no guaranteed GPUs, so it cannot reclaim any: this waits for GPUs to free up"
    )


def test_without_guarantees_anywhere_nothing_is_said_about_reclaiming():
    four = node("n", gpus=4)
    run = [running(job("x", "lab-b", "bob", gpus=4), four, range(4))]
    d = cycle(snapshot([four], [tenant("lab-a"), tenant("lab-b")], run), [job("j", gpus=1)], 0.0)
    assert "reclaim" not in d.pending["j"].reason


def test_requeued_work_says_it_keeps_its_place_in_line():
    # w-old was preempted and requeued: it kept its submit time, so it stands ahead of w-new,
    # which has waited longer in the queue; its reason says why
    four = node("n", gpus=4)
    run = [running(job("x", "lab-b", "bob", gpus=4), four, range(4))]
    old = dataclasses.replace(job("w-old", gpus=1, submit=T0), preemptions=1)
    new = job("w-new", gpus=1, submit=T0 + 60)
    d = cycle(snapshot([four], [tenant("lab-a"), tenant("lab-b")], run), [new, old], T0 + 600)
    assert d.pending["w-old"].position == 1 and d.pending["w-new"].position == 2
    assert d.pending["w-old"].reason == (
        "no node has 1 free GPU on one host: all 4 GPUs are in use; requeued after a "
        "preemption, it keeps its place in line from its first submit (2026-11-18 11:06:40 UTC)"
    )
    assert "requeued" not in d.pending["w-new"].reason


def test_reason_names_cpu_when_gpus_are_free_but_cpus_are_not():
    n = node("n", gpus=8, cpus=8)
    run = [running(job("x", "lab-a", gpus=1, cpus=6), n, [0])]
    d = cycle(snapshot([n], [tenant("lab-a")], run), [job("j", gpus=1, cpus=4)], 0.0)
    assert d.pending["j"].reason == (
        "no node with 1 free GPU also has 4 CPUs and 1 GiB memory free"
    )


def test_fraction_reason():
    sh = node("s", gpus=1, model="A100", gpu_gib=40, sharing="shared")
    run = [running(job("x", gpus=0), sh, fraction=(0, 900, 1024))]
    d = cycle(
        snapshot([sh], [tenant("lab-a")], run),
        [job("f", fraction=0.25, gpu_gib=10, model="A100", cpus=0, memory_gib=0)],
        0.0,
    )
    assert d.pending["f"].reason == "no shared A100 GPU has 0.25 free with 10 GiB of memory"


@pytest.mark.parametrize(
    "w, expected",
    [
        (
            job("j", gpus=16),
            "needs 16 GPUs on one node; the most any node has is 8 GPUs of one model",
        ),
        (
            job("j", gpus=2, model="A100"),
            "needs 2 A100 GPUs on one node; no node has A100 GPUs (the models here: H100)",
        ),
        (
            job("j", fraction=0.5, gpu_gib=10),
            "needs 0.5 of a shared GPU with 10 GiB; no node has shared GPUs "
            "(an admin sets GPUs to 'shared')",
        ),
        (
            job("j", gpus=1, memory_gib=4096),
            "needs 1 CPU and 4096 GiB memory on one node; the largest node has 64 CPUs "
            "and 512 GiB memory",
        ),
        (job("j", "nope", gpus=1), "unknown tenant 'nope'; ask an admin to add it"),
        (
            job("j", "physics", gpus=1),
            "tenant physics has sub-tenants; only leaf tenants hold work "
            "(submit to one of physics/lab-a)",
        ),
    ],
)
def test_unschedulable(w, expected):
    t = tree(tenant("lab-a"), tenant("physics/lab-a"))
    d = cycle(snapshot(H, t), [w], 0.0)
    assert d.unschedulable == {"j": expected}
    assert d.pending == {} and d.admissions == ()


def test_down_nodes_still_count_for_could_ever_fit():
    nodes = [node("big", gpus=8, state="down"), node("small", gpus=2)]
    d = cycle(snapshot(nodes, [tenant("lab-a")]), [job("j", gpus=8)], 0.0)
    assert "j" in d.pending and not d.unschedulable


def test_no_nodes_registered_yet_means_waiting():
    d = cycle(snapshot([], [tenant("lab-a")]), [job("j", gpus=1)], 0.0)
    assert "j" in d.pending and not d.unschedulable


def test_admission_cap_reason():
    n = node("n", gpus=8)
    pending = [job(f"j{i}", gpus=1, submit=i) for i in range(3)]
    d = cycle(
        snapshot([n], [tenant("lab-a")]), pending, 0.0, SchedulerConfig(max_admissions_per_cycle=1)
    )
    assert len(d.admissions) == 1
    assert d.pending["j2"].reason == "waiting for the next cycle (at most 1 admissions per cycle)"


def test_every_pending_workload_is_admitted_or_explained_exactly_once():
    n = node("n", gpus=4)
    pending = [
        job("a", gpus=2),
        job("b", "lab-b", "bob", gpus=4, submit=1),
        job("c", "lab-b", "bob", gpus=99, submit=2),
        job("d", gpus=1, submit=3),
    ]
    d = cycle(snapshot([n], [tenant("lab-a", limit=2), tenant("lab-b")]), pending, 0.0)
    admitted = {a.workload_id for a in d.admissions}
    assert admitted | set(d.pending) | set(d.unschedulable) == {"a", "b", "c", "d"}
    assert not admitted & set(d.pending) and not set(d.pending) & set(d.unschedulable)
    assert d.pending["d"].reason.startswith("lab-a is at its limit of 2 GPUs")
    assert all(info.reason for info in d.pending.values())


def test_duplicates_and_already_running_ids_are_ignored():
    n = node("n", gpus=4)
    run = [running(job("r", gpus=1), n, [0])]
    d = cycle(snapshot([n], [tenant("lab-a")], run), [job("r", gpus=1), job("x", gpus=1)] * 2, 0.0)
    assert [a.workload_id for a in d.admissions] == ["x"]


# -- waits that say when they end (issue 17) ---------------------------------------------------

T0 = 1_795_000_000.0  # 2026-11-18 11:06:40 UTC
TWO = node("gpu", gpus=2, cpus=32, memory_gib=256)
LABS = [tenant("lab-a"), tenant("lab-b", 2)]
LABS4 = [tenant("lab-a"), tenant("lab-b", 4)]


def _pair(submit: float = T0 + 10):
    return job("b-pair", "lab-b", "bob", gpus=2, submit=submit)


def test_owed_gpus_say_from_which_workloads_and_when():
    # lab-a borrows 1 of 2 GPUs since T0; lab-b, guaranteed 2, asks for 2 at T0 + 10 s: it is
    # owed them, and the reclaim is due at T0 + 610 s (reclaim_after_s). a-train has run only
    # 20 s now, but will have run min_runtime_s by then: it is named.
    run = [running(job("a-train", "lab-a", "dave", gpus=1), TWO, [0], since=T0)]
    d = cycle(snapshot([TWO], LABS, run), [_pair()], T0 + 20)
    info = d.pending["b-pair"]
    assert info.reason == (
        "no node has 2 free GPUs on one host; the most is 1; lab-b is owed 2 GPUs within its "
        "guarantee: unless they free up first, they will be taken from a-train of lab-a at "
        "2026-11-18 11:16:50 UTC"
    )
    assert info.wait == Wait(
        WaitKind.OWED, owed_milli=2000, victims=("a-train",), until=T0 + 610, node="gpu"
    )
    assert d.preemptions == ()
    # when it is due, the reclaim happens: the reason says it waits for the victim to stop
    d = cycle(snapshot([TWO], LABS, run), [_pair()], T0 + 610)
    assert [p.workload_id for p in d.preemptions] == ["a-train"]
    info = d.pending["b-pair"]
    assert info.reason == (
        "reclaiming its guaranteed share: waiting for 1 preempted workload to stop"
    )
    assert info.wait == Wait(WaitKind.RECLAIMING, victims=("a-train",))


def test_no_owed_text_without_borrowed_work_to_take():
    run = [running(job("a-train", "lab-a", "dave", gpus=1, preemptible=False), TWO, [0], since=T0)]
    d = cycle(snapshot([TWO], LABS, run), [_pair()], T0 + 20)
    info = d.pending["b-pair"]
    assert info.reason == "no node has 2 free GPUs on one host; the most is 1"
    assert info.wait == Wait(WaitKind.RESERVED, node="gpu")  # no max runtime: no start time


def test_reserved_work_gets_an_expected_start_from_max_runtimes():
    a = dataclasses.replace(
        job("a-train", "lab-a", "dave", gpus=1, preemptible=False), max_runtime_s=3600
    )
    run = [running(a, TWO, [0], since=T0)]
    d = cycle(snapshot([TWO], LABS, run), [_pair()], T0 + 20)
    info = d.pending["b-pair"]
    assert info.reason == (
        "no node has 2 free GPUs on one host; the most is 1; gpu is reserved for it: expected "
        "to start by 2026-11-18 12:06:40 UTC, when the work in its way there reaches its max "
        "runtime"
    )
    assert info.wait == Wait(WaitKind.RESERVED, node="gpu", expected_start=T0 + 3600)


def test_expected_start_is_the_first_end_that_makes_room():
    four = node("gpu", gpus=4)
    ends = {"a0": 7200, "a1": 1800, "a2": 3600}  # b-pair needs 2 more: a1, then a2
    run = [
        running(
            dataclasses.replace(
                job(wid, "lab-a", "dave", gpus=1, preemptible=False), max_runtime_s=limit
            ),
            four,
            [i],
            since=T0,
        )
        for i, (wid, limit) in enumerate(ends.items())
    ]
    d = cycle(snapshot([four], LABS4, run), [job("b-pair", "lab-b", gpus=3, submit=T0)], T0 + 5)
    assert d.pending["b-pair"].wait.expected_start == T0 + 3600


def test_no_expected_start_while_work_without_max_runtime_is_in_the_way():
    four = node("gpu", gpus=4)
    limited = dataclasses.replace(
        job("a0", "lab-a", "dave", gpus=2, preemptible=False), max_runtime_s=600
    )
    run = [
        running(limited, four, [0, 1], since=T0),
        running(job("a1", "lab-a", "dave", gpus=1, preemptible=False), four, [2], since=T0),
    ]
    d = cycle(snapshot([four], LABS4, run), [job("b-pair", "lab-b", gpus=4, submit=T0)], T0 + 5)
    info = d.pending["b-pair"]
    assert info.wait == Wait(WaitKind.RESERVED, node="gpu") and "expected" not in info.reason
