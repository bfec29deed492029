"""A seeded gpupool store for the dashboard tests and benchmark: tenants, users of every role,
simulated GPUs with telemetry history, profiles, and workloads in every state.

Written straight through the store's repositories (no API calls), so seeding 500 workloads
takes well under a second.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from gpupool.clock import ManualClock
from gpupool.domain import (
    GPU,
    Allocation,
    Enforcement,
    Membership,
    Node,
    Quota,
    Request,
    Role,
    Share,
    SharingMode,
    Tenant,
    User,
    Workload,
    WorkloadKind,
    WorkloadState,
)
from gpupool.domain.profiles import Profile
from gpupool.scheduler.types import PendingInfo
from gpupool.server.security import hash_password
from gpupool.store import (
    AllocationRepo,
    NodeRepo,
    ProfileRepo,
    Store,
    TenantRepo,
    UsageRepo,
    UserRepo,
    WorkloadRepo,
)
from gpupool.telemetry import Sampler, SimulatedSource

PASSWORD = "correct-horse-9"
#: Users and their roles: name -> (admin, [(tenant, role)]).
USERS: dict[str, tuple[bool, list[tuple[str, Role]]]] = {
    "root": (True, []),
    "tess": (False, [("physics", Role.TENANT_ADMIN)]),
    "ann": (False, [("physics/lab-a", Role.MEMBER)]),
    "bob": (False, [("physics/lab-b", Role.MEMBER)]),
    "vic": (False, [("physics/lab-a", Role.VIEWER)]),
    "cara": (False, [("bio", Role.MEMBER)]),
}
TENANTS = [
    Tenant("physics", Quota.gpus(guaranteed=6, limit=12)),
    Tenant("physics/lab-a", Quota.gpus(guaranteed=3, limit=6, max_per_user=4), idle_timeout_s=3600),
    Tenant("physics/lab-b", Quota.gpus(guaranteed=2, limit=5)),
    Tenant("bio", Quota.gpus(guaranteed=2, limit=4, weight=2.0)),
]
LEAVES = {"physics/lab-a": "ann", "physics/lab-b": "bob", "bio": "cara"}
DAY = 86400.0


@dataclass
class Seeded:
    clock: ManualClock
    sources: list[SimulatedSource]
    samplers: list[Sampler]
    nodes: list[Node]
    workloads: dict[WorkloadState, list[str]] = field(default_factory=dict)


def _day(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d")


def seed(
    store: Store,
    *,
    now: float,
    gpus: int = 8,
    workloads: int = 24,
    history_s: float = 2 * 3600,
    nodes: int = 1,
    gang_gpus_per_node: int = 0,
) -> Seeded:
    """Fill `store`. `gpus` simulated H100s spread over `nodes` nodes (the first node's GPUs
    come from a `SimulatedSource` sampled for `history_s` seconds ending at `now`);
    `workloads` workloads: a third running, a third pending, the rest finished.
    `gang_gpus_per_node` > 0 (with `nodes` > 1): one more running workload, `w-gang`, across
    every node with that many whole GPUs on each (the first exclusive ones), its rank 0 on
    the last node; the other running work takes the GPUs left."""
    start = now - history_s
    clock = ManualClock(start)
    per_node = max(1, gpus // nodes)
    sources = [
        SimulatedSource(f"{per_node}xH100-80GB", clock=clock, hostname=f"sim-{n}")
        for n in range(nodes)
    ]
    samplers = [Sampler(src, clock=clock, interval_s=10.0) for src in sources]
    node_list = []
    for n, src in enumerate(sources):
        gs = tuple(
            GPU(
                i,
                g.uuid,
                "H100-80GB",
                int(g.memory_total_bytes // (1024 * 1024)),
                sharing=SharingMode.SHARED if i % 4 == 3 else SharingMode.EXCLUSIVE,
            )
            for i, g in enumerate(src.snapshot().gpus)
        )
        node_list.append(
            Node(f"sim-{n}", gs, cpu_milli=64_000, memory_mib=512_000, last_heartbeat=now)
        )

    with store.write() as s:
        tenants = TenantRepo(s)
        for t in TENANTS:
            tenants.save(t, now)
        users = UserRepo(s)
        pw = hash_password(PASSWORD)
        for name, (admin, ms) in USERS.items():
            users.create(User(name, admin=admin), pw, now)
            for tenant, role in ms:
                users.set_membership(Membership(name, tenant, role))
        repo = NodeRepo(s)
        for node in node_list:
            repo.upsert(node)
        profiles = ProfileRepo(s)
        profiles.save(
            Profile("h100", Request(gpus=1), "1 × H100, whole GPU", WorkloadKind.NOTEBOOK),
            create=True,
        )
        profiles.save(
            Profile(
                "quarter",
                Request(gpu_milli=250, gpu_memory_mib=20 * 1024),
                "¼ GPU with 20 GiB",
                WorkloadKind.NOTEBOOK,
            ),
            create=True,
        )
        profiles.save(Profile("cpu", Request(), "CPU only", WorkloadKind.NOTEBOOK), create=True)

    seeded = Seeded(clock, sources, samplers, node_list)
    _seed_workloads(store, seeded, now=now, count=workloads, gang_per_node=gang_gpus_per_node)
    _seed_usage(store, now=now)
    # Telemetry history: mostly busy GPUs, every fifth one idle.
    for n, src in enumerate(sources):
        for i in range(per_node):
            k = n * per_node + i
            src.set_utilization(i, 0.0 if k % 5 == 4 else 35.0 + (k * 7) % 60)
            src.add_process(i, 10_000 + k, memory_mib=8_000.0 + (k * 3_331) % 60_000)
    step = samplers[0].interval_s
    while True:
        for sm in samplers:
            sm.sample_once()
        if clock.now() >= now:
            break
        clock.advance(min(step, now - clock.now()))
    return seeded


def _seed_workloads(
    store: Store, seeded: Seeded, *, now: float, count: int, gang_per_node: int = 0
) -> None:
    gang = _gang_gpus(seeded.nodes, gang_per_node)
    slots = [(n, g) for n in seeded.nodes for g in n.gpus if (n.name, g) not in gang]
    tenants = list(LEAVES.items())
    running_n = min(count // 3, len(slots))
    pending_n = count // 3
    done_n = count - running_n - pending_n
    out: dict[WorkloadState, list[str]] = {}
    with store.write() as s:
        wr, ar = WorkloadRepo(s), AllocationRepo(s)
        infos = {}
        k = 0
        for i in range(running_n):
            node, g = slots[i]
            tenant, owner = tenants[i % len(tenants)]
            frac = g.sharing is SharingMode.SHARED
            req = Request(gpu_milli=500, gpu_memory_mib=40 * 1024) if frac else Request(gpus=1)
            wid = f"w-run{k:05d}"
            k += 1
            w = Workload(wid, tenant, owner, req, submitted_at=now - 3000 - i, command=("train",))
            wr.add(w, name=f"train-{i}")
            enf = Enforcement.POLICED if frac else Enforcement.HARDWARE
            share = Share(
                node.name,
                g.index,
                g.uuid,
                req.total_gpu_milli,
                req.gpu_memory_mib or g.memory_mib,
                enf,
            )
            wr.change_state(wid, WorkloadState.ADMITTED, now - 2900, "fits on " + node.name)
            ar.allocate(Allocation(wid, node.name, (share,), since=now - 2900))
            wr.change_state(wid, WorkloadState.STARTING, now - 2890, "launched")
            wr.change_state(wid, WorkloadState.RUNNING, now - 2880, "running")
            out.setdefault(WorkloadState.RUNNING, []).append(wid)
        if gang:
            _seed_gang(wr, ar, seeded.nodes, gang, now=now)
            out.setdefault(WorkloadState.RUNNING, []).append("w-gang")
        for i in range(pending_n):
            tenant, owner = tenants[i % len(tenants)]
            wid = f"w-pend{k:05d}"
            k += 1
            w = Workload(wid, tenant, owner, Request(gpus=1 + i % 2), submitted_at=now - 600 + i)
            wr.add(w, name=f"sweep-{i}")
            infos[wid] = PendingInfo(
                f"{tenant} is at its limit; waiting for a GPU", i + 1, i // 3 + 1
            )
            out.setdefault(WorkloadState.PENDING, []).append(wid)
        wr.set_pending_info(infos)
        ends = [WorkloadState.SUCCEEDED, WorkloadState.FAILED, WorkloadState.CANCELLED]
        for i in range(done_n):
            tenant, owner = tenants[i % len(tenants)]
            wid = f"w-done{k:05d}"
            k += 1
            t0 = now - DAY - i * 60
            wr.add(Workload(wid, tenant, owner, Request(), submitted_at=t0), name=f"old-{i}")
            end = ends[i % 3]
            if end is WorkloadState.CANCELLED:
                wr.change_state(wid, end, t0 + 5, "cancelled by its owner")
            else:
                wr.change_state(wid, WorkloadState.ADMITTED, t0 + 1, "fits")
                wr.change_state(wid, WorkloadState.STARTING, t0 + 2, "launched")
                wr.change_state(
                    wid,
                    end,
                    t0 + 50,
                    "exited",
                    exit_code=0 if end is WorkloadState.SUCCEEDED else 1,
                )
            out.setdefault(end, []).append(wid)
    seeded.workloads = out


def _gang_gpus(nodes: list[Node], per_node: int) -> list[tuple[str, GPU]]:
    """(node, GPU) of a gang with `per_node` whole GPUs on every node (none for one node)."""
    if per_node <= 0 or len(nodes) < 2:
        return []
    out = []
    for n in nodes:
        exclusive = [g for g in n.gpus if g.sharing is SharingMode.EXCLUSIVE]
        if len(exclusive) < per_node:
            raise ValueError(f"{n.name} has {len(exclusive)} exclusive GPUs, not {per_node}")
        out.extend((n.name, g) for g in exclusive[:per_node])
    return out


def _seed_gang(
    wr: WorkloadRepo,
    ar: AllocationRepo,
    nodes: list[Node],
    gpus: list[tuple[str, GPU]],
    *,
    now: float,
) -> None:
    """A running multi-node workload of ann's holding `gpus`; rank 0 is the last node (so
    the rank order differs from the order of the shares and of the node names)."""
    head = nodes[-1].name
    req = Request(gpus=len(gpus), nodes=len(nodes))
    wr.add(
        Workload("w-gang", "physics/lab-a", "ann", req, submitted_at=now - 4000),
        name="gang-train",
    )
    shares = tuple(
        Share(node, g.index, g.uuid, 1000, g.memory_mib, Enforcement.HARDWARE) for node, g in gpus
    )
    wr.change_state("w-gang", WorkloadState.ADMITTED, now - 3900, f"fits on {len(nodes)} nodes")
    ar.allocate(Allocation("w-gang", head, shares, since=now - 3900))
    wr.change_state("w-gang", WorkloadState.STARTING, now - 3890, "launched")
    wr.change_state("w-gang", WorkloadState.RUNNING, now - 3880, "running")


def _seed_usage(store: Store, *, now: float) -> None:
    with store.write() as s:
        u = UsageRepo(s)
        for days_ago in range(0, 10):
            day = _day(now - days_ago * DAY)
            for j, (tenant, owner) in enumerate(LEAVES.items()):
                alloc = 3600.0 * (4 + j + days_ago % 3)
                eff = (0.85, 0.4, 0.15)[j]
                u.add(
                    workload_id=f"w-usage{days_ago:02d}{j}",
                    tenant=tenant,
                    user=owner,
                    day=day,
                    gpu_seconds_allocated=alloc,
                    gpu_seconds_busy=alloc * eff,
                    gpu_memory_mib_seconds=alloc * 30_000,
                    gpu_memory_mib=40 * 1024,
                )
