"""`gpupool agent` (the per-node agent) and `gpupool node token ...` (its credentials).

The agent runs on a GPU host and reports to a gpupool server; an admin gives it a node
credential first:

    gpupool node token create gpu-a            # prints the secret once
    GPUPOOL_NODE_TOKEN=gpn_... gpupool agent --url http://server:8080 --node gpu-a
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from pathlib import Path

import typer

from gpupool.cli import tables
from gpupool.cli.base import CliError, api, handled, out
from gpupool.cli.client_admin import node_app
from gpupool.cli.tables import Col

SIMULATE_HELP = "Report simulated GPUs, e.g. 4xH100-80GB (no GPU needed; labelled simulated)."

token_app = typer.Typer(help="Node credentials for `gpupool agent` (admins).", no_args_is_help=True)
node_app.add_typer(token_app, name="token")


def _say(msg: str, *, loud: bool = False) -> None:
    typer.secho(msg, fg=typer.colors.YELLOW if loud else None, bold=loud, err=True)


def _read_token(token_file: Path | None) -> str:
    if token_file is not None:
        try:
            return token_file.read_text().strip()
        except OSError as e:
            raise CliError(f"cannot read --token-file {token_file}: {e.strerror or e}", 2) from e
    token = os.environ.get("GPUPOOL_NODE_TOKEN", "").strip()
    if not token:
        raise CliError(
            "no node credential: pass --token-file or set GPUPOOL_NODE_TOKEN; an admin "
            "creates one with `gpupool node token create NODE`",
            2,
        )
    return token


def agent(
    url: str = typer.Option(
        None, "--url", envvar="GPUPOOL_URL", help="The gpupool server, e.g. http://server:8080."
    ),
    node: str = typer.Option(
        None, "--node", help="This node's name in gpupool (default: hostname)."
    ),
    token_file: Path = typer.Option(
        None, "--token-file", help="File holding the node credential (else $GPUPOOL_NODE_TOKEN)."
    ),
    simulate: str = typer.Option(None, "--simulate", help=SIMULATE_HELP),
    interval: float = typer.Option(
        5.0, "--interval", min=0.1, max=3600, help="Seconds between reports."
    ),
    proc_root: Path = typer.Option(
        Path("/proc"), "--proc-root", help="Where the host's /proc is (e.g. /host/proc in a pod)."
    ),
    once: bool = typer.Option(False, "--once", help="Report once, print the answer, and exit."),
    log_level: str = typer.Option("info", "--log-level", help="debug, info, warning, error."),
) -> None:
    """Report this node's GPUs and processes to a gpupool server (the node agent).

    Needs a node credential: gpupool node token create NODE (admins).
    Three missed reports and the server marks the node unknown.
    """
    from gpupool.agent.attribute import HostAttributor, host_facts
    from gpupool.agent.loop import Agent, AgentError, AgentRefused, HttpReporter
    from gpupool.telemetry import NoGPUError, SpecError, open_source

    logging.basicConfig(
        level=getattr(logging, log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )

    @handled
    def go() -> None:
        if not url:
            raise CliError("which server? pass --url http://server:8080 or set GPUPOOL_URL", 2)
        name = node or socket.gethostname()
        token = _read_token(token_file)
        try:
            source = open_source(simulate, hostname=name)
        except SpecError as e:
            raise CliError(str(e), 2) from None
        except NoGPUError as e:
            raise CliError(f"{e.reason}; use --simulate SPEC to report simulated GPUs", 2) from None
        if source.simulated:
            _say(f"*** SIMULATED GPUs ({simulate}): not real hardware ***", loud=True)
        reporter = HttpReporter(url, name, token)
        runner = Agent(
            source,
            reporter,
            interval_s=interval,
            tagger=HostAttributor(proc_root),
            host=host_facts(),
        )
        try:
            if once:
                try:
                    tables.print_json(out, runner.report_once())
                except AgentError as e:
                    raise CliError(str(e)) from None
                return
            stop = threading.Event()
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, lambda *_: stop.set())
            first = threading.Event()

            def acked(ack: dict[str, object]) -> None:
                if not first.is_set():
                    first.set()
                    _say(
                        f"gpupool agent: node {ack['node']} ({ack['gpus']} GPUs, {ack['state']}) "
                        f"reports to {url} every {interval:g} s"
                    )

            try:
                runner.run(stop, on_ack=acked)
            except AgentRefused as e:
                raise CliError(str(e), 1) from None
            _say(f"gpupool agent: stopped after {runner.stats.reports} report(s)")
        finally:
            reporter.close()
            source.close()

    go()


@token_app.command("create")
def token_create(
    node: str = typer.Argument(..., help="The node's name, as its agent's --node."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Create a credential for a node's agent (admins). The secret is printed once."""

    @handled
    def go() -> None:
        t = api().post(f"/nodes/{node}/tokens")
        if as_json:
            tables.print_json(out, t)
            return
        out.print(f"created credential {t['id']} for node {t['node']}; it is shown only once:")
        out.print(t["token"], soft_wrap=True)
        out.print(
            f"run on {t['node']}: GPUPOOL_NODE_TOKEN=<it> gpupool agent --url URL --node {node}"
        )

    go()


TOKEN_COLUMNS = (
    Col("ID", lambda r: r["id"]),
    Col("CREATED", lambda r: tables.age(r["created_at"])),
    Col("BY", lambda r: r["created_by"]),
    Col("LAST USED", lambda r: tables.age(r["last_used_at"])),
    Col("REVOKED", lambda r: tables.age(r["revoked_at"]) if r["revoked_at"] else "-"),
)


@token_app.command("ls")
def token_ls(
    node: str = typer.Argument(...),
    as_json: bool = tables.json_option(),
    output: tables.Output = tables.output_option(),
) -> None:
    """List a node's credentials (admins)."""

    @handled
    def go() -> None:
        rows = api().get(f"/nodes/{node}/tokens")
        if tables.wants_json(output, as_json):
            tables.print_json(out, rows)
            return
        tables.show(out, TOKEN_COLUMNS, rows, output, empty=f"no credentials for node {node}")

    go()


@token_app.command("revoke")
def token_revoke(node: str = typer.Argument(...), token_id: str = typer.Argument(...)) -> None:
    """Revoke a node credential (admins); its agent's next report is refused."""

    @handled
    def go() -> None:
        api().call("DELETE", f"/nodes/{node}/tokens/{token_id}")
        out.print(f"revoked credential {token_id} of node {node}")

    go()


def register(app: typer.Typer) -> None:
    app.command("agent")(agent)
