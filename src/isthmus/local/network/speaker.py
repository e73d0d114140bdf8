"""runc mode, `up --nodes N`: the fabric's routes to a cluster's edge addresses and egress range
follow the pods that hold them, as MetalLB's speakers or a BGP speaker do on a real network.

Any node of a member cluster can run the pool manager and the egress gateway, the two hostNetwork
pods that bind the cluster's edge addresses (10.30.i.1, 10.31.i.1) and egress source IPs
(10.32.i.0/24). Every node of such a cluster binds addresses it does not hold
(`net.ipv4.ip_nonlocal_bind=1`, so a pod starting on a node does not race the speaker) and has the
egress range as a local route (only the gateway binds it, and nothing in the cluster dials it).
This speaker, a task of the supervisor (which made the fabric), watches the Pods of those two
Deployments and, for each, finds the holder: for the gateway the node (`status.hostIP`) of the pod
labelled `egress.isthmus.io/leader: "true"` (the one that binds the source IPs; both replicas are
ready when healthy), then for both the node of the newest ready pod, else of the newest scheduled one that is not terminating (a pool manager cannot become ready
before its addresses are there), else where it was (at start node 1, as the plan has it). The pool
manager's addresses are sticky: they stay on their node while a ready pool manager runs there. It puts
the edge addresses on the holder's `edge0` and removes them from the other nodes (as MetalLB's
layer-2 speaker answers for an address from the one node that holds it), and points the fabric's
routes — 10.30.i.0/24 and 10.31.i.0/24, 10.32.i.0/24 for the gateway (its labelled leader) —
at the holder.

The decision (`edge_routes`) is pure; `EdgeSpeaker` is the thin loop around it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from isthmus.local.network.plan import EDGE_DEVICE, FABRIC_BRIDGE, FabricPlan, NodeNet

__all__ = [
    "EDGE_COMPONENTS",
    "EdgeSpeaker",
    "address_batches",
    "edge_routes",
    "pin_mark",
    "pin_routes",
    "pin_rules",
    "pool_nodes",
    "route_batch",
]

log = logging.getLogger(__name__)

NAME_LABEL = "app.kubernetes.io/name"
POOLS = "isthmus-pools"
GATEWAY = "isthmus-egress-gateway"
EDGE_COMPONENTS = (POOLS, GATEWAY)
LEADER_LABEL = "egress.isthmus.io/leader"
"""The gateway's leader labels its own Pod (isthmus.api.egress.GATEWAY_LEADER_LABEL)."""
PIN_BASE = 0x1000
"""First firewall mark / routing table of pinned edge flows (`pin_mark`)."""
PIN_PREF = 1000
"""The policy routing rules' preference: before the main table (32766)."""
POLL_SECONDS = 2.0
"""How often the speaker looks again when a watch cannot be held (the apiserver restarting)."""


def _ranges(node: NodeNet) -> dict[str, tuple[str, ...]]:
    i = node.index
    return {POOLS: (f"10.30.{i}.0/24", f"10.31.{i}.0/24"), GATEWAY: (f"10.32.{i}.0/24",)}


def _ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    return bool(status.get("hostIP")) and not (pod.get("metadata") or {}).get("deletionTimestamp") and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _leader(pod: Mapping[str, Any]) -> bool:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(LEADER_LABEL) == "true"


def _scheduled(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("status") or {}).get("hostIP")) and not (pod.get("metadata") or {}).get("deletionTimestamp")


def edge_routes(first: NodeNet, nodes: Iterable[NodeNet], pods: Iterable[Mapping[str, Any]],
                current: Mapping[str, str]) -> dict[str, str]:
    """Destination CIDR → the node address the fabric should route it via (the holder of its
    component). ``first``: the cluster's node 1 (the default); ``nodes``: every node of the
    cluster (a pod's hostIP elsewhere is ignored); ``current``: the routes as they are (kept while
    no pod of a component is scheduled)."""
    addresses = {n.address for n in nodes}
    by_component: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        name = ((pod.get("metadata") or {}).get("labels") or {}).get(NAME_LABEL)
        if name in EDGE_COMPONENTS and _scheduled(pod) and pod["status"]["hostIP"] in addresses:
            by_component.setdefault(str(name), []).append(pod)
    out: dict[str, str] = {}
    for component, cidrs in _ranges(first).items():
        candidates = sorted(by_component.get(component, []),
                            key=lambda p: (_leader(p), _ready(p), str(p["metadata"].get("creationTimestamp") or "")))
        for cidr in cidrs:
            held = current.get(cidr)
            if component == POOLS and any(_ready(p) and p["status"]["hostIP"] == held for p in candidates):
                # Sticky: every ready pool manager serves a pool of size 2, so the addresses stay with
                # a ready holder (a rollout moves them once, when the holder's replica goes, not again
                # when a newer one turns ready); a terminating replica is not ready (its lame duck).
                out[cidr] = str(held)
                continue
            out[cidr] = str(candidates[-1]["status"]["hostIP"]) if candidates else current.get(cidr, first.address)
    return out


