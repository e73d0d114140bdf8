"""`isthmus pools`: the pool manager of one edge host (EdgeLB's role)."""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from isthmus.cli.app import (
    COMPONENTS,
    ComponentKubeconfigOpt,
    ContextOpt,
    LogFormatOpt,
    LogLevelOpt,
    MetricsAddrOpt,
    command,
    fail,
    run_component,
)
from isthmus.cli.lameduck import DEFAULT_SHUTDOWN_DELAY, LameDuck


def _address(value: str) -> str:
    try:
        return str(ipaddress.IPv4Address(value))
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not an IPv4 address") from None


@command("pools", panel=COMPONENTS)
def pools(
    public_address: Annotated[
        str, typer.Option("--public-address", help="This edge host's public address: `slave_public` pools listen here "
                          "(and on the private one).", callback=_address)
    ],
    private_address: Annotated[
        str, typer.Option("--private-address", help="This edge host's private address: every pool listens here.",
                          callback=_address)
    ],
    kubeconfig: ComponentKubeconfigOpt = None,
    context: ContextOpt = None,
    haproxy: Annotated[str, typer.Option("--haproxy", help="The HAProxy 2.6+ binary.")] = "haproxy",
    state_dir: Annotated[
        Path | None,
        typer.Option("--state-dir", help="Where each instance's config, sockets and log live (default: a new "
                     "temporary directory).", show_default=False),
    ] = None,
    identity: Annotated[
        str | None,
        typer.Option("--identity", help="Holder identity in the pool slot Leases (default: $POD_NAME, else the host "
                     "name, with the public address).", show_default=False),
    ] = None,
    shutdown_delay: Annotated[
        float,
        typer.Option("--shutdown-delay", help="At SIGTERM: seconds to keep every HAProxy instance serving while "
                     "not ready (so routes and endpoints move to other pool managers first), before stopping "
                     "them and releasing the slots; the pod's terminationGracePeriodSeconds must exceed it."),
    ] = DEFAULT_SHUTDOWN_DELAY,
    metrics_addr: MetricsAddrOpt = None,
    log_format: LogFormatOpt = "text",
    log_level: LogLevelOpt = "info",
) -> None:
    """Run LoadBalancerPools as HAProxy on this edge host, one instance per pool slot it wins."""
    from isthmus.api.lb import POOLS_NAMESPACE
    from isthmus.haproxy.manager import PoolManager
    from isthmus.kube.client import make_client

    binary = shutil.which(haproxy)
    if binary is None:
        raise fail(f"HAProxy not found ({haproxy!r}): install Debian's haproxy package or pass --haproxy PATH")
    if shutdown_delay < 0:
        raise fail("--shutdown-delay cannot be negative")
    holder = identity or f"{os.environ.get('POD_NAME') or socket.gethostname()}-{public_address}"
    directory = state_dir or Path(tempfile.mkdtemp(prefix="isthmus-pools-"))
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise fail(f"cannot use --state-dir {directory}: {e.strerror or e}") from None

    async def build() -> LameDuck:
        manager = PoolManager(make_client(kubeconfig, context), identity=holder, public_address=public_address,
                              private_address=private_address, state_dir=directory, haproxy=binary,
                              namespace=os.environ.get("POD_NAMESPACE") or POOLS_NAMESPACE).manager
        return LameDuck(manager, shutdown_delay, "pools")

    run_component("pools", build, log_format=log_format, log_level=log_level, metrics_addr=metrics_addr)
