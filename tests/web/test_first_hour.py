"""docs/first-hour.md, walked for real (issue 30): the tutorial is the script of this test.

Every code block of the tutorial tagged ```` ```bash first-hour:<step> ```` runs, line by
line as written, in one interactive bash on a terminal (80 columns, passwords typed at the
prompts) against a real `gpupool up --simulate 4xH100-80GB` with JupyterHub (a subprocess,
started with the tutorial's own `gpupool up` line and its environment); each command must
exit 0. Between the steps the test asserts what the tutorial says happens: the first job
sees its GPU, lab-a's job waits for a reclaim at a time, lab-b's borrowed job shows when it
will be preempted, the reclaim happens at that time and not before (the tutorial's short
`GPUPOOL_RECLAIM_AFTER_S`), the fractional job gets its share of the GPU the admin shared, a
notebook asked for in the hub's spawn form is queued. Chromium takes the screenshots the
tutorial shows (docs/img/first-hour/*.png) and every image it embeds must be one of them.

What the test changes, and why: the server's ports are free ones (not 8080/8000) and its
data directory a temporary one; as root, plain jobs run as `nobody` (`--jobs-account`, as in
tests/cli/test_up.py) so that no `gp-<name>` account is made on the test machine, and the
notebook is not started (its account would be made, and this machine's Python under /root
is out of its reach, which the tutorial's install avoids). The notebook starting by itself
once a GPU frees is tested in tests/jupyterhub/test_hub_pending_page.py.
Waits are bounded polls of the real server, never sleeps standing in for a clock."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from gpupool.engines.local.executor import LocalExecutor
from tests.cli.test_up import PASSWORD, Up
from tests.engines.conftest import end_all
from tests.support import free_hub_port, free_port, wait_for

pexpect = pytest.importorskip("pexpect", reason="pexpect drives the tutorial's terminal")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("configurable-http-proxy") is None,
        reason="configurable-http-proxy missing; scripts/test installs it with npm",
    ),
]
ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "first-hour.md"
IMAGES = ROOT / "docs" / "img" / "first-hour"
TRANSCRIPT = ROOT / "test-artifacts" / "first-hour" / "transcript.txt"
STEP = re.compile(r"^```bash first-hour:([\w-]+)\s*$")
#: the passwords the test types when the tutorial's commands ask (admin: gpupool up's)
PASSWORDS = {"admin": PASSWORD, "alice": "alice-first-hour-pw", "bob": "bob-first-hour-pw"}
DOC_API, DOC_HUB = "http://127.0.0.1:8080", "http://127.0.0.1:8000"


def tutorial_steps(text: str) -> dict[str, list[str]]:
    """step name -> the lines of its ```` ```bash first-hour:<step> ```` block, in order
    (blank lines and whole-line comments left out, `\\`-continued lines joined)."""
    steps: dict[str, list[str]] = {}
    cur: list[str] | None = None
    pending = ""
    for line in text.splitlines():
        m = STEP.match(line)
        if cur is None:
            if m:
                assert m.group(1) not in steps, f"step {m.group(1)} twice"
                cur = steps[m.group(1)] = []
            continue
        if line.startswith("```"):
            cur = None
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1]
            continue
        line, pending = pending + line, ""
        if line.strip() and not line.lstrip().startswith("#"):
            cur.append(line)
    return steps


def test_the_tutorial_has_its_steps():
    steps = tutorial_steps(DOC.read_text())
    assert list(steps) == [
        "up",
        "login",
        "first-job",
        "teams",
        "bob-borrows",
        "bob-ls",
        "alice-asks",
        "alice-queue",
        "bob-warned",
        "after-reclaim",
        "alice-logs",
        "share-a-gpu",
        "fraction",
        "fraction-logs",
    ]
    (up,) = steps["up"]
    assert shlex.split(up)[-2:] == ["gpupool", "up"]


