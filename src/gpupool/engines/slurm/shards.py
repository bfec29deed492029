"""Fractional GPUs on Slurm: ``gres/shard`` (Slurm 22.05 and later).

A site that configures shards (``GresTypes=gpu,shard``, ``Gres=gpu:4,shard:16`` on the node,
``Name=shard Count=16`` in gres.conf) lets several jobs share one GPU: Slurm splits each GPU's
shards evenly (16 over 4 GPUs: 4 a GPU), gives a job its shards from **one** GPU and sets
``CUDA_VISIBLE_DEVICES`` to it. That is all it does: shards are counted, nothing limits a
job's GPU memory or compute. So gpupool labels every share run on shards `none`.

``gres/mps`` (CUDA MPS under Slurm) sets only ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``, a
compute share, never a memory limit: gpupool does not submit to it, and would never call
it memory-enforced.

Mapping: a gpupool share of ``milli`` on a GPU of a node with ``S`` shards per GPU asks for
``ceil(milli * S / 1000)`` shards (rounded up: the job never gets less than gpupool
allocated; fractions that are multiples of 1/S match exactly).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from gpupool.domain import MILLI_PER_GPU, Enforcement
from gpupool.engines.slurm.cli import gres_parts

#: what Slurm enforces of a shard: nothing but the count
SHARD_ENFORCEMENT = Enforcement.NONE
_SHARD = re.compile(r"^shard(?::(?P<type>[^:(]+))?:(?P<count>\d+)")


def parse_shards(gres: str) -> int:
    """Shards of a node from its GRES (``gpu:fake:4,shard:fake:16(S:0)`` → 16; none → 0)."""
    total = 0
    for part in gres_parts(gres):
        m = _SHARD.match(part)
        if m:
            total += int(m.group("count"))
    return total


def shards_per_gpu(raw: Mapping[str, Any], gpus: int) -> int:
    """Shards on each GPU of one `sinfo --json` node (Slurm splits them evenly); 0 when the
    node has no shards or no GPUs."""
    total = parse_shards(str(raw.get("gres") or ""))
    return total // gpus if gpus else 0


def shards_for(milli: int, per_gpu: int) -> int:
    """Shards to ask for a share of `milli` on a GPU split in `per_gpu` shards."""
    if per_gpu <= 0:
        raise ValueError("the GPU has no shards")
    return max(1, min(per_gpu, math.ceil(milli * per_gpu / MILLI_PER_GPU)))


def shard_label(per_gpu: int) -> tuple[str, str]:
    """The node label saying a node's GPUs can be shared through gres/shard."""
    return ("slurm.shards-per-gpu", str(per_gpu))
