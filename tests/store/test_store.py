"""Store: migrations, converters round-trip, repositories, the one state-changing function,
and the no-double-allocation guard. Runs on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import threading

import pytest
from sqlalchemy import inspect

from gpupool.domain import (
    GPU,
    Allocation,
    Enforcement,
    IllegalTransition,
    Membership,
    Node,
    Quota,
    Request,
    Role,
    Share,
    SharingMode,
    Tenant,
    User,
    ValidationError,
    Workload,
    WorkloadState,
)
from gpupool.domain.profiles import Profile
from gpupool.store import (
    AllocationRepo,
    Conflict,
    EventRepo,
    NodeRepo,
    NotFound,
    ProfileRepo,
    TenantRepo,
    UsageRepo,
    UserRepo,
    WorkloadRepo,
    new_workload_id,
    open_store,
    record_of,
    role_in,
)

S = WorkloadState


def node(name="n1", gpus=2, mem=81920, model="H100") -> Node:
    return Node(
        name,
        tuple(GPU(i, f"GPU-{name}-{i}", model, mem) for i in range(gpus)),
        cpu_milli=64000,
        memory_mib=512000,
        labels=(("zone", "a"),),
    )


def seed(store) -> None:
    with store.write() as s:
        NodeRepo(s).upsert(node())
        TenantRepo(s).save(Tenant("lab", Quota.gpus(1, 2)), 0.0)
        UserRepo(s).create(User("ann"), None, 0.0)


def workload(wid=None, gpus=1, **kw) -> Workload:
    return Workload(
        wid or new_workload_id(),
        "lab",
        "ann",
        Request(gpus=gpus),
        command=("python", "train.py"),
        **kw,
    )


def whole(wid, node_name="n1", idx=0, mem=81920) -> Allocation:
    return Allocation(
        wid, node_name, (Share(node_name, idx, f"GPU-{node_name}-{idx}", 1000, mem),), 1.0
    )


def test_migration_creates_every_table_and_is_idempotent(store):
    names = set(inspect(store.engine).get_table_names())
    assert {
        "nodes",
        "gpus",
        "tenants",
        "users",
        "memberships",
        "api_tokens",
        "workloads",
        "allocations",
        "shares",
        "events",
        "usage",
        "profiles",
        "alembic_version",
    } <= names
    store.migrate()  # a second run is a no-op
    again = open_store(store.url)
    again.close()


def test_nodes_round_trip_and_keep_admin_sharing_mode(store):
    with store.write() as s:
        NodeRepo(s).upsert(node())
        NodeRepo(s).set_sharing("GPU-n1-1", SharingMode.SHARED)
    with store.write() as s:
        # rediscovery reports the GPU as exclusive again; the admin's choice stays
        got = NodeRepo(s).upsert(node())
    assert got.gpu(1).sharing is SharingMode.SHARED
    with store.read() as s:
        n = NodeRepo(s).get("n1")
    assert n == Node(
        "n1",
        (node().gpus[0], GPU(1, "GPU-n1-1", "H100", 81920, SharingMode.SHARED)),
        64000,
        512000,
        (("zone", "a"),),
    )
    with store.write() as s:
        NodeRepo(s).upsert(node(gpus=1))
    with store.read() as s:
        assert [g.uuid for _, g in NodeRepo(s).gpus()] == ["GPU-n1-0"]
        with pytest.raises(NotFound):
            NodeRepo(s).gpu("GPU-n1-1")


def test_tenants_create_ancestors_and_refuse_invalid_trees(store):
    with store.write() as s:
        TenantRepo(s).save(Tenant("physics", Quota.gpus(2, 4)), 0.0)
        TenantRepo(s).save(Tenant("physics/lab-a", Quota.gpus(2, 3, weight=2)), 0.0)
        TenantRepo(s).save(Tenant("bio/lab-b/x"), 0.0)
    with store.read() as s:
        tree = TenantRepo(s).tree()
        names = sorted(t.name for t in tree)
        assert names == ["bio", "bio/lab-b", "bio/lab-b/x", "physics", "physics/lab-a"]
        assert tree.get("physics/lab-a").quota == Quota.gpus(2, 3, weight=2)
    # children's guarantees beyond the parent's limit: refused, nothing written
    with pytest.raises(ValidationError), store.write() as s:
        TenantRepo(s).save(Tenant("physics/lab-c", Quota.gpus(3, 3)), 0.0)
    with store.read() as s:
        assert not TenantRepo(s).exists("physics/lab-c")
    with pytest.raises(Conflict), store.write() as s:
        TenantRepo(s).save(Tenant("bio"), 0.0, create=True)
    with pytest.raises(Conflict), store.write() as s:
        TenantRepo(s).delete("physics")  # has children


def test_users_memberships_and_roles(store):
    seed(store)
    with store.write() as s:
        TenantRepo(s).save(Tenant("lab/sub"), 0.0)
        UserRepo(s).set_membership(Membership("ann", "lab", Role.VIEWER))
        UserRepo(s).set_membership(Membership("ann", "lab/sub", Role.TENANT_ADMIN))
        with pytest.raises(NotFound):
            UserRepo(s).set_membership(Membership("ann", "nope"))
        with pytest.raises(Conflict):
            UserRepo(s).create(User("ann"), None, 0.0)
    with store.read() as s:
        ms = UserRepo(s).memberships("ann")
    assert role_in(ms, "lab") is Role.VIEWER
    assert role_in(ms, "lab/sub") is Role.TENANT_ADMIN
    assert role_in(ms, "other") is None


def test_change_state_writes_the_event_in_the_same_transaction(store):
    seed(store)
    w = workload()
    with store.write() as s:
        WorkloadRepo(s).add(w)
    with store.write() as s:
        AllocationRepo(s).allocate(whole(w.id))
        WorkloadRepo(s).change_state(w.id, S.ADMITTED, 5.0, "admitted")
        WorkloadRepo(s).change_state(w.id, S.STARTING, 6.0, "starting")
    with store.read() as s:
        assert AllocationRepo(s).active_for(w.id) is not None
    # an illegal change raises and leaves everything as it was
    with pytest.raises(IllegalTransition), store.write() as s:
        WorkloadRepo(s).change_state(w.id, S.ADMITTED, 7.0, "nope")
    with store.write() as s:
        done = WorkloadRepo(s).change_state(w.id, S.SUCCEEDED, 9.0, "exited 0", exit_code=0)
    assert done.finished_at == 9.0 and done.exit_code == 0
    with store.read() as s:
        assert WorkloadRepo(s).get(w.id) == done
        assert AllocationRepo(s).active_for(w.id) is None  # released with the change
        kinds = [e.kind for _, e in reversed(EventRepo(s).list(workload_id=w.id))]
    assert kinds == [
        "workload.submitted",
        "workload.admitted",
        "workload.starting",
        "workload.succeeded",
    ]


def test_change_state_expect_guards_races(store):
    seed(store)
    w = workload()
    with store.write() as s:
        WorkloadRepo(s).add(w)
        WorkloadRepo(s).change_state(w.id, S.CANCELLED, 1.0, "by ann")
    with pytest.raises(Conflict), store.write() as s:
        WorkloadRepo(s).change_state(w.id, S.ADMITTED, 2.0, "late", expect={S.PENDING})


def test_allocate_refuses_to_oversubscribe_a_gpu(store):
    seed(store)
    a, b = workload(), workload()
    with store.write() as s:
        WorkloadRepo(s).add(a)
        WorkloadRepo(s).add(b)
        AllocationRepo(s).allocate(whole(a.id))
    with pytest.raises(Conflict, match="free"), store.write() as s:
        AllocationRepo(s).allocate(whole(b.id))
    half = Allocation(b.id, "n1", (Share("n1", 1, "GPU-n1-1", 500, 40000, Enforcement.POLICED),), 1)
    with store.write() as s:
        AllocationRepo(s).allocate(half)
    with store.read() as s:
        assert AllocationRepo(s).gpu_usage() == {
            "GPU-n1-0": (1000, 81920),
            "GPU-n1-1": (500, 40000),
        }
    c = workload()
    too_much_memory = Allocation(
        c.id, "n1", (Share("n1", 1, "GPU-n1-1", 400, 50000, Enforcement.POLICED),), 1
    )
    with store.write() as s:
        WorkloadRepo(s).add(c)
    with pytest.raises(Conflict), store.write() as s:
        AllocationRepo(s).allocate(too_much_memory)


def test_concurrent_allocations_never_double_allocate(store):
    """Many threads race for 2 GPUs, each in its own write transaction: exactly 2 win."""
    seed(store)
    ids = [new_workload_id() for _ in range(12)]
    with store.write() as s:
        for wid in ids:
            WorkloadRepo(s).add(workload(wid))
    wins: list[str] = []
    barrier = threading.Barrier(len(ids))

    def grab(wid: str, idx: int) -> None:
        barrier.wait()
        try:
            with store.write() as s:
                AllocationRepo(s).allocate(whole(wid, idx=idx))
                WorkloadRepo(s).change_state(wid, S.ADMITTED, 1.0, "won", expect={S.PENDING})
            wins.append(wid)
        except Conflict:
            pass

    threads = [threading.Thread(target=grab, args=(w, i % 2)) for i, w in enumerate(ids)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 2
    with store.read() as s:
        usage = AllocationRepo(s).gpu_usage()
        assert usage == {"GPU-n1-0": (1000, 81920), "GPU-n1-1": (1000, 81920)}
        assert len(AllocationRepo(s).running()) == 2


def test_pending_info_is_stored_and_cleared_on_admission(store):
    from gpupool.scheduler.types import PendingInfo

    seed(store)
    w = workload()
    with store.write() as s:
        WorkloadRepo(s).add(w)
        WorkloadRepo(s).set_pending_info({w.id: PendingInfo("lab is at its limit", 1, 1)})
    with store.read() as s:
        assert WorkloadRepo(s).record(w.id).pending == PendingInfo("lab is at its limit", 1, 1)
    with store.write() as s:
        AllocationRepo(s).allocate(whole(w.id))
        WorkloadRepo(s).change_state(w.id, S.ADMITTED, 2.0, "ok")
    with store.read() as s:
        assert WorkloadRepo(s).record(w.id).pending is None


def test_workload_list_filters(store):
    seed(store)
    with store.write() as s:
        TenantRepo(s).save(Tenant("other"), 0.0)
        UserRepo(s).create(User("bob"), None, 0.0)
        WorkloadRepo(s).add(workload("w-1", submitted_at=1))
        WorkloadRepo(s).add(Workload("w-2", "other", "bob", submitted_at=2))
        WorkloadRepo(s).add(Workload("w-3", "other", "ann", submitted_at=3))
    with store.read() as s:
        repo = WorkloadRepo(s)
        assert [r.workload.id for r in repo.list()] == ["w-3", "w-2", "w-1"]
        assert [r.workload.id for r in repo.list(tenants=["lab"])] == ["w-1"]
        ids = [r.workload.id for r in repo.list(tenants=["lab"], visible_to_user="ann")]
        assert ids == ["w-3", "w-1"]
        assert [r.workload.id for r in repo.list(owner="bob")] == ["w-2"]
        assert [r.workload.id for r in repo.list(states={S.RUNNING})] == []
        assert [w.id for w in repo.pending()] == ["w-1", "w-2", "w-3"]


def test_usage_rollups(store):
    seed(store)
    with store.write() as s:
        u = UsageRepo(s)
        u.add(
            workload_id="w-1",
            tenant="lab",
            user="ann",
            day="2026-01-01",
            gpu_seconds_allocated=100,
            gpu_seconds_busy=50,
            gpu_memory_mib=1000,
        )
        u.add(
            workload_id="w-1",
            tenant="lab",
            user="ann",
            day="2026-01-01",
            gpu_seconds_allocated=100,
            gpu_seconds_busy=50,
            gpu_memory_mib=3000,
        )
        u.add(
            workload_id="w-2", tenant="lab", user="bob", day="2026-01-02", gpu_seconds_allocated=10
        )
    with store.read() as s:
        by_user = {t.key: t for t in UsageRepo(s).rollup("user")}
        assert by_user["ann"].gpu_seconds_allocated == 200
        assert by_user["ann"].efficiency == 0.5
        assert by_user["ann"].gpu_memory_mib_max == 3000
        days = UsageRepo(s).rollup("day", from_day="2026-01-02")
        assert [(d.key, d.gpu_seconds_allocated) for d in days] == [("2026-01-02", 10)]
        assert UsageRepo(s).rollup("tenant", tenants=["other"]) == []
        assert UsageRepo(s).attained_by_tenant() == {"lab": 210_000}


def test_profiles_crud(store):
    p = Profile(
        "quarter", Request(gpu_milli=250, gpu_memory_mib=20480), "1/4 GPU", tenants=("lab",)
    )
    with store.write() as s:
        ProfileRepo(s).save(p, create=True)
        with pytest.raises(Conflict):
            ProfileRepo(s).save(p, create=True)
    with store.read() as s:
        assert ProfileRepo(s).get("quarter") == p
        assert p.allows("lab/sub") and not p.allows("labx")
    with store.write() as s:
        ProfileRepo(s).delete("quarter")
    with store.read() as s:
        assert ProfileRepo(s).list() == []


def test_checkpointing_is_stored(store):
    seed(store)
    on, off = workload(checkpointing=True), workload()
    with store.write() as s:
        WorkloadRepo(s).add(on)
        WorkloadRepo(s).add(off)
    with store.read() as s:
        assert WorkloadRepo(s).get(on.id).checkpointing is True
        assert WorkloadRepo(s).get(off.id).checkpointing is False


def test_placement_pins_are_stored(store):
    """An engine pin and node labels survive the store, in the ORM and the plain-row paths."""
    seed(store)
    pinned = Request(gpus=1, engine="slurm", node_labels=(("zone", "a"), ("rack", "r1")))
    on, off = workload(), workload()
    on = dataclasses.replace(on, request=pinned)
    with store.write() as s:
        WorkloadRepo(s).add(on)
        WorkloadRepo(s).add(off)
    with store.read() as s:
        got = WorkloadRepo(s).get(on.id).request
        assert (got.engine, got.node_labels) == ("slurm", (("rack", "r1"), ("zone", "a")))
        plain = WorkloadRepo(s).get(off.id).request
        assert (plain.engine, plain.node_labels) == (None, ())
        rows = {
            record_of(r).workload.id: record_of(r).workload.request for r in WorkloadRepo(s).rows()
        }
        assert rows[on.id] == got
