"""`isthmus proxy`: make one cluster's ClusterIPs, NodePorts and ClusterSet IPs reachable."""

from __future__ import annotations

import ipaddress
import shutil
from typing import Annotated, Literal

import typer

from isthmus.cli.app import (
    COMPONENTS,
    ClusterIdOpt,
    ComponentKubeconfigOpt,
    ContextOpt,
    LogFormatOpt,
    LogLevelOpt,
    MetricsAddrOpt,
    command,
    fail,
    run_component,
)


@command("proxy", panel=COMPONENTS)
def proxy(
    cluster_id: ClusterIdOpt,
    kubeconfig: ComponentKubeconfigOpt = None,
    context: ContextOpt = None,
    node_address: Annotated[
        str, typer.Option(help="IP address NodePorts listen on; empty for no NodePort listeners.")
    ] = "127.0.0.1",
    connect_timeout: Annotated[
        float, typer.Option(help="Seconds to wait for a backend to accept before trying the next.")
    ] = 2.0,
    udp_idle_timeout: Annotated[
        float, typer.Option(help="Seconds before an idle UDP flow is closed.")
    ] = 30.0,
    mode: Annotated[
        Literal["userspace", "nftables"],
        typer.Option(help="userspace: listen and relay every byte; nftables: the kernel DNATs each new "
                          "connection to an endpoint (kube-proxy's nftables mode; needs root or NET_ADMIN, and "
                          "programs the network namespace the proxy runs in)."),
    ] = "userspace",
    socket_lb: Annotated[
        bool,
        typer.Option(help="userspace mode: balance this network namespace's TCP connect()s to ClusterIPs and VIPs in "
                          "the kernel (cgroup BPF, as Cilium's socket LB; needs root, cgroup v2 and Linux 5.7+, "
                          "else the listeners relay them)."),
    ] = True,
    kernel_splice: Annotated[
        bool,
        typer.Option(help="userspace mode: once a connection carries a second client read, let the kernel move its "
                          "bytes (BPF sockmap; needs root, else every byte is relayed by the proxy). Lower latency "
                          "per exchange, worse p99 under load on few cores."),
    ] = False,
    metrics_addr: MetricsAddrOpt = None,
    log_format: LogFormatOpt = "text",
    log_level: LogLevelOpt = "info",
) -> None:
    """Serve ClusterIPs, NodePorts and VIPs by relaying to ready endpoints, or by kernel NAT.

    ClusterIP:port, node-address:NodePort and VIP:port: TCP and UDP relayed to ready endpoints, or
    translated by the kernel (--mode nftables)."""
    from isthmus.kube.client import make_client
    from isthmus.proxy import ProxyConfig, ProxyService

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
    if mode == "nftables" and shutil.which("nft") is None:
        raise fail("--mode nftables needs the nft command (Debian: apt-get install nftables)")
    client = make_client(kubeconfig, context, field_manager="isthmus-proxy")
    # run_component serves /metrics and the health checks, with the service's readiness.
    config = ProxyConfig(
        cluster_id=cluster_id, node_address=node, connect_timeout=connect_timeout, udp_idle_timeout=udp_idle_timeout,
        mode=mode, socket_lb=socket_lb, kernel_splice=kernel_splice,
    )

    async def build() -> ProxyService:
        return ProxyService(client, config)

    run_component("proxy", build, log_format=log_format, log_level=log_level, metrics_addr=metrics_addr)
