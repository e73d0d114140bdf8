"""`isthmus kube-lite` (hidden): the cluster parts kube-lite provides for one embedded apiserver.

Started by `isthmus up` for each cluster; hidden because users never run it themselves.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

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
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
"""A label, not any DNS subdomain: the node name is also a hostname and a cgroup's name."""


@command("kube-lite", panel=COMPONENTS, hidden=True)
def kube_lite(
    kubeconfig: Annotated[str, typer.Option(help="Kubeconfig of the cluster's API server.")],
    cluster_name: Annotated[
        str, typer.Option("--cluster-name", help="Cluster name (node name, echo answers).")
    ],
    pod_cidr: Annotated[str, typer.Option("--pod-cidr", help="The cluster's Pod addresses, inside 127.0.0.0/8.")],
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
        str, typer.Option("--node-address", help="With --proxy: the IP address NodePorts listen on; in runc mode "
                          "also the Node's InternalIP (its address in --netns).")
    ] = "127.0.0.1",
    runtime: Annotated[
        str, typer.Option("--runtime", help="process: Isthmus-image Pods as processes of this machine; runc: every "
                          "Pod as OCI containers (runc), each in a network namespace of its own (needs root).")
    ] = "process",
    runc_path: Annotated[str, typer.Option("--runc", help="runc mode: the runc binary.")] = "runc",
    netns_name: Annotated[
        str | None, typer.Option("--netns", help="runc mode: the node's network namespace (ip netns name); pods "
                                 "get namespaces of their own attached to its bridge cni0.")
    ] = None,
    registry_mirrors: Annotated[
        list[str] | None, typer.Option("--registry-mirror", help="runc mode: HOST=URL, pull images of registry HOST "
                                       "from URL (repeatable), e.g. docker.io=http://10.255.0.2:5000.")
    ] = None,
    api_address_in_pods: Annotated[
        str | None, typer.Option("--api-address-in-pods", help="runc mode: HOST:PORT where containers reach the "
                                 "apiserver (KUBERNETES_SERVICE_HOST/PORT); default the kubeconfig's server.")
    ] = None,
    node: Annotated[
        str | None, typer.Option("--node-name", help="This kubelet's Node (default <cluster-name>-node); it runs only "
                                 "the Pods bound to it.")
    ] = None,
    node_pod_cidr: Annotated[
        str | None, typer.Option("--node-pod-cidr", help="The Node's spec.podCIDR, a slice of --pod-cidr its Pods "
                                 "get addresses from (default all of it).")
    ] = None,
    controllers: Annotated[
        bool, typer.Option("--controllers/--no-controllers", help="Also run the cluster-wide controllers (ClusterIPs, "
                           "EndpointSlices, workloads, scheduling): exactly one kube-lite of a cluster does.")
    ] = True,
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
    from isthmus.local.kubelite.pods import node_name, node_zygote
    from isthmus.local.kubelite.processes import ProcessOptions
    from isthmus.local.kubelite.run import KubeLite, validate_config, validate_node_cidr
    from isthmus.procs.entry import enabled as zygote_enabled

    if runtime not in ("process", "runc"):
        raise fail(f"--runtime {runtime!r}: use process or runc")
    try:
        node_ports = parse_port_range(node_port_range)
        validate_config(pod_cidr, service_cidr, node_ports, loopback=runtime == "process")
        validate_node_cidr(pod_cidr, node_pod_cidr)
    except ValueError as e:
        raise fail(str(e)) from None
    if not _DNS_LABEL.fullmatch(cluster_name):
        raise fail(f"--cluster-name {cluster_name!r} is not a DNS-1123 label of at most 58 characters")
    node = node or node_name(cluster_name)
    if not _NODE_NAME.fullmatch(node):
        raise fail(f"--node-name {node!r} is not a DNS-1123 label of at most 63 characters")
    if not 0 <= kubelet_port <= 65535:
        raise fail(f"--kubelet-port {kubelet_port} is not a port number (0-65535)")
    try:
        node_ip = str(ipaddress.ip_address(node_address))
    except ValueError:
        raise fail(f"--node-address {node_address!r} is not an IP address") from None
    mirrors: dict[str, str] = {}
    for m in registry_mirrors or []:
        host, sep, url = m.partition("=")
        if not sep or not host or not url:
            raise fail(f"--registry-mirror {m!r} is not HOST=URL (e.g. docker.io=http://10.255.0.2:5000)")
        mirrors[host] = url
    if runtime == "runc":
        problem = _runc_mode_problem(runc_path, netns_name)
        if problem:
            raise fail(problem)
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
    runc_node = None
    network = None
    if runtime == "runc":
        assert netns_name is not None
        runc_node, network = _runc_mode(
            client, root=root, cluster=cluster_name, node=node, runc=runc_path, netns_name=netns_name,
            node_address=node_ip, pod_cidr=node_pod_cidr or pod_cidr, mirrors=mirrors,
            api_in_pods=api_address_in_pods or f"{processes.api_host}:{processes.api_port}", api_ca=ca, allocatable=processes.allocatable,
        )
    elif zygote_enabled():
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
            runc=runc_node,
            network=network,
            node=node,
            node_pod_cidr=node_pod_cidr,
            controllers=controllers,
        )
        part = Background("kube-lite", lite.run, lambda: lite.ready, on_stop=client.close)
        if not proxy:
            return part
        from isthmus.proxy import ProxyConfig, ProxyService

        # A client of its own: the proxy's watches and kube-lite's writes never queue behind each other.
        proxy_client = client_for(config, field_manager="isthmus-proxy")
        if runtime == "runc":  # kube-proxy's place in the node's namespace: the kernel DNATs
            from isthmus.proxy.nftables import NftablesDataplane

            service = ProxyService(proxy_client,
                                   ProxyConfig(cluster_id=cluster_name, node_address=node_ip, mode="nftables"),
                                   dataplane=NftablesDataplane(netns=netns_name))
        else:
            service = ProxyService(proxy_client, ProxyConfig(cluster_id=cluster_name, node_address=node_ip))
        return Together([part, service])

    run_component("kube-lite", build, log_format=log_format, log_level=log_level, metrics_addr=metrics_addr)


