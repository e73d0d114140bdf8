"""The address plan of the local clusterset: pure, so `up`, `status` and the tests agree on it.

Everything lives in 127.0.0.0/8 (every 127.x address is local on Linux: no root, no
interfaces). Cluster ``ci`` (1-based ``i``) gets pod CIDR 127.(100+i).0.0/16, service CIDR
127.(200+i).0.0/16, NodePorts 30000+(i-1)*500 … +499 and a VIP block of the broker's
127.240.0.0/12 — a /16 each (c1 127.240.0.0/16, c2 127.241.0.0/16 …) while 16 of them fit, a
/17 each beyond that, so 30 clusters never overlap. Its load-balancer pools listen on the pool
manager's public address 127.30.i.1 and private address 127.31.i.1 (127.30.0.0/16 and
127.31.0.0/16: an edge host's two networks). The broker runs workloads too (exposure's broker
controller and the pool manager of its load balancers), as cluster index 0: pod CIDR 127.100.0.0/16,
service CIDR 127.200.0.0/16, NodePorts 29500-29999, pools on 127.30.0.1 / 127.31.0.1.
127.48.0.0/12 stays the user's. VIP blocks are passed to `join`
explicitly: clusters joining concurrently then still get the block their name promises.

The runc runtime (`up --runtime runc`) has the same plan with 10 for 127: every pod has a network
namespace of its own and nodes are namespaces joined by a fabric (local/network/), so addresses
must route between namespaces, which 127.0.0.0/8 never does. Its node of cluster ``ci`` has the
address 10.255.0.(10+i) (NodePorts listen there), and nothing of it is routed from the host.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

PROCESS = "process"
RUNC = "runc"
RUNTIMES = (PROCESS, RUNC)
"""`up --runtime`: pods as processes of the host (the fast default) or as OCI containers under runc."""
MAX_CLUSTERS = 30
DEFAULT_CLUSTERS = 3
MAX_NODES = 8
"""`up --nodes`: each node is a kube-lite (and, in runc mode, a network namespace) per cluster."""
DEFAULT_NODES = 1
NODE_CIDR_MASK = 24
"""kube-controller-manager's --node-cidr-mask-size default: a /24 of the cluster's /16 per node."""
BROKER = "broker"
HOST = "127.0.0.1"
NODE_ADDRESS = "127.0.0.1"
LOCAL_ZONE = "cluster.local"
CLUSTERSET_IP_RANGE = "127.240.0.0/12"
NODE_PORT_BASE = 30000
NODE_PORTS_PER_CLUSTER = 500
POOL_PUBLIC_RANGE = "127.30.0.0/16"
"""Public addresses of the clusters' pool managers (c<i>: 127.30.i.1): `role: slave_public` pools."""
POOL_PRIVATE_RANGE = "127.31.0.0/16"
"""Private addresses of the clusters' pool managers (c<i>: 127.31.i.1): every pool."""
EGRESS_RANGE = "127.32.0.0/16"
"""Source IPs of the clusters' local SourceIPClass `isthmus-local` (c<i>: 127.32.i.1-127.32.i.254)."""
DEMO_OUTSIDE_RANGE = "127.33.0.0/16"
"""Outside servers `isthmus demo` starts (its egress step's echo server is 127.33.0.1)."""
RUNC_FABRIC_ADDRESS = "10.255.0.1"
"""runc mode: the fabric's own address, where the apiservers are published to the pods (local/network/)."""
LOCAL_SOURCE_IP_CLASS = "isthmus-local"
LOCAL_SOURCE_IP_NAMESPACES = ("default", "demo")
"""Namespaces the local SourceIPClass lets claim (`default` and the demo's); admins add others."""

