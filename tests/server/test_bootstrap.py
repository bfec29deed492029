"""First-run setup of `gpupool up`: admin, default tenant, default profiles."""

from __future__ import annotations

import pytest

from gpupool.domain import GPU, Node, Request
from gpupool.domain.profiles import Profile
from gpupool.server.bootstrap import ensure_admin, ensure_default_profiles
from gpupool.store.profiles import ProfileRepo
from tests.store.databases import make_store


@pytest.fixture
def store(tmp_path):
    yield from make_store("sqlite", tmp_path)


def node(*models: str) -> Node:
    return Node("n", tuple(GPU(i, f"GPU-{i}", m, 81920) for i, m in enumerate(models)))


def test_first_run_offers_one_gpu_of_the_model_and_cpu_only(store):
    assert ensure_default_profiles(store, node("H100", "H100")) == ["gpu", "cpu"]
    with store.read() as s:
        got = {p.name: p for p in ProfileRepo(s).list()}
    assert got["gpu"].request == Request(gpus=1, gpu_model="H100")
    assert not got["cpu"].request.wants_gpu


def test_mixed_models_get_a_model_free_gpu_profile(store):
    ensure_default_profiles(store, node("H100", "A100"))
    with store.read() as s:
        assert ProfileRepo(s).get("gpu").request.gpu_model is None


def test_a_node_without_gpus_gets_cpu_only(tmp_path, store):
    assert ensure_default_profiles(store, node()) == ["cpu"]


def test_admins_profiles_are_never_touched(store):
    with store.write() as s:
        ProfileRepo(s).save(Profile("big", Request(gpus=4)), create=True)
    assert ensure_default_profiles(store, node("A100")) == []
    with store.read() as s:
        assert [p.name for p in ProfileRepo(s).list()] == ["big"]


def test_admin_created_once(store):
    assert ensure_admin(store, "admin", "pw-123456", 0) == "pw-123456"
    assert ensure_admin(store, "admin", "other", 1) is None
