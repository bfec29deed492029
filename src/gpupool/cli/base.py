"""What every client command shares: the consoles, `CliError` and `handled` (a message and an
exit code, never a traceback), the saved login, and `Api`, the CLI's use of `gpupool.client`.

The server URL and token come from GPUPOOL_URL / GPUPOOL_TOKEN, else from
`~/.config/gpupool/config.toml` (written by `gpupool login`). Exit code 1 for refused requests
and unreachable servers, 2 for bad command-line input.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from gpupool import client as sdk
from gpupool.cli import tables
from gpupool.domain import WorkloadState

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


# -- configuration and HTTP (both gpupool.client's) ------------------------------------


def config_path() -> Path:
    return sdk.config_path()


def load_config() -> dict[str, str]:
    """The URL and token in effect (gpupool.client.load_config), as a dict."""
    try:
        cfg = sdk.load_config()
    except sdk.ConfigError as e:
        raise CliError(str(e)) from None
    return {"url": cfg.url} | ({"token": cfg.token} if cfg.token else {})


def save_config(url: str, token: str) -> Path:
    return sdk.save_config(url, token)


class Api:
    """The CLI's use of `gpupool.client.Client`: JSON as the server sent it (tables and
    `--json` print it as is), and refusals as CliError (a message and an exit code)."""

    def __init__(self, url: str, token: str | None, timeout: float = 30.0):
        try:
            self.client = sdk.Client(url, token or "", timeout_s=timeout)
        except sdk.GpupoolError as e:
            raise CliError(str(e), 2) from None
        self.url = self.client.url

    def call(self, method: str, path: str, **kw: Any) -> Any:
        with cli_errors(self.url):
            return self.client.request(method, path, **kw)

    def get(self, path: str, **kw: Any) -> Any:
        return self.call("GET", path, **kw)

    def post(self, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        return self.call("POST", path, json=body, headers=headers)

    def log_pages(self, wid: str, offset: int = 0) -> Iterator[dict]:
        """The log from byte `offset` on, page by page (`?offset=`: at most 1 MiB each), until
        a page brings nothing new, which comes last (its `note` is the latest); neither side
        holds the whole log (gpupool.client's `log_pages`)."""
        with cli_errors(self.url):
            for page in self.client.log_pages(wid, offset):
                yield page.model_dump(mode="json")

    def follow(self, wid: str, poll: float) -> Iterator[tuple[str, str | None, str]]:
        """Yield (state, note, new log text) until the workload ends (gpupool.client's
        `follow`)."""
        with cli_errors(self.url):
            for w, text in self.client.follow(wid, poll_s=poll):
                note = None
                if w.state == WorkloadState.PENDING and w.pending:
                    note = f"waiting (#{w.pending.position} in the queue): {w.pending.reason}"
                    if w.preemptions:  # its earlier run's output stays; the next run follows
                        note = "requeued after preemption; " + note
                yield w.state, note, text


def cli_error(e: sdk.GpupoolError, url: str) -> CliError:
    """What the CLI prints for an error of the client (exit code 1)."""
    if isinstance(e, sdk.Unreachable):
        return CliError(
            f"cannot reach the gpupool server at {url} ({e.why}); "
            "is it running? Set GPUPOOL_URL or run gpupool login --url URL",
            retry_after=e.retry_after,
        )
    if isinstance(e, sdk.ApiError):
        hint = "; run gpupool login" if e.status == 401 else ""
        return CliError(
            f"{e.message}{hint} (HTTP {e.status})", retry_after=e.retry_after, problem=e.problem
        )
    return CliError(str(e))


@contextmanager
def cli_errors(url: str) -> Iterator[None]:
    """Turn the client's errors into CliError inside the block."""
    try:
        yield
    except sdk.GpupoolError as e:
        raise cli_error(e, url) from None


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


def parse_mib(text: str, what: str = "--gpu-memory") -> int:
    """'20G', '512M', '1.5GiB' -> MiB (gpupool.client.parse_mib)."""
    try:
        return sdk.parse_mib(text, what)
    except sdk.InvalidInput:
        raise CliError(f"{what} {text!r}: give a size with a unit, e.g. 20G or 512M", 2) from None


_UNITS = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|min|h|d)?\s*$")


def parse_duration(text: str, flag: str) -> float:
    """'8h', '90m', '2d', '45s', '3600' (seconds) -> seconds; CliError (exit 2) otherwise."""
    m = _DURATION.match(text.lower())
    seconds = float(m.group(1)) * _UNITS[m.group(2) or "s"] if m else 0.0
    if seconds <= 0:
        raise CliError(f"{flag} {text!r}: give a duration above 0, e.g. 8h, 90m, 2d or 3600", 2)
    return seconds


def print_json(data: Any) -> None:
    """`--json` output: the data as indented JSON on stdout."""
    tables.print_json(out, data)
