"""The ``--gres`` option of a Slurm job for the GPU shares gpupool allocated on one node.

Whole GPUs are ``gpu[:type]:N`` (the type when all are of one), a MIG instance
``gpu:<mig type>:1`` (`inventory.mig_gres_type`), one fractional share ``shard:N``
(`shards`; the node must have ``gres/shard``). What Slurm cannot express is a permanent
`StartError` saying what to ask for instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpupool.domain import Share
from gpupool.engines.common.executor import StartError
from gpupool.engines.slurm.inventory import mig_gres_type, slurm_prefix
from gpupool.engines.slurm.shards import shards_for


def gres_option(
    shares: Sequence[Share], node: str, gpu_types: Mapping[str, str], shards_per_gpu: int
) -> str:
    """The ``--gres=...`` of `shares` on `node` ("" for none); `gpu_types`: GPU uuid ->
    Slurm GRES type; `shards_per_gpu`: the node's ``gres/shard`` per GPU (0: none)."""
    if not shares:
        return ""
    migs = [s for s in shares if s.mig_profile is not None]
    if migs:  # one MIG instance: Slurm binds it (MIG devices are GRES types)
        prefix = slurm_prefix(gpu_types.get(migs[0].gpu_uuid, ""))
        return f"--gres=gpu:{mig_gres_type(prefix, migs[0].mig_profile or '')}:1"
    if all(s.whole for s in shares):
        types = {gpu_types.get(s.gpu_uuid) for s in shares}
        typ = types.pop() if len(types) == 1 else None
        n = len(shares)
        return f"--gres=gpu:{typ}:{n}" if typ and typ != "gpu" else f"--gres=gpu:{n}"
    if len(shares) != 1:
        raise StartError(
            "Slurm gives a job shards of one GPU only; ask for a fraction of one GPU or "
            "for whole GPUs",
            permanent=True,
        )
    if shards_per_gpu <= 0:
        raise StartError(
            f"fractional GPUs on Slurm need gres/shard, and node {node} has none: ask "
            "for whole GPUs, or have the site configure shards (docs/slurm.md)",
            permanent=True,
        )
    return f"--gres=shard:{shards_for(shares[0].milli, shards_per_gpu)}"
