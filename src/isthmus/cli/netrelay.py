"""`isthmus netrelay` (hidden): the doors between a runc-mode clusterset's namespaces and the host."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from isthmus.cli.app import (
    COMPONENTS,
    LogFormatOpt,
    LogLevelOpt,
    MetricsAddrOpt,
    command,
    fail,
    run_component,
)

if TYPE_CHECKING:
    from isthmus.local.network.relay import Relay, RelaySpec


def _specs(values: list[str] | None, flag: str) -> list[RelaySpec]:
    from isthmus.local.network.relay import RelaySpec, RelaySpecError

    out = []
    for value in values or []:
        try:
            out.append(RelaySpec.parse(value))
        except RelaySpecError as err:
            raise fail(f"{flag} {err}") from None
    return out


@command("netrelay", panel=COMPONENTS, hidden=True)
def netrelay(
    netns: Annotated[str, typer.Option("--netns", help="The network namespace (a name under /run/netns, or a path).")],
    listen: Annotated[
        list[str] | None,
        typer.Option("--listen", metavar="ADDR:PORT=HOST:PORT",
                     help="Listen on ADDR:PORT inside the namespace, connect to HOST:PORT from the host "
                          "(repeatable)."),
    ] = None,
    publish: Annotated[
        list[str] | None,
        typer.Option("--publish", metavar="ADDR:PORT=HOST:PORT",
                     help="Listen on ADDR:PORT on the host, connect to HOST:PORT inside the namespace "
                          "(repeatable)."),
    ] = None,
    wait: Annotated[float, typer.Option("--wait", min=0.0, help="Seconds to wait for the namespace and its "
                                                                "addresses before giving up.")] = 30.0,
    metrics_addr: MetricsAddrOpt = None,
    log_format: LogFormatOpt = "text",
    log_level: LogLevelOpt = "info",
) -> None:
    """Relay TCP between a network namespace and the host (runc mode's apiserver and registry doors)."""
    from isthmus.runtime import netns as ns

    inside, outside = _specs(listen, "--listen"), _specs(publish, "--publish")
    if not inside and not outside:
        raise fail("give at least one --listen or --publish")
    try:
        path = netns if "/" in netns else ns.path(netns)
    except ns.NetnsError as err:
        raise fail(f"--netns: {err}") from None

    async def build() -> Relay:
        from isthmus.local.network.relay import Relay

        return Relay(path, inside, outside, wait=wait)

    run_component("netrelay", build, log_format=log_format, log_level=log_level, metrics_addr=metrics_addr)
