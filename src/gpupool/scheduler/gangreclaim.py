"""Making room for multi-node requests (gangs).

**Reclaim.** A gang within its tenant's guarantee that does not fit takes borrowed work back
on N nodes at once, or not at all.

Each of the gang's N nodes must have room for one member (`per_node(shape)`): nodes where it
fits now (free, or kept for this gang), then nodes where work already stopping makes room,
then nodes where victims chosen by the single-node rules of `Reclaimer.find` make room (the
victims of one node are taken before the next node is searched, so a borrower is never taken
below its guarantee across nodes). If fewer than N nodes can be found, nothing is preempted.
The N nodes are kept for the gang for the rest of the cycle; the caller nominates them for
the next cycles (`Snapshot.nominated`).

**Giving held nodes back** (`config.gang_hold_backfill`). Nodes held for a blocked gang would
sit idle while they drain; instead, one-node work that declares `checkpointing` and would
borrow may run on them (gangwalk.backfill_gang_nodes). Once the gang has waited
`reclaim_after_s` and a member fits on each held node when such work there stops, that work
is stopped: borrowed checkpointing work only (its tenant and every ancestor with a guarantee
stay at or above it without it), one-node, preemptible, run at least `min_runtime_s`. It
resumes from its checkpoint. All N nodes or none.

**Clearing nodes** (`config.gang_clears_nodes`, issue 32). Where reclaim finds no N nodes
(borrowed work is spread thin over many nodes, or mixed with the gang's own tenant's work),
a gang within its tenant's guarantee that has waited `reclaim_after_s` stops checkpointing
work on the N nodes that need the fewest victims (then the least progress lost, as
`Reclaimer.lost` orders it: with reclaim by service, the most served first): one-node,
preemptible, checkpointing work of no higher priority that has run
`gang_clears_min_runtime_s` (or `min_runtime_s` if shorter: it loses no progress, and on a
cluster of minutes-long jobs nearly every node runs some younger work), of the gang's own
tenant (its usage only grows by the swap, like a service-level preemption) or of tenants
that stay at or above their guarantee without it (all victims together; every ancestor with
a guarantee too). Work already stopping on a node counts as freed; on each node victims are
taken best first (lowest priority, least progress) and those not needed put back. Victims
resume from their checkpoints. All N nodes or none; the nodes are held for the gang, and the
caller nominates them. Pure; called by gpupool.scheduler.gangwalk.
"""

from __future__ import annotations

from gpupool.domain import Workload
from gpupool.scheduler.capacity import CapacityIndex, Shape
from gpupool.scheduler.constraints import Where
from gpupool.scheduler.cycle_reclaim import Preemptors
from gpupool.scheduler.cyclestate import CycleInputs, CycleState
from gpupool.scheduler.gangs import per_node
from gpupool.scheduler.placement import place_on_node
from gpupool.scheduler.preemption import Reclaimer, borrowing_branch, guaranteed, reclaim_due
from gpupool.scheduler.reasons import names_text, reclaim_text
from gpupool.scheduler.reservations import Hold
from gpupool.scheduler.types import Preemption, RunningWorkload


def reclaim_for_gang(
    ins: CycleInputs, st: CycleState, pre: Preemptors, w: Workload, shape: Shape
) -> bool:
    """Preempt borrowed work on N nodes for gang `w` (within its tenant's guarantee, due
    after `reclaim_after_s`), or wait for work already stopping there. True if so: the nodes
    are held for it and its reason says what it waits for. False changes nothing."""
    if not reclaim_due(w, ins.now, ins.config.reclaim_after_s):
        return False
    if not ins.cache.stopping() and not borrowing_branch(ins.tree, st.effective, w.tenant):
        return False
    parts = one_engine_parts(st.cap, per_node(shape))
    return any(_reclaim_on(st, pre, w, shape, one) for one in parts)


