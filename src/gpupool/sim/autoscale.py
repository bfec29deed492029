"""Node pools in the simulator (issue 34): replay work on a cluster that grows and shrinks.

`replay_pools` runs the real scheduler (`scheduler.cycle`) and the real autoscaling rules
(`scheduler.autoscale`: `capacity_bound`, `plan`) on a virtual clock. Events are
submissions, completions, nodes that finished booting and idle nodes reaching their pool's
`idle_seconds`. At each event time one cycle runs; then (unless the policy is `fixed`) the
plan's requests start booting nodes (up `boot_seconds` later) and its idle nodes are given
back at once. Requests are always fulfilled here (the timeout path is the server's test).

Billing: a node is paid from the moment it is asked for (booting included, as clouds bill)
until it is given back; a fixed cluster is paid for the whole replay (first submission to
last completion). GPU-hours bought = paid node-hours x the pool's GPUs per node; cost =
GPU-hours x `cost_per_gpu_hour`.

A scenario file with a `node_pools:` list (docs/scenarios.md) is read by `load_pool_scenario`:
the rest of the file is an ordinary scenario; its `cluster.nodes` are the fixed nodes beside
the pools (may be empty).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpupool.domain import Allocation, Node, Workload, WorkloadState
from gpupool.domain.errors import ValidationError
from gpupool.domain.nodepools import (
    NodePool,
    NodeRequest,
    PoolNode,
    PoolNodeState,
    RequestState,
)
from gpupool.scheduler.autoscale import PoolView, capacity_bound, plan, rescue
from gpupool.scheduler.cycle import cycle
from gpupool.scheduler.types import RunningWorkload, SchedulerConfig, Snapshot
from gpupool.sim.scenario import Scenario, ScenarioError, parse_scenario, read_yaml

UP = PoolNodeState.UP
_COMPLETE, _UP, _SUBMIT, _WAKE = 0, 1, 2, 3  # completions and new nodes first at a time


@dataclass(frozen=True, slots=True)
class PoolPolicy:
    """How the pools are run: `fixed` keeps `max_nodes` of each pool up all along;
    otherwise nodes are asked for on demand, `min_nodes` kept up from the start."""

    name: str
    pools: tuple[NodePool, ...]
    fixed: bool = False


@dataclass(slots=True)
class PoolReport:
    """What a replay bought and what the work waited. Times in seconds, money in the pools'
    unit."""

    policy: str
    jobs: int = 0
    finished: int = 0
    #: jobs no node of the cluster or its pools could ever hold
    never_ran: int = 0
    gpu_hours_bought: float = 0.0
    #: of them, those paid for up to `until` (the end of a trace's window; all: no window)
    gpu_hours_bought_until: float = 0.0
    gpu_hours_used: float = 0.0
    cost: float = 0.0
    mean_wait_s: float = 0.0
    p50_wait_s: float = 0.0
    p95_wait_s: float = 0.0
    max_wait_s: float = 0.0
    peak_nodes: int = 0
    node_requests: int = 0
    nodes_given_back: int = 0
    span_s: float = 0.0
    by_pool: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def utilization(self) -> float:
        """GPU-hours used / bought (0: nothing bought)."""
        return self.gpu_hours_used / self.gpu_hours_bought if self.gpu_hours_bought else 0.0

    def as_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__slots__ if k != "by_pool"}
        out["utilization"] = self.utilization
        out["by_pool"] = self.by_pool
        return out


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


class _Replay:
    def __init__(
        self,
        scen: Scenario,
        policy: PoolPolicy,
        config: SchedulerConfig | None,
        until: float | None = None,
    ) -> None:
        self.scen, self.policy, self.until = scen, policy, until
        self.paid_until_s: dict[str, float] = {p.name: 0.0 for p in policy.pools}
        self.config = config or scen.config
        self.pools = {p.name: p for p in policy.pools}
        self.fixed_nodes = list(scen.nodes)
        self.pool_nodes: dict[str, PoolNode] = {}
        self.node_objs: dict[str, Node] = {}
        self.paid_since: dict[str, float] = {}
        self.paid_s: dict[str, float] = {p: 0.0 for p in self.pools}
        self.requests: dict[str, NodeRequest] = {}
        self.request_nodes: dict[str, list[str]] = {}
        self.running: dict[str, RunningWorkload] = {}
        self.pending: dict[str, Workload] = {}
        self.duration = {sw.workload.id: sw.duration for sw in scen.workloads}
        self.waits: list[float] = []
        self.events: list[tuple[float, int, int, str]] = []
        self.seq = 0
        self.count = 0
        self.report = PoolReport(policy.name, jobs=len(scen.workloads))

    def push(self, t: float, kind: int, key: str) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, key))

    def new_node(self, pool: NodePool, t: float, state: PoolNodeState) -> str:
        self.count += 1
        name = f"{pool.name}-{self.count}"
        self.pool_nodes[name] = PoolNode(name, pool.name, state, t, t if state is UP else None)
        self.node_objs[name] = pool.node(name)
        self.paid_since[name] = t
        return name

    def up_nodes(self) -> list[Node]:
        up = [self.node_objs[n] for n, pn in self.pool_nodes.items() if pn.state is UP]
        return self.fixed_nodes + up

    # -- the replay -------------------------------------------------------------------------
    def run(self) -> PoolReport:
        work = sorted(self.scen.workloads, key=lambda sw: sw.workload.submitted_at)
        if not work:
            return self.report
        start = work[0].workload.submitted_at
        for sw in work:
            self.push(sw.workload.submitted_at, _SUBMIT, sw.workload.id)
        by_id = {sw.workload.id: sw.workload for sw in work}
        for p in self.pools.values():
            for _ in range(p.max_nodes if self.policy.fixed else p.min_nodes):
                self.new_node(p, start, UP)
        t = start
        left = len(work)
        while self.events and self.report.finished + self.report.never_ran < left:
            t = self.events[0][0]
            while self.events and self.events[0][0] == t:
                _, kind, _, key = heapq.heappop(self.events)
                self.apply(kind, key, t, by_id)
            self.step(t)
            up = sum(1 for n in self.pool_nodes.values() if n.state is UP)
            self.report.peak_nodes = max(self.report.peak_nodes, up)
        return self.finish(start, t)

    def apply(self, kind: int, key: str, t: float, by_id: dict[str, Workload]) -> None:
        if kind == _SUBMIT:
            self.pending[key] = by_id[key]
        elif kind == _COMPLETE:
            self.running.pop(key)
            self.report.finished += 1
        elif kind == _UP:
            pn = self.pool_nodes[key]
            self.pool_nodes[key] = pn.moved(UP, t)
            for rid, names in self.request_nodes.items():
                req = self.requests[rid]
                if key in names and all(self.pool_nodes[n].state is UP for n in names):
                    self.requests[rid] = replace(req, state=RequestState.FULFILLED, ended_at=t)

    def step(self, t: float) -> None:
        snap = Snapshot(tuple(self.up_nodes()), self.scen.tenants, tuple(self.running.values()))
        pending = sorted(self.pending.values(), key=lambda w: (w.submitted_at, w.id))
        d = cycle(snap, pending, t, self.config)
        if self.pools:
            d = rescue(d, pending, list(self.pools.values()), snap.tenants, self.config.policy)
        for a in d.admissions:
            w = self.pending.pop(a.workload_id)
            self.admit(w, a.allocation, t)
        for wid in d.unschedulable:
            if self.pending.pop(wid, None) is not None:
                self.report.never_ran += 1
        if self.policy.fixed or not self.pools:
            return
        busy = {n for r in self.running.values() for n in r.allocation.nodes}
        for name, pn in self.pool_nodes.items():
            if pn.state is UP:
                idle = None if name in busy else (pn.idle_since if pn.idle_since else t)
                if idle != pn.idle_since:
                    self.pool_nodes[name] = replace(pn, idle_since=idle)
        waiting = capacity_bound(snap, pending, d, policy=self.config.policy)
        views = [
            PoolView(
                p,
                tuple(n for n in self.pool_nodes.values() if n.pool == p.name),
                tuple(
                    r
                    for r in self.requests.values()
                    if r.pool == p.name and r.state is RequestState.OPEN
                ),
            )
            for p in self.pools.values()
        ]
        pl = plan(views, waiting, busy, t, policy=self.config.policy)
        for up in pl.scale_up:
            pool = self.pools[up.pool]
            rid = f"r{len(self.requests) + 1}"
            names = [self.new_node(pool, t, PoolNodeState.BOOTING) for _ in range(up.nodes)]
            self.requests[rid] = NodeRequest(
                rid, up.pool, up.nodes, up.for_workloads, t, atomic=up.atomic
            )
            self.request_nodes[rid] = names
            for n in names:
                self.push(t + pool.boot_seconds, _UP, n)
            self.report.node_requests += 1
        for down in pl.scale_down:
            self.give_back(down.node, t)
        for name, pn in self.pool_nodes.items():  # a node idle from now: look again then
            if pn.state is UP and pn.idle_since == t:
                due = t + self.pools[pn.pool].idle_seconds
                if due > t:
                    self.push(due, _WAKE, name)

    def admit(self, w: Workload, alloc: Allocation, t: float) -> None:
        w = replace(w, state=WorkloadState.RUNNING, admitted_at=t)
        self.running[w.id] = RunningWorkload(w, alloc)
        self.waits.append(t - w.submitted_at)
        dur = self.duration[w.id]
        self.report.gpu_hours_used += alloc.gpu_milli / 1000 * dur / 3600
        self.push(t + dur, _COMPLETE, w.id)

    def give_back(self, name: str, t: float, *, idle: bool = True) -> None:
        pn = self.pool_nodes.pop(name)
        self.node_objs.pop(name)
        since = self.paid_since.pop(name)
        self.paid_s[pn.pool] += t - since
        cut = t if self.until is None else min(t, self.until)
        self.paid_until_s[pn.pool] += max(0.0, cut - since)
        self.report.nodes_given_back += int(idle)

    def finish(self, start: float, end: float) -> PoolReport:
        for name in list(self.pool_nodes):  # the replay ends: stop paying for what is left
            self.give_back(name, end, idle=False)
        r = self.report
        r.span_s = end - start
        fixed_gpus = sum(len(n.gpus) for n in self.fixed_nodes)
        r.gpu_hours_bought = fixed_gpus * r.span_s / 3600
        cut = end if self.until is None else min(end, self.until)
        r.gpu_hours_bought_until = fixed_gpus * max(0.0, cut - start) / 3600
        for name, pool in self.pools.items():
            gpu_h = self.paid_s[name] * (pool.gpus or 1) / 3600
            r.gpu_hours_bought += gpu_h
            r.gpu_hours_bought_until += self.paid_until_s[name] * (pool.gpus or 1) / 3600
            r.cost += gpu_h * pool.cost_per_gpu_hour
            r.by_pool[name] = {"gpu_hours": gpu_h, "cost": gpu_h * pool.cost_per_gpu_hour}
        if self.waits:
            r.mean_wait_s = sum(self.waits) / len(self.waits)
            r.p50_wait_s = _percentile(self.waits, 0.5)
            r.p95_wait_s = _percentile(self.waits, 0.95)
            r.max_wait_s = max(self.waits)
        return r


def replay_pools(
    scen: Scenario,
    policy: PoolPolicy,
    config: SchedulerConfig | None = None,
    until: float | None = None,
) -> PoolReport:
    """Replay `scen`'s work on its fixed nodes and `policy`'s pools (see the module).
    `until`: also count what was paid up to that time (`gpu_hours_bought_until`)."""
    return _Replay(scen, policy, config, until).run()


# -- scenario files with node_pools ---------------------------------------------------------

_POOL_KEYS = {
    "name", "gpus", "gpu_model", "gpu_memory_gib", "cpus", "memory_gib", "labels",
    "min_nodes", "max_nodes", "boot_seconds", "cost_per_gpu_hour", "idle_seconds",
}  # fmt: skip


def parse_pools(items: Any) -> list[NodePool]:
    """The `node_pools:` list of a scenario file; problems raise ScenarioError, all at once."""
    if not isinstance(items, list):
        raise ScenarioError(["node_pools must be a list of pools"])
    pools: list[NodePool] = []
    problems: list[str] = []
    for i, item in enumerate(items):
        where = f"node_pools[{i}]"
        if not isinstance(item, dict):
            problems.append(f"{where}: must be a mapping")
            continue
        where = f"node_pools[{i}] ({item.get('name', '?')})"
        unknown = sorted(set(item) - _POOL_KEYS)
        if unknown:
            problems.append(f"{where}: unknown key {unknown[0]!r}")
            continue
        try:
            gpus = int(item.get("gpus", 8))
            boot = float(item.get("boot_seconds", 300))
            pools.append(
                NodePool(
                    name=str(item.get("name", "")),
                    gpus=gpus,
                    gpu_model=str(item.get("gpu_model", "GPU")) if gpus else "",
                    gpu_memory_mib=int(float(item.get("gpu_memory_gib", 80)) * 1024),
                    cpu_milli=int(float(item.get("cpus", 64)) * 1000),
                    memory_mib=int(float(item.get("memory_gib", 512)) * 1024),
                    labels=tuple((str(k), str(v)) for k, v in (item.get("labels") or {}).items()),
                    min_nodes=int(item.get("min_nodes", 0)),
                    max_nodes=int(item.get("max_nodes", 1)),
                    boot_seconds=boot,
                    cost_per_gpu_hour=float(item.get("cost_per_gpu_hour", 0.0)),
                    idle_seconds=float(item.get("idle_seconds", 600)),
                    request_timeout_seconds=max(1800.0, boot),
                )
            )
        except ValidationError as e:
            problems.append(f"{where}: {e}")
        except (TypeError, ValueError) as e:
            problems.append(f"{where}: {e}")
    names = [p.name for p in pools]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        problems.append(f"node_pools: pool {dup[0]!r} is given twice")
    if problems:
        raise ScenarioError(problems)
    return pools


def load_pool_scenario(path: str | Path, policy: Any = None) -> tuple[Scenario, list[NodePool]]:
    """A scenario file with `node_pools:`: the scenario (its fixed nodes) and the pools.
    Every request must fit on the fixed nodes or on the pools' nodes (`max_nodes` of each,
    the nodes the replay makes: `NodePool.node`)."""
    data = read_yaml(path)
    if not isinstance(data, dict) or "node_pools" not in data:
        raise ScenarioError(["no node_pools in this scenario"], str(path))
    data = dict(data)
    for key in ("budgets", "reservations"):  # issue 35: this replay runs the plain cycle
        if data.get(key):
            raise ScenarioError(
                [f"{key}: not replayed with node_pools; simulate them in a scenario without pools"],
                str(path),
            )
    pools = parse_pools(data.pop("node_pools"))
    coming = [p.node(f"{p.name}-{i}") for p in pools for i in range(p.max_nodes)]
    return parse_scenario(data, policy, coming_nodes=coming), pools
