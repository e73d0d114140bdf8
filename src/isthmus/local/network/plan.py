"""The runc-mode address plan of the local clusterset: pure, so `up`, `status`, kube-lite and the
tests agree on every name and address without asking each other.

A runc-mode clusterset lives in network namespaces of its own, named after its id (``isthmus-`` and
the first 8 hex digits of the sha256 of the absolute state dir, so two state dirs never share one
and `down` finds them again from the state dir alone):

- the fabric ``<cs>``: the clusterset's "outside network". Bridge ``fabric0`` holds 10.255.0.1/24
  (router of the fabric, and where the apiserver relays listen) and 10.255.0.2 (the registry);
  a dummy ``outside0`` holds the demo's outside servers (10.33.0.0/16).
- one node per cluster ``<cs>-<cluster>`` (the broker is index 0, ``c<i>`` index i): ``eth0``
  10.255.0.(10+i)/24 on fabric0 (the Node's InternalIP), a dummy ``edge0`` with the pool manager's
  edge addresses 10.30.i.1 (public) and 10.31.i.1 (private); egress source IPs 10.32.i.1-254; pod
  CIDR 10.(100+i).0.0/16 on the CNI bridge ``cni0``; service CIDR 10.(200+i).0.0/16; the
  ClusterSet IP block the process plan gives, moved from 127.240.0.0/12 to 10.240.0.0/12 (but
  never into its last /16, 10.255.0.0/16, the fabric's: see `vip_prefix`).
- one per pod ``<cs>-<cluster>-<first 12 of the pod uid>``.
- `up --nodes N`: node k > 1 of a cluster is ``<cs>-<cluster>-n<k>`` at 10.255.(k-1).(10+i)/24
  (fabric0 is the router on every such /24), its pods in ``<cs>-<cluster>-n<k>-<uid12>``; with
  several nodes each node's pods are the k-th /24 of the cluster's pod CIDR, routed to it by the
  fabric; node 1 keeps the edge addresses and egress range.

Nothing here is routed from the host's own namespace; 127.0.0.0/8 (and the user's 127.48.0.0/12)
stays untouched, since every namespace has a loopback of its own.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from isthmus.local import plan as process_plan
from isthmus.local.plan import BROKER, MAX_CLUSTERS, PlanError

__all__ = [
    "CLUSTERSET_IP_RANGE", "EDGE_PRIVATE_RANGE", "EDGE_PUBLIC_RANGE", "EGRESS_RANGE", "FABRIC_BRIDGE", "FABRIC_CIDR",
    "FABRIC_GATEWAY", "FABRIC_PREFIX", "MAX_CLUSTERS", "NETNS_PREFIX", "OUTSIDE_DEVICE", "OUTSIDE_RANGE",
    "REGISTRY_ADDRESS", "REGISTRY_PORT", "FabricPlan", "NodeNet", "PlanError", "clusterset_id", "fabric_plan",
    "node_net", "pod_netns_name", "ranges", "summary", "summary_rows", "vip_prefix",
]

NETNS_PREFIX = "isthmus-"
"""Every namespace `up` makes starts with this (and the clusterset id follows)."""
FABRIC_CIDR = "10.255.0.0/24"
FABRIC_PREFIX = 24
FABRIC_BRIDGE = "fabric0"
FABRIC_GATEWAY = "10.255.0.1"
"""The fabric's router and where the apiserver relays listen (apiserver certificates carry it)."""
REGISTRY_ADDRESS = "10.255.0.2"
REGISTRY_PORT = 5000
OUTSIDE_DEVICE = "outside0"
OUTSIDE_RANGE = "10.33.0.0/16"
"""Outside servers (the demo's egress echo server): addresses added on demand to outside0."""
EDGE_DEVICE = "edge0"
NODE_DEVICE = "eth0"
POD_BRIDGE = "cni0"
EDGE_PUBLIC_RANGE = "10.30.0.0/16"
EDGE_PRIVATE_RANGE = "10.31.0.0/16"
EGRESS_RANGE = "10.32.0.0/16"
CLUSTERSET_IP_RANGE = "10.240.0.0/12"
NODE_ADDRESS_BASE = 10
"""Node i's fabric address is 10.255.0.(10+i)."""
ID_HEX = 8