class Terminal:
    """One interactive bash on a pseudo-terminal of 80 columns, as a person types into it:
    a line at a time, passwords typed at gpupool's prompts; each line's output and status."""

    PROMPT = r"@@first-hour (\d+)@@ "
    ASKS = [r"password(?: for ([\w.-]+))?: ", r"Repeat for confirmation: "]

    def __init__(self, env: dict[str, str], log: list[str]):
        self.log = log
        self.sh = pexpect.spawn(
            "bash",
            ["--norc", "--noprofile", "-i"],
            env={**env, "PS1": "@@first-hour $?@@ ", "PS2": ""},
            encoding="utf-8",
            dimensions=(50, 80),
            timeout=90,
        )
        self.sh.expect(self.PROMPT)
        self.sh.sendline("stty -echo")
        self.sh.expect(self.PROMPT)
        self.user = ""

    def run(self, line: str) -> str:
        """Type `line`, answer its password prompts; its output. Fails unless it exits 0."""
        m = re.search(r"gpupool login .*--user (\S+)", line) or re.search(
            r"gpupool user create (\S+)", line
        )
        who = m.group(1) if m else ""
        self.sh.sendline(line)
        out = ""
        while True:
            i = self.sh.expect([self.PROMPT, *self.ASKS])
            out += self.sh.before
            if i == 0:
                break
            assert who in PASSWORDS, f"{line!r} asks for a password the test does not know"
            out += self.sh.after
            self.sh.sendline(PASSWORDS[who])
        out = out.replace("\r\n", "\n").replace("\r", "")
        rc = int(self.sh.match.group(1))
        self.log.append(f"$ {line}\n{out}" + (f"[exit {rc}]\n" if rc else ""))
        assert rc == 0, f"{line}\n -> exit {rc}\n{out}"
        return out

    def close(self) -> None:
        self.sh.close(force=True)


class Walk:
    """The tutorial's steps against one server: its lines typed with the test's ports."""

    def __init__(self, up: Up, term: Terminal, steps: dict[str, list[str]]):
        self.up, self.term, self.steps = up, term, steps
        r = httpx.post(
            f"{up.url}/api/v1/auth/login", json={"username": "admin", "password": PASSWORD}
        )
        assert r.status_code == 200, r.text
        self.h = {"Authorization": f"Bearer {r.json()['token']}"}

    def step(self, name: str) -> str:
        """Type every line of step `name`; their output, together."""
        lines = [line.replace(DOC_API, self.up.url) for line in self.steps[name]]
        self.term.log.append(f"### {name}\n")
        return "".join(self.term.run(line) for line in lines)

    def var(self, name: str) -> str:
        """A shell variable the tutorial set (a workload id)."""
        out = self.term.run(f'echo "${name}"').strip()
        assert re.fullmatch(r"w-[0-9a-z]+", out), f"${name} = {out!r}"
        return out

    def workload(self, wid: str) -> dict:
        r = httpx.get(f"{self.up.url}/api/v1/workloads/{wid}", headers=self.h, timeout=30)
        assert r.status_code == 200, r.text
        return r.json()

    def until(self, wid: str, what: str, check, timeout: float = 60) -> dict:
        def ok():
            w = self.workload(wid)
            return w if check(w) else None

        return wait_for(ok, f"{wid} {what}\n--- server:\n{self.up.output[-3000:]}", timeout, 0.3)

    def gpus(self) -> dict[int, dict]:
        r = httpx.get(f"{self.up.url}/api/v1/gpus", headers=self.h, timeout=30)
        items = r.json()["items"] if isinstance(r.json(), dict) else r.json()
        return {g["index"]: g for g in items}


def hhmm(t: float) -> str:
    """A time as the CLI shows it (to the second, then HH:MM)."""
    return datetime.fromtimestamp(round(t), UTC).strftime("%H:%M")


def running(w: dict) -> bool:
    return w["state"] == "running"


def shot(target, name: str, taken: list[str]) -> None:
    """A screenshot of a page (all of it) or of an element into docs/img/first-hour/."""
    IMAGES.mkdir(parents=True, exist_ok=True)
    whole = {"full_page": True} if hasattr(target, "goto") else {}
    target.screenshot(path=str(IMAGES / f"{name}.png"), animations="disabled", **whole)
    taken.append(f"{name}.png")


def dashboard_login(browser, base: str, user: str):
    """A Chromium page of `user` logged in to the dashboard's own login form at `base`."""
    ctx = browser.new_context(base_url=base, viewport={"width": 1200, "height": 800})
    page = ctx.new_page()
    page.set_default_timeout(30_000)
    page.goto("/dashboard/login?next=/dashboard/workloads")
    page.get_by_label("User name").fill(user)
    page.get_by_label("Password").fill(PASSWORDS[user])
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/dashboard/workloads")
    page.locator("#whoami").filter(has_text=user).wait_for()
    return ctx, page


