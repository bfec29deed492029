"""The kubernetes executor against the fake API server over real HTTP, through the official
client: pods created right, states and exit codes, quota, conflicts, loss, adoption, the
pod stuck Pending, stops with the grace period."""

from __future__ import annotations

import pytest

from gpupool.domain import Allocation, Enforcement, Request, Share, Workload
from gpupool.engines.common.executor import ExecState, StartError
from gpupool.engines.kubernetes.executor import KubernetesExecutor

NS = "gpupool-lab"


def _w(wid: str = "w1", gpus: int = 1, tenant: str = "lab") -> Workload:
    return Workload(wid, tenant, "ann", Request(gpus=gpus), command=("python", "-c", "1"))


def _alloc(wid: str = "w1", n: int = 1, node: str = "n1", first: int = 0) -> Allocation:
    shares = tuple(
        Share(node, i, f"k8s:{node}:{i}", 1000, 81920, Enforcement.HARDWARE)
        for i in range(first, first + n)
    )
    return Allocation(wid, node, shares, 0.0)


def _executor(api, clock, **kw) -> KubernetesExecutor:
    return KubernetesExecutor(api, clock, allocatable=lambda n: ({"nvidia.com/gpu": "8"}, 1), **kw)


def test_start_creates_the_pinned_pod_in_the_tenants_namespace(kube, api, clock):
    ex = _executor(api, clock)
    h = ex.start(_w(gpus=2), _alloc(n=2))
    assert h.ref == f"{NS}/gp-w1" and h.executor == "kubernetes"
    assert set(h.enforcement) == {"k8s:n1:0", "k8s:n1:1"}
    pod = kube.pod(NS, "gp-w1")
    assert NS in kube.namespaces
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "2"}
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["n1"]
    assert "nodeName" not in pod["spec"]
    assert pod["metadata"]["labels"]["gpupool.dev/workload"] == "w1"
    assert ex.poll("w1").state is ExecState.STARTING


def test_pending_running_succeeded_and_failed_with_exit_codes(kube, api, clock):
    ex = _executor(api, clock)
    ex.start(_w("a"), _alloc("a"))
    ex.start(_w("b"), _alloc("b", first=1))
    kube.set_phase(NS, "gp-a", "Running", node="n1")
    kube.set_phase(NS, "gp-b", "Running", node="n1")
    ex.tick()
    assert ex.poll("a").state is ExecState.RUNNING
    assert [p.workload_id for p in ex.list_running()] == ["a", "b"]
    kube.set_phase(NS, "gp-a", "Succeeded", exit_code=0)
    kube.set_phase(NS, "gp-b", "Failed", exit_code=3)
    ex.tick()
    a, b = ex.poll("a"), ex.poll("b")
    assert (a.state, a.exit_code) == (ExecState.SUCCEEDED, 0)
    assert (b.state, b.exit_code) == (ExecState.FAILED, 3)
    assert ex.list_running() == []


def test_exceeded_quota_is_a_transient_start_error(kube, api, clock):
    kube.add_namespace(NS, "lab")
    kube.add_quota(NS, "gpu", 1)
    ex = _executor(api, clock)
    ex.start(_w("a"), _alloc("a"))
    with pytest.raises(StartError, match="exceeded quota") as err:
        ex.start(_w("b"), _alloc("b", first=1))
    assert not err.value.permanent
    assert [p["metadata"]["name"] for p in kube.pods_of()] == ["gp-a"]


def test_a_conflict_adopts_the_existing_pod_instead_of_duplicating(kube, api, clock):
    first = _executor(api, clock)
    first.start(_w(), _alloc())
    again = _executor(api, clock)  # a retried start after a lost answer, or a new server
    h = again.start(_w(), _alloc())
    assert h.ref == f"{NS}/gp-w1"
    assert len(kube.pods_of()) == 1
    assert [m for m, p in kube.requests if m == "POST" and p.endswith("/pods")] == ["POST"] * 2


def test_a_conflict_with_someone_elses_pod_is_refused(kube, api, clock):
    kube.add_namespace(NS, "lab")
    kube.add_pod(
        {
            "metadata": {"name": "gp-w1", "namespace": NS, "labels": {}},
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        }
    )
    with pytest.raises(StartError, match="did not create"):
        _executor(api, clock).start(_w(), _alloc())


def test_a_pod_deleted_behind_gpupools_back_is_lost(kube, api, clock):
    ex = _executor(api, clock)
    ex.start(_w(), _alloc())
    kube.set_phase(NS, "gp-w1", "Running", node="n1")
    ex.tick()
    kube.vanish(NS, "gp-w1")
    ex.tick()
    st = ex.poll("w1")
    assert st.state is ExecState.LOST and "outside gpupool" in st.message


