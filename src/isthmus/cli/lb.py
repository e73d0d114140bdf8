"""`isthmus lb`: the load-balancing translator of one cluster (dklb's role)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from typing import Annotated

import typer

from isthmus.cli.app import (
    Background,
    ContextOpt,
    KubeconfigOpt,
    LogFormatOpt,
    LogLevelOpt,
    MetricsAddrOpt,
    command,
    fail,
    run_component,
)

RELEASE_TIMEOUT = 3.0


@command("lb")
def lb(
    cluster_name: Annotated[
        str, typer.Option("--cluster-name", help="This cluster's name: the first part of every pool, frontend and "
                          "backend name it makes (slashes become dots).")
    ],
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    identity: Annotated[
        str | None,
        typer.Option("--identity", help="Holder identity in the translator's leader-election Lease (default: "
                     "$POD_NAME, else the host name).", show_default=False),
    ] = None,
    grace: Annotated[
        float, typer.Option("--unprovisioned-grace", min=1.0,
                            help="Seconds a pool may go without a serving instance before its owners get a Warning.")
    ] = 20.0,
    metrics_addr: MetricsAddrOpt = None,
    log_format: LogFormatOpt = "text",
    log_level: LogLevelOpt = "info",
) -> None:
    """Turn Services of type LoadBalancer and Ingresses of class edgelb into LoadBalancerPools (leader-elected)."""
    from isthmus.kube.client import make_client
    from isthmus.lb.controller import Translator

    if not cluster_name.strip() or ":" in cluster_name:
        raise fail("--cluster-name must be non-empty and contain no ':'")
    holder = identity or os.environ.get("POD_NAME") or socket.gethostname()

    async def build() -> Background:
        translator = Translator(make_client(kubeconfig, context), cluster_name, identity=holder, grace=grace)

        async def release() -> None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(RELEASE_TIMEOUT):
                    await translator.elector.release()

        return Background("lb", translator.run, lambda: translator.ready, on_stop=release)

    run_component("lb", build, log_format=log_format, log_level=log_level, metrics_addr=metrics_addr)
