"""MIG: the hardware slices of A100, H100 and H200 GPUs, their profiles and layouts.

Facts from NVIDIA's MIG user guide ("Supported MIG Profiles"): a MIG-capable GPU of these
models has 7 compute slices and 8 memory slices. A profile `Ng.Mgb` takes N compute slices
and a number of memory slices; an instance of it sits at one of the profile's allowed start
positions on the 8-slot placement grid and covers `size` slots from there. Instances of one
layout never share a slot and never use more than 7 compute slices.

A **layout** is the fixed set of instances a GPU in `mig` mode is cut into. It has a name,
like the GPU Operator's mig-parted configs:

* `all-<profile>`: as many instances of the profile as fit (`all-1g.10gb`, `all-3g.40gb`);
* `all-balanced`: two 1g, one 2g and one 3g instance (mig-parted's balanced config);
* `PROFILE:COUNT[,PROFILE:COUNT]`: a mixed layout packed largest first (`3g.40gb:1,1g.10gb:4`);
* `PROFILE@START[,PROFILE@START]`: instances at explicit starts (`4g.40gb@0,3g.40gb@4`).

Memory sizes are the nominal sizes per memory slice; NVML reports the exact size of a
created instance. Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from gpupool.domain.errors import ValidationError
from gpupool.domain.resources import MILLI_PER_GPU

#: compute slices of every MIG-capable GPU modelled here
COMPUTE_SLICES = 7
#: placement slots (memory slices) of every MIG-capable GPU modelled here
SLOTS = 8


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One MIG profile of one GPU model."""

    name: str
    compute_slices: int
    memory_slices: int
    memory_mib: int
    #: the placement-grid slots an instance may start at
    starts: tuple[int, ...]
    #: the slots an instance covers from its start
    size: int
    #: the most instances of this profile on one GPU
    max_count: int

    @property
    def milli(self) -> int:
        """The share of the GPU's compute an instance is counted as (1000 = the whole GPU)."""
        return self.compute_slices * MILLI_PER_GPU // COMPUTE_SLICES

    @property
    def family(self) -> str:
        """`1g`, `3g`, ...: the compute part of the name."""
        return self.name.split(".", 1)[0]


@dataclass(frozen=True, slots=True)
class MigModel:
    """A MIG-capable GPU model: `key` names it in tables and docs."""

    key: str
    #: regular expression on the GPU's model name (upper case)
    pattern: str
    #: GPUs of at most this much memory (MiB) match (tells A100 40 GB from 80 GB)
    max_memory_mib: int
    profiles: tuple[MigProfile, ...]

    def profile(self, name: str) -> MigProfile | None:
        for p in self.profiles:
            if p.name == name:
                return p
        return None

    @property
    def smallest(self) -> MigProfile:
        return self.profiles[0]


def _profiles(gb: tuple[int, int, int, int, int, int], slice_mib: int) -> tuple[MigProfile, ...]:
    """The six profiles every modelled GPU has, named by their memory in GB (`gb`: 1g small,
    1g double memory, 2g, 3g, 4g, 7g), with `slice_mib` MiB per memory slice."""
    one, one2, two, three, four, seven = gb
    rows = (
        (f"1g.{one}gb", 1, 1, (0, 1, 2, 3, 4, 5, 6), 1, 7),
        (f"1g.{one2}gb", 1, 2, (0, 2, 4, 6), 2, 4),
        (f"2g.{two}gb", 2, 2, (0, 2, 4), 2, 3),
        (f"3g.{three}gb", 3, 4, (0, 4), 4, 2),
        (f"4g.{four}gb", 4, 4, (0,), 4, 1),
        (f"7g.{seven}gb", 7, 8, (0,), 8, 1),
    )
    return tuple(MigProfile(n, c, m, m * slice_mib, s, size, k) for n, c, m, s, size, k in rows)


#: The modelled GPUs, most specific first.
MODELS: tuple[MigModel, ...] = (
    MigModel("A100-40GB", r"A100", 41 * 1024, _profiles((5, 10, 10, 20, 20, 40), 4864)),
    MigModel("A100-80GB", r"A100", 82 * 1024, _profiles((10, 20, 20, 40, 40, 80), 9728)),
    MigModel("H100-80GB", r"H100|H800", 82 * 1024, _profiles((10, 20, 20, 40, 40, 80), 9984)),
    MigModel("H100-94GB", r"H100", 96 * 1024, _profiles((12, 24, 24, 47, 47, 94), 11776)),
    MigModel("H200-141GB", r"H200|GH200", 144 * 1024, _profiles((18, 35, 35, 71, 71, 141), 17920)),
)


