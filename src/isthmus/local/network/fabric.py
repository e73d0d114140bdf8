"""The fabric of a runc-mode clusterset: its namespaces, their links, addresses and routes.

    host namespace (untouched: no link, address or route of ours)
    ─────────────────────────────────────────────────────────────
    fabric ns <cs>: fabric0 bridge 10.255.0.1/24 + 10.255.0.2/24, outside0 (10.33/16 on demand)
       ├── v-broker ══ eth0 10.255.0.10  node ns <cs>-broker  (edge0: 10.30.0.1, 10.31.0.1)
       ├── v-c1     ══ eth0 10.255.0.11  node ns <cs>-c1      (edge0: 10.30.1.1, 10.31.1.1)
       └── v-c2     ══ eth0 10.255.0.12  node ns <cs>-c2 ...
    routes in the fabric: 10.(100+i)/16, 10.30.i/24, 10.31.i/24, 10.32.i/24 via 10.255.0.(10+i);
    each node: default via 10.255.0.1; pods hang off the node's cni0 (cni.py).

`ensure` is idempotent and quick (measured ~30 ms for a broker and three clusters): the
namespaces are made with one `ip -batch`, what already exists is read from inside each namespace
(if_nameindex on a thread there) so only missing links are added, then one `ip -n <ns> -batch` per
namespace (the nodes' in parallel) sets everything with `replace`, and the sysctls are written from
a thread inside each namespace. Nothing runs in, or is added to, the host's own namespace.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from isthmus.local.network.plan import (
    EDGE_DEVICE,
    FABRIC_BRIDGE,
    FABRIC_GATEWAY,
    FABRIC_PREFIX,
    NODE_DEVICE,
    OUTSIDE_DEVICE,
    REGISTRY_ADDRESS,
    FabricPlan,
    NodeNet,
)
from isthmus.runtime import netns

__all__ = ["FabricError", "FabricState", "add_outside_address", "bridge_netfilter", "ensure", "state", "teardown", "teardown_id"]


class FabricError(RuntimeError):
    """The fabric could not be set up (the message names the namespace and iproute2's complaint)."""


def _sysctl(values: dict[str, str]) -> None:
    for key, value in values.items():
        optional = key.startswith("?")
        path = f"/proc/sys/{key.lstrip('?').replace('.', '/')}"
        if optional and not os.path.exists(path):
            continue
        with open(path, "w") as f:
            f.write(value)


def bridge_netfilter() -> bool:
    """Whether bridged traffic can pass the namespaces' nftables (the host has br_netfilter loaded).

    kube-proxy's reason to need it holds here: a pod that calls a ClusterIP whose endpoint is a pod
    on the same node gets its answer bridged straight back on cni0; without br_netfilter conntrack
    never sees that answer, so it is not translated back and the call fails."""
    return os.path.exists("/proc/sys/net/bridge/bridge-nf-call-iptables")


def _prepare(values: dict[str, str]) -> set[str]:
    """Inside a namespace: write sysctls, then list its links."""
    _sysctl(values)
    return {name for _, name in socket.if_nameindex()}


FABRIC_SYSCTLS = {
    "net.ipv4.ip_forward": "1",
    # The fabric routes between nodes on one bridge: a packet leaves by the port it came in, and
    # redirects would teach nodes to bypass it (and the routes this plan describes).
    "net.ipv4.conf.all.send_redirects": "0",
    "net.ipv4.conf.default.send_redirects": "0",
}
NODE_SYSCTLS = {"net.ipv4.ip_forward": "1", "?net.bridge.bridge-nf-call-iptables": "1"}
"""`?`: set where the kernel has it (see bridge_netfilter)."""


GATEWAY_NODE_SYSCTLS = {"net.ipv4.ip_unprivileged_port_start": "0"}
"""A member's nodes are its egress gateway nodes too: the gateway runs there with hostNetwork and binds
`sourceIP:<service port>` (80, 443 …) as uid 65532. Its manifest's answer to ports below 1024, the
pod's own namespaced sysctl, is refused with hostNetwork (by kube's kubelet and ours), so the node
allows them, as an admin sets it (sysctl.d) on the gateway nodes of a real cluster (docs/egress.md).
Pods of their own network keep the kernel's default of 1024."""


def node_sysctls(node: NodeNet) -> dict[str, str]:
    """A node of a several-node member cluster also binds addresses it does not hold yet: the pool
    manager and the egress gateway start on any node, and the speaker moves the edge addresses to
    it a moment later (speaker.py)."""
    if node.index == 0:  # the broker: no gateway
        return NODE_SYSCTLS
    if node.nodes > 1:
        return {**NODE_SYSCTLS, **GATEWAY_NODE_SYSCTLS, "net.ipv4.ip_nonlocal_bind": "1"}
    return {**NODE_SYSCTLS, **GATEWAY_NODE_SYSCTLS}
HOLDER_KIND = "bridge"
"""The kind of edge0 and outside0, devices that only hold addresses: a bridge without ports has
carrier and holds them as a `dummy` would, and needs no module (the kernel here has no dummy
driver, and loading one would add a dummy0 to the host's namespace)."""


def _mac(last: int, third: int = 0) -> str:
    """The fixed MAC of a fabric address 10.255.<third>.<last> (locally administered): a node or the
    fabric remade keeps its MAC, so the neighbours' ARP entries for it stay right instead of
    black-holing traffic until they expire."""
    return f"02:00:0a:ff:{third:02x}:{last:02x}"


def _fabric_batch(plan: FabricPlan, links: set[str], cabled: set[str]) -> str:
    lines = ["link set lo up"]
    if FABRIC_BRIDGE not in links:
        lines.append(f"link add {FABRIC_BRIDGE} type bridge")
    lines += [f"link set {FABRIC_BRIDGE} address {_mac(1)} up",
              f"addr replace {FABRIC_GATEWAY}/{FABRIC_PREFIX} dev {FABRIC_BRIDGE}",
              f"addr replace {REGISTRY_ADDRESS}/{FABRIC_PREFIX} dev {FABRIC_BRIDGE}"]
    # `up --nodes`: node k > 1 of every cluster is on 10.255.(k-1).0/24, the fabric its router there too.
    lines += [f"addr replace {g}/{FABRIC_PREFIX} dev {FABRIC_BRIDGE}"
              for g in sorted({n.fabric_gateway for n in plan.nodes if n.node > 1})]
    if OUTSIDE_DEVICE not in links:
        lines.append(f"link add {OUTSIDE_DEVICE} type {HOLDER_KIND}")
    lines.append(f"link set {OUTSIDE_DEVICE} up")
    for node in plan.nodes:
        if node.netns not in cabled:
            lines.append(f"link add {node.fabric_veth} type veth peer name {NODE_DEVICE} "
                         f"address {_mac(node.index + 10, node.node - 1)} netns {node.netns}")
        lines.append(f"link set {node.fabric_veth} master {FABRIC_BRIDGE} up")
        lines += [f"route replace {dst} via {node.address} dev {FABRIC_BRIDGE}" for dst in node.routed]
    return "".join(line + "\n" for line in lines)


def _node_batch(node: NodeNet, links: set[str]) -> str:
    lines = ["link set lo up", f"link set {NODE_DEVICE} up",
             f"addr replace {node.address}/{FABRIC_PREFIX} dev {NODE_DEVICE}",
             f"route replace default via {node.fabric_gateway} dev {NODE_DEVICE}"]
    if EDGE_DEVICE not in links:
        lines.append(f"link add {EDGE_DEVICE} type {HOLDER_KIND}")
    lines.append(f"link set {EDGE_DEVICE} up")
    if node.holds_edge and node.nodes == 1:  # several nodes: the speaker puts them on the holder (speaker.py)
        lines += [f"addr replace {node.edge_public}/32 dev {EDGE_DEVICE}",
                  f"addr replace {node.edge_private}/32 dev {EDGE_DEVICE}"]
    return "".join(line + "\n" for line in lines)


def _batches(jobs: Sequence[tuple[str, str]], *, force: bool = False) -> None:
    """Run `ip -n <ns> -batch -` for each (ns, commands) at once; raise with every failure (with
    `force`, run every command whatever fails and raise nothing)."""
    procs = []
    for name, batch in jobs:
        argv = ["ip", "-n", name, *(["-force"] if force else []), "-batch", "-"]
        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append((name, p, batch))
    failures = []
    for name, p, batch in procs:
        _, err = p.communicate(batch)
        if p.returncode != 0 and not force:
            failures.append(f"{name}: {err.strip() or f'ip exit {p.returncode}'}")
    if failures:
        raise FabricError("setting up the clusterset's network failed: " + "; ".join(failures))


def ensure(plan: FabricPlan) -> None:
    """Make the fabric and every node namespace of the plan as it describes (idempotent: what is
    there is kept, what is missing or changed is set). Blocking (~20 ms): call it from a thread in
    async code if that matters.

    A node is cabled to the fabric by a veth pair. The pair is remade when either end is missing,
    or when either namespace was just (re)made: a namespace removed while a process still holds it
    (a socket of kube-lite or the relay) lives on unnamed with its devices, so an end that is
    still there may lead into it; its left-over end is deleted first."""
    try:
        created = set(netns.add_many(plan.namespaces()))
        fabric_links = netns.call_in(plan.netns_path, _prepare, FABRIC_SYSCTLS)
        node_links = {node.netns: netns.call_in(node.netns_path, _prepare, node_sysctls(node)) for node in plan.nodes}
        cabled: set[str] = set()
        stale: list[tuple[str, str]] = []
        for node in plan.nodes:
            ends = (node.fabric_veth in fabric_links, NODE_DEVICE in node_links[node.netns])
            fresh = plan.netns in created or node.netns in created
            if all(ends) and not fresh:
                cabled.add(node.netns)
                continue
            if ends[0]:
                stale.append((plan.netns, f"link del {node.fabric_veth}\n"))
            if ends[1]:
                stale.append((node.netns, f"link del {NODE_DEVICE}\n"))
        if stale:
            # Forced: the kernel may be removing an end of a deleted namespace at this very moment.
            _batches(stale, force=True)
        _batches([(plan.netns, _fabric_batch(plan, fabric_links, cabled))])
        _batches([(node.netns, _node_batch(node, node_links[node.netns])) for node in plan.nodes])
    except (netns.NetnsError, OSError) as err:
        raise FabricError(f"setting up the clusterset's network failed: {err}") from err


def teardown_id(cs: str) -> list[str]:
    """Delete every namespace of clusterset `cs` (the fabric, its nodes, their pods: names that are
    `cs` or start with `cs-`), and only those; the names deleted. Devices go with their namespace."""
    if not cs.startswith("isthmus-"):
        raise FabricError(f"refusing to tear down {cs!r}: not an isthmus clusterset id")
    mine = [n for n in netns.names() if n == cs or n.startswith(cs + "-")]
    # Pods first, then nodes, then the fabric: nothing ever points into a namespace already gone.
    mine.sort(key=lambda n: (-n.count("-"), n))
    try:
        return netns.delete_many(mine)
    except netns.NetnsError as err:
        raise FabricError(f"removing the clusterset's network failed: {err}") from err


def teardown(plan: FabricPlan) -> list[str]:
    """`teardown_id` for the plan's clusterset."""
    return teardown_id(plan.id)


@dataclass(frozen=True)
class FabricState:
    """Which of the plan's namespaces exist, and how many pod namespaces each node has."""

    fabric: bool
    nodes: dict[str, bool]
    pods: dict[str, int]

    @property
    def complete(self) -> bool:
        return self.fabric and all(self.nodes.values())


def state(plan: FabricPlan) -> FabricState:
    present = set(netns.names())
    # by node namespace; a pod's is `<its node's>-<12 hex>` (node 1's prefix would also match node k's)
    pods = {n.netns: sum(1 for name in present if name.startswith(n.netns + "-") and len(name) == len(n.netns) + 13)
            for n in plan.nodes}
    return FabricState(fabric=plan.netns in present, nodes={n.netns: n.netns in present for n in plan.nodes},
                       pods=pods)


def add_outside_address(plan: FabricPlan, address: str) -> None:
    """Give outside0 (fabric ns) an address of 10.33.0.0/16 for an outside server (idempotent)."""
    import ipaddress

    from isthmus.local.network.plan import OUTSIDE_RANGE

    if ipaddress.ip_address(address) not in ipaddress.ip_network(OUTSIDE_RANGE):
        raise FabricError(f"{address} is not an outside address ({OUTSIDE_RANGE})")
    _batches([(plan.netns, f"addr replace {address}/32 dev {OUTSIDE_DEVICE}\n")])
