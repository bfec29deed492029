"""Could a request ever run? The one rule behind every "never runs" answer.

Callers: the submit API (a 422 saying what to ask for instead), the queue's entry check
(`gpupool.scheduler.queues`: the cycle fails such work as unschedulable), the simulator's
scenario and trace validation (`gpupool.sim.scenario`, `gpupool.sim.trace`) and advance
reservations (`grant_problem`). Pure: no I/O.

The rule, under a scheduling `Policy`:

* the tenant must be known and a leaf (`tenant_problem`);
* some node must be able to hold the request with nothing running on it, whatever its state
  or health (a down node may come back): `reasons.Hardware`, on the request as the policy
  sees it (`request_shape`: under `fifo` a fraction is handed out as one whole GPU, so it
  needs any GPU, not a shared one);
* only under `fair`: no tenant limit or per-user cap on the tenant's ancestor chain may be
  below what it asks (`limits.never_within`); `fifo` and `las` apply no quotas.

A caller that keeps each GPU's MIG layout fixed (the simulator: it has no relayout loop)
asks with `fixed_mig_layouts`: a MIG instance then also needs a GPU whose layout has one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpupool.domain import MILLI_PER_GPU, Node, Request, SharingMode, TenantTree
from gpupool.domain.mig import instances_of
from gpupool.scheduler.capacity import FRACTION, MIG, Shape
from gpupool.scheduler.constraints import node_allows
from gpupool.scheduler.limits import (
    TENANT,
    NeverWithin,
    gpus_text,
    never_within,
    never_within_text,
)
from gpupool.scheduler.nodetables import mig_instances
from gpupool.scheduler.placement import shape_of
from gpupool.scheduler.reasons import Hardware
from gpupool.scheduler.types import Policy


def applies_quotas(policy: Policy) -> bool:
    """True if `policy` holds work to tenant limits and per-user caps (only `fair`)."""
    return policy is Policy.FAIR


def request_shape(request: Request, policy: Policy) -> Shape:
    """`request` as `policy` places it: under `fifo` a fraction takes one whole GPU."""
    return shape_of(request, policy is Policy.FIFO)


def tenant_problem(tree: TenantTree, tenant: str) -> str | None:
    """Why no work can be queued for `tenant` (unknown, or it has sub-tenants), or None."""
    if tenant not in tree:
        return f"unknown tenant {tenant!r}; ask an admin to add it"
    if not tree.is_leaf(tenant):
        return (
            f"tenant {tenant} has sub-tenants; only leaf tenants hold work "
            f"(submit to one of {', '.join(tree.children(tenant))})"
        )
    return None


def shape_never_runs(
    hardware: Hardware, tree: TenantTree, tenant: str, shape: Shape, policy: Policy
) -> str | None:
    """The queue's entry check for a known leaf `tenant`: why `shape` (from `request_shape`)
    can never run, in the scheduler's words, or None. The same answer as `never_runs`."""
    why = hardware.never_fits(shape)
    if why is None and applies_quotas(policy) and shape.gpu_milli:
        hit = never_within(tree, tenant, shape.gpu_milli)
        if hit is not None:
            why = never_within_text(hit, shape.gpu_milli)
    return why


@dataclass(frozen=True, slots=True)
class NeverRuns:
    """Why a request can never run. `field`: the request field at fault (`tenant`, `gpus`,
    `gpu_fraction`, `mig`, `cpus`, `memory_mib`, `engine`, `node_labels`, `nodes`); `why`:
    the scheduler's own reason (what a cycle would fail the work with); `limit`: the limit or
    cap that forbids it, if that is the reason."""

    field: str
    why: str
    limit: NeverWithin | None = None


def never_runs(
    request: Request,
    tenant: str,
    tree: TenantTree,
    nodes: Sequence[Node] | Hardware,
    policy: Policy,
    *,
    fixed_mig_layouts: bool = False,
) -> NeverRuns | None:
    """Why `request` submitted to `tenant` can never run on `nodes` under `policy`, or None
    if it can. With no node registered yet nothing is refused for hardware (nodes may still
    come). `nodes` may be a `Hardware` summary already built (callers that check many)."""
    why = tenant_problem(tree, tenant)
    if why is not None:
        return NeverRuns("tenant", why)
    hardware = nodes if isinstance(nodes, Hardware) else Hardware(tuple(nodes))
    shape = request_shape(request, policy)
    why = hardware.never_fits(shape)
    if why is None and fixed_mig_layouts:
        why = _no_layout_has(hardware.nodes, shape)
    if why is not None:
        return NeverRuns(_field(hardware, shape), why)
    if applies_quotas(policy) and shape.gpu_milli:
        hit = never_within(tree, tenant, shape.gpu_milli)
        if hit is not None:
            return NeverRuns("gpus", never_within_text(hit, shape.gpu_milli), hit)
    return None


