"""Node pools (issue 34): the autoscale loop, and the scheduler's hook that finds the work
waiting for a pool's node.

`node_pool_demand` runs inside the scheduler loop right after each cycle: it picks the
pending work that waits for capacity (`scheduler.autoscale.capacity_bound`; work no
registered node could ever hold but a pool's node could is kept waiting instead of failed),
gives it its reason ("waiting for a node of pool gpu-h100 (booting, ~4 min)") and leaves it
in `ctx.node_pool_waiting` for the loop.

`AutoscaleLoop` does the rest every pass, only for an executor that declares
`ExecutorWithNodePools`: it records what the engine says of the pools' nodes and requests
(`pool_states`), then carries out `scheduler.autoscale.plan`: withdraws requests past their
timeout (recorded with the reason), asks for nodes (`request_nodes`, recorded as open
`NodeRequest`s) and gives idle nodes back (`release_node`; the node is marked `down` so that
nothing is placed there). Without pools, or without the capability, it does nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging

from gpupool.domain import NodeState, Workload
from gpupool.domain.errors import IllegalTransition
from gpupool.domain.nodepools import (
    NodePool,
    NodeRequest,
    PoolNode,
    PoolNodeState,
    RequestState,
    pool_node_transition,
    request_transition,
)
from gpupool.engines.common.executor import ExecutorError, ExecutorWithNodePools, PoolStates
from gpupool.scheduler import Decisions, Snapshot
from gpupool.scheduler.autoscale import (
    AutoscalePlan,
    PoolView,
    capacity_bound,
    plan,
    rescue,
)
from gpupool.scheduler.budgets import apply_budgets
from gpupool.scheduler.timerules import TimeRules
from gpupool.server.context import AppContext
from gpupool.server.loops.base import Loop
from gpupool.store import AllocationRepo, NodePoolRepo, NodeRepo, NotFound, Store, WorkloadRepo

log = logging.getLogger(__name__)
P = PoolNodeState


def pool_views(store: Store, now: float) -> tuple[list[PoolView], set[str]]:
    """Every pool with its nodes, open requests and last timeout; and the busy nodes."""
    with store.read() as s:
        repo = NodePoolRepo(s)
        pools = repo.list()
        if not pools:
            return [], set()
        nodes = repo.nodes()
        reqs = repo.requests(open_only=False)
        busy = {n for r in AllocationRepo(s).running() for n in r.allocation.nodes}
    views = []
    for p in pools:
        # a withdrawn request timed out (gpupool's plan withdraws for nothing else) or the
        # engine gave up on it: the pool is not asked again for a while
        timed_out = [
            r.ended_at
            for r in reqs
            if r.pool == p.name and r.state is RequestState.WITHDRAWN and r.ended_at is not None
        ]
        views.append(
            PoolView(
                p,
                tuple(n for n in nodes if n.pool == p.name),
                tuple(r for r in reqs if r.pool == p.name and r.state is RequestState.OPEN),
                max(timed_out, default=None),
            )
        )
    return views, busy


def node_pool_demand(
    ctx: AppContext,
    snap: Snapshot,
    pending: list[Workload],
    d: Decisions,
    now: float,
    rules: TimeRules | None = None,
) -> Decisions:
    """`d` with the reasons of the work that waits for a pool's node (see the module).
    Work that `rules` hold back (a spent GPU-hour budget) makes no demand for nodes."""
    if not isinstance(ctx.executor, ExecutorWithNodePools):
        return d
    views, busy = pool_views(ctx.store, now)
    if not views:
        ctx.node_pool_waiting = ()
        return d
    policy = ctx.settings.scheduler.policy
    d = rescue(d, pending, [v.pool for v in views], snap.tenants, policy)
    held = apply_budgets(rules.budgets, snap, pending).held if rules is not None else ()
    waiting = capacity_bound(snap, pending, d, held, policy=policy)
    seen = frozenset(n.name for n in snap.nodes)
    ctx.node_pool_waiting, ctx.node_pool_seen = tuple(waiting), seen
    p = plan(views, waiting, busy, now, seen, policy=policy)
    if not p.reasons:
        return d
    infos = dict(d.pending.items())
    for wid, why in p.reasons.items():
        if wid in infos:
            infos[wid] = dataclasses.replace(infos[wid], reason=why)
    return dataclasses.replace(d, pending=infos)


class AutoscaleLoop(Loop):
    """Carries out the node pools' plan through `ExecutorWithNodePools` (see the module)."""

    name = "autoscale"

    def __init__(self, ctx: AppContext, interval_s: float = 10.0):
        super().__init__(interval_s, on_error=lambda n: ctx.metrics.loop_errors.labels(n).inc())
        self.ctx = ctx
        self.last: AutoscalePlan | None = None

    def run_once(self) -> AutoscalePlan | None:
        ex = self.ctx.executor
        if not isinstance(ex, ExecutorWithNodePools):
            return None
        now = self.ctx.clock.now()
        views, busy = pool_views(self.ctx.store, now)
        if not views:
            return None
        pools = [v.pool for v in views]
        try:
            states = ex.pool_states(pools)
        except ExecutorError as e:
            log.warning("node pools: the engine did not say where its pools stand: %s", e)
            return None
        self._record(views, states, busy, now)
        views, busy = pool_views(self.ctx.store, now)
        still = self._still_waiting()
        policy = self.ctx.settings.scheduler.policy
        self.last = p = plan(views, still, busy, now, self.ctx.node_pool_seen, policy=policy)
        self._carry_out(p, {v.pool.name: v.pool for v in views}, still, now)
        return p

    def _still_waiting(self) -> list[Workload]:
        ids = {w.id for w in self.ctx.node_pool_waiting}
        if not ids:
            return []
        with self.ctx.store.read() as s:
            pending = {w.id for w in WorkloadRepo(s).pending()}
        return [w for w in self.ctx.node_pool_waiting if w.id in pending]

    # -- what the engine says ----------------------------------------------------------------
    def _record(
        self, views: list[PoolView], states: PoolStates, busy: set[str], now: float
    ) -> None:
        known = {n.name: n for v in views for n in v.nodes}
        open_reqs = {r.id: r for v in views for r in v.requests}
        pools = {v.pool.name for v in views}
        with self.ctx.store.write() as s:
            repo = NodePoolRepo(s)
            for st in states.nodes:
                if st.pool not in pools:
                    continue
                old = known.get(st.name)
                node = _moved(old, st.name, st.pool, st.state, now)
                if node.state is P.UP:
                    idle = None if st.name in busy else (node.idle_since or now)
                    node = dataclasses.replace(node, idle_since=idle)
                if node != old:
                    repo.put_node(node)
            for rs in states.requests:
                req = open_reqs.get(rs.request)
                if req is None or rs.state is RequestState.OPEN:
                    continue
                request_transition(req.id, req.state, rs.state)
                why = "" if rs.state is RequestState.FULFILLED else f"engine: {rs.message}"
                repo.put_request(dataclasses.replace(req, state=rs.state, reason=why, ended_at=now))

    # -- carrying out the plan --------------------------------------------------------------
    def _carry_out(
        self, p: AutoscalePlan, pools: dict[str, NodePool], waiting: list[Workload], now: float
    ) -> None:
        ex = self.ctx.executor
        assert isinstance(ex, ExecutorWithNodePools)
        with self.ctx.store.read() as s:
            reqs = {r.id: r for r in NodePoolRepo(s).requests()}
        for w in p.withdrawals:
            req = reqs.get(w.request)
            try:
                ex.withdraw(w.request)
            except ExecutorError as e:
                log.warning("node pools: withdrawing request %s failed: %s", w.request, e)
            if req is not None:
                log.info("node pools: %s", w.reason)
                with self.ctx.store.write() as s:
                    NodePoolRepo(s).put_request(
                        dataclasses.replace(
                            req,
                            state=request_transition(req.id, req.state, RequestState.WITHDRAWN),
                            reason=w.reason,
                            ended_at=now,
                        )
                    )
        by_id = {w.id: w for w in waiting}
        for up in p.scale_up:
            pool = pools[up.pool]
            work = [by_id[i] for i in up.for_workloads if i in by_id]
            try:
                rid = ex.request_nodes(pool, up.nodes, work, atomic=up.atomic)
            except ExecutorError as e:
                log.warning(
                    "node pools: asking pool %s for %d nodes failed: %s", up.pool, up.nodes, e
                )
                continue
            log.info(
                "node pools: asked pool %s for %d node(s) (request %s)", up.pool, up.nodes, rid
            )
            req = NodeRequest(
                rid, up.pool, up.nodes, up.for_workloads, now, atomic=up.atomic, engine_ref=rid
            )
            with self.ctx.store.write() as s:
                NodePoolRepo(s).put_request(req)
        for down in p.scale_down:
            try:
                ex.release_node(down.node)
            except ExecutorError as e:
                log.warning("node pools: giving node %s back failed: %s", down.node, e)
                continue
            log.info("node pools: gave node %s of pool %s back (idle)", down.node, down.pool)
            with self.ctx.store.write() as s:
                repo = NodePoolRepo(s)
                for n in repo.nodes(down.pool):
                    if n.name == down.node:
                        repo.put_node(n.moved(P.POWERED_DOWN, now))
                with contextlib.suppress(NotFound):  # never registered: nothing to mark
                    NodeRepo(s).set_state(down.node, NodeState.DOWN)


def _moved(
    old: PoolNode | None, name: str, pool: str, state: PoolNodeState, now: float
) -> PoolNode:
    """The node as the engine says it is now (a change checked against the table; the
    engine's word wins over an illegal change, with a warning)."""
    if old is None:
        return PoolNode(name, pool, state, now, now if state is P.UP else None)
    if old.state is state and old.pool == pool:
        return old
    try:
        pool_node_transition(name, old.state, state)
    except IllegalTransition as e:
        log.warning("node pools: the engine says %s; recorded as it says", e)
    return PoolNode(name, pool, state, now, now if state is P.UP else None)
