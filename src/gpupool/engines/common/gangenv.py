"""The environment of a multi-node job (a gang), the same on every engine.

Each node runs the workload's command once, with:

* ``MASTER_ADDR``: rank 0's node (the allocation's `node`, or the address the engine gives
  it), ``MASTER_PORT``: `DEFAULT_MASTER_PORT` unless the workload's env sets one;
* ``NNODES``: the number of nodes; ``NODE_RANK``: this node's rank, 0..NNODES-1 (set per node
  by the engine: Slurm's ``SLURM_NODEID``, the pod's completion index);
* ``NPROC_PER_NODE`` and ``GPUS_PER_NODE``: the GPUs on each node;
* ``WORLD_SIZE``: NNODES x NPROC_PER_NODE, one rank per GPU.

So the command can be::

    torchrun --nnodes "$NNODES" --nproc-per-node "$NPROC_PER_NODE" --node-rank "$NODE_RANK" \
        --master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" train.py

Pure: no I/O.
"""

from __future__ import annotations

from gpupool.domain import Allocation

DEFAULT_MASTER_PORT = 29500


def gang_env(
    allocation: Allocation, master_addr: str | None = None, port: int | None = None
) -> dict[str, str]:
    """The variables every node of `allocation` gets (all but NODE_RANK)."""
    nodes = allocation.nodes
    per = len(allocation.on_node(allocation.node))
    return {
        "MASTER_ADDR": master_addr or allocation.node,
        "MASTER_PORT": str(port or DEFAULT_MASTER_PORT),
        "NNODES": str(len(nodes)),
        "NPROC_PER_NODE": str(per),
        "GPUS_PER_NODE": str(per),
        "WORLD_SIZE": str(len(nodes) * per),
    }