APISERVER = "apiserver"
KUBE_LITE = "kube-lite"
AGENT = "agent"
DNS = "dns"
CONTROLLER_MANAGER = "controller-manager"
"""`isthmus controller-manager`: the member's lb, mcsvc and egress-operator controllers in one pod."""
POOLS = "pools"
WEBHOOK = "webhook"
MCSVC_BROKER = "mcsvc-broker"
EGRESS_GATEWAY = "egress-gateway"
UI = "ui"
"""`isthmus ui`, the web view of the whole clusterset: a supervised process filed under the broker."""
RELAY = "relay"
"""runc mode: `isthmus netrelay`, publishing the apiservers into the fabric (10.255.0.1:<port>) and
the fabric's registry on the host (127.0.0.1:<port>): the clusterset's only doors to the host."""
REGISTRY = "registry"
"""runc mode: Debian's `docker-registry` in the fabric (10.255.0.2:5000), holding the images pods pull."""
CLUSTER_PART_KINDS = (APISERVER, KUBE_LITE, AGENT, DNS, CONTROLLER_MANAGER, POOLS, WEBHOOK, EGRESS_GATEWAY)
"""Every part of a cluster, in the order tables show them."""
SUPERVISED_KINDS = (APISERVER, KUBE_LITE)
"""What a cloud gives and the supervisor runs as processes (start order; stop order is the reverse).
A member's kube-lite is its node's service proxy too (`kube-lite --proxy`, as k3s's agent runs
kube-proxy): before the ninth session of 2026-11-28 the proxy was a process of its own."""
POD_KINDS = (AGENT, DNS, CONTROLLER_MANAGER, POOLS, WEBHOOK, EGRESS_GATEWAY)
"""Isthmus's own components: installed from deploy/member with `kubectl apply -k`, run by kube-lite."""
COMPONENT_NAMESPACE = "isthmus-system"
DEPLOYMENTS = {AGENT: "isthmus-agent", DNS: "isthmus-dns", CONTROLLER_MANAGER: "isthmus-controller-manager",
               POOLS: "isthmus-pools", WEBHOOK: "isthmus-webhook", EGRESS_GATEWAY: "isthmus-egress-gateway"}
"""The Deployment of each pod part (deploy/member)."""
SUPERSEDED_DEPLOYMENTS = ("isthmus-lb", "isthmus-mcsvc", "isthmus-egress-operator")
"""Deployments of earlier versions, now controllers inside isthmus-controller-manager: `up` deletes
them from a state dir made before."""
RUNC_BROKER_KINDS = (RELAY, REGISTRY)
"""What runc mode adds to the broker's supervised parts (started after the apiservers)."""
BROKER_POD_KINDS = (MCSVC_BROKER, POOLS)
"""The broker's workloads: installed from deploy/broker/controllers, run by the broker's kube-lite."""
BROKER_DEPLOYMENTS = {MCSVC_BROKER: "isthmus-mcsvc-broker", POOLS: "isthmus-pools"}
"""The Deployment of each broker pod part (deploy/broker/controllers)."""
DNS_SERVICE = "isthmus-dns"


class PlanError(ValueError):
    """A request the plan cannot satisfy (the message is for users)."""


@dataclass(frozen=True)
class ClusterPlan:
    """The fixed addresses of one cluster (ports are picked at run time, see `port_names`)."""

    name: str
    index: int
    pod_cidr: str
    service_cidr: str
    node_port_low: int
    node_port_high: int
    clusterset_ip_cidr: str
    pool_public_address: str
    pool_private_address: str
    runtime: str = PROCESS
    node_address: str = NODE_ADDRESS
    """Where NodePorts listen: the machine's loopback, or (runc) the node namespace's own address."""

    @property
    def node_port_range(self) -> str:
        return f"{self.node_port_low}-{self.node_port_high}"

    @property
    def first_octet(self) -> int:
        return 10 if self.runtime == RUNC else 127

    @property
    def egress_range(self) -> tuple[str, str] | None:
        """First and last address of the cluster's local SourceIPClass (none on the broker)."""
        o = self.first_octet
        return (f"{o}.32.{self.index}.1", f"{o}.32.{self.index}.254") if self.index > 0 else None


@dataclass(frozen=True)
class PartId:
    """One long-running process: ``broker-apiserver``, ``c1-agent``… A kube-lite of a cluster's
    node k > 1 (`up --nodes`) is ``c1-kube-lite-k``."""

    cluster: str
    kind: str
    node: int = 1

    @property
    def name(self) -> str:
        return f"{self.cluster}-{self.kind}" if self.node == 1 else f"{self.cluster}-{self.kind}-{self.node}"


def validate_count(n: int) -> None:
    if not 1 <= n <= MAX_CLUSTERS:
        raise PlanError(f"--clusters must be between 1 and {MAX_CLUSTERS}, not {n}")


def validate_nodes(n: int) -> None:
    if not 1 <= n <= MAX_NODES:
        raise PlanError(f"--nodes must be between 1 and {MAX_NODES}, not {n}")