def pool_nodes(nodes: Iterable[NodeNet], pods: Iterable[Mapping[str, Any]]) -> set[str]:
    """Addresses of the nodes whose pool manager pod is terminating (in its lame duck): they keep the
    edge addresses until the pod is gone, so flows pinned to them (`pin_rules`) finish there after the
    holder moved. Any other node but the holder has them removed: a pod there dialing them must reach
    the holder, whose instances serve every pool, not its own node's."""
    addresses = {n.address for n in nodes}
    return {str(p["status"]["hostIP"]) for p in pods
            if ((p.get("metadata") or {}).get("labels") or {}).get(NAME_LABEL) == POOLS
            and (p.get("metadata") or {}).get("deletionTimestamp")
            and (p.get("status") or {}).get("hostIP") in addresses}


def address_batches(nodes: Iterable[NodeNet], routes: Mapping[str, str],
                    keep: Iterable[str] = ()) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(node namespace, `ip -batch` lines) to put the edge addresses on the pool manager's holder, and
    to take them off the others but those in `keep` (nodes whose pool manager still finishes its
    flows): applied on either side of the route change, so a connection finds the address wherever
    the fabric sends it."""
    add: list[tuple[str, str]] = []
    remove: list[tuple[str, str]] = []
    kept = set(keep)
    for node in nodes:
        holder = routes.get(f"10.30.{node.index}.0/24") == node.address
        if not holder and node.address in kept:
            continue
        verb = "replace" if holder else "del"
        (add if holder else remove).append((node.netns, "".join(f"addr {verb} {a}/32 dev {EDGE_DEVICE}\n"
                                                               for a in (node.edge_public, node.edge_private))))
    return add, remove


def pin_mark(node: NodeNet) -> int:
    """The firewall mark and routing table of flows pinned to `node` (unique per cluster and node)."""
    return PIN_BASE + 16 * node.index + node.node


def pin_routes(first: NodeNet, nodes: Iterable[NodeNet]) -> str:
    """`ip -batch` lines: each node's table routes the pool manager's ranges to it, and a mark selects
    the table (idempotent; a rule that exists already fails harmlessly under -force)."""
    lines = []
    for node in nodes:
        mark = pin_mark(node)
        lines += [f"route replace {cidr} via {node.address} dev {FABRIC_BRIDGE} table {mark}" for cidr in _ranges(first)[POOLS]]
        lines.append(f"rule add fwmark {mark} lookup {mark} pref {PIN_PREF}")
    return "".join(line + "\n" for line in lines)


def pin_rules(first: NodeNet, holder: NodeNet) -> str:
    """The fabric's nftables table for one cluster's edge ranges (`nft -f`): a new connection is marked
    for the holder's node, and every later packet of it follows that mark, so a flow stays on the node
    it began on when the holder moves (as an L4 load balancer drains a backend: new flows go to the
    new one, established ones finish where they are). Without it, the move sent an established
    flow's next packet to a node that had no such connection."""
    name = f"isthmus-edge-{first.cluster}"
    ranges = ", ".join(_ranges(first)[POOLS])
    return (f"table ip {name}\ndelete table ip {name}\n"
            f"table ip {name} {{\n  chain pin {{\n    type filter hook prerouting priority mangle; policy accept;\n"
            f"    ip daddr {{ {ranges} }} ct state new ct mark set {pin_mark(holder)}\n"
            f"    ip daddr {{ {ranges} }} meta mark set ct mark\n  }}\n}}\n")