def _reclaim_on(st: CycleState, pre: Preemptors, w: Workload, shape: Shape, one: Shape) -> bool:
    """`reclaim_for_gang` with each member's part `one` (pinned to one engine where the
    pool has several: a gang runs on one engine)."""
    cap, holds = st.cap, st.holds
    mine = {n for n, h in holds.items() if h.workload_id == w.id}
    chosen: list[int] = [
        n
        for n in range(len(cap.nodes))
        if cap.node_ready[n]
        and (n in mine or n not in holds)
        and place_on_node(cap, n, one) is not None
    ][: shape.nodes]
    rc = pre.reclaimer()
    stopping = 0
    while len(chosen) < shape.nodes:
        r = rc.waits_for_stopping(one)
        if r is None:
            break
        if r.node not in chosen and (r.node in mine or r.node not in holds):
            chosen.append(r.node)
            stopping += r.stopping
    victims: list[RunningWorkload] = []
    while len(chosen) < shape.nodes:
        found = rc.find(w.tenant, one, set(holds) - mine | set(chosen))
        if found is None:
            rc.give_back(victims)
            return False
        rc.take(found.victims)
        victims.extend(found.victims)
        chosen.append(found.node)
    for v in victims:
        st.preemptions.append(Preemption(v.workload.id, w.id, rc.reason(v, w.tenant, w.id)))
    for n in chosen:
        if n not in holds:
            st.hold(n, Hold(w.tenant, w.id, one))
    why = reclaim_text(len(victims), stopping) + f" on {shape.nodes} nodes held for it"
    _reclaiming(st, w, shape, victims, why)
    return True


def hold_backfill(ins: CycleInputs) -> bool:
    """True if held gang nodes take borrowed checkpointing work and get it back (rules
    above): `fair` (quotas), `gang_hold_backfill` and preemption on."""
    return ins.quotas and ins.config.gang_hold_backfill and ins.config.preemption


def give_back_held(
    ins: CycleInputs,
    st: CycleState,
    pre: Preemptors,
    w: Workload,
    shape: Shape,
    nodes: list[int],
) -> bool:
    """Stop borrowed checkpointing work on `nodes` (held for gang `w` this cycle) so that a
    member fits on each (rules above). True if so; False changes nothing."""
    if (
        not hold_backfill(ins)
        or not reclaim_due(w, ins.now, ins.config.reclaim_after_s)
        or not ins.cache.checkpointing()
    ):
        return False
    rc = pre.reclaimer()
    one = per_node(shape)
    removed: dict[str, int] = {}
    victims: list[RunningWorkload] = []
    for n in nodes:
        if rc.fits(n, one, []) is not None:
            continue  # a member fits there already
        chosen: list[RunningWorkload] = []
        fit = None
        for rw in rc.victims.get(n, ()):  # best victims first (least progress lost)
            if not _borrowed_checkpointing(ins, st, pre, rw, removed) or not rc.eligible(rw):
                continue
            for a in st.effective.chain(rw.workload.tenant):
                removed[a] = removed.get(a, 0) + rw.allocation.gpu_milli
            chosen.append(rw)
            fit = rc.fits(n, one, chosen)
            if fit is not None:
                break
        if fit is None:
            return False  # all N nodes or none
        victims.extend(chosen)
    if not victims:
        return False
    rc.take(victims)
    names = names_text([st.cap.nodes[n].name for n in nodes], most=4)
    for v in victims:
        st.preemptions.append(
            Preemption(
                v.workload.id,
                w.id,
                f"{v.allocation.node} is held for {w.id} of {w.tenant}, which needs "
                f"{shape.nodes} nodes at once; this borrowed capacity is given back, and the "
                "work resumes from its checkpoint",
            )
        )
    _reclaiming(
        st,
        w,
        shape,
        victims,
        f"stopping {len(victims)} borrowed checkpointing workload"
        f"{'s' if len(victims) != 1 else ''} on the nodes held for it ({names})",
    )
    return True


