"""`isthmus ui`: the clusterset's live web view (isthmus.ui). Flags and wiring only."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from isthmus.cli import complete
from isthmus.cli.app import (
    TROUBLESHOOT,
    KubeconfigOpt,
    LogFormatOpt,
    LogLevelOpt,
    command,
    fail,
    run_component,
)

DEFAULT_LISTEN = "127.0.0.1:7450"


def _listen(value: str) -> str:
    from isthmus.runtime import parse_addr

    try:
        _, port = parse_addr(value)
    except ValueError:
        raise fail(f"--listen must be HOST:PORT, not {value!r}") from None
    if port > 65535:
        raise fail(f"--listen: port {port} is out of range (0-65535)")
    return value


@command("ui", panel=TROUBLESHOOT)
def ui(
    kubeconfig: KubeconfigOpt = None,
    context: Annotated[
        list[str] | None,
        typer.Option("--context", help="A member cluster's context; repeat for several (default: every "
                                       "context of the kubeconfig but the broker's).",
                     autocompletion=complete.contexts),
    ] = None,
    broker_kubeconfig: Annotated[
        Path | None,
        typer.Option("--broker-kubeconfig", show_default=False,
                     help="Kubeconfig of the broker (default: --kubeconfig's)."),
    ] = None,
    broker_context: Annotated[
        str | None,
        typer.Option("--broker-context", help="The broker's context (default: the context whose cluster "
                                              "holds the clusterset's Broker object).",
                     autocompletion=complete.broker_contexts),
    ] = None,
    listen: Annotated[
        str, typer.Option("--listen", metavar="HOST:PORT", callback=_listen,
                          help="Where to serve the page (port 0: any free port). Loopback unless told otherwise."),
    ] = DEFAULT_LISTEN,
    log_format: LogFormatOpt = "text",
    log_level: LogLevelOpt = "info",
) -> None:
    """Serve a live, read-only web view of the clusterset.

    Clusters and their health, services with their exporters, importers and conflicts,
    MultiClusterServices, pools and egress, updated from watches. Reads every cluster with the
    kubeconfig's credentials (list, watch and get only).

    Handed a listening socket (socket activation: ``ISTHMUS_LISTEN_FD``, as the local clusterset
    starts it on first use), it serves there instead of binding --listen."""
    import asyncio
    import logging
    import os
    import socket

    from isthmus.procs.child import LISTEN_ENV
    from isthmus.runtime import parse_addr
    from isthmus.ui.server import UiServer
    from isthmus.ui.watch import discover

    host, port = parse_addr(listen)
    inherited = os.environ.pop(LISTEN_ENV, None)
    sock = socket.socket(fileno=int(inherited)) if inherited else None
    if sock is not None:
        host, port = sock.getsockname()[:2]
    sources = asyncio.run(discover(kubeconfig, context, broker_kubeconfig, broker_context))

    async def build() -> UiServer:
        # The view says once per cluster when it cannot be reached; each informer would say it per
        # kind and per retry.
        logging.getLogger("isthmus.runtime.informer").setLevel(logging.ERROR)
        return _Announced(sources, host, port, sock=sock)

    class _Announced(UiServer):
        async def start(self) -> None:
            try:
                await super().start()
            except OSError as err:
                raise fail(f"cannot serve on {listen}: {err.strerror or err}") from None
            broker = next((s.name for s in self.sources if s.role == "broker"), None)
            members = [s.name for s in self.sources if s.role != "broker"]
            typer.echo(f"isthmus ui: {self.url}  (broker: {broker or 'none found'}; "
                       f"clusters: {', '.join(members) or 'none'})", err=True)

    run_component("ui", build, log_format=log_format, log_level=log_level)
