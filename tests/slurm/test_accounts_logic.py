"""Tenants never share a Slurm account (security review F12), over a scripted `sacctmgr`
that keeps accounts as Slurm 22.05 does (names and descriptions folded to lower case, an
association needs its account). No Slurm needed; test_slurm_engine.py checks the real one."""

from __future__ import annotations

import subprocess

import pytest

from gpupool.clock import ManualClock
from gpupool.domain import Quota, Tenant
from gpupool.engines.common.engine import EngineEnv
from gpupool.engines.slurm.accounts import SlurmAccounts, account_mark
from gpupool.engines.slurm.cli import SlurmCLI, SlurmError
from gpupool.engines.slurm.engine import SlurmEngine


class FakeSacctmgr:
    def __init__(self) -> None:
        #: account -> {"parent", "description", "tres"}
        self.accounts: dict[str, dict[str, str]] = {}
        self.users: set[tuple[str, str]] = set()
        self.writes: list[list[str]] = []

    def add(self, name: str, description: str, parent: str = "root", tres: str = "") -> None:
        self.accounts[name.lower()] = {
            "parent": parent,
            "description": description.lower(),
            "tres": tres,
        }

    def __call__(self, args, input=None, **kw):  # noqa: A002, ANN001, ANN003, ANN204
        assert args[0] == "sacctmgr", args
        out, err, code = "", "", 0
        if args[1:4] == ["-n", "-P", "list"]:
            what, rest = args[4], args[5:]
            if what == "account":
                out = "".join(f"{a}|{v['description']}\n" for a, v in self.accounts.items())
            elif rest and rest[0] == "where":
                user = rest[1].split("=", 1)[1]
                acct = rest[2].split("=", 1)[1]
                out = f"{user}\n" if (user, acct) in self.users else ""
            else:
                out = "".join(f"{a}||{v['tres']}\n" for a, v in self.accounts.items())
        else:
            self.writes.append(list(args))
            verb, kind = args[2], args[3]
            if (verb, kind) == ("add", "account"):
                opts = dict(a.split("=", 1) for a in args[5:])
                self.add(args[4], opts["Description"], opts["Parent"])
            elif (verb, kind) == ("modify", "account"):
                acct = args[5].split("=", 1)[1]
                key, value = args[7].split("=", 1)
                field = {"Description": "description", "GrpTRES": "tres"}[key]
                self.accounts[acct][field] = value.lower() if field == "description" else value
            elif (verb, kind) == ("add", "user"):
                acct = args[5].split("=", 1)[1]
                if acct not in self.accounts:
                    code, err = 1, f" Error: account {acct} does not exist"
                self.users.add((args[4].removeprefix("Names="), acct))
        return subprocess.CompletedProcess(args, code, out, err)


def tenants(*names: str) -> list[Tenant]:
    return [Tenant(n, Quota.gpus(1, 2)) for n in names]


@pytest.fixture
def slurm() -> FakeSacctmgr:
    return FakeSacctmgr()


@pytest.fixture
def accounts(slurm) -> SlurmAccounts:
    return SlurmAccounts(SlurmCLI("/dev/null", runner=slurm))


def test_the_reviews_colliding_tenants_get_three_accounts_each_marked_exactly(slurm, accounts):
    result = accounts.sync(tenants("a", "a/b", "a.b", "A", "A/b"))
    assert result.refused == {}
    names = {t: accounts.account_of(t) for t in ("a/b", "a.b", "A/b")}
    assert len(set(names.values())) == 3, names
    for tenant, acct in names.items():
        assert slurm.accounts[acct]["description"] == account_mark(tenant).lower()
    # each limit is set once, on its own account: no sync flips another's
    assert accounts.sync(tenants("a", "a/b", "a.b", "A", "A/b")).changed == []
    assert {account_mark(t) for t in ("a/b", "A/b", "a.b")} == {
        account_mark(t).lower() for t in ("a/b", "A/b", "a.b")
    }  # marks survive Slurm's lower-casing
    assert len({account_mark(t) for t in ("a/b", "A/b", "a.b")}) == 3


def test_an_account_made_by_hand_is_refused_and_never_submitted_to(slurm, accounts):
    slurm.add("gp.lab", "physics group", tres="gres/gpu=64")
    result = accounts.sync(tenants("lab", "lab/sub"))
    assert "gp.lab" in result.refused and "no gpupool tenant" in result.refused["gp.lab"]
    assert "sacctmgr" in result.refused["gp.lab"]  # says what to do
    assert "gp.lab.sub" in result.refused  # never hung under someone else's account
    assert slurm.accounts["gp.lab"]["tres"] == "gres/gpu=64"  # left as it was
    assert "gp.lab.sub" not in slurm.accounts
    assert [w for w in slurm.writes if "name=gp.lab" in w] == []
    with pytest.raises(SlurmError, match="gp.lab exists"):
        accounts.ensure_user("ann", "gp.lab")
    assert ("ann", "gp.lab") not in slurm.users


def test_an_account_marked_for_another_tenant_is_refused(slurm, accounts):
    slurm.add("gp.lab", account_mark("other"))
    result = accounts.sync(tenants("lab"))
    assert "another tenant" in result.refused["gp.lab"]
    with pytest.raises(SlurmError):
        accounts.ensure_user("ann", "gp.lab")


def test_an_older_gpupools_account_of_the_same_tenant_is_taken_over_and_marked(slurm, accounts):
    slurm.add("gp.physics", "gpupool physics", tres="gres/gpu=-1")
    slurm.add("gp.physics.lab-a", "gpupool physics/lab-a", parent="gp.physics")
    result = accounts.sync(tenants("physics", "physics/lab-a"))
    assert result.refused == {}
    assert slurm.accounts["gp.physics.lab-a"]["description"] == "gpupool tenant physics/lab-a"
    accounts.ensure_user("ann", "gp.physics.lab-a")
    assert ("ann", "gp.physics.lab-a") in slurm.users


def test_the_engine_records_a_refusal_once(slurm):
    events: list[tuple[str, str, dict]] = []
    clock = ManualClock(0.0)
    engine = SlurmEngine(cli=SlurmCLI("/dev/null", runner=slurm), tenants=lambda: tenants("lab"))
    engine._env = EngineEnv(clock, record=lambda k, m, d: events.append((k, m, dict(d))))
    slurm.add("gp.lab", "")
    engine.sync_accounts(force=True)
    engine.sync_accounts(force=True)
    refused = [e for e in events if e[0] == "slurm.account_refused"]
    assert len(refused) == 1 and refused[0][2] == {"account": "gp.lab"}
    with pytest.raises(SlurmError):
        engine.ensure_user("ann", "gp.lab")
