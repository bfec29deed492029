"""CLI commands that talk to a gpupool server over its REST API.

The server URL and token come from GPUPOOL_URL / GPUPOOL_TOKEN, else from
`~/.config/gpupool/config.toml` (written by `gpupool login`). Errors from the server are
printed as their problem detail; exit code 1 for refused requests and unreachable servers,
2 for bad command-line input. No tracebacks.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import tomllib
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from functools import wraps
from pathlib import Path
from typing import Any

import httpx
import typer
from rich.console import Console

from gpupool.cli import flags, tables
from gpupool.cli.tables import Col, Output
from gpupool.domain import TERMINAL_STATES, WorkloadState

S = WorkloadState
DEFAULT_URL = "http://127.0.0.1:8000"
#: states in which a followed workload has ended for the caller (preempted work may be
#: requeued, but this run of it is over)
TERMINAL = TERMINAL_STATES | {S.PREEMPTED}

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class CliError(Exception):
    """`retry_after`: seconds after which the same request may succeed (the server could not
    be reached or asked for a retry); None when retrying would not help."""

    def __init__(
        self,
        message: str,
        code: int = 1,
        retry_after: float | None = None,
        problem: dict[str, Any] | None = None,
    ):
        super().__init__(message)
        self.code = code
        self.retry_after = retry_after
        #: the server's problem+json answer, if it refused the request (see cli/flags.py)
        self.problem = problem


# -- configuration and HTTP ---------------------------------------------------------------


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gpupool" / "config.toml"


def load_config() -> dict[str, str]:
    cfg: dict[str, str] = {}
    p = config_path()
    if p.exists():
        try:
            cfg = {k: str(v) for k, v in tomllib.loads(p.read_text()).items()}
        except (tomllib.TOMLDecodeError, OSError) as e:
            raise CliError(f"cannot read {p}: {e}; fix or delete it and run gpupool login") from e
    if os.environ.get("GPUPOOL_URL"):
        cfg["url"] = os.environ["GPUPOOL_URL"]
    if os.environ.get("GPUPOOL_TOKEN"):
        cfg["token"] = os.environ["GPUPOOL_TOKEN"]
    cfg.setdefault("url", DEFAULT_URL)
    return cfg


def save_config(url: str, token: str) -> Path:
    p = config_path()
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(f"url = {json.dumps(url)}\ntoken = {json.dumps(token)}\n")
    p.chmod(0o600)
    return p


class Api:
    """A thin httpx client of /api/v1 that turns problem+json answers into CliError."""

    def __init__(self, url: str, token: str | None, timeout: float = 30.0):
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=self.url + "/api/v1", headers=headers, timeout=timeout)

    def call(self, method: str, path: str, **kw: Any) -> Any:
        try:
            r = self.http.request(method, path, **kw)
        except httpx.HTTPError as e:
            raise CliError(
                f"cannot reach the gpupool server at {self.url} ({e.__class__.__name__}: {e}); "
                "is it running? Set GPUPOOL_URL or run gpupool login --url URL",
                retry_after=1.0,
            ) from None
        if r.status_code >= 400:
            body = None
            try:
                body = r.json()
                detail = body.get("detail") or body.get("title") or r.text
            except (ValueError, AttributeError):
                body, detail = None, r.text or r.reason_phrase
            hint = "; run gpupool login" if r.status_code == 401 else ""
            retry = _retry_after(r) if r.status_code in (502, 503) else None
            raise CliError(
                f"{detail}{hint} (HTTP {r.status_code})", retry_after=retry, problem=body
            )
        if r.status_code == 204 or not r.content:
            return None
        return r.json()

    def get(self, path: str, **kw: Any) -> Any:
        return self.call("GET", path, **kw)

    def post(self, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        return self.call("POST", path, json=body, headers=headers)


def _retry_after(r: httpx.Response) -> float:
    try:
        return max(0.0, float(r.headers.get("retry-after", "1")))
    except ValueError:
        return 1.0


def api() -> Api:
    cfg = load_config()
    if not cfg.get("token"):
        raise CliError("not logged in: run gpupool login (or set GPUPOOL_TOKEN)")
    return Api(cfg["url"], cfg["token"])


def handled(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Print CliError as a message and exit with its code."""

    @wraps(fn)
    def wrapper(*a: Any, **kw: Any) -> Any:
        try:
            return fn(*a, **kw)
        except CliError as e:
            err.print(f"[red]error:[/red] {e}", markup=True)
            raise typer.Exit(e.code) from None

    return wrapper