def _reclaiming(
    st: CycleState, w: Workload, shape: Shape, victims: list[RunningWorkload], why: str
) -> None:
    """Gang `w` waits for `victims` to stop (`why`): its GPUs count against its guarantee
    from now on, the failure memos are dropped, and its reason and wait say so."""
    st.effective.add(w.tenant, w.owner, shape.gpu_milli)
    st.changed()
    st.reasons[w.id] = why
    st.waits.reclaiming(w, why, victims)


def _borrowed_checkpointing(
    ins: CycleInputs,
    st: CycleState,
    pre: Preemptors,
    rw: RunningWorkload,
    removed: dict[str, int],
) -> bool:
    """True if `rw` may give a held node back: one-node checkpointing work, not chosen yet,
    whose tenant and ancestors with a guarantee all stay at or above it without `rw`."""
    w, a = rw.workload, rw.allocation
    if not w.checkpointing or a.multi_node or w.id in pre.victims:
        return False
    return _keeps_guarantee(ins, st, w.tenant, a.gpu_milli, removed)


def _keeps_guarantee(
    ins: CycleInputs, st: CycleState, tenant: str, milli: int, removed: dict[str, int]
) -> bool:
    """True if `tenant` and every ancestor with a guarantee stay at or above it when
    `milli` more, beyond what `removed` already takes from each, stop."""
    effective = st.effective
    for t in effective.chain(tenant):
        g = guaranteed(ins.tree, t)
        if g > 0 and effective.of(t) - removed.get(t, 0) - milli < g:
            return False
    return True


def clear_for_gang(
    ins: CycleInputs, st: CycleState, pre: Preemptors, w: Workload, shape: Shape
) -> bool:
    """(`config.gang_clears_nodes`) Stop checkpointing work on N nodes so that gang `w`
    (within its tenant's guarantee, due after `reclaim_after_s`) starts there (rules in the
    module docstring, "Clearing nodes"). True if so: the nodes are held for it and its reason
    says what it waits for. False changes nothing."""
    config = ins.config
    if (
        not config.gang_clears_nodes
        or not reclaim_due(w, ins.now, config.reclaim_after_s)
        or not ins.cache.checkpointing()
    ):
        return False
    parts = one_engine_parts(st.cap, per_node(shape))
    return any(_clear_on(ins, st, pre, w, shape, one) for one in parts)


def _clear_on(
    ins: CycleInputs, st: CycleState, pre: Preemptors, w: Workload, shape: Shape, one: Shape
) -> bool:
    """`clear_for_gang` with each member's part `one`: the N nodes that need the fewest
    victims (then the least progress lost), all N or none."""
    cap, holds = st.cap, st.holds
    rc = pre.reclaimer()
    costs: list[tuple[int, float, int]] = []
    plans: dict[int, tuple[list[RunningWorkload], list[RunningWorkload]]] = {}
    for n in range(len(cap.nodes)):
        h = holds.get(n)
        if not cap.node_ready[n] or (h is not None and h.workload_id != w.id):
            continue
        if not rc.could_host(n, one):
            continue
        plan = _clear_node(ins, st, pre, rc, w, n, one)
        if plan is None:
            continue
        plans[n] = plan
        costs.append((len(plan[1]), sum(rc.lost(v) for v in plan[1]), n))
    if len(costs) < shape.nodes:
        return False
    costs.sort()
    # the cheapest nodes whose victims, together, take no other tenant below its guarantee
    mine = set(st.effective.chain(w.tenant))
    removed: dict[str, int] = {}
    chosen: list[int] = []
    victims: list[RunningWorkload] = []
    for _, _, n in costs:
        more: dict[str, int] = {}
        for v in plans[n][1]:
            for a in st.effective.chain(v.workload.tenant):
                if a not in mine:
                    more[a] = more.get(a, 0) + v.allocation.gpu_milli
        if any(
            (g := guaranteed(ins.tree, a)) > 0
            and st.effective.of(a) - removed.get(a, 0) - milli < g
            for a, milli in more.items()
        ):
            continue
        for a, milli in more.items():
            removed[a] = removed.get(a, 0) + milli
        chosen.append(n)
        victims.extend(plans[n][1])
        if len(chosen) == shape.nodes:
            break
    if len(chosen) < shape.nodes:
        return False
    rc.take(victims)
    stopping = 0
    for n in chosen:
        claimed = {id(r) for r in plans[n][0]}
        if claimed:
            rc.stopping[n] = [r for r in rc.stopping.get(n, ()) if id(r) not in claimed]
            stopping += len(claimed)
        if n not in holds:
            st.hold(n, Hold(w.tenant, w.id, one))
    for v in victims:
        st.preemptions.append(Preemption(v.workload.id, w.id, _clear_text(v, w, shape)))
    why = reclaim_text(len(victims), stopping) + f" on {shape.nodes} nodes held for it"
    _reclaiming(st, w, shape, victims, why)
    return True


