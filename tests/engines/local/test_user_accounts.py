"""The Unix accounts gpupool makes for its users (single-user mode under root): an injective,
valid name per user, made on demand, never an account gpupool did not make for that user."""

from __future__ import annotations

import os
import pwd
import re
import stat
import subprocess
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.domain.tenancy import USER_NAME_PATTERN
from gpupool.engines.common.executor import StartError
from gpupool.engines.local.user_accounts import (
    ACCOUNT_PREFIX,
    MARK,
    MAX_NAME,
    UserAccounts,
    account_name,
)

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="making Unix accounts needs root")

#: gpupool user names as the API allows them (upper case, '.', '@' included; no '..')
user_names = st.from_regex(USER_NAME_PATTERN, fullmatch=True).filter(
    lambda n: ".." not in n and len(n) <= 128
)
#: names close to each other: case, separators and length variants of one stem
near_names = st.builds(
    lambda stem, tail: stem + tail,
    st.sampled_from(["alice", "Alice", "a", "x" * 29, "x" * 30, "bob-", "bob_"]),
    st.sampled_from(["", ".", "@", "-", "--", "_", "-1", ".1", "@lab", "A", "a", "x" * 40]),
)
UNIX_NAME = re.compile(r"[a-z_][a-z0-9_-]*")


def _valid(name: str) -> bool:
    return bool(UNIX_NAME.fullmatch(name)) and len(name) <= MAX_NAME


@settings(max_examples=400, deadline=None)
@given(st.one_of(user_names, near_names), st.one_of(user_names, near_names))
def test_no_two_users_map_to_one_account(a, b):
    if a != b:
        assert account_name(a) != account_name(b)
    for name in (a, b):
        assert _valid(account_name(name)) and account_name(name).startswith(ACCOUNT_PREFIX)
        assert _valid(account_name(name, "gpt0-"))


def test_the_name_is_readable_and_exact_where_it_can_be():
    assert account_name("alice") == "gp-alice"
    assert account_name("bob-2") == "gp-bob-2"
    upper, dotted = account_name("Alice"), account_name("alice.smith@lab")
    assert upper.startswith("gp-alice--") and upper != "gp-alice"
    assert dotted.startswith("gp-alice_smith_lab"[:18]) and "--" in dotted
    assert account_name("a--b") != account_name("a-b") and "--" in account_name("a--b")
    long = "x" * 40
    assert len(account_name(long)) <= MAX_NAME and account_name(long) != account_name(long + "y")


@settings(max_examples=200, deadline=None)
@given(user_names)
def test_a_name_is_never_an_existing_account_gpupool_did_not_make(name):
    theirs = {pw.pw_name for pw in pwd.getpwall() if not pw.pw_gecos.startswith(MARK)}
    assert account_name(name) not in theirs


def test_a_bad_prefix_is_refused():
    for bad in ("", "GP-", "1gp", "gp--", "x" * 13):
        with pytest.raises(ValueError):
            UserAccounts(bad)


# -- made on demand --------------------------------------------------------------------------
@root_only
def test_an_account_is_made_once_for_its_user_alone(user_accounts):
    a = user_accounts.ensure("Alice.Smith@lab")
    pw = pwd.getpwnam(a.name)
    assert a.name == user_accounts.name("Alice.Smith@lab") and a.uid == pw.pw_uid != 0
    assert pw.pw_gecos == f"{MARK}Alice.Smith@lab" and pw.pw_shell.endswith(("nologin", "false"))
    assert a.home == str(user_accounts.home_base / a.name) == pw.pw_dir
    home = os.stat(a.home)
    assert home.st_uid == a.uid and stat.S_IMODE(home.st_mode) == 0o700
    assert stat.S_IMODE(user_accounts.home_base.stat().st_mode) == 0o711
    assert user_accounts.ensure("Alice.Smith@lab") == a  # found, not made again
    b = user_accounts.ensure("alice.smith@lab")  # another user, however alike
    assert b.uid != a.uid and b.name != a.name


@root_only
def test_an_account_gpupool_did_not_make_is_never_taken(user_accounts):
    name = user_accounts.name("mallory")
    subprocess.run(["useradd", "--no-create-home", name], check=True, capture_output=True)
    with pytest.raises(StartError, match="not gpupool's for 'mallory'") as e:
        user_accounts.ensure("mallory")
    assert e.value.permanent
    # an account marked for another gpupool user is not this one's either
    other = user_accounts.name("trent")
    subprocess.run(
        ["useradd", "--no-create-home", "--comment", f"{MARK}Trent", other],
        check=True,
        capture_output=True,
    )
    with pytest.raises(StartError, match="not gpupool's for 'trent'"):
        user_accounts.ensure("trent")


@root_only
def test_a_leftover_home_of_someone_else_is_refused(user_accounts):
    home = user_accounts.home("oscar")
    home.parent.mkdir(parents=True, exist_ok=True)
    home.mkdir()
    os.chown(home, pwd.getpwnam("nobody").pw_uid, -1)
    with pytest.raises(StartError, match="is not a directory of"):
        user_accounts.ensure("oscar")


@root_only
def test_useradd_runs_with_a_fixed_path(user_accounts, tmp_path, monkeypatch):
    fake = tmp_path / "bin"
    fake.mkdir()
    marker = tmp_path / f"ran-{uuid.uuid4().hex}"
    (fake / "useradd").write_text(f"#!/bin/sh\ntouch {marker}\nexit 0\n")
    (fake / "useradd").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    a = user_accounts.ensure("peggy")
    assert not marker.exists() and pwd.getpwnam(a.name).pw_uid == a.uid


def test_without_root_no_account_is_made(user_accounts, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert user_accounts.cannot() == "only root can make Unix accounts"
    with pytest.raises(StartError, match="cannot make a Unix account for gpupool user 'zed'"):
        user_accounts.ensure("zed")
