"""The proxy's desired state: which virtual addresses to listen on and where each one forwards.

Pure functions over plain snapshots (no sockets, no API objects), so every rule is unit-tested:

- a Service with a real ClusterIP listens on `clusterIP:port` for each port, and a NodePort (or
  LoadBalancer) Service also on `node_address:nodePort`; its backends are the ready endpoints of
  its own kube EndpointSlices;
- a ServiceImport with a VIP (`spec.ips`) listens on `VIP:port` with SO_REUSEPORT (every cluster's
  proxy on the machine binds the same VIP) and balances over the imported slices of the other
  clusters plus, when this cluster is one of the exporters (`status.clusters`), its own slices —
  so whichever proxy the kernel hands a connection to, it reaches every cluster's endpoints.

A service port maps to a slice port by name and protocol (kube names slice ports after service
ports; an unnamed single port is ""), falling back to the slice's only port of that protocol for
a single-port service. Endpoints are the ready ones; when none is ready, serving-and-terminating
ones are used (kube-proxy's terminating-endpoint fallback) so draining pods finish rolling updates.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

__all__ = [
    "DEFAULT_AFFINITY_TIMEOUT",
    "Backend",
    "EndpointSnap",
    "ImportSnap",
    "ListenerKey",
    "Port",
    "ServiceSnap",
    "SliceSnap",
    "Table",
    "Target",
    "backends_for",
    "build_table",
    "merge_targets",
    "service_targets",
]

DEFAULT_AFFINITY_TIMEOUT = 10800
"""Seconds of ClientIP stickiness when sessionAffinityConfig does not say (kube's default, 3 h)."""
PROTOCOLS = ("TCP", "UDP")
"""What a userspace proxy can carry; SCTP ports are skipped."""

Kind = Literal["ClusterIP", "NodePort", "ClusterSetIP"]
_KIND_ORDER: dict[str, int] = {"ClusterSetIP": 0, "ClusterIP": 1, "NodePort": 2}


class Backend(NamedTuple):
    """An endpoint address; a tuple so it is directly a socket address."""

    host: str
    port: int


class ListenerKey(NamedTuple):
    protocol: str
    ip: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.ip}]" if ":" in self.ip else self.ip
        return f"{host}:{self.port}/{self.protocol}"


@dataclass(frozen=True, slots=True)
class Port:
    name: str
    """"" when unnamed."""
    protocol: str
    port: int
    node_port: int | None = None


@dataclass(frozen=True, slots=True)
class EndpointSnap:
    addresses: tuple[str, ...]
    ready: bool = True
    serving: bool = True
    terminating: bool = False


@dataclass(frozen=True, slots=True)
class SliceSnap:
    endpoints: tuple[EndpointSnap, ...]
    ports: tuple[Port, ...]
    cluster: str = ""
    """The source cluster of an imported slice ("" for the local cluster's own)."""
    address_type: str = "IPv4"


@dataclass(frozen=True, slots=True)
class ServiceSnap:
    namespace: str
    name: str
    type: str = "ClusterIP"
    cluster_ips: tuple[str, ...] = ()
    """Real ClusterIPs only: empty for headless ("None") and ExternalName services."""
    ports: tuple[Port, ...] = ()
    affinity_timeout: int | None = None
    """ClientIP stickiness in seconds; None when sessionAffinity is not ClientIP."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class ImportSnap:
    namespace: str
    name: str
    type: str = "ClusterSetIP"
    ips: tuple[str, ...] = ()
    ports: tuple[Port, ...] = ()
    affinity_timeout: int | None = None
    clusters: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Target:
    """What one listener does: balance over `backends` for one port of one service."""

    service: str
    """`ns/name`."""
    port_name: str
    kind: Kind
    backends: tuple[Backend, ...]
    affinity_timeout: int | None = None
    reuse_port: bool = False
    """SO_REUSEPORT: VIPs are bound by every cluster's proxy on the machine."""


@dataclass
class Table:
    listeners: dict[ListenerKey, Target] = field(default_factory=dict)
    conflicts: list[str] = field(default_factory=list)
    """Human-readable reasons a listener was claimed by more than one service port."""


# --- endpoints -----------------------------------------------------------------------------------


def _slice_port(port: Port, slice_ports: Sequence[Port], single: bool) -> int | None:
    for p in slice_ports:
        if p.name == port.name and p.protocol == port.protocol:
            return p.port
    if single:
        same = [p for p in slice_ports if p.protocol == port.protocol]
        if len(same) == 1:
            return same[0].port
    return None