def test_restart_adopts_running_pods_by_label(kube, api, clock):
    ex = _executor(api, clock)
    ex.start(_w(gpus=2), _alloc(n=2))
    kube.set_phase(NS, "gp-w1", "Running", node="n1")
    reborn = _executor(api, clock)  # a new server process: knows nothing
    running = reborn.list_running()
    assert [(p.workload_id, p.ref, p.user) for p in running] == [("w1", f"{NS}/gp-w1", NS)]
    assert running[0].gpu_uuids == ("k8s:n1:0", "k8s:n1:1")
    assert reborn.poll("w1").state is ExecState.RUNNING
    assert reborn.gpu_indexes_by_node() == {"n1": {0, 1}}


def test_a_pod_stuck_pending_is_rejected_with_the_events_reason(kube, api, clock):
    rejected = []
    ex = _executor(api, clock, on_rejected=rejected.append)
    ex.start(_w(), _alloc())
    kube.set_unschedulable(NS, "gp-w1", "0/3 nodes are available: 1 Insufficient nvidia.com/gpu")
    clock.advance(29)
    ex.tick()
    assert ex.poll("w1").state is ExecState.STARTING and rejected == []
    clock.advance(2)
    ex.tick()
    st = ex.poll("w1")
    assert st.state is ExecState.REJECTED
    assert "Insufficient nvidia.com/gpu" in st.message and "Pending for 31 s" in st.message
    assert kube.pods_of() == [] and rejected == ["n1"]


def test_stuck_pending_reason_from_events_when_no_condition(kube, api, clock):
    ex = _executor(api, clock)
    ex.start(_w(), _alloc())
    kube.add_event(NS, "gp-w1", "Failed", 'Failed to pull image "python:3.12-slim"')
    clock.advance(31)
    ex.tick()
    assert "Failed to pull image" in ex.poll("w1").message


def test_stop_deletes_gracefully_then_forces_after_the_grace(kube, api, clock):
    ex = _executor(api, clock)
    ex.start(_w(), _alloc())
    kube.set_phase(NS, "gp-w1", "Running", node="n1")
    ex.tick()
    ex.stop("w1", "cancelled", grace_s=10)
    assert kube.deletes == [(NS, "gp-w1", 10)]
    ex.tick()
    assert ex.poll("w1").state is ExecState.RUNNING and ex.poll("w1").stop_reason == "cancelled"
    clock.advance(11)
    ex.tick()  # still there after the grace: forced
    assert kube.deletes[-1] == (NS, "gp-w1", 0)
    ex.tick()
    st = ex.poll("w1")
    assert (st.state, st.exit_code, st.stop_reason) == (ExecState.FAILED, 137, "cancelled")


def test_logs_come_through_the_api(kube, api, clock):
    ex = _executor(api, clock)
    ex.start(_w(), _alloc())
    kube.write_log(NS, "gp-w1", "one\ntwo\nthree\n")
    assert ex.logs("w1") == "one\ntwo\nthree\n"
    assert ex.logs("w1", tail=1) == "three\n"


def test_prune_deletes_pods_of_work_that_ended_long_ago(kube, api, clock):
    ex = _executor(api, clock)
    ex.start(_w(), _alloc())
    kube.set_phase(NS, "gp-w1", "Succeeded", node="n1", exit_code=0)
    ex.tick()
    assert ex.prune(3600) == []
    clock.advance(3601)
    assert ex.prune(3600) == ["w1"]
    assert kube.pods_of() == []
    assert ex.poll("w1").state is ExecState.UNKNOWN


def test_fractional_share_asks_the_shared_resource(kube, api, clock):
    ex = KubernetesExecutor(api, clock, allocatable=lambda n: ({"nvidia.com/gpu.shared": "8"}, 4))
    share = Share("n1", 0, "k8s:n1:0", 250, 20000, Enforcement.POLICED)
    h = ex.start(_w(), Allocation("w1", "n1", (share,), 0.0))
    assert h.enforcement == {"k8s:n1:0": Enforcement.NONE}
    limits = kube.pod(NS, "gp-w1")["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu.shared": "1"}


def test_a_pending_pod_adopted_after_a_restart_keeps_its_node(kube, api, clock):
    _executor(api, clock).start(_w(), _alloc(first=3))
    reborn = _executor(api, clock)
    reborn.tick()  # not bound yet: the node comes from the pod's node affinity
    assert reborn.gpu_indexes_by_node() == {"n1": {3}}


def test_whole_gpus_are_recorded_as_hardware_also_after_adoption(kube, api, clock):
    # the scheduler labels a whole GPU `policed` (all the local engine can do); on Kubernetes
    # the device plugin gives the container only its own GPUs, which the executor reports
    shares = tuple(Share("n1", i, f"k8s:n1:{i}", 1000, 81920, Enforcement.POLICED) for i in (0, 1))
    ex = _executor(api, clock)
    assert ex.enforcement_of("w1") == {}  # unknown: nothing launched yet
    ex.start(_w(gpus=2), Allocation("w1", "n1", shares, 0.0))
    want = {"k8s:n1:0": Enforcement.HARDWARE, "k8s:n1:1": Enforcement.HARDWARE}
    assert ex.enforcement_of("w1") == want
    fresh = _executor(api, clock)  # a restarted server adopts the pod by its label
    fresh.refresh()
    assert fresh.enforcement_of("w1") == want
