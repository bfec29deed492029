"""The `gpupool` command. Each concept's commands live in their own module and register here."""

from __future__ import annotations

import typer

from gpupool import __version__
from gpupool.cli import agent, client, k8s, nodepools, simulate, telemetry, up

app = typer.Typer(
    name="gpupool",
    help="Pool GPUs and share them fairly among users and teams.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"gpupool {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Pool GPUs and share them fairly among users and teams."""


for module in (simulate, telemetry, client, up, agent, k8s, nodepools):
    module.register(app)


def run() -> None:
    """Console-script entry point."""
    app()