# -- parsing and printing -------------------------------------------------------------------

_UNITS = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}


def parse_mib(text: str, what: str = "--gpu-memory") -> int:
    """'20G', '512M', '1.5GiB' -> MiB."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT])(?:i?[bB])?\s*", text)
    if not m:
        raise CliError(f"{what} {text!r}: give a size with a unit, e.g. 20G or 512M", 2)
    return int(round(float(m.group(1)) * _UNITS[m.group(2).lower()]))


def _when(t: float | None) -> str:
    if t is None:
        return "-"
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _print_json(data: Any) -> None:
    tables.print_json(out, data)


def _gpus_of(w: dict[str, Any]) -> str:
    a = w.get("allocation")
    if not a:
        return ""
    return tables.gpu_list((s["node"], s["gpu_index"]) for s in a["shares"])


# -- user commands ------------------------------------------------------------------------


def login(
    url: str = typer.Option(None, "--url", help="server URL (default: saved, or GPUPOOL_URL)"),
    user: str = typer.Option(None, "--user", "-u", help="user name (default: $USER)"),
    password_stdin: bool = typer.Option(False, "--password-stdin", help="read the password"),
) -> None:
    """Log in and save the server URL and a token to ~/.config/gpupool/config.toml."""

    @handled
    def go() -> None:
        base = url or load_config()["url"]
        name = user or os.environ.get("USER") or typer.prompt("user")
        pw = sys.stdin.readline().rstrip("\n") if password_stdin else None
        if pw is None:
            pw = typer.prompt("password", hide_input=True)
        res = Api(base, None).post(
            "/auth/login", {"username": name, "password": pw, "token_name": "cli"}
        )
        path = save_config(base, res["token"])
        roles = ", ".join(f"{m['role']} of {m['tenant']}" for m in res["user"]["memberships"])
        admin = " (admin)" if res["user"]["admin"] else ""
        out.print(f"logged in to {base} as {name}{admin}; {roles or 'no tenant roles'}")
        out.print(f"token saved to {path}")

    go()


def whole_gpus(text: str) -> int:
    """`--gpus`: a whole number of GPUs; a part of one GPU is pointed at --gpu-fraction."""
    try:
        n = int(text)
    except ValueError:
        try:
            f: float | None = float(text)
        except ValueError:
            f = None
        part = f"--gpu-fraction {f:g}" if f is not None and 0 < f < 1 else "--gpu-fraction"
        near = f" ({int(f)} or {int(f) + 1})" if f is not None and f > 1 else ""
        raise typer.BadParameter(
            f"{text} is not a whole number: --gpus takes whole GPUs{near}; for a part of one "
            f"GPU use {part}"
        ) from None
    if n < 0:
        raise typer.BadParameter(f"{text}: give 0 or more whole GPUs")
    return n


def run(
    command: list[str] = typer.Argument(
        None, metavar="-- COMMAND", help="the command, after --", show_default=False
    ),
    gpus: int = typer.Option(
        None, "--gpus", parser=whole_gpus, metavar="INTEGER", help="whole GPUs"
    ),
    nodes: int | None = typer.Option(
        None, "--nodes", min=1, help="nodes to span (with --gpus-per-node); one job on all"
    ),
    gpus_per_node: int | None = typer.Option(
        None, "--gpus-per-node", min=1, help="whole GPUs on each node (with --nodes)"
    ),
    gpu_fraction: float = typer.Option(
        None, "--gpu-fraction", help="a part of one GPU, between 0 and 1 (whole GPUs: --gpus)"
    ),
    gpu_memory: str = typer.Option(None, "--gpu-memory", help="GPU memory, e.g. 20G"),
    gpu_model: str = typer.Option(None, "--gpu-model", help="GPU model, e.g. H100"),
    mig: str = typer.Option(
        None, "--mig", help="one MIG instance of this profile, e.g. 1g.10gb (hardware-isolated)"
    ),
    tenant: str = typer.Option(None, "--tenant", "-t", help="tenant (if you have several)"),
    priority: int = typer.Option(0, "--priority", "-p", help="higher runs first in a tenant"),
    name: str = typer.Option(None, "--name", help="a label for the job"),
    cpus: float = typer.Option(0, "--cpus", min=0, help="CPUs"),
    memory: str = typer.Option(None, "--memory", help="host memory, e.g. 16G"),
    max_runtime: float = typer.Option(None, "--max-runtime", help="seconds before it is stopped"),
    wait: bool = typer.Option(False, "--wait", "-w", help="stream logs, exit with its code"),
    poll: float = typer.Option(1.0, "--poll", hidden=True, help="seconds between polls"),
    env: list[str] = typer.Option(
        None, "--env", "-e", help="NAME=VALUE for the job's environment (repeatable)"
    ),
    preemptible: bool = typer.Option(
        True, "--preemptible/--no-preemptible", help="may be stopped for guaranteed work"
    ),
    checkpointing: bool = typer.Option(
        False,
        "--checkpointing",
        help="it saves its progress when stopped and resumes from there (cheap to preempt)",
    ),
) -> None:
    """Submit a job: gpupool run --gpus 1 -- python3 train.py

    Across nodes: gpupool run --nodes 2 --gpus-per-node 8 -- torchrun ... (all nodes start
    together; --cpus and --memory are per node)."""

    @handled
    def go() -> None:
        if gpus is not None and gpu_fraction is not None:
            whole = f"--gpus {gpus}" if gpus else "--gpus"
            raise CliError(
                f"use {whole} (whole GPUs) or --gpu-fraction (a part of one GPU), not both", 2
            )
        if mig is not None and (gpus is not None or gpu_fraction is not None):
            raise CliError("use --mig or --gpus / --gpu-fraction, not both", 2)
        if (nodes or 1) > 1 and gpus_per_node is None and not gpus:
            raise CliError("--nodes needs --gpus-per-node (whole GPUs on each node)", 2)
        if (
            gpus is not None
            and nodes is not None
            and gpus_per_node is not None
            and gpus
            and gpus != nodes * gpus_per_node
        ):
            raise CliError(
                f"--gpus {gpus} is not --nodes {nodes} x --gpus-per-node {gpus_per_node}; "
                "give --gpus-per-node alone",
                2,
            )
        body: dict[str, Any] = {"command": command or [], "priority": priority}
        if gpus is not None:
            body["gpus"] = gpus
        if nodes is not None:
            body["nodes"] = nodes
        if gpus_per_node is not None:
            body["gpus_per_node"] = gpus_per_node
        if gpu_fraction is not None:
            body["gpu_fraction"] = gpu_fraction
        if gpu_memory:
            body["gpu_memory_mib"] = parse_mib(gpu_memory)
        if memory:
            body["memory_mib"] = parse_mib(memory, "--memory")
        for key, value in (
            ("gpu_model", gpu_model),
            ("mig", mig),
            ("tenant", tenant),
            ("name", name),
            ("max_runtime_s", max_runtime),
        ):
            if value is not None:
                body[key] = value
        if cpus:
            body["cpus"] = cpus
        if env:
            body["env"] = parse_env(env)
        if not preemptible:
            body["preemptible"] = False
        if checkpointing:
            body["checkpointing"] = True
        given = {
            "gpu_memory_mib": gpu_memory,
            "memory_mib": memory,
            "gpu_fraction": None if gpu_fraction is None else f"{gpu_fraction:g}",
            "max_runtime_s": None if max_runtime is None else f"{max_runtime:g}",
            "cpus": f"{cpus:g}",
            "priority": str(priority),
            "gpus": None if gpus is None else str(gpus),
            "nodes": None if nodes is None else str(nodes),
            "gpus_per_node": None if gpus_per_node is None else str(gpus_per_node),
        }
        given = {k: v for k, v in given.items() if v is not None}
        refused = flags.check_run_body(body, given)
        if refused:
            raise CliError(refused, 2)
        c = api()
        try:
            w = submit_once(c, body)
        except CliError as e:
            raise flag_terms(e, flags.RUN_FLAGS, given) from None
        if not wait:
            out.print(w["id"])
            return
        err.print(f"{w['id']} submitted ({w['request']['description']} in {w['tenant']})")
        raise typer.Exit(_wait(c, w["id"], poll))

    go()


def flag_terms(
    e: CliError, known: Mapping[str, flags.Flag], given: Mapping[str, str] | None = None
) -> CliError:
    """`e` with a server's 422 about the request's fields said in the command's flags."""
    if e.problem is None or e.problem.get("status") != 422:
        return e
    text = flags.explain(e.problem, known, given or {})
    return e if text is None else CliError(text, e.code, e.retry_after, e.problem)