def node_name(cluster: str, node: int = 1) -> str:
    """Node 1 keeps the one-node name (kube-lite's default, ``<cluster>-node``); node k is ``<cluster>-node-k``."""
    return f"{cluster}-node" if node == 1 else f"{cluster}-node-{node}"


def node_pod_cidr(pod_cidr: str, node: int, nodes: int) -> str:
    """The Node's spec.podCIDR, as kube-controller-manager's range allocator hands them out: the
    k-th /24 of the cluster's pod CIDR; a one-node cluster's node keeps all of it (as before
    `--nodes`, so its Pods' addresses do not change)."""
    validate_nodes(nodes)
    if not 1 <= node <= nodes:
        raise PlanError(f"node {node} outside 1..{nodes}")
    if nodes == 1:
        return pod_cidr
    net = ipaddress.IPv4Network(pod_cidr)
    return str(ipaddress.IPv4Network((int(net.network_address) + (node - 1) * 2 ** (32 - NODE_CIDR_MASK),
                                      NODE_CIDR_MASK)))


def cluster_name(i: int) -> str:
    return f"c{i}"


def validate_runtime(runtime: str) -> None:
    if runtime not in RUNTIMES:
        raise PlanError(f"--runtime must be one of {', '.join(RUNTIMES)}, not {runtime!r}")


def clusterset_ip_range(runtime: str = PROCESS) -> str:
    """The broker's ClusterSet IP range: 127.240.0.0/12, or 10.240.0.0/12 under runc."""
    return "10.240.0.0/12" if runtime == RUNC else CLUSTERSET_IP_RANGE


def runc_node_address(index: int, node: int = 1) -> str:
    """runc mode: node ``node`` of cluster index ``index`` (the broker is 0) on the fabric
    (10.255.0.0/16: node 1 in 10.255.0.0/24 as before `--nodes`, node k in 10.255.(k-1).0/24)."""
    return f"10.255.{node - 1}.{10 + index}"


def vip_prefix(n: int, runtime: str = PROCESS) -> int:
    """/16 per cluster while they fit in the /12 (16 clusters), /17 beyond (up to 32). Under runc the
    range's last /16 holds the fabric (10.255.0.0/24): no block may reach it, so 16 clusters get a /17
    each too."""
    rng = ipaddress.ip_network(clusterset_ip_range(runtime))
    prefix = 16
    while 2 ** (prefix - rng.prefixlen) < n:
        prefix += 1
    if runtime == RUNC:
        fabric = int(ipaddress.ip_address(RUNC_FABRIC_ADDRESS)) & ~0xFFFF
        while int(rng.network_address) + n * 2 ** (32 - prefix) > fabric:
            prefix += 1
    return prefix


def cluster_plan(i: int, n: int, runtime: str = PROCESS) -> ClusterPlan:
    """Addresses of cluster ``ci`` in a clusterset of ``n``."""
    validate_count(n)
    validate_runtime(runtime)
    if not 1 <= i <= n:
        raise PlanError(f"cluster index {i} outside 1..{n}")
    rng = ipaddress.ip_network(clusterset_ip_range(runtime))
    prefix = vip_prefix(n, runtime)
    block = ipaddress.ip_network((int(rng.network_address) + (i - 1) * 2 ** (32 - prefix), prefix))
    low = NODE_PORT_BASE + (i - 1) * NODE_PORTS_PER_CLUSTER
    o = 10 if runtime == RUNC else 127
    return ClusterPlan(
        name=cluster_name(i),
        index=i,
        pod_cidr=f"{o}.{100 + i}.0.0/16",
        service_cidr=f"{o}.{200 + i}.0.0/16",
        node_port_low=low,
        node_port_high=low + NODE_PORTS_PER_CLUSTER - 1,
        clusterset_ip_cidr=str(block),
        pool_public_address=f"{o}.30.{i}.1",
        pool_private_address=f"{o}.31.{i}.1",
        runtime=runtime,
        node_address=runc_node_address(i) if runtime == RUNC else NODE_ADDRESS,
    )


def broker_plan(runtime: str = PROCESS) -> ClusterPlan:
    """The broker's addresses: index 0 of the member scheme (its ClusterSet IP CIDR is the range)."""
    validate_runtime(runtime)
    o = 10 if runtime == RUNC else 127
    return ClusterPlan(
        name=BROKER, index=0, pod_cidr=f"{o}.100.0.0/16", service_cidr=f"{o}.200.0.0/16",
        node_port_low=NODE_PORT_BASE - NODE_PORTS_PER_CLUSTER, node_port_high=NODE_PORT_BASE - 1,
        clusterset_ip_cidr=clusterset_ip_range(runtime), pool_public_address=f"{o}.30.0.1",
        pool_private_address=f"{o}.31.0.1", runtime=runtime,
        node_address=runc_node_address(0) if runtime == RUNC else NODE_ADDRESS,
    )