def backends_for(port: Port, slices: Iterable[SliceSnap], *, single: bool = False) -> tuple[Backend, ...]:
    """Usable backends of one service port across `slices`, deduplicated, in a stable order.

    `single`: the service has only this port, so an unmatched name may use the slice's only port.
    """
    ready: set[Backend] = set()
    draining: set[Backend] = set()
    for s in slices:
        if s.address_type == "FQDN":
            continue
        target = _slice_port(port, s.ports, single)
        if target is None:
            continue
        for ep in s.endpoints:
            if not ep.addresses:
                continue
            b = Backend(ep.addresses[0], target)  # kube-proxy uses the first address only
            if ep.ready:
                ready.add(b)
            elif ep.serving and ep.terminating:
                draining.add(b)
    return tuple(sorted(ready or draining))


# --- targets -------------------------------------------------------------------------------------


def service_targets(
    svc: ServiceSnap | None,
    svc_slices: Sequence[SliceSnap],
    imp: ImportSnap | None,
    imp_slices: Sequence[SliceSnap],
    *,
    cluster_id: str,
    node_address: str | None,
) -> list[tuple[ListenerKey, Target]]:
    """Every listener one `ns/name` asks for: its Service's and its ServiceImport's."""
    out: list[tuple[ListenerKey, Target]] = []
    if svc is not None and svc.cluster_ips:
        single = len(svc.ports) == 1
        node_ports = svc.type in ("NodePort", "LoadBalancer") and node_address
        for p in svc.ports:
            if p.protocol not in PROTOCOLS:
                continue
            backends = backends_for(p, svc_slices, single=single)
            for ip in svc.cluster_ips:
                out.append(
                    (
                        ListenerKey(p.protocol, ip, p.port),
                        Target(svc.key, p.name, "ClusterIP", backends, svc.affinity_timeout),
                    )
                )
            if node_ports and node_address and p.node_port:
                out.append(
                    (
                        ListenerKey(p.protocol, node_address, p.node_port),
                        Target(svc.key, p.name, "NodePort", backends, svc.affinity_timeout),
                    )
                )
    if imp is not None and imp.ips and imp.type != "Headless":
        local = cluster_id in imp.clusters
        slices = [s for s in imp_slices if not (local and s.cluster == cluster_id)]
        if local:
            slices.extend(svc_slices)
        single = len(imp.ports) == 1
        for p in imp.ports:
            if p.protocol not in PROTOCOLS:
                continue
            backends = backends_for(p, slices, single=single)
            for ip in imp.ips:
                out.append(
                    (
                        ListenerKey(p.protocol, ip, p.port),
                        Target(imp.key, p.name, "ClusterSetIP", backends, imp.affinity_timeout, True),
                    )
                )
    return out


def merge_targets(per_service: Mapping[str, Sequence[tuple[ListenerKey, Target]]]) -> Table:
    """One table from every service's listeners; a listener claimed twice goes to one owner.

    The owner is chosen deterministically (VIPs, then ClusterIPs, then NodePorts; then by service
    key and port name) so every rebuild — and every proxy — picks the same one.
    """
    claims: dict[ListenerKey, list[Target]] = {}
    for targets in per_service.values():
        for key, target in targets:
            claims.setdefault(key, []).append(target)
    table = Table()
    for key, ts in claims.items():
        if len(ts) > 1:
            ts.sort(key=lambda t: (_KIND_ORDER[t.kind], t.service, t.port_name))
            winner = ts[0]
            losers = ", ".join(f"{t.kind} {t.service}:{t.port_name or '-'}" for t in ts[1:])
            table.conflicts.append(
                f"{key} is claimed by {winner.kind} {winner.service}:{winner.port_name or '-'} "
                f"and by {losers}; serving the first"
            )
        table.listeners[key] = ts[0]
    return table


def build_table(
    services: Iterable[ServiceSnap],
    service_slices: Mapping[str, Sequence[SliceSnap]],
    imports: Iterable[ImportSnap],
    import_slices: Mapping[str, Sequence[SliceSnap]],
    *,
    cluster_id: str,
    node_address: str | None = "127.0.0.1",
) -> Table:
    """The whole table from snapshots of every Service, ServiceImport and their slices (by `ns/name`)."""
    svcs = {s.key: s for s in services}
    imps = {i.key: i for i in imports}
    per: dict[str, list[tuple[ListenerKey, Target]]] = {}
    for key in sorted(svcs.keys() | imps.keys()):
        per[key] = service_targets(
            svcs.get(key),
            service_slices.get(key, ()),
            imps.get(key),
            import_slices.get(key, ()),
            cluster_id=cluster_id,
            node_address=node_address,
        )
    return merge_targets(per)