def parse_env(pairs: list[str]) -> dict[str, str]:
    """`--env NAME=VALUE` options as a mapping (the server checks the names)."""
    env: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise CliError(f"--env {pair!r}: write NAME=VALUE, e.g. --env WANDB_MODE=offline", 2)
        env[name] = value
    return env


#: tries of one submission, and the most seconds between them
SUBMIT_TRIES = 4
SUBMIT_MAX_WAIT_S = 5.0


def submit_once(c: Api, body: dict[str, Any]) -> dict[str, Any]:
    """POST /workloads with one Idempotency-Key for this invocation, reused on its retries
    (the server unreachable, a cut connection, 502/503): a submission whose answer was lost
    is answered with the workload already made, never submitted twice."""
    headers = {"Idempotency-Key": str(uuid.uuid4())}
    for attempt in range(1, SUBMIT_TRIES + 1):
        try:
            return c.post("/workloads", body, headers=headers)  # type: ignore[no-any-return]
        except CliError as e:
            if e.retry_after is None or attempt == SUBMIT_TRIES:
                raise
            wait = min(SUBMIT_MAX_WAIT_S, e.retry_after * attempt)
            err.print(f"submission not confirmed ({e}); retrying in {wait:g} s")
            time.sleep(wait)
    raise AssertionError("unreachable")


