"""The spawner runs a notebook as the account gpupool's grant names (single-user mode under
root: the owner's own account, review F2b of issue 29), never as root, in that account's own
home, and refuses a home that is not the account's."""

from __future__ import annotations

import os
import pwd
import subprocess
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from gpupool.engines.common.handoff import Grant
from gpupool.engines.local.user_accounts import UserAccounts
from gpupool.jupyterhub.spawner import GpupoolSpawner, as_account
from tests.engines.conftest import throwaway_accounts

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching accounts needs root")


@pytest.fixture
def accounts(monkeypatch: pytest.MonkeyPatch) -> Iterator[UserAccounts]:
    with throwaway_accounts(monkeypatch) as made:
        yield made


def _spawner(name: str) -> GpupoolSpawner:
    user = SimpleNamespace(name=name, url=f"/user/{name}/")
    return GpupoolSpawner(user=user, gpupool_url="http://127.0.0.1:9", jobs_account="nobody")


def test_the_notebook_runs_as_the_granted_account_in_its_home(accounts):
    mine = accounts.ensure("alice")
    spawner = _spawner("alice")
    env = {"CUDA_VISIBLE_DEVICES": "GPU-a"}
    spawner._take(Grant("w1", env, ("GPU-a",), {}, 0.0, account=mine.name, home=mine.home))
    env = spawner.user_env({})
    assert (env["USER"], env["HOME"]) == (mine.name, mine.home)
    assert spawner.home_dir == mine.home
    assert "--ServerApp.allow_root=True" not in spawner.get_args()
    out = subprocess.run(
        ["sh", "-c", "id -u; pwd"],
        preexec_fn=spawner.make_preexec_fn("alice"),
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == [str(mine.uid), mine.home]  # not nobody (jobs_account)
    assert mine.uid != 0


def test_a_grant_without_a_home_or_a_home_of_another_account_is_refused(accounts):
    mine, theirs = accounts.ensure("alice"), accounts.ensure("bob")
    with pytest.raises(Exception, match="no home"):
        _spawner("alice")._take(Grant("w1", {}, (), {}, 0.0, account=mine.name))
    with pytest.raises(Exception, match="is not a directory of"):
        as_account(mine.name, theirs.home)
    with pytest.raises(Exception, match="is not a directory of"):
        as_account(mine.name, "/")
    assert os.stat(theirs.home).st_uid == pwd.getpwnam(theirs.name).pw_uid  # unchanged
