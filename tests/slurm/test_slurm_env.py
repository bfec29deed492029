"""On a real Slurm: the job gets exactly the variables its workload declared (values with
spaces, quotes, ``$``, backquotes, newlines) although sbatch runs with the server's own
fixed environment and ``--export=NONE`` (security review F1); Slurm still binds the GPUs.
Tenants' accounts carry their exact tenant and a hand-made account is not used (F12)."""

from __future__ import annotations

import pytest

from gpupool.domain import Quota, Tenant
from gpupool.engines.slurm.accounts import account_mark
from gpupool.store import TenantRepo
from tests.slurm.conftest import sacct, sh

pytestmark = pytest.mark.slurm

DECLARED = {
    "SPACES": "a  b\tc",
    "QUOTES": 'it\'s "quoted"',
    "DOLLAR": "$HOME ${PATH} $(id -u) `id -u` \\n",
    "NEWLINES": "line 1\n\nline 3",  # (the API strips leading and trailing blanks)
    "EMPTY": "",
    "DIRECTIVE": "x\n#SBATCH --array=0-3\n#SBATCH --exclusive",
    "PATH": "/usr/local/bin:/usr/bin:/bin:/opt/member-tools",
}


def test_the_job_gets_its_declared_variables_exactly(make_world):
    w = make_world()
    wid = w.submit("slann", gpus=1, env=DECLARED, command=["env", "-0"])["id"]
    w.schedule()
    done = w.settle(wid, {"succeeded", "failed", "lost"})
    assert done["state"] == "succeeded", done
    ex = w.engine.executor
    assert ex is not None
    raw = ex._jobs[wid].output.read_text()
    got = dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)
    for name, value in DECLARED.items():
        assert got.get(name) == value, (name, got.get(name))
    assert got["GPUPOOL_WORKLOAD_ID"] == wid
    assert got["USER"] == "slann" and len(got["CUDA_VISIBLE_DEVICES"].split(",")) == 1
    assert got["SLURM_JOB_ID"] == w.job_id(wid)
    job = sacct(w.job_id(wid))
    assert job["user"] == "slann" and job["account"] == "gp.lab"
    ids = sh("sacct", "-n", "-X", "--allusers", "-o", "JobID", "--name", f"gpupool-{wid}")
    assert ids.split() == [w.job_id(wid)]  # one job: the value's #SBATCH was no directive


def test_accounts_carry_their_exact_tenant_and_a_hand_made_one_is_refused(make_world):
    w = make_world()
    with w.ctx.store.write() as s:
        repo = TenantRepo(s)
        repo.save(Tenant("Lab2", Quota.gpus(0, 1)), w.clock.now())
        repo.save(Tenant("handmade", Quota.gpus(0, 1)), w.clock.now())
    sh("sacctmgr", "-i", "add", "account", "gp.handmade", "Description=made by hand")
    try:
        w.engine.sync_accounts(force=True)
        rows = sh("sacctmgr", "-n", "-P", "list", "account", "format=Account,Description")
        described = dict(r.split("|", 1) for r in rows.splitlines())
        lab2 = w.engine.accounts.account_of("Lab2")
        assert lab2 != "gp.lab2" and described[lab2] == account_mark("Lab2")
        assert described["gp.lab"] == account_mark("lab")
        assert described["gp.handmade"] == "made by hand"  # untouched
        assert "gp.handmade" in w.engine.accounts.refused
    finally:
        sh("sacctmgr", "-i", "delete", "account", "gp.handmade")
        sh("sacctmgr", "-i", "delete", "account", w.engine.accounts.account_of("Lab2"))
