"""Every waiting workload gets a readable reason; what can never run is reported as such."""

import pytest

from gpupool.scheduler import SchedulerConfig, cycle
from tests.scheduler.builders import job, node, running, snapshot, tenant, tree

H = [node("h-0", gpus=4, model="H100"), node("h-1", gpus=8, model="H100")]


def test_no_node_has_enough_free_gpus_of_the_model_on_one_host():
    run = [
        running(job("x", "lab-b", "bob", gpus=5), H[1], range(5)),
        running(job("y", "lab-b", "bob", gpus=2), H[0], range(2)),
    ]
    d = cycle(snapshot(H, [tenant("lab-a"), tenant("lab-b")], run), [job("j", gpus=4)], 0.0)
    assert d.pending["j"].reason == "no node has 4 free GPUs on one host; the most is 3"
    d = cycle(
        snapshot(H, [tenant("lab-a"), tenant("lab-b")], run),
        [job("j", gpus=4, model="H100")],
        0.0,
    )
    assert d.pending["j"].reason == "no node has 4 free H100 GPUs on one host; the most is 3"


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
            "needs 2 A100 GPUs on one node; the most any node has is 0 A100 GPUs",
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