def _runc_mode_problem(runc: str, netns_name: str | None) -> str | None:
    """Why runc mode cannot run here (a message for users), None when it can."""
    import os
    import shutil

    if os.geteuid() != 0:
        return "--runtime runc needs root (runc, network namespaces, overlay mounts)"
    if shutil.which(runc) is None:
        return f"--runtime runc: {runc!r} not found (Debian: apt-get install runc)"
    if not netns_name:
        return "--runtime runc needs --netns, the node's network namespace"
    from isthmus.runtime import netns

    if not netns.exists(netns_name):
        return f"--netns {netns_name!r}: no such network namespace (ip netns list)"
    return None


def _runc_mode(client: Any, *, root: Any, cluster: str, node: str, runc: str, netns_name: str, node_address: str,
               pod_cidr: str, mirrors: dict[str, str], api_in_pods: str, api_ca: bytes | None,
               allocatable: Any) -> tuple[Any, Any]:
    """The runc side of the node: runc, the image store (pulls from the node's namespace), the pod network."""
    import ipaddress
    from urllib.parse import urlsplit

    from isthmus.local.kubelite.images import ImageStore
    from isthmus.local.kubelite.runc import RuncNode, RuncRuntime, seccomp_supported
    from isthmus.local.network.cni import PodNetwork
    from isthmus.runtime import netns

    host, sep, port = api_in_pods.rpartition(":")
    if not sep or not port.isdigit():
        raise fail(f"--api-address-in-pods {api_in_pods!r} is not HOST:PORT")
    net = ipaddress.IPv4Network(pod_cidr)
    insecure = [urlsplit(u).netloc for u in mirrors.values() if u.startswith("http://")]
    images = ImageStore(root, mirrors=mirrors, netns=netns_name, insecure=insecure)
    runc_node = RuncNode(
        runtime=RuncRuntime(root, node=node, runc=runc), images=images,
        node_netns=netns.path(netns_name), node_address=node_address, api_host=host.strip("[]"), api_port=int(port),
        cluster=cluster, node_name=node, client=client, api_ca=api_ca, seccomp=seccomp_supported(runc),
        allocatable=allocatable,
    )
    network = PodNetwork(netns_name, pod_cidr, str(net.network_address + 1), root / "cni")
    return runc_node, network
