"""Nodes and GPUs, with who holds which share."""

from __future__ import annotations

from gpupool.domain import GPU, GPUHealth, Node, NodeState, OutsideUse, SharingMode
from gpupool.server.context import AppContext
from gpupool.server.principal import Principal
from gpupool.server.schemas.agents import NodeTelemetryOut
from gpupool.server.schemas.cluster import (
    GpuOut,
    GpuUpdateIn,
    HolderOut,
    NodeIn,
    NodeOut,
    OutsideOut,
)
from gpupool.server.schemas.convert import holder_out
from gpupool.server.services.agents import node_telemetry
from gpupool.server.services.mig import instances_out, update_gpu
from gpupool.store import AllocationRepo, NodeRepo


def _holders(ctx: AppContext) -> dict[str, list[HolderOut]]:
    with ctx.store.read() as s:
        running = AllocationRepo(s).running()
    out: dict[str, list[HolderOut]] = {}
    for r in running:
        for sh in r.allocation.shares:
            out.setdefault(sh.gpu_uuid, []).append(
                holder_out(sh, r.workload.id, r.workload.tenant, r.workload.owner)
            )
    return out


def _gpu_out(node: str, g: GPU, holders: list[HolderOut]) -> GpuOut:
    return GpuOut(
        uuid=g.uuid,
        node=node,
        index=g.index,
        model=g.model,
        memory_mib=g.memory_mib,
        sharing=str(g.sharing),  # type: ignore[arg-type]
        health=str(g.health),  # type: ignore[arg-type]
        allocated_milli=sum(h.milli for h in holders),
        allocated_memory_mib=sum(h.memory_mib for h in holders),
        holders=holders,
        outside=None
        if g.outside is None
        else OutsideOut(ref=g.outside.ref, user=g.outside.user, since=g.outside.since),
        mig_layout=g.mig_layout if g.sharing is SharingMode.MIG else None,
        mig_instances=instances_out(g, holders),
    )


def _node_out(
    n: Node, holders: dict[str, list[HolderOut]], telemetry: NodeTelemetryOut | None = None
) -> NodeOut:
    return NodeOut(
        name=n.name,
        state=str(n.state),  # type: ignore[arg-type]
        cpu_milli=n.cpu_milli,
        memory_mib=n.memory_mib,
        labels=n.label_map,
        last_heartbeat=n.last_heartbeat,
        gpus=[_gpu_out(n.name, g, holders.get(g.uuid, [])) for g in n.gpus],
        telemetry=telemetry,
    )


def list_nodes(ctx: AppContext) -> list[NodeOut]:
    holders = _holders(ctx)
    with ctx.store.read() as s:
        nodes = NodeRepo(s).list()
    reports = node_telemetry(ctx)
    return [_node_out(n, holders, reports.get(n.name)) for n in nodes]


def get_node(ctx: AppContext, name: str) -> NodeOut:
    holders = _holders(ctx)
    with ctx.store.read() as s:
        node = NodeRepo(s).get(name)
    return _node_out(node, holders, node_telemetry(ctx).get(name))


def put_node(ctx: AppContext, p: Principal, name: str, body: NodeIn) -> NodeOut:
    p.require_admin("register nodes")
    node = Node(
        name=name,
        gpus=tuple(
            GPU(
                g.index,
                g.uuid,
                g.model,
                g.memory_mib,
                health=GPUHealth(g.health),
                outside=None
                if g.outside is None
                else OutsideUse(g.outside.ref, g.outside.user, g.outside.since),
            )
            for g in body.gpus
        ),
        cpu_milli=body.cpu_milli,
        memory_mib=body.memory_mib,
        labels=tuple(sorted(body.labels.items())),
        state=NodeState(body.state),
        last_heartbeat=ctx.clock.now(),
    )
    with ctx.store.write() as s:
        NodeRepo(s).upsert(node)
    ctx.wake_scheduler()
    return get_node(ctx, name)


def set_node_state(ctx: AppContext, p: Principal, name: str, state: str) -> NodeOut:
    p.require_admin("drain or restore nodes")
    with ctx.store.write() as s:
        NodeRepo(s).set_state(name, NodeState(state))
    ctx.wake_scheduler()
    return get_node(ctx, name)


def delete_node(ctx: AppContext, p: Principal, name: str) -> None:
    p.require_admin("remove nodes")
    with ctx.store.read() as s:
        busy = [a for a in AllocationRepo(s).active() if name in a.nodes]
    if busy:
        from gpupool.store import Conflict

        raise Conflict(
            f"node {name!r} still runs {len(busy)} workload(s); drain it and wait, then remove it"
        )
    with ctx.store.write() as s:
        NodeRepo(s).delete(name)


def list_gpus(ctx: AppContext) -> list[GpuOut]:
    return [g for n in list_nodes(ctx) for g in n.gpus]


def get_gpu(ctx: AppContext, uuid: str) -> GpuOut:
    holders = _holders(ctx)
    with ctx.store.read() as s:
        node, g = NodeRepo(s).gpu(uuid)
    return _gpu_out(node, g, holders.get(uuid, []))


def set_sharing(ctx: AppContext, p: Principal, uuid: str, body: GpuUpdateIn) -> GpuOut:
    """Change a GPU's sharing mode and/or MIG layout (gpupool.server.services.mig). Running
    work keeps its shares; the new mode applies to the next admissions."""
    update_gpu(ctx, p, uuid, body)
    return get_gpu(ctx, uuid)
