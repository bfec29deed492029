"""The scheduler loop's snapshot reuse (gpupool.server.loops.snapshot) over a real store: it
decides exactly as a loop that builds every object afresh, over many cycles of submissions,
cancels, preemptions, start failures, finishes and node changes; and the why-pending it stores
stays equal to the decisions, with other writers (a cancel between the read and the write, a
row changed behind its back) and across a restart."""

from __future__ import annotations

import dataclasses
import random

from sqlalchemy import select, update

from gpupool.domain import (
    ACTIVE_STATES,
    GPU,
    Enforcement,
    GPUHealth,
    Node,
    NodeState,
    Quota,
    Request,
    SharingMode,
    Tenant,
    Workload,
    WorkloadState,
)
from gpupool.engines.fake.executor import FailingExecutor
from gpupool.scheduler import RunningWorkload, SchedulerCache, Snapshot
from gpupool.server.loops import scheduler as loop_module
from gpupool.server.loops.scheduler import SchedulerLoop
from gpupool.server.services import lifecycle
from gpupool.store import (
    AllocationRepo,
    NodeRepo,
    TenantRepo,
    UsageRepo,
    WorkloadRepo,
    kept_service,
    new_workload_id,
)
from gpupool.store.convert import allocation_to_domain, node_to_domain, workload_to_domain
from gpupool.store.rows import AllocationRow, NodeRow, WorkloadRow
from gpupool.store.workloads import info_columns

S = WorkloadState
OWNERS = {"lab": "ann", "other": "otto"}
ROLES = {"lab": "member", "other": "outsider"}


def orm_snapshot(ctx) -> tuple[Snapshot, list[Workload]]:  # noqa: ANN001
    """What a cycle sees, made of ORM rows by the ORM converters (`node_to_domain`,
    `allocation_to_domain`, `workload_to_domain`): apart from the plain-row path the loop
    reads with (`NodeRepo.rows`, `running_rows`, `pending_rows` and their converters), so a
    bug in that path does not hide in the reference too. The running work by workload id."""
    active = {str(st) for st in ACTIVE_STATES}
    with ctx.store.read() as s:
        nodes = tuple(
            node_to_domain(r)
            for r in s.scalars(select(NodeRow).order_by(NodeRow.name))
            if ctx.runs_work_on(r.name)
        )
        running = []
        q = select(AllocationRow).where(AllocationRow.released_at.is_(None))
        for a in s.scalars(q):
            w = s.get(WorkloadRow, a.workload_id)
            if w is not None and w.state in active:
                rw = RunningWorkload(
                    workload_to_domain(w), allocation_to_domain(a), w.stop_state is not None
                )
                running.append(rw)
        q = (
            select(WorkloadRow)
            .where(WorkloadRow.state == str(S.PENDING))
            .order_by(WorkloadRow.submitted_at, WorkloadRow.id)
        )
        pending = [workload_to_domain(r) for r in s.scalars(q)]
        tree = TenantRepo(s).tree()
        attained = UsageRepo(s).attained_by_tenant()
        attained.update(kept_service(s))
    running.sort(key=lambda rw: rw.workload.id)
    return Snapshot(nodes, tree, tuple(running), attained), pending


class Referee:
    """Wraps the loop's `cycle_timed`: each cycle of `loop` is checked against a cycle over a
    fresh read through the ORM converters (`orm_snapshot`: new objects, its own cache), and
    the decisions are kept."""

    def __init__(self, world, monkeypatch, loop: SchedulerLoop, meanwhile=None):  # noqa: ANN001
        self.world = world
        self.loop = loop
        self.cache = SchedulerCache()
        self.real = loop_module.cycle_timed
        self.meanwhile = meanwhile
        self.decisions = None
        self.considered: set[str] = set()
        self.cycles = self.reused = self.objects = 0
        self._seen: set[int] = set()
        self._keep: list[object] = []  # holds last cycle's objects: ids stay unique
        monkeypatch.setattr(loop_module, "cycle_timed", self.cycle)

    def cycle(self, snap, pending, now, config, cache, rules):  # noqa: ANN001
        d = self.real(snap, pending, now, config, cache, rules)
        if cache is not self.loop.cache:
            return d
        fresh, fresh_pending = orm_snapshot(self.world.ctx)  # new objects, another path
        ids = {w.id for w in pending}
        fresh_pending = [w for w in fresh_pending if w.id in ids]
        assert fresh.nodes == snap.nodes
        assert fresh.running == tuple(sorted(snap.running, key=lambda rw: rw.workload.id))
        assert fresh.attained_service == snap.attained_service
        fresh = dataclasses.replace(fresh, running=snap.running, nominated=snap.nominated)
        assert fresh_pending == pending
        ref = self.real(fresh, fresh_pending, now, config, self.cache, rules)
        assert d.admissions == ref.admissions
        assert d.preemptions == ref.preemptions
        assert d.unschedulable == ref.unschedulable
        assert dict(d.pending) == dict(ref.pending)
        objs = [*pending, *snap.running]
        self.reused += sum(id(o) in self._seen for o in objs)
        self.objects += len(objs)
        self._seen, self._keep = set(map(id, objs)), objs
        self.cycles += 1
        self.decisions, self.considered = d, ids
        if self.meanwhile is not None:
            self.meanwhile(pending)
        return d


