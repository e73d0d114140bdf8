"""`isthmus kube-lite` (hidden): the cluster parts kube-lite provides for one embedded apiserver.

Started by `isthmus up` for each cluster; hidden because users never run it themselves.
"""

from __future__ import annotations

import asyncio
import re
import signal
from typing import Annotated

import typer

from isthmus.cli.app import app, fail

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,56}[a-z0-9])?$")
"""The node name is ``<cluster>-node``: the cluster name must leave room for the suffix."""


@app.command("kube-lite", hidden=True)
def kube_lite(
    kubeconfig: Annotated[str, typer.Option(help="Kubeconfig of the cluster's API server.")],
    cluster_name: Annotated[
        str, typer.Option("--cluster-name", help="Cluster name (node name, echo answers).")
    ],
    pod_cidr: Annotated[str, typer.Option("--pod-cidr", help="Pod addresses, inside 127.0.0.0/8.")],
    service_cidr: Annotated[str, typer.Option("--service-cidr", help="ClusterIPs, inside 127.0.0.0/8.")],
    node_port_range: Annotated[
        str, typer.Option("--node-port-range", help="NodePorts, LOW-HIGH.")
    ] = "30000-32767",
    context: Annotated[str | None, typer.Option(help="Kubeconfig context.")] = None,
    metrics_addr: Annotated[
        str | None, typer.Option(help="Serve /metrics, /healthz and /readyz on HOST:PORT.")
    ] = None,
    log_format: Annotated[str, typer.Option(help="Log format: text or json.")] = "text",
    log_level: Annotated[str, typer.Option(help="Log level.")] = "info",
) -> None:
    """Allocate ClusterIPs and NodePorts, maintain EndpointSlices, run Deployments, StatefulSets and Pods."""
    from isthmus.kube.client import KubeConfigError, make_client
    from isthmus.local.kubelite import FIELD_MANAGER
    from isthmus.local.kubelite.ipam import parse_port_range
    from isthmus.local.kubelite.run import KubeLite, validate_config
    from isthmus.runtime import HealthServer, parse_addr, setup_logging

    try:
        setup_logging(log_format, log_level)
        node_ports = parse_port_range(node_port_range)
        validate_config(pod_cidr, service_cidr, node_ports)
        if metrics_addr:
            parse_addr(metrics_addr)
    except ValueError as e:
        raise fail(str(e)) from None
    if not _DNS_LABEL.match(cluster_name):
        raise fail(f"--cluster-name {cluster_name!r} is not a DNS-1123 label")
    try:
        client = make_client(kubeconfig, context, field_manager=FIELD_MANAGER)
    except KubeConfigError as e:
        raise fail(str(e)) from None

    async def main() -> None:
        lite = KubeLite(
            client, cluster=cluster_name, pod_cidr=pod_cidr, service_cidr=service_cidr, node_ports=node_ports
        )
        health = None
        if metrics_addr:
            health = HealthServer()
            health.add_liveness_check("kube-lite", lambda: True)
            health.add_readiness_check("kube-lite", lambda: lite.ready)
            await health.start(metrics_addr)
        task = asyncio.create_task(lite.run())
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        try:
            await task
        except asyncio.CancelledError:
            pass
        finally:
            if health is not None:
                await health.stop()
            await client.close()

    try:
        asyncio.run(main())
    except OSError as e:
        raise fail(f"cannot listen: {e.strerror or e}") from None
