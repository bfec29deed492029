"""Slurm's power saving as gpupool's node pools (issue 34).

Slurm powers idle nodes down after ``SuspendTime`` (its ``SuspendProgram``) and up again
(its ``ResumeProgram``) when a job is placed there or when asked (``scontrol update
NodeName=<n> State=POWER_UP``). Nodes defined ``State=CLOUD`` start powered down. gpupool
reads the power state from `sinfo --json`'s state flags:

=========================================  ======================  ==========================
Slurm (``sinfo -o %T`` / flags)             gpupool pool node        inventory node state
=========================================  ======================  ==========================
``POWER_UP`` (asked, ResumeProgram not      requested                down (pool) / ready
run yet)
``POWERING_UP`` (``#``)                     booting                  down (pool) / ready
``POWERED_DOWN``, ``CLOUD+POWERED_DOWN``    powered_down             down (pool) / ready
(``~``), ``POWERING_DOWN`` (``%``),
``POWER_DOWN``
anything else                               up                       as its base state says
=========================================  ======================  ==========================

A node belongs to gpupool's node pool ``P`` when its Slurm features (``Features=`` in
slurm.conf) include ``gpupool-pool:P`` (`POOL_FEATURE`); the inventory then labels it
`POOL_LABEL` = P and reports it down while it is not up: gpupool's autoscale loop asks for
it (`request_nodes`: ``State=POWER_UP``, Slurm runs the ResumeProgram) when waiting work
needs it, places work there once it is up, and gives it back (`release_node`:
``State=POWER_DOWN``, Slurm runs the SuspendProgram) after the pool's ``idle_seconds``; Slurm's
own ``SuspendTime`` may power it down earlier. A powered-down node in no pool is ordinary
reachable capacity: it stays ready, and a job gpupool submits there makes Slurm resume it
(the job is ``CONFIGURING`` meanwhile: starting, never rejected for its pending time).

A request for more nodes than the pool has powered down asks for those it has; one for a
pool with none is reported withdrawn at once, saying so. Requests live in this process: after
a restart the server's loop withdraws the old ones at their timeout; an ended one is reported
for `ENDED_KEPT_S`, then forgotten.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpupool.clock import Clock
from gpupool.domain import Workload
from gpupool.domain.nodepools import NodePool, PoolNodeState, RequestState
from gpupool.engines.common.executor import (
    ExecutorError,
    ExecutorWithNodePools,
    NodeRequestStatus,
    PoolNodeStatus,
    PoolStates,
)
from gpupool.engines.slurm.cli import SlurmCLI, SlurmError, state_of

#: a node's Slurm feature naming its gpupool node pool: ``gpupool-pool:<pool>``
POOL_FEATURE = "gpupool-pool:"
P = PoolNodeState
_REQUESTED = {"POWER_UP"}
_BOOTING = {"POWERING_UP"}
_DOWN = {"POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN"}
#: base states or flags of a node that is down whatever its power state (a failed resume
#: leaves ``DOWN+CLOUD+POWERED_DOWN``)
_BROKEN = {"DOWN", "FAIL", "FAILING", "FUTURE"}
#: seconds an ended request is still reported by `pool_states` (the contract's "ended
#: recently"; the server's loop records the end at its next pass), then forgotten
ENDED_KEPT_S = 3600.0


def _words(raw: Mapping[str, Any]) -> set[str]:
    """A `sinfo --json` node's state and flags, upper case (22.05: a state string and a
    flags list; 23+: a list of both)."""
    words = {state_of(raw.get("state"))}
    state = raw.get("state")
    if isinstance(state, list):
        words |= {str(s).upper() for s in state}
    flags = raw.get("state_flags") or []
    words |= {str(f).upper() for f in (flags if isinstance(flags, list) else [flags])}
    return words


def power_state(raw: Mapping[str, Any]) -> PoolNodeState:
    """Where the node stands in Slurm's power saving (see the module's table); a node that
    is down for another reason counts as powered down (it runs nothing)."""
    words = _words(raw)
    if words & _BOOTING:
        return P.BOOTING
    if words & _REQUESTED:
        return P.REQUESTED
    if words & _DOWN or words & _BROKEN:
        return P.POWERED_DOWN
    return P.UP


def saving_power(raw: Mapping[str, Any]) -> bool:
    """Whether the node is in one of Slurm's power-saving states (not up, not broken)."""
    return power_state(raw) is not P.UP and not _words(raw) & _BROKEN


def pool_of(raw: Mapping[str, Any]) -> str | None:
    """The gpupool node pool the node's features name (`POOL_FEATURE`), else None."""
    for key in ("active_features", "features"):
        value = raw.get(key) or ""
        items = value if isinstance(value, list) else str(value).split(",")
        for f in items:
            f = str(f).strip()
            if f.startswith(POOL_FEATURE) and len(f) > len(POOL_FEATURE):
                return f[len(POOL_FEATURE) :]
    return None