def clusterset_id(state_dir: str | os.PathLike[str]) -> str:
    """``isthmus-`` + the first 8 hex of sha256(absolute state dir): also the fabric namespace's name.

    The path is resolved as `local.state.Layout.at` resolves it, so `up`, `down` and `shell` given
    the same directory by different spellings agree."""
    absolute = str(Path(state_dir).expanduser().resolve())
    return NETNS_PREFIX + hashlib.sha256(absolute.encode()).hexdigest()[:ID_HEX]


def pod_netns_name(cs: str, cluster: str, pod_uid: str, node_name: str | None = None) -> str:
    """A pod's namespace: ``<its node's namespace>-<first 12 of the pod uid, dashes dropped>``
    (``<cs>-<cluster>-…`` on node 1, ``<cs>-<cluster>-n<k>-…`` on node k); `node_name`: the Pod's
    spec.nodeName (None: node 1)."""
    short = pod_uid.replace("-", "")[:12]
    if not short:
        raise PlanError("a pod namespace needs the pod's uid")
    node = 1
    prefix = process_plan.node_name(cluster, 1) + "-"
    if node_name and node_name.startswith(prefix) and node_name[len(prefix):].isdigit():
        node = int(node_name[len(prefix):])
    return f"{cs}-{cluster}-{short}" if node == 1 else f"{cs}-{cluster}-n{node}-{short}"


def _index(cluster: str) -> int:
    if cluster == BROKER:
        return 0
    if cluster.startswith("c") and cluster[1:].isdigit() and 1 <= int(cluster[1:]) <= MAX_CLUSTERS:
        return int(cluster[1:])
    raise PlanError(f"no cluster {cluster!r} in the plan (broker or c1..c{MAX_CLUSTERS})")


def vip_prefix(n: int) -> int:
    """The runc plan's split of the ClusterSet IP range (local/plan.py's rule: never into
    10.255.0.0/16, the fabric's)."""
    return process_plan.vip_prefix(n, process_plan.RUNC)


def _vip_block(index: int, n: int) -> str:
    if index == 0:
        return CLUSTERSET_IP_RANGE
    rng = ipaddress.ip_network(CLUSTERSET_IP_RANGE)
    prefix = vip_prefix(n)
    return str(ipaddress.ip_network((int(rng.network_address) + (index - 1) * 2 ** (32 - prefix), prefix)))