def stored_infos(world) -> dict[str, tuple]:  # noqa: ANN001
    q = select(
        WorkloadRow.id,
        WorkloadRow.pending_reason,
        WorkloadRow.queue_position,
        WorkloadRow.tenant_position,
        WorkloadRow.pending_wait,
    ).where(WorkloadRow.state == str(S.PENDING))
    with world.ctx.store.read() as s:
        return {r[0]: tuple(r[1:]) for r in s.execute(q)}


def check_stored(world, referee: Referee) -> None:  # noqa: ANN001
    """Every pending workload the last cycle decided on stores what it decided."""
    d = referee.decisions
    if d is None:
        return
    stored = stored_infos(world)
    for wid, info in d.pending.items():
        if wid in stored:
            assert stored[wid] == info_columns(info), wid


def submit(world, rng: random.Random, tenant: str | None = None, gpus: int | None = None) -> None:  # noqa: ANN001
    tenant = tenant or rng.choice(["lab", "other", "other", "other"])
    shape = rng.choice(
        [Request(gpus=1), Request(gpus=2), Request(gpu_milli=500, gpu_memory_mib=8192)]
    )
    w = Workload(
        new_workload_id(),
        tenant,
        OWNERS[tenant],
        shape if gpus is None else Request(gpus=gpus),
        priority=0 if gpus else rng.choice([0, 0, 0, 5, 5, 7]),  # 7: its start fails (below)
        preemptible=gpus is not None or rng.random() > 0.2,
        submitted_at=world.clock.now(),
        command=("train",),
    )
    with world.ctx.store.write() as s:
        WorkloadRepo(s).add(w)


def settle_all(world) -> None:  # noqa: ANN001
    with world.ctx.store.read() as s:
        active = [rw.workload.id for rw in AllocationRepo(s).running()]
    for wid in active:
        lifecycle.settle(world.ctx, wid)


def change_nodes(world, step: int) -> None:  # noqa: ANN001
    with world.ctx.store.write() as s:
        nodes = NodeRepo(s)
        if step == 4:
            gpus = tuple(GPU(i, f"GPU-n2-{i}", "A100", 40960) for i in range(4))
            nodes.upsert(Node("n2", gpus, cpu_milli=64000, memory_mib=512000))
        elif step == 9:
            nodes.set_state("n2", NodeState.DRAINING)
        elif step == 13:
            nodes.set_state("n2", NodeState.READY)
            nodes.set_sharing("GPU-n2-3", SharingMode.SHARED)
        elif step == 17:
            n1 = nodes.get("n1")
            sick = dataclasses.replace(n1.gpus[0], health=GPUHealth.UNHEALTHY)
            nodes.upsert(dataclasses.replace(n1, gpus=(sick, *n1.gpus[1:])))
        elif step == 22:
            n1 = nodes.get("n1")
            well = dataclasses.replace(n1.gpus[0], health=GPUHealth.HEALTHY)
            nodes.upsert(dataclasses.replace(n1, gpus=(well, *n1.gpus[1:])))
        elif step % 5 == 0:
            nodes.heartbeat("n1", world.clock.now())


def enforce_shares(world, how: Enforcement) -> None:  # noqa: ANN001
    """Record `how` on every fractional share of running work (its workload row stays the
    same)."""
    with world.ctx.store.write() as s:
        allocs = AllocationRepo(s)
        for a in allocs.active():
            fractions = {sh.gpu_uuid: how for sh in a.shares if not sh.whole}
            if fractions:
                allocs.set_enforcement(a.workload_id, fractions)


