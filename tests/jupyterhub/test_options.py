"""The spawn form and user_options validation (pure)."""

from __future__ import annotations

import pytest

from gpupool.jupyterhub.options import (
    OptionsError,
    gpu_availability,
    pending_message,
    render_form,
    submit_tenants,
    usable_profiles,
    validate,
)

PROFILES = [
    {
        "name": "one-gpu",
        "kind": "notebook",
        "tenants": [],
        "description": "1 GPU",
        "request": {
            "gpus": 1,
            "gpu_fraction": None,
            "gpu_memory_mib": 0,
            "gpu_model": None,
            "description": "1 GPU",
        },
    },
    {
        "name": "quarter",
        "kind": "notebook",
        "tenants": ["physics"],
        "description": "",
        "request": {
            "gpus": 0,
            "gpu_fraction": 0.25,
            "gpu_memory_mib": 4096,
            "gpu_model": None,
            "description": "0.25 of a GPU with 4 GiB",
        },
    },
    {"name": "train", "kind": "job", "tenants": [], "request": {"gpus": 1}},
]
ALICE = {
    "name": "alice",
    "admin": False,
    "memberships": [
        {"user": "alice", "tenant": "physics", "role": "member"},
        {"user": "alice", "tenant": "bio", "role": "viewer"},
    ],
}
TENANTS = [
    {"name": "physics", "leaf": False},
    {"name": "physics/lab-a", "leaf": True},
    {"name": "bio", "leaf": True},
]


def test_submit_tenants_follow_roles():
    assert submit_tenants(ALICE, TENANTS) == ["physics/lab-a"]
    assert submit_tenants({"name": "root", "admin": True}, TENANTS) == ["bio", "physics/lab-a"]


def test_usable_profiles_filters_by_tenant_and_kind():
    names = [p["name"] for p in usable_profiles(PROFILES, ["physics/lab-a"])]
    assert names == ["one-gpu", "quarter"]
    assert [p["name"] for p in usable_profiles(PROFILES, ["bio"])] == ["one-gpu"]


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"gpus": 8}, "unknown option 'gpus'"),
        ({"profile": "huge"}, "no profile 'huge'"),
        ({"profile": "one-gpu", "tenant": "bio"}, "cannot start notebooks in tenant 'bio'"),
        ("one-gpu", "must be an object"),
        ({"profile": ["a", "b"]}, "no profile"),
    ],
)
def test_forged_options_are_refused_with_a_message(options, fragment):
    profiles = usable_profiles(PROFILES, ["physics/lab-a"])
    with pytest.raises(OptionsError, match=fragment):
        validate(options, profiles, ["physics/lab-a"])


def test_profile_not_open_to_the_chosen_tenant():
    profiles = usable_profiles(PROFILES, ["bio", "physics/lab-a"])
    with pytest.raises(OptionsError, match="not open to tenant 'bio'"):
        validate({"profile": "quarter", "tenant": "bio"}, profiles, ["bio", "physics/lab-a"])


def test_valid_choices():
    profiles = usable_profiles(PROFILES, ["bio", "physics/lab-a"])
    c = validate({"profile": ["quarter"]}, profiles, ["bio", "physics/lab-a"])
    assert (c.profile["name"], c.tenant) == ("quarter", "physics/lab-a")
    only = usable_profiles(PROFILES, ["bio"])
    assert validate(None, only, ["bio"]).profile["name"] == "one-gpu"
    with pytest.raises(OptionsError, match="choose a profile"):
        validate({}, profiles, ["bio"])
    with pytest.raises(OptionsError, match="not a member"):
        validate({}, profiles, [])


