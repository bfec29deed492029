"""CLI commands: simulate (to be filled in)."""

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