@dataclass(frozen=True)
class NodeNet:
    """The network of one node of a cluster (the broker is index 0). `up --nodes N`: node 1 keeps
    the one-node names and addresses; node k > 1 is ``<cs>-<cluster>-n<k>`` at 10.255.(k-1).(10+i)."""

    clusterset: str
    cluster: str
    index: int
    clusterset_ip_cidr: str
    node_port_low: int
    node_port_high: int
    node: int = 1
    nodes: int = 1
    """How many nodes the cluster has: with more than one, each gets a /24 of the pod CIDR."""

    @property
    def netns(self) -> str:
        return f"{self.clusterset}-{self.cluster}" if self.node == 1 else f"{self.clusterset}-{self.cluster}-n{self.node}"

    @property
    def name(self) -> str:
        """The Node's name (kube-lite --node-name)."""
        return process_plan.node_name(self.cluster, self.node)

    @property
    def netns_path(self) -> str:
        return f"/run/netns/{self.netns}"

    @property
    def address(self) -> str:
        """The node's fabric address: its InternalIP, where NodePorts and hostNetwork pods listen."""
        return f"10.255.{self.node - 1}.{NODE_ADDRESS_BASE + self.index}"

    @property
    def fabric_gateway(self) -> str:
        """The fabric's address on this node's /24 of 10.255.0.0/16: the node's default gateway."""
        return f"10.255.{self.node - 1}.1"

    @property
    def fabric_veth(self) -> str:
        """The veth end in the fabric namespace, on fabric0 (≤ 15 characters: ``v-broker``, ``v-c30``,
        ``v-c30-n8``)."""
        return f"v-{self.cluster}" if self.node == 1 else f"v-{self.cluster}-n{self.node}"

    @property
    def cluster_pod_cidr(self) -> str:
        """The cluster's pod CIDR (kube-lite --pod-cidr)."""
        return f"10.{100 + self.index}.0.0/16"

    @property
    def pod_cidr(self) -> str:
        """This node's pods (its spec.podCIDR): the cluster's, or its /24 of it on a several-node cluster."""
        return process_plan.node_pod_cidr(self.cluster_pod_cidr, self.node, self.nodes)

    @property
    def pod_gateway(self) -> str:
        """cni0's address in the node namespace: the pods' default gateway."""
        return str(ipaddress.IPv4Network(self.pod_cidr).network_address + 1)

    @property
    def pod_range_start(self) -> str:
        return str(ipaddress.IPv4Network(self.pod_cidr).network_address + 2)

    @property
    def holds_edge(self) -> bool:
        """Node 1 holds the cluster's edge addresses and egress range at first; with several nodes
        they follow the pods that bind them (speaker.py)."""
        return self.node == 1

    @property
    def service_cidr(self) -> str:
        return f"10.{200 + self.index}.0.0/16"

    @property
    def edge_public(self) -> str:
        return f"10.30.{self.index}.1"

    @property
    def edge_private(self) -> str:
        return f"10.31.{self.index}.1"

    @property
    def egress_range(self) -> tuple[str, str] | None:
        """First and last egress source IP (none on the broker, as in the process plan)."""
        return (f"10.32.{self.index}.1", f"10.32.{self.index}.254") if self.index > 0 else None

    @property
    def routed(self) -> tuple[str, ...]:
        """What the fabric routes to this node: its pods, (node 1) its edge addresses and egress sources."""
        i = self.index
        edge = (f"10.30.{i}.0/24", f"10.31.{i}.0/24", f"10.32.{i}.0/24") if self.holds_edge else ()
        return (self.pod_cidr, *edge)

    def pod_netns(self, pod_uid: str) -> str:
        """``<node netns>-<first 12 of the uid>``, as kube-lite names it (pods.py `_pod_netns`)."""
        short = pod_uid.replace("-", "")[:12]
        if not short:
            raise PlanError("a pod namespace needs the pod's uid")
        return f"{self.netns}-{short}"


@dataclass(frozen=True)
class FabricPlan:
    """The whole clusterset's network: the fabric and its nodes (the broker first)."""

    id: str
    nodes: tuple[NodeNet, ...]

    @property
    def netns(self) -> str:
        """The fabric namespace (`isthmus shell` enters it)."""
        return self.id

    @property
    def netns_path(self) -> str:
        return f"/run/netns/{self.id}"

    @property
    def gateway(self) -> str:
        return FABRIC_GATEWAY

    @property
    def registry(self) -> str:
        """The registry's address and port (plain HTTP)."""
        return f"{REGISTRY_ADDRESS}:{REGISTRY_PORT}"

    def node(self, cluster: str, node: int = 1) -> NodeNet:
        """Node ``node`` (default the first) of ``cluster``."""
        for net in self.nodes:
            if net.cluster == cluster and net.node == node:
                return net
        raise PlanError(f"no cluster {cluster!r} in this clusterset "
                        f"({', '.join(n.cluster for n in self.nodes)})")

    def namespaces(self) -> list[str]:
        """Every namespace ensure() makes: the fabric first."""
        return [self.netns] + [n.netns for n in self.nodes]

    def owns(self, netns: str) -> bool:
        """Whether a namespace name is this clusterset's (the fabric, a node, or a pod of a node)."""
        return netns == self.id or netns.startswith(self.id + "-")


