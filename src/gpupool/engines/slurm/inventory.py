"""Slurm's nodes as gpupool nodes, from `sinfo --json` (and `squeue --json` for the GPUs that
work gpupool did not submit holds).

- GRES ``gpu:<type>:<count>`` (or ``gpu:<count>``) → that many GPUs of model ``<type>``
  (``gpu`` when Slurm names no type). Slurm does not know a GPU's memory: a table of common
  types gives it, else `default_memory_mib`. GPU uuids are ``slurm-<node>-gpu<index>``.
- MIG instances are GRES types named by their profile (``gpu:1g.10gb:7``, or with the
  model as Slurm's NVML autodetection names them, ``gpu:nvidia_h100_80gb_hbm3_3g.40gb:2``):
  each profile's count is split evenly over as few GPUs as hold it (a GPU in ``mig`` mode
  whose layout is ``PROFILE:COUNT,...``); the model is the type's prefix, else the first
  MIG model with that profile. Such a GPU's `model` is the type's prefix (``gpu_types``
  names it for the executor's ``--gres=gpu:<prefix>_<profile>:1``).
- Node state: ``DRAIN``/``DRAINING``/``DRAINED`` → draining; ``DOWN``/``FAIL``/``NOT_RESPONDING``
  (or a state flag saying so) → down; anything else (idle, mixed, allocated) → ready. A node
  in Slurm's power saving (``POWERED_DOWN``, ``CLOUD``, ``POWERING_UP``…) is labelled
  ``slurm.power=<state>``, and with its node pool (feature ``gpupool-pool:<pool>``) where it
  has one: `power` says which state such a node has.
- GPUs held by Slurm jobs that gpupool did not submit (their name lacks gpupool's prefix) are
  **used outside gpupool**: healthy, with `GPU.outside` naming the job and its user ("slurm
  job 4711", "bob", since its start), so the scheduler places nothing there; which ones: the
  indices Slurm gave those jobs where gpupool holds none of them, else others that gpupool
  holds none of. `ForeignJob` lists them (job, user, node, GPUs) for events and the operator.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from gpupool.domain import GPU, Node, NodeState, OutsideUse, SharingMode, ValidationError
from gpupool.domain.mig import MODELS as MIG_MODELS
from gpupool.domain.mig import MigModel, parse_layout
from gpupool.domain.nodepools import POOL_LABEL
from gpupool.engines.slurm.cli import gres_parts, number, state_of
from gpupool.engines.slurm.power import pool_of, power_state, saving_power
from gpupool.engines.slurm.shards import shard_label, shards_per_gpu

#: the label of a node in Slurm's power saving: its state (powered_down, requested, booting)
POWER_LABEL = "slurm.power"

#: GPU memory (MiB) of common Slurm GPU type names; others get `default_memory_mib`.
MEMORY_BY_TYPE = {
    "a100": 40960,
    "a100-80gb": 81920,
    "h100": 81920,
    "h200": 143360,
    "l40s": 46068,
    "a40": 46068,
    "v100": 16384,
    "t4": 15360,
    "rtx6000": 24576,
}
_GRES = re.compile(r"^gpu(?::(?P<type>[^:(]+))?:(?P<count>\d+)")
_IDX = re.compile(r"IDX:([0-9,\-]+)")
_DRAIN = {"DRAIN", "DRAINING", "DRAINED"}
_DOWN = {"DOWN", "FAIL", "FAILING", "NOT_RESPONDING", "NO_RESPOND", "FUTURE"}


@dataclass(frozen=True, slots=True)
class ForeignJob:
    """A running Slurm job gpupool did not submit, with the GPUs it holds."""

    job_id: str
    user: str
    account: str
    node: str
    gpus: int
    indices: tuple[int, ...] = ()
    #: when it started (epoch seconds), where Slurm says
    since: float | None = None

    @property
    def use(self) -> OutsideUse:
        return OutsideUse(f"slurm job {self.job_id}", self.user, self.since)


def gpu_uuid(node: str, index: int) -> str:
    return f"slurm-{node}-gpu{index}"


def parse_gres(gres: str) -> list[tuple[str, int]]:
    """``gpu:a100:4,gpu:t4:2(S:0),shard:8`` → [("a100", 4), ("t4", 2)]; type "gpu" if none."""
    out = []
    for part in gres_parts(gres):
        m = _GRES.match(part)
        if m:
            out.append((m.group("type") or "gpu", int(m.group("count"))))
    return out


def parse_indices(detail: Iterable[str]) -> tuple[int, ...]:
    """GPU indices from ``gres_detail`` entries such as ``gpu:fake:2(IDX:0-1)``."""
    out: list[int] = []
    for d in detail:
        if not d.startswith("gpu"):
            continue
        for m in _IDX.finditer(d):
            for r in m.group(1).split(","):
                lo, _, hi = r.partition("-")
                out.extend(range(int(lo), int(hi or lo) + 1))
    return tuple(out)


def node_state(raw: Mapping[str, Any]) -> NodeState:
    """Draining or down as Slurm says; a node in power saving (`power`): down while not up
    when it belongs to a gpupool node pool (the pool's autoscaling asks for it), else ready
    (reachable: a job placed there makes Slurm resume it)."""
    if saving_power(raw):
        return NodeState.DOWN if pool_of(raw) else NodeState.READY
    words = {state_of(raw.get("state"))}
    flags = raw.get("state_flags") or []
    words |= {str(f).upper() for f in (flags if isinstance(flags, list) else [flags])}
    if isinstance(raw.get("state"), list):
        words |= {str(s).upper() for s in raw["state"]}
    if words & _DOWN:
        return NodeState.DOWN
    if words & _DRAIN:
        return NodeState.DRAINING
    return NodeState.READY


_MIG_TYPE = re.compile(r"^(?:(?P<prefix>.+?)_)?(?P<profile>[0-9]+g\.[0-9]+gb)$")


def mig_gres_type(prefix: str, profile: str) -> str:
    """The GRES type of a MIG instance: the profile, after the model prefix if any."""
    return f"{prefix}_{profile}" if prefix and prefix != "gpu" else profile


def _candidates(prefix: str, wanted: dict[str, int]) -> list[MigModel]:
    """The MIG models the GRES could be of: the one its prefix names, else every model that
    has all the profiles."""
    if prefix:
        name = prefix.replace("_", " ").upper()
        gb = re.search(r"(\d+)\s*GB", name)
        mib = int(gb.group(1)) * 1024 if gb else 0
        named = [
            mm for mm in MIG_MODELS if re.search(mm.pattern, name) and mib <= mm.max_memory_mib
        ]
        if named:
            return named[:1]
    return [mm for mm in MIG_MODELS if all(mm.profile(p) for p in wanted)]


def _mig_gpus(prefix: str, wanted: dict[str, int]) -> list[tuple[str, int, str]]:
    """(model, memory MiB, layout) of each GPU that the MIG GRES `wanted` (profile -> count)
    of one model prefix come from: the fewest GPUs that split every count evenly and hold
    the share each; else one GPU per instance. The model is the prefix, else the key of the
    first MIG model that fits (Slurm then names no model)."""
    models = _candidates(prefix, wanted)
    if not models:
        return []
    for k in range(1, sum(wanted.values()) + 1):
        if any(c % k for c in wanted.values()):
            continue
        layout = ",".join(f"{p}:{c // k}" for p, c in sorted(wanted.items()))
        for model in models:
            try:
                parse_layout(model, layout)
            except ValidationError:
                continue
            return [(prefix or model.key, model.profiles[-1].memory_mib, layout)] * k
    model = models[0]
    label, memory = prefix or model.key, model.profiles[-1].memory_mib
    return [(label, memory, f"{p}:1") for p, c in sorted(wanted.items()) for _ in range(c)]


def slurm_prefix(model: str) -> str:
    """The GRES type prefix of a MIG GPU's instances from its model ('' when Slurm named
    none, i.e. the model is one of gpupool's MIG model keys)."""
    return "" if model in {mm.key for mm in MIG_MODELS} else model


def to_node(raw: Mapping[str, Any], default_memory_mib: int) -> Node:
    """One `sinfo --json` node as a gpupool node (GPUs healthy)."""
    name = str(raw["name"])
    gpus: list[GPU] = []
    mig: dict[str, dict[str, int]] = {}
    for model, count in parse_gres(str(raw.get("gres") or "")):
        hit = _MIG_TYPE.match(model)
        if hit:
            per = mig.setdefault(hit.group("prefix") or "", {})
            per[hit.group("profile")] = per.get(hit.group("profile"), 0) + count
            continue
        mem = MEMORY_BY_TYPE.get(model.lower(), default_memory_mib)
        for _ in range(count):
            i = len(gpus)
            gpus.append(GPU(i, gpu_uuid(name, i), model, mem))
    for prefix, wanted in sorted(mig.items()):
        for model, mem, layout in _mig_gpus(prefix, wanted):
            i = len(gpus)
            gpus.append(GPU(i, gpu_uuid(name, i), model, mem, SharingMode.MIG, mig_layout=layout))
    cpus = number(raw.get("cpus")) or 0
    mem_mib = number(raw.get("real_memory")) or 0
    labels: tuple[tuple[str, str], ...] = (("engine", "slurm"),)
    pool = pool_of(raw)
    if pool:
        labels = (*labels, (POOL_LABEL, pool))
    if saving_power(raw):
        labels = (*labels, (POWER_LABEL, str(power_state(raw))))
    return Node(
        name,
        tuple(gpus),
        cpu_milli=cpus * 1000,
        memory_mib=mem_mib,
        labels=labels,
        state=node_state(raw),
    )


def foreign_jobs(jobs: Iterable[Mapping[str, Any]], prefix: str) -> list[ForeignJob]:
    """Running jobs (from `squeue --json`) not named with gpupool's `prefix` that hold GPUs."""
    out = []
    for j in jobs:
        if state_of(j.get("job_state")) not in ("RUNNING", "SUSPENDED", "COMPLETING"):
            continue
        if str(j.get("name") or "").startswith(prefix):
            continue
        detail = [str(d) for d in j.get("gres_detail") or []]
        indices = parse_indices(detail)
        count = len(indices) or sum(c for _, c in parse_gres(_tres_gres(j)))
        if count == 0:
            continue
        out.append(
            ForeignJob(
                str(j.get("job_id")),
                str(j.get("user_name") or j.get("user_id") or "?"),
                str(j.get("account") or ""),
                str(j.get("batch_host") or j.get("nodes") or ""),
                count,
                indices,
                _since(j.get("start_time")),
            )
        )
    return out


def _since(value: Any) -> float | None:
    try:
        t = number(value)
    except (TypeError, ValueError):
        return None
    return float(t) if t else None


def _tres_gres(job: Mapping[str, Any]) -> str:
    tres = str(job.get("tres_per_node") or "")
    return tres.replace("gres:", "").replace("gres/", "")


def mark_foreign(node: Node, foreign: Iterable[ForeignJob], held: Collection[str]) -> Node:
    """`node` with the GPUs that `foreign` jobs hold marked as used outside gpupool (naming
    the job); `held`: GPU uuids gpupool's own work holds (never marked). A job whose indices
    Slurm does not give, or that gpupool holds, takes other free GPUs, highest index first."""
    jobs = [f for f in foreign if f.node == node.name]
    if not jobs:
        return node
    free = [g.index for g in node.gpus if gpu_uuid(node.name, g.index) not in held]
    taken: dict[int, OutsideUse] = {}
    short: list[tuple[ForeignJob, int]] = []
    for f in jobs:
        mine = [i for i in f.indices if i in free and i not in taken][: f.gpus]
        for i in mine:
            taken[i] = f.use
        if len(mine) < f.gpus:
            short.append((f, f.gpus - len(mine)))
    rest = iter([i for i in reversed(free) if i not in taken])
    for f, n in short:
        for _, i in zip(range(n), rest, strict=False):  # range first: no index lost
            taken[i] = f.use
    gpus = tuple(replace(g, outside=taken[g.index]) if g.index in taken else g for g in node.gpus)
    return replace(node, gpus=gpus)


def with_shards(node: Node, raw: Mapping[str, Any]) -> tuple[Node, int]:
    """`node` labelled with its shards per GPU (``slurm.shards-per-gpu``) when Slurm has
    ``gres/shard`` on it, and that number (0: none). See `shards`."""
    per_gpu = shards_per_gpu(raw, len(node.gpus))
    if per_gpu <= 0:
        return node, 0
    return replace(node, labels=(*node.labels, shard_label(per_gpu))), per_gpu
