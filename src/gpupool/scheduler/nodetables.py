"""The parts of the capacity index (`gpupool.scheduler.capacity`) that depend only on the
nodes: dense ids of nodes, GPUs and MIG instances, their totals, health and labels. A
`SchedulerCache` keeps one across cycles and patches it in place when only node states or
totals change (`CapacityIndex.update_nodes`). Pure: no I/O.
"""

from __future__ import annotations

from collections import Counter
from itertools import compress

from gpupool.domain import GPU, MILLI_PER_GPU, Node, OutsideUse, SharingMode
from gpupool.domain.mig import instances_of
from gpupool.domain.placement import ENGINE_LABEL, enforces_mps
from gpupool.scheduler.constraints import Where, node_allows


class NodeTables:
    """The parts of the index that depend only on the nodes. A `SchedulerCache` keeps one and
    patches it in place when only node states or totals change (`update_nodes`)."""

    def __init__(self, nodes: tuple[Node, ...]):
        self.nodes = nodes
        self.node_ids: dict[str, int] = {}
        self.node_ready: list[bool] = []
        self.node_held: list[bool] = []
        self.cpu: list[int] = []
        self.mem: list[int] = []
        self.node_gpus: list[list[int]] = []
        self.gpu_node: list[int] = []
        self.gpu_index: list[int] = []
        self.gpu_uuid: list[str] = []
        self.gpu_model: list[str] = []
        self.gpu_total_mem: list[int] = []
        self.gpu_sharing: list[SharingMode] = []
        self.gpu_ok: list[bool] = []
        self.milli: list[int] = []
        self.gpu_ids: dict[tuple[int, int], int] = {}
        #: GPU id -> who holds it outside gpupool (such GPUs are not `gpu_ok`)
        self.outside: dict[int, OutsideUse] = {}
        #: MIG instances (see gpupool.scheduler.mig): per node their ids, per id its
        #: (profile, start) (None: a physical GPU), (node, GPU index, start) -> id
        self.node_mig: list[list[int]] = []
        self.gpu_mig: list[tuple[str, int] | None] = []
        self.mig_ids: dict[tuple[int, int, int], int] = {}
        #: GPUs of nodes without MIG instances not yet filed, with their nodes and states
        plain: list[GPU] = []
        plain_node: list[int] = []
        plain_ready: list[bool] = []
        for n, node in enumerate(nodes):
            dup = node.name in self.node_ids  # a duplicate name: the first one wins
            if not dup:
                self.node_ids[node.name] = n
            self.node_ready.append(node.schedulable and not dup)
            self.node_held.append(dup)
            self.cpu.append(0 if dup else node.cpu_milli)
            self.mem.append(0 if dup else node.memory_mib)
            ids: list[int] = []
            self.node_gpus.append(ids)
            self.node_mig.append([])
            if dup:
                continue
            gpus = sorted(node.gpus, key=_index)
            for gpu in gpus:
                if gpu.sharing is SharingMode.MIG and gpu.mig_layout:
                    break
            else:  # no MIG instances: filed with the next plain nodes' GPUs, in one go
                g0 = len(self.gpu_node) + len(plain)
                ids.extend(range(g0, g0 + len(gpus)))
                plain += gpus
                plain_node += [n] * len(gpus)
                plain_ready += [node.schedulable] * len(gpus)
                continue
            self._add_plain(plain, plain_node, plain_ready)
            for gpu in gpus:
                g = len(self.gpu_node)
                ids.append(g)
                self.gpu_ids[(n, gpu.index)] = g
                insts = mig_instances(gpu)
                self._add(n, gpu, gpu.memory_mib, 0 if insts else MILLI_PER_GPU, None, node)
                for profile, start, milli, mem in insts:
                    self.mig_ids[(n, gpu.index, start)] = len(self.gpu_node)
                    self.node_mig[n].append(len(self.gpu_node))
                    self._add(n, gpu, mem, milli, (profile, start), node)
        self._add_plain(plain, plain_node, plain_ready)
        self.models = sorted(set(self.gpu_model))
        #: the nodes with MIG instances (few: placement scans them)
        self.mig_nodes = [n for n, ids in enumerate(self.node_mig) if ids]
        self.gpu_shared = [s is SharingMode.SHARED for s in self.gpu_sharing]
        self.total_gpu_milli = self.count_gpu_milli()
        self.whole_gpus = self.count_whole_gpus()
        #: the GPU models on each node (most nodes have one)
        self.node_models = [
            tuple(sorted({self.gpu_model[g] for g in ids})) for ids in self.node_gpus
        ]
        #: per node: its one GPU model (None: none or several); its `shared` GPUs; per GPU:
        #: 1 if it is not `shared` (what `CapacityIndex._refile` reads)
        self.node_model = [m[0] if len(m) == 1 else None for m in self.node_models]
        self.node_shared = [[g for g in ids if self.gpu_shared[g]] for ids in self.node_gpus]
        self.gpu_not_shared = [0 if s else 1 for s in self.gpu_shared]
        self.labels_changed()

    def labels_changed(self) -> None:
        """Forget what was derived from the nodes' labels (after `nodes` changed)."""
        #: where -> (per node: may it be used, the ids that may, in order)
        self.where_memo: dict[Where, tuple[list[bool], list[int]]] = {}
        #: per node: its engine label (None: unlabelled, counts as any)
        self.node_engine: list[str | None] = [n.label_map.get(ENGINE_LABEL) for n in self.nodes]
        #: per node: may fractions there be recorded as MPS-enforced
        self.node_mps: list[bool] = [enforces_mps(n.label_map) for n in self.nodes]

    def where(self, where: Where) -> tuple[list[bool], list[int]]:
        """(per node: may work constrained by `where` use it, the ids that may), memoized."""
        hit = self.where_memo.get(where)
        if hit is None:
            mask = [node_allows(n.label_map, where) for n in self.nodes]
            hit = self.where_memo[where] = (mask, [n for n, ok in enumerate(mask) if ok])
        return hit

    def _add_plain(self, gpus: list[GPU], node: list[int], ready: list[bool]) -> None:
        """File `gpus` (physical GPUs with no MIG instances; `node`, `ready`: per GPU its
        node and whether that node is schedulable) under the next ids, and empty the three
        lists: what `_add` does GPU by GPU, a column at a time."""
        if not gpus:
            return
        g0 = len(self.gpu_node)
        index = [g.index for g in gpus]
        keys = zip(node, index, strict=True)
        self.gpu_ids.update(zip(keys, range(g0, g0 + len(gpus)), strict=True))
        self.gpu_node += node
        self.gpu_index += index
        self.gpu_uuid += [g.uuid for g in gpus]
        self.gpu_model += [g.model for g in gpus]
        self.gpu_total_mem += [g.memory_mib for g in gpus]
        self.gpu_sharing += [g.sharing for g in gpus]
        self.gpu_ok += [r and g.schedulable for g, r in zip(gpus, ready, strict=True)]
        self.milli += [MILLI_PER_GPU] * len(gpus)
        self.gpu_mig += [None] * len(gpus)
        for g, gpu in enumerate(gpus, g0):
            if gpu.outside is not None:
                self.outside[g] = gpu.outside
        gpus.clear()
        node.clear()
        ready.clear()

    def _add(
        self, n: int, gpu: GPU, mem: int, milli: int, mig: tuple[str, int] | None, node: Node
    ) -> None:
        """File one physical GPU (`mig` None) or one MIG instance of it under the next id."""
        self.gpu_node.append(n)
        self.gpu_index.append(gpu.index)
        self.gpu_uuid.append(gpu.uuid)
        self.gpu_model.append(gpu.model)
        self.gpu_total_mem.append(mem)
        self.gpu_sharing.append(gpu.sharing)
        self.gpu_ok.append(node.schedulable and gpu.schedulable)
        self.milli.append(milli)
        self.gpu_mig.append(mig)
        if mig is None and gpu.outside is not None:
            self.outside[len(self.gpu_node) - 1] = gpu.outside

    def count_gpu_milli(self) -> int:
        """Healthy physical GPUs of ready nodes, in milli (MIG instances not counted again)."""
        return MILLI_PER_GPU * sum(
            [ok and m is None for ok, m in zip(self.gpu_ok, self.gpu_mig, strict=True)]
        )

    def count_whole_gpus(self) -> dict[str, int]:
        """Per model, the GPUs a whole-GPU request could use when free: healthy, on ready
        nodes, not in MIG mode (for reasons: 'all 4 GPUs are in use')."""
        usable = [
            ok and m is None and milli == MILLI_PER_GPU
            for ok, m, milli in zip(self.gpu_ok, self.gpu_mig, self.milli, strict=True)
        ]
        return dict(Counter(compress(self.gpu_model, usable)))


def _index(gpu: GPU) -> int:
    return gpu.index


def mig_instances(gpu: GPU) -> list[tuple[str, int, int, int]]:
    """(profile, start, milli, memory MiB) of each instance of a `mig` GPU's layout; empty
    if it has none (or one that does not fit its model: then it is handed out whole)."""
    if gpu.sharing is not SharingMode.MIG or not gpu.mig_layout:
        return []
    return instances_of(gpu.model, gpu.memory_mib, gpu.mig_layout)


def gpu_layout(node: Node) -> tuple:
    """What of a node's GPUs the dense ids and the indexes are built on (not their health)."""
    return tuple(
        sorted((g.index, g.uuid, g.model, g.memory_mib, g.sharing, g.mig_layout) for g in node.gpus)
    )
