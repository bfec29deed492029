"""MIG profile tables, layouts and placement rules (gpupool.domain.mig)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.domain import GPU, Request, SharingMode, ValidationError
from gpupool.domain.mig import (
    COMPUTE_SLICES,
    MODELS,
    MigInstance,
    find_model,
    layout_for_gpu,
    model_for,
    pack,
    parse_layout,
    slots_of,
    validate,
)

H100 = find_model("H100-80GB")


def test_models_are_told_apart_by_name_and_memory() -> None:
    assert model_for("NVIDIA A100-SXM4-40GB", 40960).key == "A100-40GB"
    assert model_for("NVIDIA A100-SXM4-80GB", 81920).key == "A100-80GB"
    assert model_for("NVIDIA H100 80GB HBM3", 81559).key == "H100-80GB"
    assert model_for("NVIDIA H100 NVL", 95830).key == "H100-94GB"
    assert model_for("NVIDIA H200", 143771).key == "H200-141GB"
    assert model_for("NVIDIA L40S", 46068) is None


@pytest.mark.parametrize(
    ("key", "names"),
    [
        ("A100-40GB", ["1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]),
        ("H100-80GB", ["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]),
        ("H200-141GB", ["1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"]),
    ],
)
def test_profile_names(key: str, names: list[str]) -> None:
    assert [p.name for p in find_model(key).profiles] == names


def test_placement_rules_of_h100() -> None:
    p = {q.name: q for q in H100.profiles}
    assert p["1g.10gb"].starts == (0, 1, 2, 3, 4, 5, 6) and p["1g.10gb"].max_count == 7
    assert p["1g.20gb"].starts == (0, 2, 4, 6) and p["1g.20gb"].max_count == 4
    assert p["2g.20gb"].starts == (0, 2, 4) and p["2g.20gb"].max_count == 3
    assert p["3g.40gb"].starts == (0, 4) and p["3g.40gb"].max_count == 2
    assert p["4g.40gb"].starts == (0,) and p["7g.80gb"].starts == (0,)
    assert p["7g.80gb"].milli == 1000 and p["3g.40gb"].milli == 428


def test_named_layouts() -> None:
    assert [str(i) for i in parse_layout(H100, "all-3g.40gb")] == ["3g.40gb@0", "3g.40gb@4"]
    assert len(parse_layout(H100, "all-1g.10gb")) == 7
    bal = parse_layout(H100, "all-balanced")
    assert sorted(i.profile for i in bal) == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    mixed = parse_layout(H100, "4g.40gb:1,3g.40gb:1")
    assert [str(i) for i in mixed] == ["4g.40gb@0", "3g.40gb@4"]
    assert [str(i) for i in parse_layout(H100, "3g.40gb@4,2g.20gb@0")] == [
        "2g.20gb@0",
        "3g.40gb@4",
    ]


@pytest.mark.parametrize(
    ("layout", "says"),
    [
        ("all-1g.5gb", "has no MIG profile 1g.5gb"),
        ("3g.40gb@2", "needs start 0 or 4"),
        ("4g.40gb@0,3g.40gb@0", "overlaps"),
        ("4g.40gb:1,4g.40gb:1", "at most 1 4g.40gb"),
        ("4g.40gb:1,2g.20gb:2", "compute slices"),
        ("nonsense", "write all-PROFILE"),
    ],
)
def test_bad_layouts_say_why(layout: str, says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        parse_layout(H100, layout)


def test_gpu_without_mig_is_refused() -> None:
    with pytest.raises(ValidationError, match="no MIG profiles"):
        layout_for_gpu("Tesla T4", 15360, "all-1g.10gb")


def test_request_field_mig() -> None:
    r = Request(mig="3g.40gb")
    assert r.total_gpu_milli == 428 and r.wants_gpu
    assert "3g.40gb" in r.describe()
    with pytest.raises(ValidationError, match="not both"):
        Request(mig="1g.10gb", gpus=1)
    with pytest.raises(ValidationError, match="not a MIG profile"):
        Request(mig="big")
    assert GPU(0, "u", "H100", 81920, SharingMode.MIG, mig_layout="all-1g.10gb").mig_layout


models = st.sampled_from(MODELS)


@st.composite
def wanted(draw: st.DrawFn) -> tuple:
    model = draw(models)
    picks = draw(
        st.lists(st.tuples(st.sampled_from(model.profiles), st.integers(1, 7)), max_size=4)
    )
    return model, [(p.name, c) for p, c in picks]


@settings(max_examples=300, deadline=None)
@given(wanted())
def test_packed_layouts_never_overlap_nor_exceed_the_gpu(case: tuple) -> None:
    model, want = case
    try:
        insts = pack(model, want)
    except ValidationError:
        return
    slots: list[int] = []
    for i in insts:
        slots += list(slots_of(model, i))
        assert i.start in model.profile(i.profile).starts
    assert len(slots) == len(set(slots)) and max(slots, default=0) < 8
    assert sum(model.profile(i.profile).compute_slices for i in insts) <= COMPUTE_SLICES
    validate(model, insts)  # the packer only returns valid layouts


@settings(max_examples=300, deadline=None)
@given(models, st.lists(st.tuples(st.integers(0, 7), st.integers(0, 5)), max_size=8))
def test_validate_accepts_only_disjoint_layouts_within_the_slices(model, raw) -> None:
    insts = tuple(MigInstance(s, model.profiles[k].name) for s, k in raw)
    try:
        validate(model, insts)
    except ValidationError:
        return
    seen: set[int] = set()
    for i in insts:
        r = set(slots_of(model, i))
        assert not seen & r
        seen |= r
    assert sum(model.profile(i.profile).compute_slices for i in insts) <= COMPUTE_SLICES
