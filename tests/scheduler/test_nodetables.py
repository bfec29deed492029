"""`NodeTables` files the GPUs of nodes without MIG instances a column at a time
(`_add_plain`); the result must be what filing every GPU one by one (`_add`) gives, with MIG
nodes in between, duplicate names, nodes down, GPUs unhealthy or held outside gpupool, a MIG
GPU with no layout (handed out whole) and GPUs listed out of index order."""

from __future__ import annotations

import dataclasses

from gpupool.domain import GPU, MILLI_PER_GPU, GPUHealth, Node, OutsideUse, SharingMode
from gpupool.scheduler.nodetables import NodeTables, mig_instances
from tests.scheduler.builders import GIB, node

COLUMNS = (
    "node_ids", "node_ready", "node_held", "cpu", "mem", "node_gpus", "gpu_node", "gpu_index",
    "gpu_uuid", "gpu_model", "gpu_total_mem", "gpu_sharing", "gpu_ok", "milli", "gpu_ids",
    "outside", "node_mig", "gpu_mig", "mig_ids",
)  # fmt: skip


def _nodes() -> tuple[Node, ...]:
    mig = Node(
        "mig",
        (
            GPU(0, "mig-0", "H100", 80 * GIB, SharingMode.MIG, mig_layout="all-1g.10gb"),
            GPU(1, "mig-1", "H100", 80 * GIB, SharingMode.MIG),  # no layout: whole
            GPU(2, "mig-2", "H100", 80 * GIB),
        ),
        cpu_milli=64_000,
        memory_mib=512 * GIB,
    )
    a = node("a", gpus=3, model="A100", gpu_gib=40)
    a = dataclasses.replace(a, gpus=a.gpus[::-1])  # out of index order
    held = node("held", gpus=2, sharing="shared")
    held = dataclasses.replace(
        held,
        gpus=(
            dataclasses.replace(held.gpus[0], outside=OutsideUse("slurm job 1", "bob", 1.0)),
            dataclasses.replace(held.gpus[1], health=GPUHealth.UNHEALTHY),
        ),
    )
    return (a, node("down", gpus=2, state="down"), mig, held, node("a", gpus=1), node("cpu", 0))


def _one_by_one(nodes: tuple[Node, ...]) -> NodeTables:
    """The tables with every GPU filed by `_add` (as before `_add_plain`)."""
    ref = NodeTables(())
    for n, nd in enumerate(nodes):
        dup = nd.name in ref.node_ids
        if not dup:
            ref.node_ids[nd.name] = n
        ref.node_ready.append(nd.schedulable and not dup)
        ref.node_held.append(dup)
        ref.cpu.append(0 if dup else nd.cpu_milli)
        ref.mem.append(0 if dup else nd.memory_mib)
        ids: list[int] = []
        ref.node_gpus.append(ids)
        ref.node_mig.append([])
        if dup:
            continue
        for gpu in sorted(nd.gpus, key=lambda x: x.index):
            g = len(ref.gpu_node)
            ids.append(g)
            ref.gpu_ids[(n, gpu.index)] = g
            insts = mig_instances(gpu)
            ref._add(n, gpu, gpu.memory_mib, 0 if insts else MILLI_PER_GPU, None, nd)
            for profile, start, milli, mem in insts:
                ref.mig_ids[(n, gpu.index, start)] = len(ref.gpu_node)
                ref.node_mig[n].append(len(ref.gpu_node))
                ref._add(n, gpu, mem, milli, (profile, start), nd)
    return ref


def test_plain_nodes_filed_a_column_at_a_time_equal_filing_gpu_by_gpu():
    nodes = _nodes()
    got = NodeTables(nodes)
    ref = _one_by_one(nodes)
    assert got.node_mig[2], "the MIG node has instances"
    for name in COLUMNS:
        assert getattr(got, name) == getattr(ref, name), name
    # what is derived from the columns
    assert got.models == ["A100", "H100"]
    assert got.node_model == ["A100", "H100", "H100", "H100", None, None]
    assert got.total_gpu_milli == ref.count_gpu_milli()
    assert got.whole_gpus == ref.count_whole_gpus()
