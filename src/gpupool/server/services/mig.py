"""MIG on the API: a GPU's layout and instances, and the admin's changes of sharing mode and
layout (`PATCH /api/v1/gpus/{uuid}`).

Rules:
* `mig` sharing is refused on a GPU this process samples itself (the local engine) whose
  MIG mode NVML reads as off (nvmlDeviceGetMigMode), saying how to turn it on; a GPU whose
  mode is unknown (no reading yet) is accepted, and so is one of a cluster node, whose MIG
  mode the GPU Operator's MIG manager (or the admin) turns on after gpupool is told;
* a layout must fit the GPU's model (gpupool.domain.mig), needs `mig` sharing, and changes
  only on a GPU no workload holds;
* where this process samples the GPU itself (the local engine) and NVML lists MIG devices
  with their profiles, the layout must match them: gpupool binds those devices, it never
  creates or destroys MIG instances (it does not change the hardware).
"""

from __future__ import annotations

from gpupool.domain import GPU, SharingMode, ValidationError
from gpupool.domain.mig import MigInstance, instances_of, layout_for_gpu, model_for
from gpupool.server.context import AppContext
from gpupool.server.principal import Principal
from gpupool.server.schemas.cluster import GpuUpdateIn, HolderOut, MigInstanceOut
from gpupool.store import AllocationRepo, Conflict, NodeRepo
from gpupool.telemetry import GPUSnapshot


def instances_out(g: GPU, holders: list[HolderOut]) -> list[MigInstanceOut]:
    """The instances of `g`'s layout with who holds each ([] without a layout)."""
    if g.sharing is not SharingMode.MIG or not g.mig_layout:
        return []
    held = {h.mig_start: h.workload_id for h in holders if h.mig_start is not None}
    return [
        MigInstanceOut(profile=p, start=s, memory_mib=mem, workload_id=held.get(s))
        for p, s, _, mem in instances_of(g.model, g.memory_mib, g.mig_layout)
    ]


def _readings(ctx: AppContext, uuid: str) -> tuple[GPUSnapshot | None, bool]:
    """The latest telemetry of GPU `uuid` and whether this process sampled it itself."""
    from gpupool.server.services.agents import report_frames

    for sampler in ctx.samplers:
        frame = sampler.latest
        if frame is None:
            continue
        for g in frame.snapshot.gpus:
            if g.uuid == uuid:
                return g, True
    for frame in report_frames(ctx):
        for g in frame.snapshot.gpus:
            if g.uuid == uuid:
                return g, False
    return None, False


def mig_mode_off_text(node: str, g: GPU) -> str:
    """What to do when `mig` sharing is asked of a GPU whose MIG mode is off."""
    model = model_for(g.model, g.memory_mib)
    small = model.smallest.name if model is not None else "1g.10gb"
    return (
        f"GPU {g.index} of {node} has MIG mode off (NVML reports it disabled), so it cannot "
        f"be shared as MIG slices. To use MIG: drain the GPU, enable MIG mode with "
        f"`sudo nvidia-smi -i {g.index} -mig 1` (some GPUs need a reset or reboot after), "
        f"create the instances of a layout (`sudo nvidia-smi mig -i {g.index} -cgi "
        f"{small},{small} -C`, or mig-parted / the GPU Operator's MIG manager), then set "
        f"sharing to mig again. Otherwise use exclusive or shared sharing for it."
    )


def update_gpu(ctx: AppContext, p: Principal, uuid: str, body: GpuUpdateIn) -> tuple[str, GPU]:
    """Apply `body` (sharing mode and/or MIG layout) to GPU `uuid`; see the module rules."""
    p.require_admin("change a GPU's sharing mode or MIG layout")
    if body.sharing is None and body.mig_layout is None:
        raise ValidationError("give sharing, mig_layout or both", "sharing")
    with ctx.store.read() as s:
        node, g = NodeRepo(s).gpu(uuid)
    sharing = SharingMode(body.sharing) if body.sharing is not None else g.sharing
    layout = g.mig_layout if body.mig_layout is None else (body.mig_layout.strip() or None)
    if sharing is not SharingMode.MIG:
        if body.mig_layout:
            raise ValidationError(
                f"GPU {g.index} of {node} is {sharing}: a MIG layout needs sharing mig "
                "(give both: sharing mig and the layout)",
                "mig_layout",
            )
        layout = None
    reading, local = _readings(ctx, uuid)
    turning_on = sharing is SharingMode.MIG and g.sharing is not SharingMode.MIG
    if turning_on and local and reading is not None and reading.mig_enabled is False:
        raise Conflict(mig_mode_off_text(node, g))
    if layout is not None:
        insts = layout_for_gpu(g.model, g.memory_mib, layout)
        if local and reading is not None:
            _check_devices(node, g, layout, insts, reading)
    if layout != g.mig_layout:
        with ctx.store.read() as s:
            busy = [a.workload_id for a in AllocationRepo(s).active() if uuid in a.gpu_uuids]
        if busy:
            raise Conflict(
                f"GPU {g.index} of {node} is held by {', '.join(sorted(busy))}: its MIG layout "
                "changes only while no work holds it; wait for that work to end (or drain the "
                "node) and try again"
            )
    with ctx.store.write() as s:
        repo = NodeRepo(s)
        if sharing is not g.sharing:
            repo.set_sharing(uuid, sharing)
        if layout != g.mig_layout:
            repo.set_mig_layout(uuid, layout)
        node, g = repo.gpu(uuid)
    ctx.wake_scheduler()
    return node, g


def _check_devices(
    node: str, g: GPU, layout: str, insts: tuple[MigInstance, ...], reading: GPUSnapshot
) -> None:
    """A layout on a GPU this process binds must be the MIG devices NVML lists (when NVML
    tells their profiles): gpupool binds existing instances and never creates them."""
    if reading.mig_enabled is not True:
        return
    have = [d for d in reading.mig_devices if d.profile]
    if not have:
        return
    want = sorted((i.profile, i.start) for i in insts)
    starts_known = all(d.start is not None for d in have)
    got = sorted((d.profile or "", -1 if d.start is None else d.start) for d in have)
    if starts_known and got == want:
        return
    if not starts_known and [p for p, _ in got] == [p for p, _ in want]:
        return
    listed = ", ".join(f"{p}@{s}" if s >= 0 else p for p, s in got) or "none"
    raise Conflict(
        f"GPU {g.index} of {node} has the MIG devices {listed}, but layout {layout!r} is "
        + ", ".join(f"{p}@{s}" for p, s in want)
        + f". gpupool binds the instances NVML lists and never creates them: create them "
        f"(`sudo nvidia-smi mig -i {g.index} -dci -dgi`, then `-cgi ... -C`) or give the "
        "layout they form"
    )
