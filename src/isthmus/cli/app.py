"""The `isthmus` typer application; command modules attach themselves to it."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="isthmus",
    help="Multi-cluster service networking for Kubernetes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print a user-facing error and return the Exit to raise (exit code 2 = bad input)."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)