@pytest.fixture
def terminal_env(tmp_path: Path) -> dict[str, str]:
    """The tutorial's shell: `gpupool` is this interpreter's, the CLI's login is the test's."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gp = bin_dir / "gpupool"
    gp.write_text(
        f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -c "
        "'from gpupool.cli.main import run; run()' \"$@\"\n"
    )
    gp.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPOOL_")}
    env.update(
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        HOME=str(tmp_path / "home"),
        XDG_CONFIG_HOME=str(tmp_path / "cfg"),
        TERM="dumb",
        NO_COLOR="1",
        LC_ALL="C.UTF-8",
    )
    return env


def test_the_first_hour_as_the_tutorial_says(tmp_path, browser, terminal_env):
    steps = tutorial_steps(DOC.read_text())
    (up_line,) = steps["up"]
    words = shlex.split(up_line)
    env = dict(w.split("=", 1) for w in words[: words.index("gpupool")])
    assert env.get("GPUPOOL_RECLAIM_AFTER_S"), "the tutorial sets a short reclaim wait"
    reclaim_after = float(env["GPUPOOL_RECLAIM_AFTER_S"])
    port = free_port()
    hub_port = free_hub_port(port)
    extra = words[words.index("gpupool") + 2 :]
    up = Up(
        tmp_path / "data",
        port,
        "--simulate",
        "4xH100-80GB",
        "--jupyterhub",
        "--hub-port",
        str(hub_port),
        *extra,
        env=env,
    )
    hub = f"http://127.0.0.1:{hub_port}"
    log: list[str] = []
    term = Terminal(terminal_env, log)
    taken: list[str] = []
    try:
        up.wait_ready(90)
        # what the tutorial says gpupool up prints: where things listen
        wait_for(lambda: "JupyterHub on" in up.output, "the hub's address", 60)
        assert f"JupyterHub on {hub}" in up.output, up.output
        assert f"serving on {up.url}" in up.output, up.output
        assert f"dashboard: {up.url}/dashboard)" in up.output, up.output
        wait_for(lambda: _answers(f"{hub}/hub/api/"), f"JupyterHub\n{up.output}", 120, 0.5)
        walk = Walk(up, term, steps)

        # -- log in, the first job -----------------------------------------------------
        out = walk.step("login")
        assert "logged in" in out.lower() and out.count("H100") >= 4, out
        out = walk.step("first-job")
        assert re.search(r"GPU-[0-9a-f-]{8,}", out), out

        # -- two teams ------------------------------------------------------------------
        out = walk.step("teams")
        assert re.search(r"lab-a\s+2\s", out) and re.search(r"lab-b\s+2\s", out), out

        # -- contention and reclaim --------------------------------------------------------
        walk.step("bob-borrows")
        b1, b2 = walk.var("B1"), walk.var("B2")
        for wid in (b1, b2):
            walk.until(wid, "running", running)
        out = walk.step("bob-ls")
        assert out.count("running") >= 2, out
        walk.step("alice-asks")
        a1 = walk.var("A1")
        owed = walk.until(
            a1,
            "waiting with a reclaim time",
            lambda w: (
                w["state"] == "pending"
                and "will be taken" in (w["pending"] or {}).get("reason", "")
            ),
        )
        at = owed["submitted_at"] + reclaim_after
        told = walk.until(b2, "told when it will be preempted", lambda w: w["preemption"])
        said = datetime.fromisoformat(told["preemption"]["at"].replace("Z", "+00:00"))
        assert said.timestamp() == pytest.approx(at, abs=1), (told, owed)
        assert walk.workload(b1)["preemption"] is None  # within lab-b's guarantee
        out = walk.step("alice-queue")
        assert "lab-a is owed 1 GPU within its guarantee" in " ".join(out.split()), out
        out = walk.step("bob-warned")
        flat = " ".join(out.split())
        assert f"running, preempt {hhmm(at)}" in flat, out
        assert f"will be preempted at {hhmm(at)} UTC for lab-a's guarantee" in flat, out

        # the dashboard during contention: bob's workloads, the admin's tenants
        ctx, page = dashboard_login(browser, up.url, "bob")
        try:
            table = page.locator("#mine")
            table.filter(has_text="will be preempted at").wait_for()
            shot(page.locator("section", has=table), "workloads-contention", taken)
        finally:
            ctx.close()
        ctx, page = dashboard_login(browser, up.url, "admin")
        try:
            page.goto("/dashboard/tenants")
            page.locator("#tenants").filter(has_text="borrowing").wait_for()
            shot(page, "tenants-contention", taken)
        finally:
            ctx.close()

        # the reclaim, at the time it was announced (not before it)
        ran = walk.until(a1, "running after the reclaim", running, timeout=reclaim_after + 60)
        assert ran["started_at"] >= at - 0.5, (ran["started_at"], at)
        requeued = walk.workload(b2)
        assert requeued["state"] == "pending" and requeued["preemptions"] == 1, requeued
        assert walk.workload(b1)["state"] == "running" and walk.workload(b1)["preemptions"] == 0
        out = walk.step("after-reclaim")
        assert f"{b2} was preempted at {hhmm(ran['started_at'])} UTC and requeued" in out, out
        out = walk.step("alice-logs")
        assert re.search(r"training on GPU-", out), out

        # -- a fractional GPU ---------------------------------------------------------------
        gpu3 = walk.gpus()[3]
        assert gpu3["allocated_milli"] == 0, gpu3  # the GPU the tutorial shares is free
        out = walk.step("share-a-gpu")
        assert walk.gpus()[3]["sharing"] == "shared", out
        walk.step("fraction")
        f = walk.var("F")
        frac = walk.until(f, "running", running)
        assert frac["allocation"]["gpu_uuids"] == [gpu3["uuid"]], frac
        out = walk.step("fraction-logs")
        assert f"{gpu3['uuid']} 250" in out, out

        # -- a notebook through the hub, then the dashboard from the hub's Services menu ------
        ctx = browser.new_context(base_url=hub, viewport={"width": 1200, "height": 800})
        try:
            page = ctx.new_page()
            page.set_default_timeout(30_000)
            page.goto("/hub/login")
            page.fill("#username_input", "alice")
            page.fill("#password_input", PASSWORDS["alice"])
            page.click("#login_submit")
            page.wait_for_url("**/hub/spawn**")
            page.check("#gpupool-profile-gpu")
            page.click("#spawn_form button[type=submit]")
            page.wait_for_url("**/spawn-pending/alice**")
            msg = page.locator("#progress-message")
            msg.filter(has_text="Queued for a GPU: 1st in line for lab-a").wait_for()
            shot(page, "hub-queued", taken)
            (nb,) = [
                w
                for w in httpx.get(
                    f"{up.url}/api/v1/workloads",
                    params={"user": "alice", "kind": "notebook"},
                    headers=walk.h,
                ).json()
            ]
            assert nb["state"] == "pending" and nb["profile"] == "gpu", nb

            page.locator(".dropdown-toggle", has_text="Services").click()
            page.locator("a.dropdown-item", has_text="gpupool").click()
            page.wait_for_url("**/services/gpupool/dashboard/**")
            page.locator("#whoami").filter(has_text="alice").wait_for()
            page.locator("#nodes .gpu").first.wait_for()
            shot(page, "dashboard-from-hub", taken)
        finally:
            ctx.close()
        embedded = set(re.findall(r"img/first-hour/([\w-]+\.png)", DOC.read_text()))
        assert embedded == set(taken), (embedded, taken)
    finally:
        term.close()
        up.stop()
        # work outlives its server by design (adopted at the next start): end what the
        # walk left running (the tutorial's sleep 3600 jobs, run as nobody)
        end_all(LocalExecutor(tmp_path / "data" / "jobs", user_mode="single-user"))
        TRANSCRIPT.parent.mkdir(parents=True, exist_ok=True)
        TRANSCRIPT.write_text("".join(log) + "\n--- gpupool up:\n" + up.output)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_steps_are_read_as_written():
    text = (
        "```bash first-hour:a\n"
        "# a comment\n"
        "gpupool run --gpus 1 \\\n"
        "   -- python3 x.py\n"
        "\n"
        "```\n"
        "```bash\nnot a step\n```\n"
        "```bash first-hour:b\nX=$(gpupool run -- true)   # set X\n```\n"
    )
    assert tutorial_steps(text) == {
        "a": ["gpupool run --gpus 1    -- python3 x.py"],
        "b": ["X=$(gpupool run -- true)   # set X"],
    }
