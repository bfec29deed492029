"""Names that steer the dynamic loader or Slurm are refused at submit with a 422 problem that
says what to do, on every engine (security review F1); a new tenant whose namespace or Slurm
account would be an existing tenant's is refused with a 422 (F3, F12)."""

from __future__ import annotations

import pytest

from gpupool.domain import external_names
from gpupool.server.services import tenants as tenant_service
from tests.server.test_bad_input import _problem, _state


@pytest.mark.parametrize(
    "name,words",
    [
        ("LD_PRELOAD", "dynamic loader"),
        ("LD_LIBRARY_PATH", "inside the command"),
        ("GLIBC_TUNABLES", "dynamic loader"),
        ("SBATCH_ARRAY_INX", "steers Slurm"),
        ("SBATCH_GRES", "steers Slurm"),
        ("SBATCH_EXCLUSIVE", "steers Slurm"),
        ("SBATCH_WAIT", "steers Slurm"),
        ("SLURM_CONF", "steers Slurm"),
        ("SALLOC_GRES", "steers Slurm"),
        ("SRUN_EXPORT_ENV", "steers Slurm"),
    ],
)
def test_steering_variables_are_a_422_that_says_what_to_do(world, name, words):
    before = _state(world)
    body = {"gpus": 1, "command": ["python", "t.py"], "env": {"OK": "1", name: "x"}}
    p = _problem(world.post("member", "/workloads", json=body), 422)
    assert repr(name) in p["detail"] and words in p["detail"], p
    assert p["errors"][0]["field"] == "env"
    assert _state(world) == before


def test_ordinary_variables_with_awkward_values_are_accepted(world):
    env = {"PATH": "/opt/x/bin:/usr/bin", "QUOTES": 'it\'s "q" $HOME `id`', "N": "a\nb"}
    r = world.post("member", "/workloads", json={"gpus": 1, "command": ["t"], "env": env})
    assert r.status_code == 201, r.text


def test_a_tenant_whose_slurm_account_would_be_taken_is_a_422(world, monkeypatch):
    """The injective mapping meets only on a 40-bit hash collision: one is forced here."""
    real = external_names.slurm_account_name

    def clashing(path: str, prefix: str = "gp.") -> str:
        return real("lab", prefix) if path == "Lab-2" else real(path, prefix)

    names = (("Kubernetes namespace", external_names.namespace_name), ("Slurm account", clashing))
    monkeypatch.setattr(tenant_service, "TENANT_NAMES", names)
    before = _state(world)
    p = _problem(world.post("admin", "/tenants", json={"name": "Lab-2"}), 422)
    assert "Slurm account 'gp.lab'" in p["detail"] and "choose another name" in p["detail"]
    assert "'lab'" not in p["detail"].replace("'gp.lab'", "")  # the other tenant is not named
    assert _state(world) == before
    assert world.post("admin", "/tenants", json={"name": "Lab-3"}).status_code == 201


def test_a_tenant_whose_namespace_would_be_taken_is_a_422(world, monkeypatch):
    real = external_names.namespace_name

    def clashing(path: str, prefix: str = "gpupool-") -> str:
        return real("other", prefix) if path == "lab/other" else real(path, prefix)

    names = (
        ("Kubernetes namespace", clashing),
        ("Slurm account", external_names.slurm_account_name),
    )
    monkeypatch.setattr(tenant_service, "TENANT_NAMES", names)
    p = _problem(world.post("tenant-admin", "/tenants", json={"name": "lab/other"}), 422)
    assert "Kubernetes namespace 'gpupool-other'" in p["detail"]


def test_the_reviews_colliding_names_are_all_accepted_as_distinct_tenants(world):
    for name in ("a", "a/b", "a.b", "A", "A/b", "alpha", "alpha/lab", "alpha-lab"):
        r = world.post("admin", "/tenants", json={"name": name})
        assert r.status_code == 201, (name, r.text)


def test_blanks_in_env_values_and_arguments_reach_the_job_exactly(world):
    """The request models strip blanks from names and ids; a value or argument is data."""
    body = {"gpus": 1, "command": ["echo", " two  spaces "], "env": {"PAD": "  x  ", "NL": "a\n"}}
    r = world.post("member", "/workloads", json=body)
    assert r.status_code == 201, r.text
    assert r.json()["command"] == ["echo", " two  spaces "]
    world.scheduler.run_once()
    env = world.executor.world.processes[r.json()["id"]].env
    assert env["PAD"] == "  x  " and env["NL"] == "a\n"
