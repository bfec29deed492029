"""Attribution: process -> workload -> user/tenant, on a fake /proc and on the real one."""

from __future__ import annotations

import os
import signal
import subprocess

from telemetry_fakes import write_proc

from gpupool.telemetry import WORKLOAD_ENV, Attributor, Via, WorkloadOwner

OWNERS = {"w-1": ("alice", "physics/lab-a"), "w-2": WorkloadOwner("bob", "bio")}


def test_workload_found_through_parent_processes(proc_root):
    write_proc(proc_root, 1, ppid=0, uid=0, comm="init")
    write_proc(proc_root, 100, ppid=1, env={WORKLOAD_ENV: "w-1", "HOME": "/h"})
    write_proc(proc_root, 101, ppid=100, env={"HOME": "/h"}, comm="bash")
    write_proc(proc_root, 102, ppid=101, env={}, comm="python3")
    a = Attributor(proc_root, resolve_workload=OWNERS, user_name=lambda uid: f"u{uid}")
    owner = a.attribute(102)
    assert (owner.via, owner.workload_id, owner.user, owner.tenant) == (
        Via.ENV,
        "w-1",
        "alice",
        "physics/lab-a",
    )
    assert owner.source_pid == 100 and owner.command == "python3"
    assert owner.unix_user == "u1000" and owner.owned
    assert owner.label == "physics/lab-a/alice w-1"


def test_own_variable_wins_over_the_parents(proc_root):
    write_proc(proc_root, 100, env={WORKLOAD_ENV: "w-1"})
    write_proc(proc_root, 101, ppid=100, env={WORKLOAD_ENV: "w-2"})
    owner = Attributor(proc_root, resolve_workload=OWNERS).attribute(101)
    assert (owner.workload_id, owner.user, owner.tenant) == ("w-2", "bob", "bio")


def test_unknown_workload_keeps_its_id_without_user(proc_root):
    write_proc(proc_root, 100, env={WORKLOAD_ENV: "w-gone"})
    owner = Attributor(proc_root, resolve_workload=lambda wid: None).attribute(100)
    assert owner.workload_id == "w-gone" and owner.user is None and owner.owned


def test_without_workload_the_unix_user_is_reported_as_unowned(proc_root):
    write_proc(proc_root, 1, ppid=0, uid=0)
    write_proc(proc_root, 200, ppid=1, uid=1234)
    owner = Attributor(proc_root, user_name=lambda uid: "carol").attribute(200)
    assert (owner.via, owner.unix_user, owner.uid, owner.owned) == (
        Via.UNIX_USER,
        "carol",
        1234,
        False,
    )
    assert owner.label == "unowned (carol)"


def test_kubernetes_pod_uid_from_cgroup(proc_root):
    uid = "1f2e3d4c-5b6a-4798-8a9b-0c1d2e3f4a5b"
    systemd = uid.replace("-", "_")
    write_proc(
        proc_root,
        300,
        cgroup=f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{systemd}"
        ".slice/cri-containerd-abc.scope\n",
    )
    write_proc(proc_root, 301, cgroup=f"11:memory:/kubepods/besteffort/pod{uid}/abcdef\n")
    a = Attributor(proc_root, resolve_workload=OWNERS, resolve_pod={uid: "w-1"})
    for pid in (300, 301):
        owner = a.attribute(pid)
        assert (owner.via, owner.pod_uid, owner.workload_id, owner.user) == (
            Via.POD,
            uid,
            "w-1",
            "alice",
        )
    unknown = Attributor(proc_root, user_name=lambda u: "x").attribute(300)
    assert unknown.pod_uid == uid and not unknown.owned


def test_vanished_process_is_unowned(proc_root):
    owner = Attributor(proc_root).attribute(999)
    assert (owner.via, owner.owned, owner.label) == (Via.NONE, False, "unowned")


def test_parent_cycle_terminates(proc_root):
    write_proc(proc_root, 10, ppid=11)
    write_proc(proc_root, 11, ppid=10)
    assert Attributor(proc_root, user_name=lambda u: "x").attribute(10).via is Via.UNIX_USER


def test_reused_pid_is_attributed_afresh(proc_root):
    write_proc(proc_root, 100, env={WORKLOAD_ENV: "w-1"}, start=1)
    a = Attributor(proc_root, resolve_workload=OWNERS, recheck_every=1)
    assert a.attribute_all([100])[100].workload_id == "w-1"
    write_proc(proc_root, 100, env={WORKLOAD_ENV: "w-2"}, start=2)  # a new process, same pid
    assert a.attribute_all([100])[100].workload_id == "w-2"