@dataclass
class PowerRequest:
    """Nodes gpupool asked Slurm to power up for one request."""

    id: str
    pool: str
    nodes: tuple[str, ...]
    at: float
    state: RequestState = RequestState.OPEN
    message: str = ""
    #: when it ended (None: open)
    ended_at: float | None = None


def request_state(
    req: PowerRequest, states: Mapping[str, PoolNodeState], broken: Iterable[str]
) -> tuple[RequestState, str]:
    """Where `req` stands given the nodes' power states (`states`) and the nodes that are
    down (`broken`: a resume that failed, ``ResumeTimeout`` passed)."""
    if not req.nodes:
        return RequestState.WITHDRAWN, req.message
    failed = sorted(set(req.nodes) & set(broken))
    if failed:
        return RequestState.WITHDRAWN, (
            f"Slurm could not resume {', '.join(failed)} (down after ResumeProgram; see "
            "slurmctld's log and ResumeTimeout)"
        )
    if all(states.get(n) is P.UP for n in req.nodes):
        return RequestState.FULFILLED, ""
    return RequestState.OPEN, ""


class SlurmNodePools(ExecutorWithNodePools):
    """`ExecutorWithNodePools` over Slurm's power saving (the Slurm executor's power; see
    the module). Uses the executor's `cli` and `clock`."""

    cli: SlurmCLI
    clock: Clock
    _power_requests: dict[str, PowerRequest] | None = None
    _power_ids = itertools.count(1)

    def _requests(self) -> dict[str, PowerRequest]:
        if self._power_requests is None:
            self._power_requests = {}
        return self._power_requests

    def _update(self, nodes: Sequence[str], state: str) -> None:
        self.cli.run(["scontrol", "update", f"NodeName={','.join(nodes)}", f"State={state}"])

    def _nodes(self) -> list[dict[str, Any]]:
        try:
            return self.cli.nodes()
        except SlurmError as e:
            raise ExecutorError(f"cannot read Slurm's nodes: {e}") from None

    def request_nodes(
        self, pool: NodePool, count: int, for_workloads: Sequence[Workload], *, atomic: bool
    ) -> str:
        raw = self._nodes()
        down = sorted(
            str(r["name"])
            for r in raw
            if pool_of(r) == pool.name and power_state(r) is P.POWERED_DOWN and saving_power(r)
        )
        rid = f"slurm-power-{int(self.clock.now() * 1000)}-{next(self._power_ids)}"
        names = tuple(down[:count])
        req = PowerRequest(rid, pool.name, names, self.clock.now())
        if not names or (atomic and len(names) < count):
            req.nodes, req.state, req.ended_at = (), RequestState.WITHDRAWN, req.at
            req.message = (
                f"Slurm has {len(down)} powered-down node(s) of pool {pool.name} (feature "
                f"{POOL_FEATURE}{pool.name}), {count} needed"
            )
        else:
            try:
                self._update(names, "POWER_UP")
            except SlurmError as e:
                raise ExecutorError(f"Slurm refused to power up {', '.join(names)}: {e}") from None
        self._requests()[rid] = req
        return rid

    def withdraw(self, request: str) -> None:
        """Forget the request: Slurm cannot stop a resume under way; nodes that come up idle
        are powered down again by ``SuspendTime`` or by gpupool's `release_node`."""
        req = self._requests().get(request)
        if req is not None and req.state is RequestState.OPEN:
            req.state, req.message = RequestState.WITHDRAWN, "withdrawn by gpupool"
            req.ended_at = self.clock.now()

    def release_node(self, node: str) -> None:
        """Power `node` down now (``State=POWER_DOWN``: Slurm runs its SuspendProgram)."""
        raw = {str(r["name"]): r for r in self._nodes()}
        if node not in raw or power_state(raw[node]) is not P.UP:
            return
        try:
            self._update((node,), "POWER_DOWN")
        except SlurmError as e:
            raise ExecutorError(f"Slurm refused to power {node} down: {e}") from None

    def pool_states(self, pools: Sequence[NodePool]) -> PoolStates:
        names = {p.name for p in pools}
        now = self.clock.now()
        kept = self._power_requests = {
            rid: r
            for rid, r in self._requests().items()
            if r.ended_at is None or now - r.ended_at < ENDED_KEPT_S
        }
        raw = self._nodes()
        states = {str(r["name"]): power_state(r) for r in raw}
        broken = {str(r["name"]) for r in raw if _words(r) & _BROKEN}
        of_request = {n: r.id for r in kept.values() for n in r.nodes}
        pools_of = {str(r["name"]): pool_of(r) for r in raw}
        nodes = tuple(
            PoolNodeStatus(n, pool, states[n], of_request.get(n, ""))
            for n, pool in sorted(pools_of.items())
            if pool is not None and pool in names
        )
        reqs = []
        for req in kept.values():
            if req.pool not in names:
                continue
            if req.state is RequestState.OPEN:
                req.state, req.message = request_state(req, states, broken)
                req.ended_at = None if req.state is RequestState.OPEN else now
            reqs.append(NodeRequestStatus(req.id, req.pool, req.state, req.message))
        return PoolStates(nodes, tuple(reqs))