GPUS = [
    {
        "uuid": "GPU-a",
        "model": "A100",
        "memory_mib": 40960,
        "sharing": "exclusive",
        "health": "healthy",
        "allocated_milli": 1000,
        "allocated_memory_mib": 40960,
    },
    {
        "uuid": "GPU-b",
        "model": "A100",
        "memory_mib": 40960,
        "sharing": "shared",
        "health": "healthy",
        "allocated_milli": 500,
        "allocated_memory_mib": 8192,
    },
    {
        "uuid": "GPU-c",
        "model": "A100",
        "memory_mib": 40960,
        "sharing": "exclusive",
        "health": "healthy",
        "allocated_milli": 0,
        "allocated_memory_mib": 0,
    },
]


def test_availability_texts():
    assert gpu_availability(PROFILES[0], GPUS) == "1 of 3 A100 free"
    assert gpu_availability(PROFILES[1], GPUS) == "1 of 3 A100 have room for this share"


def test_form_lists_profiles_with_availability_and_escapes():
    info = {
        "physics/lab-a": {
            "name": "physics/lab-a",
            "allocated_gpus": 1,
            "quota": {"guaranteed": 2, "limit": 3},
        }
    }
    html = render_form(
        usable_profiles(PROFILES, ["physics/lab-a"]),
        ["physics/lab-a"],
        GPUS,
        info,
        notice="<b>stopped</b>",
    )
    assert 'value="one-gpu" checked' in html and 'value="quarter"' in html
    assert "1 of 3 A100 free" in html
    assert "physics/lab-a uses 1 of its 2 guaranteed GPUs (limit 3)" in html
    assert "&lt;b&gt;stopped&lt;/b&gt;" in html
    assert "No gpupool profile" in render_form([], ["bio"], GPUS, {})


def test_pending_message():
    w = {
        "tenant": "lab-a",
        "request": {"gpus": 1, "gpu_fraction": None},
        "pending": {
            "reason": "lab-a is at its limit of 2 GPUs",
            "position": 3,
            "tenant_position": 2,
        },
    }
    assert pending_message(w) == (
        "Queued for a GPU: 3rd in line for lab-a (lab-a is at its limit of 2 GPUs)"
    )
    w["pending"]["position"] = 11
    assert "11th in line" in pending_message(w)
    assert pending_message({"tenant": "x", "pending": None}) == "Queued for CPUs and memory in x"
    w["request"] = {"gpus": 0, "gpu_fraction": 0.25}
    assert pending_message({**w, "pending": None}) == "Queued for a GPU in lab-a"


def test_pending_message_says_when_it_is_expected_to_start():
    now = 1_780_000_000.0  # 2026-05-28 20:26:40 UTC
    w = {
        "tenant": "lab-a",
        "request": {"gpus": 1, "gpu_fraction": None},
        "pending": {
            "reason": "no GPU is free",
            "position": 3,
            "tenant_position": 1,
            "forecast": {
                "expected": "2026-05-28T20:38:40Z",
                "latest": "2026-05-28T21:00:00Z",
                "until": "2026-05-29T20:26:40Z",
                "text": "expected to start around 20:38 UTC, by 21:00 UTC at the latest (p90)",
            },
        },
    }
    assert pending_message(w, now) == (
        "Queued for a GPU: 3rd in line for lab-a (no GPU is free); expected to start in "
        "about 12 min, by 21:00 UTC at the latest"
    )
    w["pending"]["forecast"] |= {"expected": None, "latest": None, "text": "not before 20:26"}
    assert pending_message(w, now).endswith("; not before 20:26")


def test_pending_message_of_a_cpu_only_notebook_says_what_it_waits_for():
    """Issue 17: a notebook that asks for no GPU was told it waited 'for a GPU'."""
    why = (
        "waiting behind higher-priority work of lab-b (w-1 holds a reservation on gpu, and "
        "the CPUs and memory this would use there are kept for it)"
    )
    w = {
        "tenant": "lab-a",
        "request": {"gpus": 0, "gpu_fraction": None, "cpus": 2, "memory_mib": 4096},
        "pending": {"reason": why, "position": 1, "tenant_position": 1},
    }
    assert pending_message(w) == f"Queued for CPUs and memory: 1st in line for lab-a ({why})"