def model_for(gpu_model: str, memory_mib: int) -> MigModel | None:
    """The MIG model of a GPU (by model name and memory), or None if it has no MIG here."""
    name = gpu_model.upper()
    for m in MODELS:
        if re.search(m.pattern, name) and memory_mib <= m.max_memory_mib:
            return m
    return None


def find_model(key: str) -> MigModel | None:
    for m in MODELS:
        if m.key.lower() == key.lower():
            return m
    return None


@dataclass(frozen=True, slots=True, order=True)
class MigInstance:
    """One instance of a layout: a profile at a start slot."""

    start: int
    profile: str

    def __str__(self) -> str:
        return f"{self.profile}@{self.start}"


def slots_of(model: MigModel, inst: MigInstance) -> range:
    p = model.profile(inst.profile)
    assert p is not None
    return range(inst.start, inst.start + p.size)


def validate(model: MigModel, instances: tuple[MigInstance, ...]) -> None:
    """Raise ValidationError (saying what to change) unless `instances` can coexist on one
    GPU of `model`: known profiles, allowed starts, no shared slot, at most 7 compute slices,
    at most each profile's max count."""
    used: dict[int, MigInstance] = {}
    compute = 0
    counts: dict[str, int] = {}
    for inst in instances:
        p = model.profile(inst.profile)
        if p is None:
            names = ", ".join(q.name for q in model.profiles)
            raise ValidationError(
                f"{model.key} has no MIG profile {inst.profile}; it has {names}", "mig_layout"
            )
        if inst.start not in p.starts:
            raise ValidationError(
                f"a {p.name} instance cannot start at {inst.start}: it needs start "
                + _or(p.starts),
                "mig_layout",
            )
        for s in slots_of(model, inst):
            if s in used:
                raise ValidationError(
                    f"{inst} overlaps {used[s]} at slot {s}: move one to a free start",
                    "mig_layout",
                )
            used[s] = inst
        compute += p.compute_slices
        counts[p.name] = counts.get(p.name, 0) + 1
        if counts[p.name] > p.max_count:
            raise ValidationError(
                f"at most {p.max_count} {p.name} instances fit on a {model.key}", "mig_layout"
            )
    if compute > COMPUTE_SLICES:
        raise ValidationError(
            f"the layout needs {compute} compute slices; a {model.key} has {COMPUTE_SLICES}",
            "mig_layout",
        )


def _or(starts: tuple[int, ...]) -> str:
    if len(starts) == 1:
        return str(starts[0])
    return ", ".join(map(str, starts[:-1])) + f" or {starts[-1]}"


def starts_text(p: MigProfile) -> str:
    """'start 0 or 4' for a 3g profile."""
    return "start " + _or(p.starts)


def place(model: MigModel, placed: tuple[MigInstance, ...], profile: str) -> MigInstance | None:
    """The lowest allowed start where one more `profile` instance fits beside `placed`, or
    None."""
    p = model.profile(profile)
    if p is None:
        return None
    for s in p.starts:
        cand = (*placed, MigInstance(s, profile))
        try:
            validate(model, cand)
        except ValidationError:
            continue
        return MigInstance(s, profile)
    return None


def pack(model: MigModel, wanted: list[tuple[str, int]]) -> tuple[MigInstance, ...]:
    """Place `wanted` (profile, count) together, largest first, each at the lowest start that
    still lets the rest fit (a small backtracking search); ValidationError if they cannot."""
    by_name: dict[str, MigProfile] = {}
    names: list[str] = []
    for name, count in wanted:
        p = model.profile(name)
        if p is None:
            validate(model, (MigInstance(0, name),))  # raises: unknown profile
            raise AssertionError  # pragma: no cover - validate raised
        by_name[name] = p
        names += [name] * count
    names.sort(key=lambda n: -by_name[n].size)
    for n, p in sorted(by_name.items()):
        if names.count(n) > p.max_count:
            raise ValidationError(
                f"at most {p.max_count} {n} instances fit on a {model.key}", "mig_layout"
            )
    compute = sum(by_name[n].compute_slices for n in names)
    if compute > COMPUTE_SLICES:
        raise ValidationError(
            f"the layout needs {compute} compute slices; a {model.key} has {COMPUTE_SLICES}",
            "mig_layout",
        )

    def search(i: int, placed: tuple[MigInstance, ...]) -> tuple[MigInstance, ...] | None:
        if i == len(names):
            return placed
        for s in by_name[names[i]].starts:
            cand = (*placed, MigInstance(s, names[i]))
            try:
                validate(model, cand)
            except ValidationError:
                continue
            done = search(i + 1, cand)
            if done is not None:
                return done
        return None

    found = search(0, ())
    if found is None:
        what = ", ".join(f"{c} × {n}" for n, c in wanted)
        raise ValidationError(f"{what} do not fit together on a {model.key}", "mig_layout")
    return tuple(sorted(found))


