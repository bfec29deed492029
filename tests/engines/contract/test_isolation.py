"""The isolation invariants every engine keeps, through the same assertions for each:

- work never runs as root (local: the job's process uid; Slurm: the job's user; Kubernetes:
  the pod's `runAsNonRoot`/`runAsUser` and no privilege escalation);
- a member's declared environment never shapes a process gpupool runs itself (the local
  launcher, Slurm's commands): it reaches the work only. The API refuses such names at
  submit too (`domain.commands.check_declared_env`); this is the engine's own defence;
- one tenant's work never lands in another tenant's place (namespace, Slurm account, Unix
  account), and each tenant's lands in its own;
- secrets never appear in what others read of the work (pod, squeue record, argv, the
  local spec), and the server's own secrets never reach it at all.
"""

from __future__ import annotations

import os

import pytest

from gpupool.engines.common.executor import ExecState
from tests.engines.contract.adapter import Behaviour
from tests.engines.contract.caps import need

ENDED = (ExecState.SUCCEEDED, ExecState.FAILED, ExecState.LOST)
#: what a member might declare to steer a privileged process (the security review's F1)
STEERING = {
    "PATH": "/tmp/gpupool-member-bin:/usr/bin:/bin",
    "LD_PRELOAD": "/tmp/gpupool-member-bin/evil.so",
    "LD_LIBRARY_PATH": "/tmp/gpupool-member-bin",
    "SLURM_CONF": "/tmp/gpupool-member-bin/slurm.conf",
    "SBATCH_GRES": "gpu:8",
}
MEMBER_SECRET = "member-secret-4f1c"
SERVER_SECRETS = {"GPUPOOL_ADMIN_PASSWORD": "server-secret-91d2", "PGPASSWORD": "db-secret-77a0"}


def test_work_never_runs_as_root(engine_under_test):
    eut = engine_under_test
    need(eut)
    wid = eut.id("whoami")
    eut.start(wid, Behaviour(show_uid=True))
    st = eut.settle(wid, *ENDED)
    assert (st.state, st.exit_code) == (ExecState.SUCCEEDED, 0)
    uid = eut.uid_of(wid)
    if uid is None:
        pytest.skip(f"the {eut.name} engine runs no processes")
    assert uid != 0


def test_a_declared_environment_never_shapes_a_privileged_process(engine_under_test):
    eut = engine_under_test
    need(eut)
    wid = eut.id("steer")
    declared = {**STEERING, "MEMBER_VAR": "mine"}
    eut.start(wid, Behaviour(show=("MEMBER_VAR",), until="release"), env=declared)
    eut.wait_ready(wid)
    envs = eut.privileged_envs()
    assert envs or not eut.privileged_here, "no environment of gpupool's own processes read"
    for env in envs:
        assert not {k for k in env if k.startswith(("LD_", "SBATCH_"))}, env
        assert "gpupool-member-bin" not in env.get("PATH", "") + env.get("SLURM_CONF", "")
        assert "MEMBER_VAR" not in env
    assert eut.reached_work(wid)["MEMBER_VAR"] == "mine"  # the work itself got them
    eut.release(wid)
    st = eut.settle(wid, *ENDED)
    assert (st.state, st.exit_code) == (ExecState.SUCCEEDED, 0)


def test_each_tenants_work_lands_in_its_own_place(engine_under_test):
    eut = engine_under_test
    need(eut)
    a, a2, b = eut.id("lab-1"), eut.id("lab-2"), eut.id("other-1")
    eut.start(a, Behaviour(until="release"), tenant="lab")
    eut.start(a2, Behaviour(until="release"), tenant="lab", first=1)
    eut.start(b, Behaviour(until="release"), tenant="other", first=2)
    for wid in (a, a2, b):
        eut.wait_ready(wid)
    places = {wid: eut.place_of(wid) for wid in (a, a2, b)}
    for wid in (a, a2, b):
        eut.release(wid)
        eut.settle(wid, *ENDED)
    if places[a] is None:
        pytest.skip(f"the {eut.name} engine keeps no per-tenant place here")
    assert places[a] == places[a2] != places[b]
    for wid, tenant in ((a, "lab"), (b, "other")):
        want = eut.place_for(tenant)
        assert want is None or places[wid] == want


def test_secrets_stay_out_of_what_others_read_and_server_secrets_out_of_the_work(
    engine_under_test, monkeypatch
):
    eut = engine_under_test
    need(eut)
    for name, value in SERVER_SECRETS.items():
        monkeypatch.setenv(name, value)
    wid = eut.id("secret")
    shown = ("API_TOKEN", *SERVER_SECRETS)
    eut.start(wid, Behaviour(show=shown, until="release"), env={"API_TOKEN": MEMBER_SECRET})
    eut.wait_ready(wid)
    spec = eut.public_spec(wid)
    for secret in (MEMBER_SECRET, *SERVER_SECRETS.values()):
        assert secret not in spec
    reached = eut.reached_work(wid)
    assert reached["API_TOKEN"] == MEMBER_SECRET
    assert {n: reached[n] for n in SERVER_SECRETS} == dict.fromkeys(SERVER_SECRETS, "<unset>")
    eut.release(wid)
    eut.settle(wid, *ENDED)
    assert os.environ["PGPASSWORD"] == SERVER_SECRETS["PGPASSWORD"]  # still the server's