def _field(hardware: Hardware, shape: Shape) -> str:
    """The request field to blame for hardware no node has."""
    profiles = hardware.profiles
    if not any(p.cpu >= shape.cpu_milli and p.mem >= shape.memory_mib for p in profiles):
        return "memory_mib" if any(p.cpu >= shape.cpu_milli for p in profiles) else "cpus"
    if shape.where is not None and hardware.never_fits(shape._replace(where=None)) is None:
        # it would fit somewhere: the pins leave out every node that could hold it
        where = shape.where
        return "engine" if where.engine else "node_labels" if where.labels else "nodes"
    return {FRACTION: "gpu_fraction", MIG: "mig"}.get(shape.kind, "gpus")


def _no_layout_has(nodes: Sequence[Node], shape: Shape) -> str | None:
    """With layouts fixed: why no GPU's current MIG layout has the instance `shape` asks
    for (on a node it may use, with its CPUs and memory), or None (or not a MIG shape)."""
    if shape.kind != MIG:
        return None
    for n in nodes:
        if n.cpu_milli < shape.cpu_milli or n.memory_mib < shape.memory_mib:
            continue
        if shape.where is not None and not node_allows(n.label_map, shape.where):
            continue
        for g in n.gpus:
            if g.sharing is not SharingMode.MIG or shape.model not in (None, g.model):
                continue
            if any(
                p == shape.mig for p, *_ in instances_of(g.model, g.memory_mib, g.mig_layout or "")
            ):
                return None
    return (
        f"needs a {shape.mig} MIG instance; no GPU's mig_layout has a {shape.mig} instance "
        "(with the CPUs and memory asked for), and layouts are kept as they are here"
    )


# -- one node, as it is now -----------------------------------------------------------------


def node_could_hold(node: Node, shape: Shape) -> bool:
    """Could `node`, with nothing running on it and its GPUs as they are now (healthy, not
    used outside gpupool, MIG layouts as laid out), hold (its part of) `shape`: the CPUs
    and memory, and `shape.count` whole GPUs of one model? For the node a cycle holds for
    blocked work (gpupool.scheduler.reservations, gangs). A fraction is taken to fit (the
    caller asks only of nodes with a shared GPU for it); constraints are the caller's."""
    if node.cpu_milli < shape.cpu_milli or node.memory_mib < shape.memory_mib:
        return False
    if shape.kind == FRACTION or shape.count <= 0:
        return True
    counts: dict[str, int] = {}
    for g in node.gpus:
        if (
            g.schedulable
            and shape.model in (None, g.model)
            and g.memory_mib >= shape.gpu_memory_mib
            and not mig_instances(g)
        ):
            counts[g.model] = counts.get(g.model, 0) + 1
    return max(counts.values(), default=0) >= shape.count


# -- advance reservations --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Grant:
    """Could whole GPUs of a model ever be given to a tenant at once? `why` None: yes;
    else why never and the `field` at fault (`tenant`, `gpus`, `model`).
    `guaranteed_milli`: the most any tenant on its chain is guaranteed (a per-model
    guarantee is part of it), so `within_guarantee` says whether the grant could be had
    without borrowing."""

    why: str | None
    field: str = ""
    guaranteed_milli: int = 0

    def within_guarantee(self, milli: int) -> bool:
        return self.why is None and milli <= self.guaranteed_milli


def grant_problem(
    tree: TenantTree,
    nodes: Sequence[Node],
    tenant: str,
    gpus: int,
    model: str | None = None,
    policy: Policy = Policy.FAIR,
) -> Grant:
    """Could `gpus` whole GPUs (of `model`; any model if None) ever be held by `tenant` at
    once (on any nodes, all of them empty), under the limits on its chain (`fair`)?
    For advance reservations: the same limit rules as `never_runs` (the tenant must be
    known; it may be an inner one); the GPUs are counted over the whole cluster (a
    reservation may span nodes), whatever their health. With no node registered yet only
    the tenant and its limits are checked."""
    if tenant not in tree:  # an inner tenant may book: its sub-tenants' users use it
        return Grant(f"unknown tenant {tenant!r}; see `gpupool tenant ls`", "tenant")
    milli = gpus * MILLI_PER_GPU
    if gpus <= 0:
        return Grant("ask for at least 1 GPU", "gpus")
    if nodes:
        have: dict[str, int] = {}
        for n in nodes:
            for g in n.gpus:
                have[g.model] = have.get(g.model, 0) + 1
        if model is not None and model not in have:
            return Grant(
                f"no node has {model} GPUs (the models here: {', '.join(sorted(have))})",
                "model",
            )
        most = have.get(model, 0) if model is not None else max(have.values(), default=0)
        if most < gpus:
            kind = f"{model} GPUs" if model else "GPUs of one model"
            return Grant(f"asks for {gpus_text(milli)} but the pool has {most} {kind}", "gpus")
    if applies_quotas(policy):  # limits; not per-user caps: the tenant's users share them
        for a in tree.ancestors(tenant):
            limit = tree.get(a).quota.limit_milli
            if limit is not None and milli > limit:
                return Grant(never_within_text(NeverWithin(TENANT, a, limit), milli), "gpus")
    guaranteed = max(tree.get(a).quota.guaranteed_milli for a in tree.ancestors(tenant))
    return Grant(None, guaranteed_milli=guaranteed)