def test_reuse_decides_as_fresh_objects_over_many_cycles(world, monkeypatch, seed=1):
    with world.ctx.store.write() as s:
        TenantRepo(s).save(Tenant("lab", Quota.gpus(4, 8)), 0, create=False)
        TenantRepo(s).save(Tenant("other", Quota.gpus(1, 8)), 0, create=False)
    config = dataclasses.replace(world.ctx.settings.scheduler, reclaim_after_s=0, min_runtime_s=60)
    world.ctx.settings = dataclasses.replace(world.ctx.settings, scheduler=config)
    world.ctx.executor = FailingExecutor(
        world.clock, world=world.executor.world, only=lambda w: w.priority == 7
    )
    rng = random.Random(seed)
    loop = world.scheduler
    referee = Referee(world, monkeypatch, loop)
    for _ in range(6):
        submit(world, rng)
    seen: dict[str, int] = {}
    for step in range(60):
        if step == 30:  # a restart: a new loop, nothing remembered
            loop = referee.loop = SchedulerLoop(world.ctx)
        report = loop.run_once()
        check_stored(world, referee)
        for k in ("admitted", "preempted", "start_failed", "backing_off", "failed"):
            seen[k] = seen.get(k, 0) + len(getattr(report, k))
        # after a failed start a short step: the next cycle sees it backing off
        world.clock.advance(1 if report.start_failed else rng.choice([30, 120, 400, 900]))
        for _ in range(rng.randrange(4)):
            submit(world, rng)
        if step % 14 == 5:  # "other" borrows every GPU, then lab claims its guarantee back
            for _ in range(12):
                submit(world, rng, "other", gpus=1)
        if step % 14 == 7:
            for _ in range(4):
                submit(world, rng, "lab", gpus=1)
        with world.ctx.store.read() as s:
            pending = [w.id for w in WorkloadRepo(s).pending()]
            running = [rw.workload for rw in AllocationRepo(s).running()]
        if pending and rng.random() < 0.3:  # an API cancel of pending work
            wid = rng.choice(pending)
            with world.ctx.store.read() as s:
                tenant = WorkloadRepo(s).get(wid).tenant
            assert world.delete(ROLES[tenant], f"/workloads/{wid}").status_code == 200
        for w in running:
            if rng.random() < 0.15 and w.id in world.executor.world.processes:
                world.ctx.executor.finish(w.id, rng.choice([0, 1]))
        settle_all(world)
        change_nodes(world, step)
        if step % 3 == 1:  # the telemetry records the enforcement applied: the shares change
            enforce_shares(world, Enforcement.POLICED if step % 2 else Enforcement.MPS)
    assert referee.cycles >= 50
    # the fast path was taken: most objects were last cycle's
    assert referee.reused > referee.objects // 3
    assert seen["admitted"] and seen["preempted"] and seen["start_failed"] and seen["backing_off"]


def test_pending_info_written_only_where_it_changed_and_only_on_pending_rows(world, monkeypatch):
    """A cancel between the cycle's read and its write is not written over; a why-pending
    changed behind the loop's back is rewritten; a restarted loop rewrites nothing unchanged."""
    ids = [world.submit(gpus=3)["id"] for _ in range(5)]  # lab's limit is 3: one runs
    written: list[int] = []
    real = WorkloadRepo.set_pending_info

    def counting(self, infos, stored=None):  # noqa: ANN001
        n = real(self, infos, stored)
        written.append(n)
        return n

    monkeypatch.setattr(WorkloadRepo, "set_pending_info", counting)
    cancelled: list[str] = []

    def cancel_one(pending) -> None:  # noqa: ANN001
        if not cancelled:
            wid = pending[-1].id
            assert world.delete("member", f"/workloads/{wid}").status_code == 200
            cancelled.append(wid)

    loop = world.scheduler
    referee = Referee(world, monkeypatch, loop, meanwhile=cancel_one)
    assert loop.run_once().admitted == ids[:1]
    assert written == [4]  # asked for the cancelled one too: the UPDATE left it alone
    stored = stored_infos(world)
    assert set(stored) == set(ids[1:4]) and all(v[0] for v in stored.values())
    with world.ctx.store.read() as s:
        gone = s.get(WorkloadRow, cancelled[0])
        assert gone.state == "cancelled" and gone.pending_reason is None
    check_stored(world, referee)
    loop.run_once()
    loop.run_once()  # nothing changed: nothing written
    assert written[-1] == 0
    with world.ctx.store.write() as s:  # another writer changed one behind the loop's back
        s.execute(update(WorkloadRow).where(WorkloadRow.id == ids[2]).values(pending_reason="x"))
    loop.run_once()
    assert written[-1] == 1
    check_stored(world, referee)
    restarted = referee.loop = SchedulerLoop(world.ctx)  # a restart: nothing remembered
    restarted.run_once()
    assert written[-1] == 0  # its first read is its memory: nothing to write
    check_stored(world, referee)


def test_another_loops_read_between_the_read_and_the_apply_changes_nothing(world, monkeypatch):
    """The MIG re-layout loop reads the scheduler's snapshot from its own thread
    (`SchedulerLoop.snapshot`): such a read between a cycle's read and its apply must not
    change what the apply compares with (the why-pending this cycle read)."""
    ids = [world.submit(gpus=3)["id"] for _ in range(3)]  # lab's limit is 3: one runs
    loop = world.scheduler
    wid = ids[2]
    referee: Referee

    def other_read_meanwhile(pending) -> None:  # noqa: ANN001
        cols = info_columns(referee.decisions.pending[wid])
        names = ("pending_reason", "queue_position", "tenant_position", "pending_wait")

        def put(values) -> None:  # noqa: ANN001
            with world.ctx.store.write() as s:
                q = update(WorkloadRow).where(WorkloadRow.id == wid)
                s.execute(q.values(dict(zip(names, values, strict=True))))

        put(cols)  # another writer stores what this cycle decides ...
        loop.snapshot()  # ... the other loop's read sees it ...
        put(("x", 99, 99, None))  # ... and it changes again before the apply

    referee = Referee(world, monkeypatch, loop, meanwhile=other_read_meanwhile)
    assert loop.run_once().admitted == ids[:1]
    assert stored_infos(world)[wid][0] != "x"  # this cycle read it unlike its decision: written
    check_stored(world, referee)
