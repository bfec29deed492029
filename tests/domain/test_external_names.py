"""Tenant paths map injectively to namespaces and Slurm accounts (security review F3, F12)."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from gpupool.domain.external_names import namespace_name, slurm_account_name
from gpupool.domain.tenancy import TENANT_NAME_PATTERN

_segment = st.from_regex(r"\A[A-Za-z0-9_][A-Za-z0-9_.-]{0,12}\Z").filter(lambda s: ".." not in s)
paths = st.lists(_segment, min_size=1, max_size=4).map("/".join)
_DNS = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


def test_the_review_collisions_get_distinct_names() -> None:
    clash = ["a/b", "a-b", "a.b", "a_b", "A/b", "alpha/lab", "alpha-lab"]
    assert len({namespace_name(p) for p in clash}) == len(clash)
    assert len({slurm_account_name(p) for p in clash}) == len(clash)


def test_simple_names_stay_readable() -> None:
    assert namespace_name("lab-a") == "gpupool-lab-a"
    assert slurm_account_name("physics/lab-a") == "gp.physics.lab-a"
    assert namespace_name("alpha/lab").startswith("gpupool-alpha-lab-h")


def test_a_name_shaped_like_a_hash_is_hashed_itself() -> None:
    hashed = namespace_name("a/b")
    lookalike = hashed.removeprefix("gpupool-")
    assert re.fullmatch(TENANT_NAME_PATTERN, lookalike)
    assert namespace_name(lookalike) != hashed


@given(st.lists(paths, min_size=2, max_size=2, unique=True))
def test_no_two_paths_share_a_namespace_or_account(pair: list[str]) -> None:
    a, b = pair
    assert namespace_name(a) != namespace_name(b)
    assert slurm_account_name(a) != slurm_account_name(b)


@given(paths)
def test_namespaces_are_dns_labels(path: str) -> None:
    assert _DNS.fullmatch(namespace_name(path))
    account = slurm_account_name(path)
    assert len(account) <= 64 and account == account.lower()


def test_long_paths_are_cut_and_stay_distinct() -> None:
    a, b = "x" * 80 + "/a", "x" * 80 + "/b"
    assert len(namespace_name(a)) <= 63 and namespace_name(a) != namespace_name(b)