def _clear_node(
    ins: CycleInputs,
    st: CycleState,
    pre: Preemptors,
    rc: Reclaimer,
    w: Workload,
    n: int,
    one: Shape,
) -> tuple[list[RunningWorkload], list[RunningWorkload]] | None:
    """(work already stopping on node `n` counted as freed, victims) so that `one` fits on
    `n`, victims best first and only as many as needed; None if the work that may be
    stopped there (`_clearable`) is not enough."""
    if place_on_node(st.cap, n, one) is not None:
        return [], []
    stopping = list(rc.stopping.get(n, ()))
    if stopping and rc.fits(n, one, stopping) is not None:
        return stopping, []
    victims: list[RunningWorkload] = []
    for rw in rc.victims.get(n, ()):  # best victims first (lowest priority, least progress)
        if not _clearable(ins, st, pre, rc, w, rw):
            continue
        victims.append(rw)
        if rc.fits(n, one, stopping + victims) is not None:
            for v in victims[-2::-1]:  # put back those not needed, most progress first
                trial = [x for x in victims if x is not v]
                if rc.fits(n, one, stopping + trial) is not None:
                    victims = trial
            return stopping, victims
    return None


def _clearable(
    ins: CycleInputs,
    st: CycleState,
    pre: Preemptors,
    rc: Reclaimer,
    w: Workload,
    rw: RunningWorkload,
) -> bool:
    """True if `rw` (preemptible: `rc.victims`) may be stopped for gang `w`: one-node
    checkpointing work, run `gang_clears_min_runtime_s` (or `min_runtime_s` if shorter), not
    chosen yet, of no higher priority; of `w`'s own tenant or of a
    tenant that stays at or above its guarantee without it (all victims together: checked
    by `_clear_on`)."""
    v, a = rw.workload, rw.allocation
    if not v.checkpointing or a.multi_node or v.id in pre.victims or v.priority > w.priority:
        return False
    config = ins.config
    started = v.started_at if v.started_at is not None else a.since
    if ins.now - started < min(config.min_runtime_s, config.gang_clears_min_runtime_s):
        return False
    return v.tenant == w.tenant or _keeps_guarantee(ins, st, v.tenant, a.gpu_milli, {})


def _clear_text(v: RunningWorkload, w: Workload, shape: Shape) -> str:
    own = v.workload.tenant == w.tenant
    whose = f"{w.tenant}'s own" if own else "this borrowed"
    return (
        f"{w.id} of {w.tenant}, within its guarantee, needs {shape.nodes} nodes at once; "
        f"{whose} checkpointing work on {v.allocation.node} is stopped for it and resumes "
        "from its checkpoint"
    )


def one_engine_parts(cap: CapacityIndex, one: Shape) -> list[Shape]:
    """A gang member's part `one`, once per engine of the pool (name order), pinned to it:
    what makes room for a gang on one engine (`gangreclaim`). `[one]` when no node has an
    engine label, or the gang is pinned to an engine already."""
    where = one.where or Where(multi_node=True)
    if where.engine is not None:
        return [one]
    names = sorted({e for e in cap.node_engine if e is not None})
    if not names:
        return [one]
    return [one._replace(where=where._replace(engine=e)) for e in names]
