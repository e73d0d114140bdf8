"""`isthmus proxy`: make one cluster's ClusterIPs, NodePorts and ClusterSet IPs reachable."""

from __future__ import annotations

import asyncio
import ipaddress
import re
from typing import Annotated

import typer

from isthmus.cli.app import app, fail, serve_until_signalled

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@app.command("proxy", hidden=False)
def proxy(
    cluster_id: Annotated[str, typer.Option("--cluster-id", help="This cluster's ID in the clusterset.")],
    kubeconfig: Annotated[str | None, typer.Option(help="Kubeconfig of this cluster's API server.")] = None,
    context: Annotated[str | None, typer.Option(help="Context of the kubeconfig to use.")] = None,
    node_address: Annotated[
        str, typer.Option(help="IP address NodePorts listen on; empty for no NodePort listeners.")
    ] = "127.0.0.1",
    connect_timeout: Annotated[
        float, typer.Option(help="Seconds to wait for a backend to accept before trying the next.")
    ] = 2.0,
    udp_idle_timeout: Annotated[
        float, typer.Option(help="Seconds before an idle UDP flow is closed.")
    ] = 30.0,
    metrics_addr: Annotated[
        str | None, typer.Option(help="Serve /metrics, /healthz and /readyz on HOST:PORT.")
    ] = None,
    log_format: Annotated[str, typer.Option(help="Log format: text or json.")] = "text",
    log_level: Annotated[str, typer.Option(help="Log level.")] = "info",
) -> None:
    """Listen on ClusterIP:port, node-address:NodePort and VIP:port; relay TCP and UDP to ready endpoints."""
    from isthmus.kube.client import KubeConfigError, make_client
    from isthmus.proxy import ProxyConfig, ProxyService
    from isthmus.runtime import parse_addr, setup_logging

    try:
        setup_logging(log_format, log_level)
    except ValueError as e:
        raise fail(str(e)) from None
    if not _DNS_LABEL.match(cluster_id):
        raise fail(f"--cluster-id {cluster_id!r} is not a DNS-1123 label")
    node: str | None = None
    if node_address:
        try:
            node = str(ipaddress.ip_address(node_address))
        except ValueError:
            raise fail(f"--node-address {node_address!r} is not an IP address") from None
    if not 0 < connect_timeout <= 300:
        raise fail("--connect-timeout must be between 0 and 300 seconds")
    if not 0 < udp_idle_timeout <= 86400:
        raise fail("--udp-idle-timeout must be between 0 and 86400 seconds")
    if metrics_addr:
        try:
            parse_addr(metrics_addr)
        except ValueError as e:
            raise fail(str(e)) from None
    try:
        client = make_client(kubeconfig, context, field_manager="isthmus-proxy")
    except KubeConfigError as e:
        raise fail(str(e)) from None
    config = ProxyConfig(
        cluster_id=cluster_id,
        node_address=node,
        connect_timeout=connect_timeout,
        udp_idle_timeout=udp_idle_timeout,
        metrics_addr=metrics_addr,
    )
    try:
        service = ProxyService(client, config)
        asyncio.run(serve_until_signalled(service.start, service.stop))
    except OSError as e:
        raise fail(f"cannot serve metrics: {e.strerror or e}") from None