def _wait(c: Api, wid: str, poll: float) -> int:
    """Follow a workload to its end, printing queue changes and logs; return an exit code."""
    last_note = None
    for state, note, text in _follow(c, wid, poll):
        if note and note != last_note:
            err.print(note)
            last_note = note
        if text:
            out.out(text, end="")
        if state in TERMINAL:
            w = c.get(f"/workloads/{wid}")
            code = w["exit_code"]
            err.print(f"{wid} {state}" + (f": {w['reason']}" if w["reason"] else ""))
            if state == S.SUCCEEDED:
                return 0
            return code if isinstance(code, int) and 0 < code < 256 else 1
    return 1


def _follow(c: Api, wid: str, poll: float) -> Iterator[tuple[str, str | None, str]]:
    """Yield (state, note, new log text) until the workload ends."""
    printed = 0
    while True:
        w = c.get(f"/workloads/{wid}")
        state = w["state"]
        note = None
        if state == S.PENDING and w.get("pending"):
            p = w["pending"]
            note = f"waiting (#{p['position']} in the queue): {p['reason']}"
        text = ""
        if state != S.PENDING:
            logs = c.get(f"/workloads/{wid}/logs")["text"]
            text, printed = logs[printed:], max(printed, len(logs))
        yield state, note, text
        if state in TERMINAL:
            return
        time.sleep(poll)


