"""The CLI against a real server: uvicorn on a loopback port in a thread, with the scheduler
loop running and a scripted fake executor (`echo ...` prints and succeeds, `exit N` fails
with N, anything else keeps running)."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest
from typer.testing import CliRunner

from gpupool.cli.main import app as cli
from gpupool.clock import SystemClock
from gpupool.domain import GPU, Allocation, Node, Quota, Tenant, Workload
from gpupool.engines.common.executor import Handle
from gpupool.engines.fake.engine import FakeEngine
from gpupool.engines.fake.executor import FakeExecutor
from gpupool.server.services.accounts import issue_token
from gpupool.server.settings import Settings
from gpupool.store import NodeRepo, TenantRepo, UsageRepo, open_store
from gpupool.system import SystemSettings, build_system
from tests.server.conftest import PASSWORD, seed
from tests.support import ServedApp, wait_for


class ScriptedExecutor(FakeExecutor):
    def start(
        self,
        workload: Workload,
        allocation: Allocation | None,
        *,
        env: Mapping[str, str] | None = None,
        unix_user: str | None = None,
    ) -> Handle:
        h = super().start(workload, allocation, env=env, unix_user=unix_user)
        cmd = list(workload.command)
        if cmd[:1] == ["echo"]:
            self.write_log(workload.id, " ".join(cmd[1:]) + "\n")
            self.finish(workload.id, 0)
        elif cmd[:1] == ["exit"]:
            self.write_log(workload.id, "failing on purpose\n")
            self.finish(workload.id, int(cmd[1]))
        return h


@pytest.fixture
def server(tmp_path):
    store = open_store(f"sqlite:///{tmp_path / 'gpupool.db'}")
    clock = SystemClock()
    settings = Settings(database_url=store.url, scheduler_interval_s=0.05)
    system = build_system(
        SystemSettings(server=settings),
        FakeEngine(ScriptedExecutor(clock)),
        clock=clock,
        store=store,
    )
    seed(system.ctx)
    with ServedApp(system.app) as url:
        yield url, system.ctx
    system.stop()
    store.close()


@pytest.fixture
def env(server, tmp_path, monkeypatch):
    url, ctx = server
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.delenv("GPUPOOL_TOKEN", raising=False)
    monkeypatch.setenv("GPUPOOL_URL", url)
    return url, ctx


def gp(*args: str, input: str | None = None, token: str | None = None):
    env = {"GPUPOOL_TOKEN": token} if token else {}
    return CliRunner().invoke(cli, list(args), input=input, env=env)


def as_(ctx, user: str) -> str:
    return issue_token(ctx, user, "cli-test", None).token


def test_login_saves_config_and_ls_uses_it(env, tmp_path):
    url, _ = env
    r = gp("login", "--user", "ann", "--password-stdin", input=PASSWORD + "\n")
    assert r.exit_code == 0, r.output
    assert "logged in" in r.output and "member of lab" in r.output
    cfg = (tmp_path / "cfg" / "gpupool" / "config.toml").read_text()
    assert url in cfg and "gp_" in cfg
    r = gp("ls")
    assert r.exit_code == 0, r.output
    r = gp("login", "--user", "ann", "--password-stdin", input="wrong password\n")
    assert r.exit_code == 1 and "wrong user name or password" in r.output
    assert "Traceback" not in r.output


def test_run_wait_streams_logs_and_exits_with_the_job_code(env):
    _, ctx = env
    t = as_(ctx, "ann")
    r = gp("run", "--gpus", "1", "--wait", "--poll", "0.05", "--", "echo", "hello", token=t)
    assert r.exit_code == 0, r.output
    assert "hello" in r.output and "succeeded" in r.output
    r = gp("run", "--gpus", "1", "--wait", "--poll", "0.05", "--", "exit", "3", token=t)
    assert r.exit_code == 3, r.output
    assert "failing on purpose" in r.output


def test_run_show_queue_cancel_logs(env):
    _, ctx = env
    t = as_(ctx, "ann")
    r = gp("run", "--gpus", "3", "--name", "big", "--", "python", "train.py", token=t)
    assert r.exit_code == 0, r.output
    big = r.output.strip()
    assert big.startswith("w-")
    r = gp("run", "--gpu-fraction", "0.25", "--gpu-memory", "20G", "--", "python", "x", token=t)
    small = r.output.strip()

    def big_runs_and_small_waits_on_the_limit() -> bool:
        q = json.loads(gp("queue", "--json", token=t).output)
        shown = json.loads(gp("show", big, "--json", token=t).output)
        waits = q[0]["workload"]["id"] == small and "limit" in q[0]["reason"] if q else False
        return shown["state"] == "running" and waits

    # the scheduler loop gets to both
    wait_for(
        big_runs_and_small_waits_on_the_limit,
        f"{big} running and {small} first in the queue, waiting on the limit",
        timeout=30,
        every=0.05,
    )
    r = gp("queue", token=t)
    assert small in r.output and "WHY IT WAITS" in r.output
    r = gp("show", big, token=t)
    assert "enforcement policed" in r.output and "workload.admitted" in r.output
    r = gp("ls", token=t)
    assert big in r.output and small in r.output
    r = gp("ls", "--all", "--json", "--state", "running", token=t)
    assert [w["id"] for w in json.loads(r.output)] == [big]
    r = gp("logs", big, token=t)
    assert r.exit_code == 0
    r = gp("cancel", small, token=t)
    assert r.exit_code == 0 and "cancelled" in r.output
    r = gp("cancel", small, token=t)
    assert r.exit_code == 1 and "already ended" in r.output


def test_errors_are_messages_not_tracebacks(env):
    _, ctx = env
    t = as_(ctx, "ann")
    r = gp("run", "--gpus", "9", "--", "x", token=t)
    assert r.exit_code == 1 and "needs 9 GPUs" in r.output and "(HTTP 422)" in r.output
    r = gp("run", "--gpus", "1", "--gpu-fraction", "0.5", "--", "x", token=t)
    assert r.exit_code == 2 and "not both" in r.output
    r = gp("run", "--gpu-fraction", "0.5", "--gpu-memory", "lots", "--", "x", token=t)
    assert r.exit_code == 2 and "e.g. 20G" in r.output
    r = gp("show", "w-nothing", token=t)
    assert r.exit_code == 1 and "no workload" in r.output
    r = gp("ls")  # no token at all
    assert r.exit_code == 1 and "gpupool login" in r.output
    r = gp("ls", token="gp_forged")
    assert r.exit_code == 1 and "HTTP 401" in r.output
    r = CliRunner().invoke(
        cli, ["ls"], env={"GPUPOOL_URL": "http://127.0.0.1:9", "GPUPOOL_TOKEN": t}
    )
    assert r.exit_code == 1 and "cannot reach" in r.output
    r = gp("tenant", "create", "x", token=t)
    assert r.exit_code == 1 and "only an admin" in r.output
    for res in (r,):
        assert "Traceback" not in res.output


def test_admin_commands(env):
    _, ctx = env
    t = as_(ctx, "root")
    r = gp("tenant", "create", "physics", "--guaranteed", "1", "--limit", "2", token=t)
    assert r.exit_code == 0, r.output
    r = gp("tenant", "set-quota", "physics", "--limit", "3", token=t)
    assert "limit 3" in r.output
    r = gp("tenant", "set-quota", "physics", "--guaranteed", "5", token=t)
    assert r.exit_code == 1 and "below guaranteed" in r.output
    assert "physics" in gp("tenant", "ls", token=t).output
    r = gp("tenant", "set-quota", "physics", "--idle-timeout", "7200", token=t)
    assert r.exit_code == 0 and "limit 3" in r.output and "idle timeout 2h" in r.output
    shown = json.loads(gp("tenant", "ls", "--json", token=t).output)
    assert {x["name"]: x["idle_timeout_s"] for x in shown}["physics"] == 7200
    assert "2h" in gp("tenant", "ls", "-o", "wide", token=t).output
    r = gp("tenant", "set-quota", "physics", "--no-idle-timeout", token=t)
    assert r.exit_code == 0 and "idle timeout never" in r.output and "limit 3" in r.output
    r = gp("tenant", "set-quota", "physics", token=t)
    assert r.exit_code == 2 and "nothing to change" in r.output
    r = gp("tenant", "set-quota", "physics", "--idle-timeout", "60", "--no-idle-timeout", token=t)
    assert r.exit_code == 2 and "not both" in r.output
    r = gp(
        "user",
        "create",
        "alice",
        "--tenant",
        "physics",
        "--password-stdin",
        input="a long password\n",
        token=t,
    )
    assert r.exit_code == 0, r.output
    assert "created user alice" in r.output and "alice is now member of physics" in r.output
    r = gp(
        "user",
        "create",
        "bert",
        "--tenant",
        "nowhere",
        "--password-stdin",
        input="a long password\n",
        token=t,
    )
    assert r.exit_code == 1 and "nowhere" in r.output
    users = {u["name"]: u for u in json.loads(gp("user", "ls", "--json", token=t).output)}
    assert "bert" not in users  # refused before anything was created
    assert [(m["tenant"], m["role"]) for m in users["alice"]["memberships"]] == [
        ("physics", "member")
    ]
    r = gp("user", "create", "newbie", "--password-stdin", input="a long password\n", token=t)
    assert r.exit_code == 0, r.output
    r = gp("user", "add-to-tenant", "newbie", "physics", "--role", "viewer", token=t)
    assert "viewer of physics" in r.output
    assert "viewer:physics" in gp("user", "ls", token=t).output
    r = gp("gpu", "set-sharing", "GPU-n1-0", "shared", token=t)
    assert r.exit_code == 0 and "GPU 0 on n1 is now shared" in r.output
    r = gp("gpu", "set-sharing", "n1:1", "shared", token=t)  # as gpu ls names it
    assert r.exit_code == 0 and "GPU 1 on n1 is now shared" in r.output
    r = gp("gpu", "set-sharing", "n1:7", "shared", token=t)
    assert r.exit_code == 1 and "no GPU 7 on node 'n1'" in r.output
    assert "n1:0" in gp("gpu", "ls", token=t).output
    assert "GPU-n1-0" in gp("gpu", "ls", "-o", "wide", token=t).output
    r = gp(
        "profile",
        "create",
        "quarter",
        "--gpu-fraction",
        "0.25",
        "--gpu-memory",
        "20G",
        "-t",
        "lab",
        token=t,
    )
    assert r.exit_code == 0, r.output
    assert "quarter" in gp("profile", "ls", token=t).output
    assert gp("profile", "rm", "quarter", token=t).exit_code == 0
    assert "quarter" not in gp("profile", "ls", token=t).output


def test_usage(env):
    _, ctx = env
    with ctx.store.write() as s:
        UsageRepo(s).add(
            workload_id="w-a",
            tenant="lab",
            user="ann",
            day="2026-05-01",
            gpu_seconds_allocated=7200,
            gpu_seconds_busy=1800,
        )
    t = as_(ctx, "ann")
    r = gp("usage", "--by", "user", token=t)
    assert r.exit_code == 0 and "ann" in r.output and "25%" in r.output
    rep = json.loads(gp("usage", "--json", "--from", "2026-05-01", token=t).output)
    assert rep["rows"][0]["gpu_hours_allocated"] == 2.0


def test_usage_shows_a_dash_where_nothing_was_measured(env):
    """Unmeasured busy time is `-`, not 0.00 / 0%; measured idleness stays 0.00 / 0%."""
    _, ctx = env
    with ctx.store.write() as s:
        for user, measured in (("ann", 0.0), ("otto", 3600.0)):
            UsageRepo(s).add(
                workload_id=f"w-{user}",
                tenant="lab",
                user=user,
                day="2026-05-01",
                gpu_seconds_allocated=3600,
                gpu_seconds_measured=measured,
            )
    r = gp("usage", "--by", "user", "-o", "wide", token=as_(ctx, "root"))
    assert r.exit_code == 0, r.output
    rows = {line.split()[0]: line.split()[1:] for line in r.output.splitlines()[1:]}
    assert rows["ann"][:3] == ["1.00", "-", "-"] and rows["ann"][3] == "-"  # MAX MiB too
    assert rows["otto"][:3] == ["1.00", "0.00", "0%"]


def test_set_quota_echoes_every_value_it_set(env):
    _, ctx = env
    t = as_(ctx, "root")
    assert gp("tenant", "create", "chem", "--guaranteed", "1", token=t).exit_code == 0
    r = gp("tenant", "set-quota", "chem", "--max-per-user", "2", "--weight", "3", token=t)
    assert r.exit_code == 0, r.output
    assert r.output.strip() == (
        "chem: guaranteed 1, limit none, weight 3, max per user 2, idle timeout never"
    )


def test_followed_work_ends_in_the_domains_final_states_and_preempted():
    from gpupool.cli.client import TERMINAL
    from gpupool.domain import ACTIVE_STATES, TERMINAL_STATES, WorkloadState

    assert TERMINAL_STATES | {WorkloadState.PREEMPTED} == TERMINAL
    assert not TERMINAL & ACTIVE_STATES and WorkloadState.PENDING not in TERMINAL


def test_run_env_reaches_the_job_and_bad_pairs_are_refused(env):
    _, ctx = env
    t = as_(ctx, "ann")
    r = gp(
        "run", "--gpus", "1", "-e", "WANDB_MODE=offline", "--env", "X=a=b", "--", "sleep", token=t
    )
    assert r.exit_code == 0, r.output
    wid = r.output.strip()
    executor = ctx.executor
    while not isinstance(executor, ScriptedExecutor):  # unwrap a wrapping executor, if any
        executor = executor.inner  # type: ignore[attr-defined]
    wait_for(lambda: wid in executor.world.processes, f"{wid}'s process", timeout=30, every=0.05)
    got = executor.world.processes[wid].env
    assert got["WANDB_MODE"] == "offline" and got["X"] == "a=b"
    r = gp("run", "--env", "NOEQUALS", "--", "sleep", token=t)
    assert r.exit_code == 2 and "NAME=VALUE" in r.output
    r = gp("run", "--env", "CUDA_VISIBLE_DEVICES=1", "--", "sleep", token=t)
    assert r.exit_code == 2 and "gpupool sets it to bind the GPUs" in r.output


def test_run_across_nodes_and_show_the_nodes(env):
    _, ctx = env
    with ctx.store.write() as s:
        NodeRepo(s).upsert(
            Node("n2", tuple(GPU(i, f"GPU-n2-{i}", "H100", 81920) for i in range(4)), 64000, 512000)
        )
        TenantRepo(s).save(Tenant("lab", Quota.gpus(8, 8)), ctx.clock.now())
    t = as_(ctx, "ann")
    r = gp("run", "--nodes", "2", "--", "python", "x", token=t)
    assert r.exit_code == 2 and "--nodes needs --gpus-per-node" in r.output
    r = gp("run", "--nodes", "2", "--gpus-per-node", "2", "--", "python", "x", token=t)
    assert r.exit_code == 0, r.output
    wid = r.output.strip()
    wait_for(
        lambda: json.loads(gp("show", wid, "--json", token=t).output)["state"] == "running",
        f"{wid} running",
        timeout=30,
        every=0.05,
    )
    r = gp("show", wid, token=t)
    assert "2 nodes x 2 GPUs" in r.output
    assert "allocation 2 nodes: n1, n2 (held)" in " ".join(r.output.split())
    assert "n2 GPU 0" in r.output
    r = gp("run", "--nodes", "3", "--gpus-per-node", "2", "--", "python", "x", token=t)
    assert r.exit_code == 1 and "needs 3 nodes" in r.output


def test_run_preemptible_and_checkpointing_flags_reach_the_workload(env):
    _, ctx = env
    t = as_(ctx, "ann")
    r = gp("run", "--no-preemptible", "--checkpointing", "--", "python", "x", token=t)
    assert r.exit_code == 0, r.output
    shown = json.loads(gp("show", r.output.strip(), "--json", token=t).output)
    assert shown["preemptible"] is False and shown["checkpointing"] is True
    r = gp("run", "--", "python", "x", token=t)
    shown = json.loads(gp("show", r.output.strip(), "--json", token=t).output)
    assert shown["preemptible"] is True and shown["checkpointing"] is False


def test_show_prints_the_attained_service_and_what_a_preemption_kept(env):
    from gpupool.domain import WorkloadState
    from gpupool.server.services import lifecycle

    _, ctx = env
    t = as_(ctx, "ann")

    def state(wid: str) -> dict:
        return json.loads(gp("show", wid, "--json", token=t).output)

    ids = []
    for flags in (["--checkpointing"], []):
        r = gp("run", "--gpus", "1", *flags, "--", "python", "train.py", token=t)
        assert r.exit_code == 0, r.output
        ids.append(r.output.strip())
    for wid in ids:  # runs, is preempted and requeued, and runs again
        wait_for(lambda w=wid: state(w)["state"] == "running", f"{wid} running", 30, 0.05)
        lifecycle.request_stop(ctx, wid, WorkloadState.PREEMPTED, "preempted for the test")
        wait_for(
            lambda i=wid: (w := state(i))["state"] == "running" and w["preemptions"] == 1,
            f"{wid} running again after one preemption",
            30,
            0.05,
        )
    ckpt, plain = (gp("show", wid, token=t).output for wid in ids)
    assert "GPU-hours (kept across 1 preemption)" in ckpt
    assert "GPU-hours (this attempt; no checkpointing)" in plain
    assert all(line.startswith("  attained ") for line in ckpt.splitlines() if "GPU-hours" in line)
