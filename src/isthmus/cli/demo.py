"""`isthmus demo`: the scripted tour (exit 0 when every step works)."""

from __future__ import annotations

import typer

from isthmus.cli.app import app


@app.command("demo")
def demo() -> None:
    """Run the scripted tour; exits non-zero naming the step that failed."""
    from isthmus.local.demo import run_demo

    raise typer.Exit(run_demo())