#: `gpupool ls` columns: the default ones fit 80 columns; `-o wide` adds the rest.
LS_COLUMNS = (
    Col("ID", lambda w: w["id"]),
    Col("NAME", lambda w: w["name"], wide=True),
    Col("USER", lambda w: w["owner"], wide=True),
    Col("TENANT", lambda w: w["tenant"], wide=True),
    Col("KIND", lambda w: w["kind"], wide=True),
    Col("STATE", lambda w: w["state"]),
    Col("ASKS", lambda w: w["request"]["description"], wrap=True),
    Col("GPUS", _gpus_of),
    Col("AGE", lambda w: tables.age(w["submitted_at"])),
    Col("SUBMITTED", lambda w: _when(w["submitted_at"]), wide=True),
)


def ls(
    all_: bool = typer.Option(False, "--all", "-a", help="everything you may see, not only yours"),
    as_json: bool = tables.json_option(),
    output: Output = tables.output_option(),
    state: list[str] = typer.Option(None, "--state", "-s", help="only these states"),
    limit: int = typer.Option(100, "--limit", min=1, max=1000),
) -> None:
    """List workloads (yours, unless --all): ID, STATE, ASKS, GPUS, AGE; -o wide for more."""

    @handled
    def go() -> None:
        c = api()
        params: list[tuple[str, Any]] = [("limit", limit)]
        if not all_:
            params.append(("user", c.get("/auth/me")["name"]))
        params += [("state", s) for s in state or []]
        ws = c.get("/workloads", params=params)
        if tables.wants_json(output, as_json):
            return _print_json(ws)
        tables.show(out, LS_COLUMNS, ws, output, empty="no workloads")

    go()