def node_net(cs: str, cluster: str, n: int, node: int = 1, nodes: int = 1) -> NodeNet:
    """The network of node ``node`` of ``nodes`` of ``cluster`` (``broker`` or ``c<i>``) in a
    clusterset ``cs`` of ``n`` clusters."""
    process_plan.validate_count(n)
    process_plan.validate_nodes(nodes)
    index = _index(cluster)
    if index > n:
        raise PlanError(f"cluster index {index} outside 1..{n}")
    if not 1 <= node <= nodes:
        raise PlanError(f"node {node} outside 1..{nodes}")
    proc = process_plan.plan_of(cluster, n)
    return NodeNet(clusterset=cs, cluster=cluster, index=index, clusterset_ip_cidr=_vip_block(index, n),
                   node_port_low=proc.node_port_low, node_port_high=proc.node_port_high, node=node, nodes=nodes)


def fabric_plan(state_dir: str | os.PathLike[str], n: int, *, cs: str | None = None, nodes: int = 1) -> FabricPlan:
    """The plan of the clusterset of ``n`` clusters of ``nodes`` nodes each (the broker has one) kept
    in ``state_dir`` (``cs`` overrides its id: tests pick a unique one)."""
    ident = cs if cs is not None else clusterset_id(state_dir)
    process_plan.validate_count(n)
    process_plan.validate_nodes(nodes)
    out = [node_net(ident, BROKER, n)]
    for i in range(1, n + 1):
        out += [node_net(ident, process_plan.cluster_name(i), n, k, nodes) for k in range(1, nodes + 1)]
    return FabricPlan(id=ident, nodes=tuple(out))


def ranges(plan: FabricPlan) -> dict[str, str]:
    """Every range the plan hands out, by what it is for (the unit tests check none overlap)."""
    out = {"fabric": FABRIC_CIDR, "outside": OUTSIDE_RANGE}
    for node in plan.nodes:
        if node.node > 1:  # its pods are a slice of node 1's cluster range; its fabric /24 is its own
            out[f"fabric of nodes {node.node}"] = f"10.255.{node.node - 1}.0/24"
            continue
        c, i = node.cluster, node.index
        if i:  # the broker's is the whole range, the umbrella of the members' blocks
            out[f"{c} clusterset IPs"] = node.clusterset_ip_cidr
        out[f"{c} pods"] = node.cluster_pod_cidr
        out[f"{c} services"] = node.service_cidr
        out[f"{c} edge public"] = f"10.30.{i}.0/24"
        out[f"{c} edge private"] = f"10.31.{i}.0/24"
        out[f"{c} egress"] = f"10.32.{i}.0/24"
    return out


def summary_rows(plan: FabricPlan) -> list[list[str]]:
    """The address plan as table rows (header first), for `isthmus status` and docs."""
    rows = [["CLUSTER", "NETNS", "NODE", "PODS", "SERVICES", "CLUSTERSET IPS", "EDGE", "EGRESS", "NODEPORTS"]]
    for node in plan.nodes:
        egress = f"{node.egress_range[0]}-{node.egress_range[1].rsplit('.', 1)[1]}" if node.egress_range else "-"
        if not node.holds_edge:  # a further node of the cluster: its own namespace, address and pods
            rows.append([f"{node.cluster} ({node.name})", node.netns, node.address, node.pod_cidr, "", "", "", "",
                         f"{node.node_port_low}-{node.node_port_high}"])
            continue
        rows.append([node.cluster, node.netns, node.address, node.pod_cidr, node.service_cidr,
                     node.clusterset_ip_cidr, f"{node.edge_public} {node.edge_private}", egress,
                     f"{node.node_port_low}-{node.node_port_high}"])
    return rows


def summary(plan: FabricPlan) -> str:
    """The plan as text: the fabric's line, then a table of the nodes."""
    rows = summary_rows(plan)
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = [f"fabric {plan.netns}: {FABRIC_BRIDGE} {FABRIC_GATEWAY}/24 (apiserver relays), registry "
             f"{plan.registry}, outside servers {OUTSIDE_RANGE}"]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)
