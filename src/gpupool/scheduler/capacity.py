"""Per-cycle capacity index built from a snapshot.

Holds free milli and memory per GPU, free CPUs and memory per node, and two indexes so that
placement never rescans every node:

* whole GPUs: per GPU model, nodes filed by how many *whole* free GPUs of that model they have
  (a whole free GPU has 1000 free milli and all its memory), once counting every GPU and once
  leaving out `shared` GPUs (whole requests use those only when nothing else fits);
* fractions: per GPU model, `shared` GPUs filed by (free milli, free memory).

`assume` takes resources for an admission, `hold` takes a node out of the indexes for the rest
of the cycle (a reservation for blocked work). A held node's GPUs go to nobody else; its CPUs
and memory beyond what the holder asks for (`held_host`) may still go to CPU-only work.
Nothing here mutates the snapshot.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from typing import NamedTuple

from gpupool.domain import MILLI_PER_GPU, Node, OutsideUse, Share, SharingMode
from gpupool.scheduler.buckets import BucketIndex
from gpupool.scheduler.constraints import Where
from gpupool.scheduler.mix import ShapeMix, class_key
from gpupool.scheduler.nodetables import NodeTables, gpu_layout
from gpupool.scheduler.types import RunningWorkload

_ANY = Where()

WHOLE = "whole"
FRACTION = "fraction"
CPU_ONLY = "cpu"
#: one instance of the MIG profile `Shape.mig` (gpupool.scheduler.mig)
MIG = "mig"


class Shape(NamedTuple):
    """A request normalized for placement (and memo keys).

    kind: WHOLE (`count` whole GPUs), FRACTION (`milli` of one shared GPU), MIG (one free
    instance of profile `mig`; `milli` its compute share) or CPU_ONLY.
    gpu_memory_mib: for WHOLE the least memory each GPU must have; for FRACTION the memory
    of the share (0: proportional to `milli`).
    nodes: for a multi-node request (a gang, gpupool.scheduler.gangs) the number of nodes,
    each taking `count` GPUs and `cpu_milli`/`memory_mib`; 1 otherwise.
    where: the nodes it may use at all (gpupool.scheduler.constraints); None: any.
    """

    kind: str
    count: int = 0  # type: ignore[assignment]  # a field named like tuple.count, on purpose
    milli: int = 0
    gpu_memory_mib: int = 0
    model: str | None = None
    cpu_milli: int = 0
    memory_mib: int = 0
    mig: str | None = None
    nodes: int = 1
    where: Where | None = None

    @property
    def gpu_milli(self) -> int:
        return self.count * MILLI_PER_GPU * self.nodes if self.kind == WHOLE else self.milli


#: what one running allocation takes: (node id or -1, ((gpu id, milli, memory), ...), cpu,
#: memory, GPU milli, the other node ids of a multi-node allocation (each also takes the cpu
#: and memory))
Takes = tuple[int, tuple[tuple[int, int, int], ...], int, int, int, tuple[int, ...]]


class CapacityIndex:
    """Free resources of one cycle. GPUs and nodes are addressed by dense integer ids.

    Built afresh from `nodes` and `running`; a `SchedulerCache` instead keeps one index from
    cycle to cycle and brings it up to date with `start_cycle_log` / `revert_cycle` /
    `apply_takes` / `refile` (gpupool.scheduler.cache)."""

    def __init__(
        self,
        nodes: tuple[Node, ...],
        running: tuple[RunningWorkload, ...] = (),
        static: NodeTables | None = None,
    ):
        st = static if static is not None else NodeTables(tuple(nodes))
        self._st = st
        self.nodes = st.nodes
        self.node_ids = st.node_ids
        self.node_ready = st.node_ready
        self.node_gpus = st.node_gpus
        self.gpu_node = st.gpu_node
        self.gpu_index = st.gpu_index
        self.gpu_uuid = st.gpu_uuid
        self.gpu_model = st.gpu_model
        self.gpu_total_mem = st.gpu_total_mem
        self.gpu_sharing = st.gpu_sharing
        self.gpu_ok = st.gpu_ok
        self.gpu_shared = st.gpu_shared
        self.node_models = st.node_models
        self._gpu_ids = st.gpu_ids
        self.node_mig = st.node_mig
        self.mig_nodes = st.mig_nodes
        self.gpu_mig = st.gpu_mig
        self.gpu_milli_total = st.milli
        self.models = st.models
        #: per node: its CPUs (milli) and memory (MiB) in all (gpupool.scheduler.balance)
        self.cpu_total = st.cpu
        self.mem_total = st.mem
        # the mutable part
        self.node_held = list(st.node_held)
        self.free_cpu = list(st.cpu)
        self.free_mem = list(st.mem)
        self.free_milli = list(st.milli)
        self.free_gmem = list(st.gpu_total_mem)
        #: (node, gpu takes, cpu, memory) of each `assume` and the nodes held, while a cache
        #: keeps this index (None: not logged)
        self._assumed: list[tuple[int, list[tuple[int, int, int]], int, int]] | None = None
        self._held: list[int] = []
        #: admitted workload id -> (its entry in `_assumed`, its allocation), while logging
        self._admitted: dict[str, tuple[int, object]] = {}
        #: held node -> (CPU milli, memory MiB) its holder asks for: kept free on the node
        self.held_host: dict[int, tuple[int, int]] = {}
        #: per node, kept by `_refile` (every change of free GPU resources is refiled before
        #: placement reads them): its GPUs' positive free milli summed, and how many of its
        #: GPUs are whole free (all milli and memory), healthy or not (gpupool.scheduler.balance)
        self.node_free_milli: list[int] = [0] * len(self.nodes)
        self.node_whole_free: list[int] = [0] * len(self.nodes)
        #: the running work by shape class (gpupool.scheduler.mix), kept by `apply_takes`
        self.mix = ShapeMix()
        #: what each running workload takes (in snapshot order; at construction only)
        self.running_takes: list[Takes] = [self.takes_of(rw) for rw in running]
        for t in self.running_takes:
            self.apply_takes(t, -1)
        #: nodes by whole free GPUs of a model: all of them / not counting `shared` GPUs
        self.whole: dict[str, BucketIndex] = {m: BucketIndex() for m in self.models}
        self.whole_unshared: dict[str, BucketIndex] = {m: BucketIndex() for m in self.models}
        self.frac: dict[str, BucketIndex] = {m: BucketIndex() for m in self.models}
        self._load_indexes()

    # -- building -------------------------------------------------------------------------

    def takes_of(self, rw: RunningWorkload) -> Takes:
        """What `rw`'s allocation takes, in ids (node -1: a node the snapshot does not list,
        so it holds nothing we could give)."""
        a = rw.allocation
        milli = sum(s.milli for s in a.shares)
        n = self.node_ids.get(a.node)
        if n is None:
            return (-1, (), 0, 0, milli, ())
        takes = []
        others: list[int] = []
        for s in a.shares:
            m = n if s.node == a.node else self.node_ids.get(s.node)
            if m is None:
                continue
            if m != n and m not in others:
                others.append(m)
            t = self.share_take(m, s)
            if t is not None:
                takes.append(t)
        return (n, tuple(takes), a.cpu_milli, a.memory_mib, milli, tuple(others))

    def share_take(self, n: int, s: Share) -> tuple[int, int, int] | None:
        """(GPU or MIG instance id, milli, memory) that share `s` on node `n` holds; None if
        the index has no such GPU (or instance). A MIG instance is held whole."""
        if s.mig_start is not None:
            g = self._st.mig_ids.get((n, s.gpu_index, s.mig_start))
            return None if g is None else (g, self._st.milli[g], self.gpu_total_mem[g])
        g = self._gpu_ids.get((n, s.gpu_index))
        if g is None:
            return None
        return (g, s.milli, self.gpu_total_mem[g] if s.whole else s.memory_mib)

    def apply_takes(self, t: Takes, sign: int) -> None:
        """Give back (`sign` 1) or take (-1) what `t` holds. Does not refile the node."""
        n = t[0]
        if n < 0:
            return
        if not t[5]:  # gangs (on several nodes) are not in the mix
            self.mix.add(class_key(t[1], t[2], t[3], t[4]), t[4], t[2], t[3], -sign)
        self.free_cpu[n] += sign * t[2]
        self.free_mem[n] += sign * t[3]
        for m in t[5]:
            self.free_cpu[m] += sign * t[2]
            self.free_mem[m] += sign * t[3]
        free_milli, free_gmem = self.free_milli, self.free_gmem
        for g, m, gm in t[1]:
            free_milli[g] += sign * m
            free_gmem[g] += sign * gm

    def gpu_id(self, node: int, gpu_index: int) -> int | None:
        return self._gpu_ids.get((node, gpu_index))

    def is_whole_free(self, g: int) -> bool:
        return self.free_milli[g] >= MILLI_PER_GPU and self.free_gmem[g] >= self.gpu_total_mem[g]

    def _load_indexes(self) -> None:
        """Build the indexes for all nodes at once (what `_refile` does node by node)."""
        free_milli, free_gmem, total = self.free_milli, self.free_gmem, self.gpu_total_mem
        ok, shared, gmodel = self.gpu_ok, self.gpu_shared, self.gpu_model
        not_shared = self._st.gpu_not_shared
        whole: dict[str, list] = {m: [] for m in self.models}
        unshared: dict[str, list] = {m: [] for m in self.models}
        frac: dict[str, list] = {m: [] for m in self.models}
        node_free_milli, node_whole_free = self.node_free_milli, self.node_whole_free
        ready, held, one_model = self.node_ready, self.node_held, self._st.node_model
        for n, gpus in enumerate(self.node_gpus):
            if not gpus:
                continue
            usable = ready[n] and not held[n]
            counts = {m: [0, 0] for m in self.node_models[n]}
            one = one_model[n]
            only = counts[one] if one is not None else None
            milli = whole_free = 0
            for g in gpus:
                fm = free_milli[g]
                if fm <= 0:
                    continue
                milli += fm
                good = usable and ok[g]
                if good and shared[g]:
                    frac[gmodel[g]].append((g, (fm, max(free_gmem[g], 0))))
                if fm >= MILLI_PER_GPU and free_gmem[g] >= total[g]:
                    whole_free += 1
                    if good:
                        c = only if only is not None else counts[gmodel[g]]
                        c[0] += 1
                        c[1] += not_shared[g]
            node_free_milli[n] = milli
            node_whole_free[n] = whole_free
            for m, (every, uns) in counts.items():
                if every:
                    whole[m].append((n, every))
                if uns:
                    unshared[m].append((n, uns))
        for m in self.models:
            self.whole[m].load(whole[m])
            self.whole_unshared[m].load(unshared[m])
            self.frac[m].load(frac[m])

    def _refile(self, n: int) -> None:
        """Recompute node `n`'s entries in the whole and fraction indexes."""
        usable = self.node_ready[n] and not self.node_held[n]
        free_milli, free_gmem, total = self.free_milli, self.free_gmem, self.gpu_total_mem
        model = self._st.node_model[n]
        if model is not None:  # one GPU model (most nodes): the same, written out
            ok = self.gpu_ok
            unshared_ok = self._st.gpu_not_shared
            node_milli = node_whole = every = unshared = 0
            for g in self.node_gpus[n]:
                fm = free_milli[g]
                if fm > 0:
                    node_milli += fm
                    if fm >= MILLI_PER_GPU and free_gmem[g] >= total[g]:
                        node_whole += 1
                        if usable and ok[g]:
                            every += 1
                            unshared += unshared_ok[g]
            frac = self.frac[model]
            for g in self._st.node_shared[n]:
                fm = free_milli[g]
                frac.set(g, (fm, max(free_gmem[g], 0)) if usable and ok[g] and fm > 0 else None)
            self.node_free_milli[n] = node_milli
            self.node_whole_free[n] = node_whole
            self.whole[model].set(n, every or None)
            self.whole_unshared[model].set(n, unshared or None)
            return
        ok, shared, gmodel = self.gpu_ok, self.gpu_shared, self.gpu_model
        models = self.node_models[n]
        counts = {m: [0, 0] for m in models}
        node_milli = node_whole = 0
        for g in self.node_gpus[n]:
            good = usable and ok[g]
            fm = free_milli[g]
            if fm > 0:
                node_milli += fm
                if fm >= MILLI_PER_GPU and free_gmem[g] >= total[g]:
                    node_whole += 1
            if shared[g]:
                key = (fm, max(free_gmem[g], 0)) if good and fm > 0 else None
                self.frac[gmodel[g]].set(g, key)
            if good and fm >= MILLI_PER_GPU and free_gmem[g] >= total[g]:
                c = counts[gmodel[g]]
                c[0] += 1
                if not shared[g]:
                    c[1] += 1
        self.node_free_milli[n] = node_milli
        self.node_whole_free[n] = node_whole
        for model, (every, unshared) in counts.items():
            self.whole[model].set(n, every or None)
            self.whole_unshared[model].set(n, unshared or None)

    def refile(self, nodes: set[int]) -> None:
        """Refile `nodes` (in id order) after `apply_takes` or `revert_cycle`."""
        for n in sorted(nodes):
            self._refile(n)

    # -- kept between cycles (by a SchedulerCache) ------------------------------------------

    def start_cycle_log(self) -> None:
        """Record every `assume` and `hold` from now on, so `revert_cycle` can undo them."""
        self._assumed = []
        self._held = []

    def admitted(self) -> dict[str, tuple[int, object]]:
        """The admissions logged since `start_cycle_log` or `revert_cycle`: workload id ->
        (its entry in the log, its allocation) (`note_admission`). Read-only."""
        return self._admitted

    def note_admission(self, workload_id: str, allocation: object) -> None:
        """The last `assume` was the admission of `workload_id` with `allocation`: if the next
        snapshot runs it with that allocation, `revert_cycle` may keep it (`keep`)."""
        if self._assumed:
            self._admitted[workload_id] = (len(self._assumed) - 1, allocation)

    def log_entries(
        self, entries: list[int]
    ) -> list[tuple[int, list[tuple[int, int, int]], int, int]]:
        """Entries `entries` of the log: (node, gpu takes, cpu, memory) of each `assume`."""
        assert self._assumed is not None
        return list(map(self._assumed.__getitem__, entries))

    def revert_cycle(self, keep: Collection[int] = ()) -> set[int]:
        """Undo the logged `assume`s and `hold`s (newest first) but the log entries `keep`
        (admissions now running with what they were assumed to take: they stay taken, and
        the caller files them as running work, `keep_running`); returns the nodes touched,
        which the caller refiles. Logging goes on."""
        touched: set[int] = set()
        log = self._assumed or []
        if keep:
            log = [e for i, e in enumerate(log) if i not in keep]
        free_milli, free_gmem = self.free_milli, self.free_gmem
        for n, takes, cpu, mem in reversed(log):
            self.free_cpu[n] += cpu
            self.free_mem[n] += mem
            for g, milli, gmem in takes:
                free_milli[g] += milli
                free_gmem[g] += gmem
            touched.add(n)
        static_held = self._st.node_held
        for n in self._held:
            self.node_held[n] = static_held[n]
            touched.add(n)
        self._assumed = [] if self._assumed is not None else None
        self._held = []
        self._admitted = {}
        self.held_host = {}
        return touched

    def release(
        self, n: int, gpu_takes: Iterable[tuple[int, int, int]], cpu: int, mem: int
    ) -> None:
        """Give back what one logged `assume` took, outside the log (the caller refiles)."""
        self.free_cpu[n] += cpu
        self.free_mem[n] += mem
        for g, milli, gmem in gpu_takes:
            self.free_milli[g] += milli
            self.free_gmem[g] += gmem

    def keep_running(self, t: Takes) -> None:
        """What `apply_takes(t, -1)` does beyond taking the resources, for an admission kept
        by `revert_cycle` (whose resources are taken already): count it in the mix."""
        if t[0] >= 0 and not t[5]:
            self.mix.add(class_key(t[1], t[2], t[3], t[4]), t[4], t[2], t[3], 1)

    def update_nodes(self, nodes: tuple[Node, ...]) -> set[int] | None:
        """Take in a new node list that differs from this index's only in node states, GPU
        health, CPUs, memory, labels or heartbeats (same names in the same order, same GPUs
        by index, uuid, model, memory and sharing). Returns the nodes changed (to refile), or
        None if the change is more than that (then nothing was changed: rebuild)."""
        st = self._st
        old = st.nodes
        if len(old) != len(nodes):
            return None
        changed = [i for i, (a, b) in enumerate(zip(old, nodes, strict=True)) if a is not b]
        changed = [i for i in changed if old[i] != nodes[i]]
        for i in changed:
            a, b = old[i], nodes[i]
            if a.name != b.name or gpu_layout(a) != gpu_layout(b):
                return None
        for n in changed:
            node = nodes[n]
            if st.node_held[n]:
                continue  # a duplicate name: never used
            st.node_ready[n] = node.schedulable
            self.free_cpu[n] += node.cpu_milli - st.cpu[n]
            self.free_mem[n] += node.memory_mib - st.mem[n]
            st.cpu[n] = node.cpu_milli
            st.mem[n] = node.memory_mib
            by_index = {g.index: g for g in node.gpus}
            for g in st.node_gpus[n] + st.node_mig[n]:
                st.gpu_ok[g] = node.schedulable and by_index[st.gpu_index[g]].schedulable
                st.outside.pop(g, None)
                o = by_index[st.gpu_index[g]].outside
                if o is not None and st.gpu_mig[g] is None:
                    st.outside[g] = o
        relabelled = any(old[i].labels != nodes[i].labels for i in changed)
        st.nodes = self.nodes = nodes
        if relabelled:
            st.labels_changed()
        st.total_gpu_milli = st.count_gpu_milli()
        st.whole_gpus = st.count_whole_gpus()
        return set(changed)

    # -- changing ---------------------------------------------------------------------------

    def assume(self, n: int, gpu_takes: list[tuple[int, int, int]], cpu: int, mem: int) -> None:
        """Take `cpu`, `mem` on node `n` and (gpu id, milli, memory) on its GPUs."""
        self.free_cpu[n] -= cpu
        self.free_mem[n] -= mem
        if self._assumed is not None:
            self._assumed.append((n, gpu_takes, cpu, mem))
        model = self._st.node_model[n]
        if model is not None and self._take_refiled(n, model, gpu_takes):
            return
        for g, milli, gmem in gpu_takes:
            self.free_milli[g] -= milli
            self.free_gmem[g] -= gmem
        self._refile(n)

    def _take_refiled(self, n: int, model: str, gpu_takes: list[tuple[int, int, int]]) -> bool:
        """`assume`'s GPU part on node `n` of one GPU `model`, the index entries brought up to
        date from the GPUs taken only (what `_refile` gives, read from the node's entries
        as they are: every change is refiled before the next `assume`). False, having
        changed nothing, if a take is not a physical GPU of `n` (then `_refile`)."""
        gpu_node, mig = self.gpu_node, self.gpu_mig
        for g, _, _ in gpu_takes:
            if gpu_node[g] != n or mig[g] is not None:
                return False
        usable = self.node_ready[n] and not self.node_held[n]
        free_milli, free_gmem, total = self.free_milli, self.free_gmem, self.gpu_total_mem
        ok, shared, not_shared = self.gpu_ok, self.gpu_shared, self._st.gpu_not_shared
        d_milli = d_whole = d_every = d_unshared = 0
        for g, milli, gmem in gpu_takes:
            fm, gm = free_milli[g], free_gmem[g]
            was = fm >= MILLI_PER_GPU and gm >= total[g]
            fm2 = free_milli[g] = fm - milli
            gm2 = free_gmem[g] = gm - gmem
            # = max(fm2, 0) - max(fm, 0), without calls
            d_milli += (fm2 if fm2 > 0 else 0) - (fm if fm > 0 else 0)
            good = usable and ok[g]
            if (fm2 >= MILLI_PER_GPU and gm2 >= total[g]) is not was:
                d = -1 if was else 1
                d_whole += d
                if good:
                    d_every += d
                    d_unshared += d * not_shared[g]
            if shared[g]:
                key = (fm2, gm2 if gm2 > 0 else 0) if good and fm2 > 0 else None
                self.frac[model].set(g, key)
        self.node_free_milli[n] += d_milli
        self.node_whole_free[n] += d_whole
        if d_every:
            idx = self.whole[model]
            idx.set(n, (idx.key_of(n) or 0) + d_every or None)
        if d_unshared:
            idx = self.whole_unshared[model]
            idx.set(n, (idx.key_of(n) or 0) + d_unshared or None)
        return True

    def unassume(self, n: int, gpu_takes: list[tuple[int, int, int]], cpu: int, mem: int) -> None:
        """Give back what `assume` took (logged like it, so `revert_cycle` stays exact)."""
        self.assume(n, [(g, -milli, -gmem) for g, milli, gmem in gpu_takes], -cpu, -mem)

    def hold(self, n: int, cpu: int = 0, mem: int = 0) -> None:
        """Keep node `n` out of placement for the rest of the cycle (a reservation) for work
        that asks for `cpu` and `mem` there: GPU work is not placed on it; CPU-only work may
        use what leaves at least that much free (`fits_beside_hold`)."""
        if n not in self.held_host:
            self.held_host[n] = (cpu, mem)
        if not self.node_held[n]:
            self.node_held[n] = True
            if self._assumed is not None:
                self._held.append(n)
            self._refile(n)

    @contextmanager
    def excluding(self, n: int) -> Iterator[None]:
        """Node `n` is out of placement inside the block (as if held); as before after it."""
        was = self.node_held[n]
        self.node_held[n] = True
        self._refile(n)
        try:
            yield
        finally:
            self.node_held[n] = was
            self._refile(n)

    # -- queries ----------------------------------------------------------------------------

    def where_mask(self, where: Where | None) -> list[bool]:
        """Per node: may work constrained by `where` use it (gpupool.scheduler.constraints)."""
        return self._st.where(where or _ANY)[0]

    def where_nodes(self, where: Where | None) -> list[int]:
        """The ids of the nodes work constrained by `where` may use, in id order."""
        return self._st.where(where or _ANY)[1]

    def unrestricted(self, where: Where) -> bool:
        """True if `where` leaves out no node (then the unconstrained indexes serve)."""
        return len(self._st.where(where)[1]) == len(self.nodes)

    @property
    def node_engine(self) -> list[str | None]:
        """Per node: its engine label (None: unlabelled)."""
        return self._st.node_engine

    @property
    def node_mps(self) -> list[bool]:
        """Per node: may fractions there be recorded as MPS-enforced."""
        return self._st.node_mps

    def node_fits_host(self, n: int, shape: Shape) -> bool:
        return self.free_cpu[n] >= shape.cpu_milli and self.free_mem[n] >= shape.memory_mib

    def fits_beside_hold(self, n: int, shape: Shape) -> bool:
        """True if held node `n` keeps, with `shape`'s CPUs and memory taken, at least what
        its holder asks for free (a node held from the start, e.g. a duplicate name: never)."""
        kept = self.held_host.get(n)
        if kept is None:
            return False
        return (
            self.free_cpu[n] - shape.cpu_milli >= kept[0]
            and self.free_mem[n] - shape.memory_mib >= kept[1]
        )

    def most_whole_free(self, model: str | None) -> int:
        """The most whole free GPUs (of `model`, or of any one model) on one usable node."""
        models = [model] if model is not None else self.models
        best = 0
        for m in models:
            idx = self.whole.get(m)
            top = idx.max_key() if idx is not None else None
            if top is not None:
                best = max(best, top)
        return best

    def outside_gpus(
        self, model: str | None, shared_only: bool = False
    ) -> list[tuple[str, int, OutsideUse]]:
        """(node, GPU index, holder) of each GPU of `model` (None: any; `shared_only`: only
        `shared` GPUs) on a ready node that work outside gpupool holds, by node then index."""
        st = self._st
        found = [
            (st.nodes[st.gpu_node[g]].name, st.gpu_index[g], g)
            for g in st.outside
            if st.node_ready[st.gpu_node[g]]
            and model in (None, st.gpu_model[g])
            and not (shared_only and st.gpu_sharing[g] is not SharingMode.SHARED)
        ]
        return [(node, i, st.outside[g]) for node, i, g in sorted(found)]

    def total_gpu_milli(self) -> int:
        """Capacity for fair shares: healthy GPUs of ready nodes."""
        return self._st.total_gpu_milli

    def whole_census(self, model: str | None) -> tuple[int, int, int]:
        """(usable GPUs, whole free GPUs, free milli on partly used shared GPUs) of `model`
        (None: every model), for reasons; whole free GPUs on held nodes are not counted.
        Reads the indexes' keys only (a few per model), never every GPU."""
        models = [model] if model is not None else self.models
        usable = free = partial = 0
        for m in models:
            usable += self._st.whole_gpus.get(m, 0)
            idx = self.whole.get(m)
            if idx is not None:
                free += sum(k * n for k, n in idx.counted())
            fr = self.frac.get(m)
            if fr is not None:
                partial += sum(k[0] * n for k, n in fr.counted() if k[0] < MILLI_PER_GPU)
        return usable, free, partial
