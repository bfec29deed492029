"""`gpupool tenant set`: a tenant's runtime policy (the default and the maximum runtime of
its work, docs/admin-guide.md "Runtime policy"), and the duration syntax its flags take."""

from __future__ import annotations

from typing import Any

import typer

from gpupool.cli import tables
from gpupool.cli.base import CliError, api, handled, out, parse_duration
from gpupool.cli.client_admin import tenant_app


def policy_text(t: dict[str, Any]) -> str:
    """'default runtime 8 h, max runtime 48 h' as the server now stores them."""

    def text(s: float | None) -> str:
        return "none" if s is None else tables.duration(s)

    return (
        f"default runtime {text(t.get('default_runtime_s'))}, "
        f"max runtime {text(t.get('max_runtime_s'))}"
    )


@tenant_app.command("set")
def tenant_set(
    name: str = typer.Argument(..., help="tenant path, e.g. physics/lab-a"),
    default_runtime: str = typer.Option(
        None, "--default-runtime", help="max runtime of work that gives none, e.g. 8h"
    ),
    max_runtime: str = typer.Option(
        None, "--max-runtime", help="longest runtime work may ask for, e.g. 48h"
    ),
    no_default_runtime: bool = typer.Option(
        False, "--no-default-runtime", help="remove the default (inherit it)"
    ),
    no_max_runtime: bool = typer.Option(
        False, "--no-max-runtime", help="remove the maximum (inherit it)"
    ),
) -> None:
    """Set a tenant's runtime policy (durations: 45s, 90m, 8h, 2d). Work without a runtime
    gets the default; a longer request than the maximum is refused. Subtenants inherit."""

    @handled
    def go() -> None:
        body: dict[str, Any] = {}
        for value, clear, field, flag in (
            (default_runtime, no_default_runtime, "default_runtime_s", "--default-runtime"),
            (max_runtime, no_max_runtime, "max_runtime_s", "--max-runtime"),
        ):
            if value is not None and clear:
                raise CliError(f"use {flag} or --no-{flag[2:]}, not both", 2)
            if value is not None:
                body[field] = parse_duration(value, flag)
            if clear:
                body["clear_" + field.removesuffix("_s")] = True
        if not body:
            raise CliError(
                "nothing to change: give --default-runtime, --max-runtime, "
                "--no-default-runtime or --no-max-runtime",
                2,
            )
        t = api().call("PATCH", f"/tenants/{name}", json=body)
        out.print(f"{t['name']}: {policy_text(t)}")

    go()