_COUNT = re.compile(r"^([0-9]+g\.[0-9]+gb):([0-9]+)$")
_AT = re.compile(r"^([0-9]+g\.[0-9]+gb)@([0-9]+)$")


def parse_layout(model: MigModel, name: str) -> tuple[MigInstance, ...]:
    """The instances of layout `name` on `model` (see the module docstring for the names);
    ValidationError saying what to write if the name is unknown or does not fit."""
    text = name.strip()
    if text.startswith("all-"):
        rest = text[4:]
        if rest == "balanced":
            p1, _, p2, p3 = model.profiles[0], None, model.profiles[2], model.profiles[3]
            return pack(model, [(p3.name, 1), (p2.name, 1), (p1.name, 2)])
        p = model.profile(rest)
        if p is None:
            raise ValidationError(
                f"layout {name!r}: {model.key} has no MIG profile {rest}; use all-"
                + ", all-".join(q.name for q in model.profiles)
                + " or all-balanced",
                "mig_layout",
            )
        return pack(model, [(p.name, p.max_count)])
    parts = [x.strip() for x in text.split(",") if x.strip()]
    if parts and all(_AT.match(x) for x in parts):
        insts = tuple(
            sorted(MigInstance(int(m.group(2)), m.group(1)) for m in map(_AT.match, parts) if m)
        )
        validate(model, insts)
        return insts
    if parts and all(_COUNT.match(x) for x in parts):
        wanted = [(m.group(1), int(m.group(2))) for m in map(_COUNT.match, parts) if m]
        return pack(model, wanted)
    raise ValidationError(
        f"layout {name!r} is not a MIG layout: write all-PROFILE (e.g. all-"
        f"{model.smallest.name}), all-balanced, PROFILE:COUNT[,PROFILE:COUNT] or "
        "PROFILE@START[,PROFILE@START]",
        "mig_layout",
    )


def layout_for_gpu(gpu_model: str, memory_mib: int, name: str) -> tuple[MigInstance, ...]:
    """`parse_layout` for a GPU given by model and memory; ValidationError if it has no MIG."""
    model = model_for(gpu_model, memory_mib)
    if model is None:
        raise ValidationError(
            f"{gpu_model} ({memory_mib} MiB) has no MIG profiles gpupool knows (A100, H100, "
            "H200); use exclusive or shared sharing for it",
            "mig_layout",
        )
    return parse_layout(model, name)


def counts(instances: tuple[MigInstance, ...]) -> list[tuple[str, int]]:
    """(profile, count) of a layout, in first-seen order (mig-parted's `mig-devices`)."""
    out: dict[str, int] = {}
    for i in instances:
        out[i.profile] = out.get(i.profile, 0) + 1
    return list(out.items())


def profile_family(name: str) -> str:
    return name.split(".", 1)[0]


def is_profile_name(name: str) -> bool:
    """True for names like `1g.10gb` (any model)."""
    return re.match(r"^[0-9]+g\.[0-9]+gb$", name) is not None


@lru_cache(maxsize=256)
def instances_of(gpu_model: str, memory_mib: int, layout: str) -> list[tuple[str, int, int, int]]:
    """(profile, start, milli, memory MiB) of each instance of `layout` on such a GPU, by
    start; empty if the GPU has no MIG here or the layout does not fit it. Memoized: the
    scheduler asks once per GPU and cycle. Callers must not change the list."""
    model = model_for(gpu_model, memory_mib)
    if model is None:
        return []
    try:
        insts = parse_layout(model, layout)
    except ValidationError:
        return []
    out = []
    for i in insts:
        p = model.profile(i.profile)
        assert p is not None
        out.append((p.name, i.start, p.milli, p.memory_mib))
    return out


def short_name(gpu_model: str, memory_mib: int, layout: str) -> str:
    """`layout` by its `all-…` name when it is exactly that named layout, else as given."""
    model = model_for(gpu_model, memory_mib)
    if model is None:
        return layout
    try:
        insts = parse_layout(model, layout)
    except ValidationError:
        return layout
    for name in [f"all-{p.name}" for p in model.profiles] + ["all-balanced"]:
        if parse_layout(model, name) == insts:
            return name
    return layout