def test_cache_is_rechecked_only_every_n_rounds(proc_root):
    write_proc(proc_root, 100, env={WORKLOAD_ENV: "w-1"}, start=1)
    a = Attributor(proc_root, resolve_workload=OWNERS, recheck_every=3)
    a.attribute_all([100])
    write_proc(proc_root, 100, env={WORKLOAD_ENV: "w-2"}, start=2)
    seen = [a.attribute_all([100])[100].workload_id for _ in range(3)]
    assert seen == ["w-1", "w-1", "w-2"]


def test_real_child_without_the_variable_is_attributed_through_its_parent():
    env = {**os.environ, WORKLOAD_ENV: "w-real"}
    # The shell carries the id; its child (sleep) is started without it.
    shell = subprocess.Popen(
        ["sh", "-c", f"env -u {WORKLOAD_ENV} sh -c 'echo $$; exec sleep 60' & wait"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the shell and its sleep: one group, ended together below
    )
    try:
        child = int(shell.stdout.readline())  # printed by the child after it dropped the id
        with open(f"/proc/{child}/environ", "rb") as f:
            assert WORKLOAD_ENV.encode() not in f.read()
        owner = Attributor(resolve_workload={"w-real": ("dana", "lab-d")}).attribute(child)
        assert (owner.workload_id, owner.user, owner.tenant, owner.source_pid) == (
            "w-real",
            "dana",
            "lab-d",
            shell.pid,
        )
        assert owner.uid == os.getuid() and owner.command in ("sh", "sleep")
        me = Attributor().attribute(os.getpid())
        assert me.workload_id == os.environ.get(WORKLOAD_ENV) and me.command
    finally:  # whatever happened above (no child read: `child` may not exist)
        os.killpg(shell.pid, signal.SIGKILL)
        shell.wait(10)
        shell.stdout.close()


def _mps(proc_root, daemon: int, server: int, ppid: int | None = None) -> None:
    write_proc(proc_root, daemon, ppid=1, uid=0, comm="nvidia-cuda-mps")
    (proc_root / str(daemon) / "cmdline").write_bytes(b"nvidia-cuda-mps-control\0-d\0")
    write_proc(proc_root, server, ppid=ppid or daemon, uid=0, comm="nvidia-cuda-mps")
    (proc_root / str(server) / "cmdline").write_bytes(b"/usr/bin/nvidia-cuda-mps-server\0")


def test_gpupools_own_mps_server_is_a_service_not_unowned(proc_root):
    from gpupool.clock import ManualClock
    from gpupool.domain import Allocation, Enforcement, Share
    from gpupool.telemetry import DetectionKind, Policer, SimulatedSource

    clock = ManualClock()
    sim = SimulatedSource("2xH100-80GB", clock=clock)
    g0, g1 = sim.uuid(0), sim.uuid(1)
    write_proc(proc_root, 1, ppid=0, uid=0, comm="init")
    _mps(proc_root, 500, 501)  # gpupool's daemon and server of GPU 0
    _mps(proc_root, 600, 601)  # ... of GPU 1
    _mps(proc_root, 700, 701, ppid=1)  # a server no daemon of gpupool started
    daemons = {500: g0, 600: g1}
    a = Attributor(proc_root, mps_daemons=lambda: daemons, user_name=lambda uid: "root")
    own = a.attribute(501)
    assert (own.via, own.service_gpu, own.owned, own.label) == (
        Via.SERVICE,
        g0,
        False,
        "gpupool MPS server",
    )
    assert a.attribute(701).via is Via.UNIX_USER
    # the NVML process list of a shared GPU 0 holding two fractional jobs
    sim.add_process(0, 501, 300, 0)  # its own MPS server: no alarm
    sim.add_process(0, 601, 300, 0)  # GPU 1's server showing on GPU 0: reported
    sim.add_process(0, 701, 300, 0)  # an impostor by name: reported
    shares = [
        Allocation(w, "n", (Share("n", 0, g0, 500, 40000, Enforcement.MPS),), 0.0)
        for w in ("w-1", "w-2")
    ]
    snap = sim.snapshot()
    dets = Policer(clock).check(snap, a.attribute_all(p.pid for p in snap.processes), shares)
    assert sorted((d.kind, d.pids) for d in dets) == [
        (DetectionKind.UNOWNED_ON_ALLOCATED, (601,)),
        (DetectionKind.UNOWNED_ON_ALLOCATED, (701,)),
    ]