def show(
    workload_id: str = typer.Argument(...),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """One workload: request, state, allocation (with enforcement), why pending, events."""

    @handled
    def go() -> None:
        w = api().get(f"/workloads/{workload_id}")
        if as_json:
            return _print_json(w)
        out.print(f"[bold]{w['id']}[/bold] {w['name'] or ''}")
        for k, v in (
            ("owner", f"{w['owner']} in {w['tenant']}"),
            ("kind", w["kind"]),
            ("state", w["state"] + (f" ({w['reason']})" if w["reason"] else "")),
            ("asks", w["request"]["description"]),
            ("command", " ".join(w["command"]) or "-"),
            ("priority", w["priority"]),
            ("submitted", _when(w["submitted_at"])),
            ("started", _when(w["started_at"])),
            ("finished", _when(w["finished_at"])),
            ("exit code", w["exit_code"]),
            ("attained", _attained(w)),
        ):
            out.print(f"  {k:<10} {'-' if v is None else v}")
        if w.get("pending"):
            p = w["pending"]
            out.print(f"  {'waiting':<10} #{p['position']} in the queue: {p['reason']}")
        a = w.get("allocation")
        if a:
            held = "released " + _when(a["released_at"]) if a["released_at"] else "held"
            spans = a.get("nodes") or [a["node"]]
            where = a["node"] if len(spans) == 1 else f"{len(spans)} nodes: {', '.join(spans)}"
            out.print(f"  {'allocation':<10} {where} ({held})")
            for s in a["shares"]:
                on = f"{s['node']} " if len(spans) > 1 else ""
                out.print(
                    f"    {on}GPU {s['gpu_index']} {s['gpu_uuid']}: {s['milli'] / 1000:g} GPU, "
                    f"{s['memory_mib']} MiB, enforcement {s['enforcement']}"
                )
        out.print("  events")
        for e in w["events"]:
            out.print(f"    {_when(e['at'])}  {e['kind']:<20} {e['message']}")

    go()


def _attained(w: dict[str, Any]) -> str | None:
    """`attained_gpu_hours` for `show`, with what became of earlier attempts."""
    hours = w.get("attained_gpu_hours")
    if hours is None:  # a server from before the field
        return None
    text = f"{hours:.2f} GPU-hours"
    n = w.get("preemptions") or 0
    if n and w.get("checkpointing"):
        text += f" (kept across {n} preemption{'s' if n > 1 else ''})"
    elif n:
        text += " (this attempt; no checkpointing)"
    return text


def cancel(workload_id: str = typer.Argument(...)) -> None:
    """Cancel a workload (queued: at once; running: stopped, then cancelled)."""

    @handled
    def go() -> None:
        w = api().call("DELETE", f"/workloads/{workload_id}")
        note = "" if w["state"] == S.CANCELLED else " (stopping)"
        out.print(f"{w['id']} {w['state']}{note}")

    go()


def logs(
    workload_id: str = typer.Argument(...),
    follow: bool = typer.Option(False, "--follow", "-f", help="keep printing until it ends"),
    tail: int = typer.Option(None, "--tail", "-n", min=1, help="only the last N lines"),
    poll: float = typer.Option(1.0, "--poll", hidden=True),
) -> None:
    """Print a job's output."""

    @handled
    def go() -> None:
        c = api()
        if not follow:
            params = {"tail": tail} if tail else {}
            out.out(c.get(f"/workloads/{workload_id}/logs", params=params)["text"], end="")
            return
        for _, _, text in _follow(c, workload_id, poll):
            if text:
                out.out(text, end="")

    go()


QUEUE_COLUMNS = (
    Col("#", lambda e: e["position"], right=True),
    Col("ID", lambda e: e["workload"]["id"]),
    Col("USER", lambda e: e["workload"]["owner"], wide=True),
    Col("TENANT", lambda e: e["workload"]["tenant"]),
    Col("KIND", lambda e: e["workload"]["kind"], wide=True),
    Col("PRIORITY", lambda e: e["workload"]["priority"], wide=True, right=True),
    Col("ASKS", lambda e: e["workload"]["request"]["description"], wrap=True),
    Col("AGE", lambda e: tables.age(e["workload"]["submitted_at"]), wide=True),
    Col("WHY IT WAITS", lambda e: e["reason"], wrap=True),
)


def queue(
    as_json: bool = tables.json_option(),
    output: Output = tables.output_option(),
    tenant: str = typer.Option(None, "--tenant", "-t", help="only this tenant (and below)"),
) -> None:
    """Pending workloads, in order, with the reason each one waits."""

    @handled
    def go() -> None:
        q = api().get("/queue", params={"tenant": tenant} if tenant else {})
        if tables.wants_json(output, as_json):
            return _print_json(q)
        tables.show(out, QUEUE_COLUMNS, q, output, empty="nothing is waiting")

    go()


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def usage_columns(by: str) -> tuple[Col, ...]:
    return (
        Col(by.upper(), lambda r: r["key"]),
        Col("GPU-H ALLOC", lambda r: f"{r['gpu_hours_allocated']:.2f}", right=True),
        Col("GPU-H BUSY", lambda r: f"{r['gpu_hours_busy']:.2f}", right=True),
        Col("EFFICIENCY", lambda r: _pct(r["efficiency"]), right=True),
        Col("MAX MiB", lambda r: r["gpu_memory_mib_max"], wide=True, right=True),
        Col("WORKLOADS", lambda r: r["workloads"], wide=True, right=True),
    )


def usage(
    by: str = typer.Option("tenant", "--by", help="user, tenant or day"),
    from_: str = typer.Option(None, "--from", help="first day, YYYY-MM-DD"),
    to: str = typer.Option(None, "--to", help="last day, YYYY-MM-DD"),
    as_json: bool = tables.json_option(),
    output: Output = tables.output_option(),
) -> None:
    """GPU-hours allocated and busy, and efficiency."""

    @handled
    def go() -> None:
        params = {"group_by": by} | {k: v for k, v in (("from", from_), ("to", to)) if v}
        rep = api().get("/usage", params=params)
        if tables.wants_json(output, as_json):
            return _print_json(rep)
        tables.show(out, usage_columns(by), rep["rows"], output, empty="no usage in this range")

    go()


def register(app: typer.Typer) -> None:
    """Add the client commands (user and admin) to the root app."""
    from gpupool.cli import client_admin  # admin commands live beside these

    app.command()(login)
    app.command(
        context_settings={"allow_interspersed_args": False},
        epilog="Example: gpupool run --gpus 1 --gpu-model H100 -- python3 train.py",
    )(run)
    app.command("ls")(ls)
    app.command()(show)
    app.command()(cancel)
    app.command()(logs)
    app.command()(queue)
    app.command()(usage)
    client_admin.register(app)