def route_batch(routes: Mapping[str, str]) -> str:
    """`ip -batch` lines that point each destination at its node (idempotent)."""
    return "".join(f"route replace {dst} via {via} dev {FABRIC_BRIDGE}\n" for dst, via in sorted(routes.items()))


def _nft(netns_name: str, ruleset: str) -> None:
    """Load `ruleset` into the named namespace's nftables (atomically, as `nft -f` does)."""
    p = subprocess.run(["ip", "netns", "exec", netns_name, "nft", "-f", "-"], input=ruleset, capture_output=True,
                       text=True, check=False)
    if p.returncode != 0:
        raise OSError(f"nft in {netns_name}: {p.stderr.strip() or p.returncode}")


class EdgeSpeaker:
    """One member cluster's speaker: until cancelled, keeps the fabric's edge routes on the nodes
    whose pods hold the addresses."""

    def __init__(self, fp: FabricPlan, cluster: str, kubeconfig: Path) -> None:
        self.fp = fp
        self.nodes = [n for n in fp.nodes if n.cluster == cluster]
        self.first = fp.node(cluster)
        self.kubeconfig = kubeconfig
        self.routes: dict[str, str] = {dst: self.first.address for cidrs in _ranges(self.first).values()
                                       for dst in cidrs}
        self.kept: set[str] = set()

    async def apply(self, pods: list[dict[str, Any]], *, force: bool = False) -> bool:
        """Put the addresses and routes where `pods` say (everything, with `force`: the first look,
        since `up` may have remade node 1's); True when something moved."""
        wanted = edge_routes(self.first, self.nodes, pods, self.routes)
        keep = pool_nodes(self.nodes, pods)
        if wanted == self.routes and keep == self.kept and not force:
            return False
        from isthmus.local.network.fabric import _batches

        # The new holder's addresses, the routes (and the pin to the holder for new flows), then the
        # addresses of the other nodes but those whose pool manager is still finishing its flows
        # (forced: deleting an address a node does not hold fails harmlessly). Taking them off first answered "no route to host".
        add, remove = address_batches(self.nodes, wanted, keep)
        await asyncio.to_thread(_batches, add, force=True)
        if force:
            await asyncio.to_thread(_batches, [(self.fp.netns, pin_routes(self.first, self.nodes))], force=True)
        await asyncio.to_thread(_batches, [(self.fp.netns, route_batch(wanted))])
        holder = next((n for n in self.nodes if n.address == wanted.get(_ranges(self.first)[POOLS][0])), self.first)
        await asyncio.to_thread(_nft, self.fp.netns, pin_rules(self.first, holder))
        await asyncio.to_thread(_batches, remove, force=True)
        moved = {dst: via for dst, via in wanted.items() if self.routes.get(dst) != via}
        if moved:
            log.info("edge routes moved", extra={"cluster": self.first.cluster, "routes": moved})
        self.routes = wanted
        self.kept = keep
        return bool(moved)

    async def run(self) -> None:
        from lightkube.resources.core_v1 import Pod

        from isthmus.kube.client import client_for, load_config

        client = client_for(load_config(str(self.kubeconfig), None))
        from lightkube import ALL_NS, operators

        labels: dict[str, Any] = {NAME_LABEL: operators.in_(list(EDGE_COMPONENTS))}
        try:
            while True:
                try:
                    # every namespace: the pool manager has one of its own (isthmus-pools), the gateway isthmus-system
                    pods = {f"{p.metadata.namespace}/{p.metadata.name}": p.to_dict()
                            async for p in client.list(Pod, namespace=ALL_NS, labels=labels) if p.metadata is not None}
                    await self.apply(list(pods.values()), force=True)
                    async for kind, pod in client.watch(Pod, namespace=ALL_NS, labels=labels):
                        if pod.metadata is None:
                            continue
                        key = f"{pod.metadata.namespace}/{pod.metadata.name}"
                        if kind == "DELETED":
                            pods.pop(key, None)
                        else:
                            pods[key] = pod.to_dict()
                        await self.apply(list(pods.values()))
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # the apiserver away, or the fabric being remade: look again
                    log.debug("edge speaker: looking again", extra={"cluster": self.first.cluster, "error": str(e)})
                await asyncio.sleep(POLL_SECONDS)
        finally:
            with contextlib.suppress(Exception):
                await client.close()
