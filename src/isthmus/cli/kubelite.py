"""`isthmus kube-lite` (hidden): the cluster parts kube-lite provides for one embedded apiserver.

Started by `isthmus up` for each cluster; hidden because users never run it themselves.
"""

from __future__ import annotations

import re
from typing import Annotated

import typer

from isthmus.cli.app import (
    COMPONENTS,
    Background,
    ContextOpt,
    LogFormatOpt,
    LogLevelOpt,
    MetricsAddrOpt,
    Together,
    command,
    fail,
    run_component,
)

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,56}[a-z0-9])?$")
"""The node name is ``<cluster>-node``: the cluster name must leave room for the suffix."""


@command("kube-lite", panel=COMPONENTS, hidden=True)
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
    kubelet_port: Annotated[
        int,
        typer.Option(
            "--kubelet-port",
            help="Port of the kubelet endpoint on 127.0.0.1 (pod logs for the apiserver); 0: any free one.",
        ),
    ] = 0,
    root_dir: Annotated[
        str | None,
        typer.Option(
            "--root-dir",
            help="Directory for the pod dirs of Isthmus-image Pods (their HOME, tmp, ServiceAccount token, "
            "logs); default ~/.local/state/isthmus/kube-lite/<cluster-name>.",
        ),
    ] = None,
    proxy: Annotated[
        bool,
        typer.Option(
            "--proxy",
            help="Also be the node's service proxy, as k3s's agent runs kube-proxy: `isthmus proxy` in "
            "userspace mode (ClusterIPs, NodePorts on --node-address, ClusterSet IPs) in this process.",
        ),
    ] = False,
    node_address: Annotated[
        str, typer.Option("--node-address", help="With --proxy: the IP address NodePorts listen on.")
    ] = "127.0.0.1",
    context: ContextOpt = None,
    metrics_addr: MetricsAddrOpt = None,
    log_format: LogFormatOpt = "text",
    log_level: LogLevelOpt = "info",
) -> None:
    """Be a local cluster's node: what a real cluster's controllers and kubelet provide.

    Allocates ClusterIPs and NodePorts, maintains EndpointSlices, runs Deployments, StatefulSets and
    Pods, and is the cluster's node (its Node object and kubelet endpoint; with --proxy, its service
    proxy)."""
    import base64
    import ipaddress
    from pathlib import Path

    import httpx2

    from isthmus.kube.client import KubeConfigError, client_for, load_config
    from isthmus.local.kubelite import FIELD_MANAGER
    from isthmus.local.kubelite.ipam import parse_port_range
    from isthmus.local.kubelite.pods import node_zygote
    from isthmus.local.kubelite.processes import ProcessOptions
    from isthmus.local.kubelite.run import KubeLite, validate_config
    from isthmus.procs.entry import enabled as zygote_enabled

    try:
        node_ports = parse_port_range(node_port_range)
        validate_config(pod_cidr, service_cidr, node_ports)
    except ValueError as e:
        raise fail(str(e)) from None
    if not _DNS_LABEL.fullmatch(cluster_name):
        raise fail(f"--cluster-name {cluster_name!r} is not a DNS-1123 label of at most 58 characters")
    if not 0 <= kubelet_port <= 65535:
        raise fail(f"--kubelet-port {kubelet_port} is not a port number (0-65535)")
    try:
        node_ip = str(ipaddress.ip_address(node_address))
    except ValueError:
        raise fail(f"--node-address {node_address!r} is not an IP address") from None
    try:
        config = load_config(kubeconfig, context)
    except KubeConfigError as e:
        raise fail(str(e)) from None
    # The kubelet endpoint answers only the cluster's own token (the apiserver proxies with it).
    user = config.user
    token = user.token if user is not None else None
    if not token and user is not None and user.token_file:
        token = Path(user.token_file).read_text().strip() or None
    client = client_for(config, field_manager=FIELD_MANAGER)
    root = Path(root_dir or f"~/.local/state/isthmus/kube-lite/{cluster_name}").expanduser().absolute()
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as e:
        raise fail(f"--root-dir {root}: {e.strerror or e}") from None
    server = httpx2.URL(config.cluster.server)
    ca: bytes | None = None
    if config.cluster.certificate_auth_data:
        ca = base64.b64decode(config.cluster.certificate_auth_data)
    elif config.cluster.certificate_auth:
        try:
            ca = Path(config.cluster.certificate_auth).read_bytes()
        except OSError as e:
            raise fail(f"certificate-authority {config.cluster.certificate_auth}: {e.strerror or e}") from None
    processes = ProcessOptions(
        root_dir=root, api_host=server.host, api_port=server.port or (443 if server.scheme == "https" else 80),
        api_ca=ca,
    )
    if zygote_enabled():
        processes.zygote = node_zygote(cluster_name, processes)
        # The supervisor's zygote when it started us with a connection to it (one zygote for every
        # node's pods); else one forked now, while this process has no loop or thread (fork_now).
        if not processes.zygote.attach_inherited():
            processes.zygote.fork_now()

    async def build() -> Background | Together:
        lite = KubeLite(
            client,
            cluster=cluster_name,
            pod_cidr=pod_cidr,
            service_cidr=service_cidr,
            node_ports=node_ports,
            kubelet_port=kubelet_port,
            kubelet_token=token,
            processes=processes,
        )
        part = Background("kube-lite", lite.run, lambda: lite.ready, on_stop=client.close)
        if not proxy:
            return part
        from isthmus.proxy import ProxyConfig, ProxyService

        # A client of its own: the proxy's watches and kube-lite's writes never queue behind each other.
        service = ProxyService(client_for(config, field_manager="isthmus-proxy"),
                               ProxyConfig(cluster_id=cluster_name, node_address=node_ip))
        return Together([part, service])

    run_component("kube-lite", build, log_format=log_format, log_level=log_level, metrics_addr=metrics_addr)
