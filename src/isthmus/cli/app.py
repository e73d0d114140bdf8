"""The `isthmus` typer application; command modules attach themselves to it."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable

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


async def serve_until_signalled(start: Callable[[], Awaitable[None]], stop: Callable[[], Awaitable[None]]) -> None:
    """The life of a long-running command: start, wait for SIGTERM/SIGINT, stop cleanly."""
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    await start()
    try:
        await stopping.wait()
    finally:
        await stop()