def plan_of(name: str, n: int, runtime: str = PROCESS) -> ClusterPlan:
    """The plan of the broker or of cluster `c<i>`."""
    return broker_plan(runtime) if name == BROKER else cluster_plan(int(name[1:]), n, runtime)


def address_plan(n: int, runtime: str = PROCESS) -> list[ClusterPlan]:
    validate_count(n)
    return [cluster_plan(i, n, runtime) for i in range(1, n + 1)]


def broker_supervised_kinds(runtime: str = PROCESS) -> tuple[str, ...]:
    """The broker's processes run by the supervisor, in table order (runc mode adds the relay and
    the registry; the web view watches every cluster, so it is started last, once they all exist)."""
    return (APISERVER, *(RUNC_BROKER_KINDS if runtime == RUNC else ()), KUBE_LITE, UI)


def broker_part_kinds(runtime: str = PROCESS) -> tuple[str, ...]:
    """Every part of the broker in table order."""
    return (APISERVER, *(RUNC_BROKER_KINDS if runtime == RUNC else ()), KUBE_LITE, MCSVC_BROKER, POOLS, UI)


def parts(n: int, runtime: str = PROCESS, nodes: int = DEFAULT_NODES) -> list[PartId]:
    """Every supervised process in start order: the broker, every apiserver, (runc) the relay and
    the registry, the broker's kube-lite, then each cluster's kube-lites (one per node; node 1's
    runs the cluster's controllers), then the web view (the agent and DNS server are pods: see
    `pod_parts`). The broker has one node whatever `nodes`."""
    validate_count(n)
    validate_nodes(nodes)
    names = [cluster_name(i) for i in range(1, n + 1)]
    out = [PartId(BROKER, APISERVER)] + [PartId(c, APISERVER) for c in names]
    if runtime == RUNC:
        out += [PartId(BROKER, kind) for kind in RUNC_BROKER_KINDS]
    out.append(PartId(BROKER, KUBE_LITE))
    out += [PartId(c, KUBE_LITE, k) for c in names for k in range(1, nodes + 1)]
    out.append(PartId(BROKER, UI))
    return out


def pod_parts(n: int) -> list[PartId]:
    """The parts that run as pods, installed from the manifests."""
    validate_count(n)
    return [PartId(BROKER, kind) for kind in BROKER_POD_KINDS] + [
        PartId(cluster_name(i), kind) for i in range(1, n + 1) for kind in POD_KINDS]


def dns_node_port(cluster: ClusterPlan) -> int:
    """The NodePort of the cluster's DNS Service (UDP and TCP), the last of its NodePort range:
    what `status` gives as the cluster's DNS address, stable across restarts of the DNS pod."""
    return cluster.node_port_high


def port_names(n: int, runtime: str = PROCESS, nodes: int = DEFAULT_NODES) -> list[str]:
    """The ports picked at first `up` and kept: API ports, kubelet endpoints, one metrics port per
    supervised part, the web view's port, (runc) the registry's port on the host."""
    out: list[str] = []
    for part in parts(n, runtime, nodes):
        if part.kind in (APISERVER, UI, REGISTRY):
            out.append(part.name)
        else:
            if part.kind == KUBE_LITE:
                out.append(kubelet_port_name(part.cluster, part.node))
            out.append(metrics_port_name(part))
    return out


def kubelet_port_name(cluster: str, node: int = 1) -> str:
    """kube-lite's kubelet endpoint (the apiserver proxies `kubectl logs` to it; its Node publishes it)."""
    return f"{PartId(cluster, KUBE_LITE, node).name}-kubelet"


def metrics_port_name(part: PartId) -> str:
    """The apiserver and the web view serve /readyz on their own port (the registry /v2/, through
    the relay); the others on a metrics port."""
    return part.name if part.kind in (APISERVER, UI, REGISTRY) else f"{part.name}-metrics"


def udp_too(port_name: str) -> bool:
    """DNS listens on UDP and TCP: its port must be free for both."""
    return port_name.endswith(f"-{DNS}")
