"""The proxy's desired state: which virtual addresses to listen on and where each one forwards.

Pure functions over plain snapshots (no sockets, no API objects), so every rule is unit-tested:

- a Service with a real ClusterIP listens on `clusterIP:port` for each port, and a NodePort (or
  LoadBalancer) Service also on `node_address:nodePort`; its backends are the ready endpoints of
  its own kube EndpointSlices;
- a ServiceImport with a VIP (`spec.ips`) listens on `VIP:port` with SO_REUSEPORT (every cluster's
  proxy on the machine binds the same VIP) and balances over the imported slices of the other
  clusters plus, when this cluster is one of the exporters (`status.clusters`), its own slices —
  so whichever proxy the kernel hands a connection to, it reaches every cluster's endpoints.

A virtual address (ClusterIP or VIP) belongs to one service at a time, with all its ports: when a
second service claims it (a VIP freed in one cluster and reallocated while another cluster still
imports the old service), the service already holding it keeps it and the newcomer gets no
listener on it until the holder lets go, so no connection to that address can reach the
newcomer's backends. With no holder yet (proxy start), the older object wins.

A service port maps to a slice port by name and protocol (kube names slice ports after service
ports; an unnamed single port is ""), falling back to the slice's only port of that protocol for
a single-port service. Endpoints are the ready ones; when none is ready, serving-and-terminating
ones are used (kube-proxy's terminating-endpoint fallback) so draining pods finish rolling updates.
"""

from __future__ import annotations

import math
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
_ADDRESS_KINDS = frozenset({"ClusterIP", "ClusterSetIP"})
"""Kinds whose address is the service's own: every port of it goes to one service. (A NodePort's
node address is shared by every NodePort service, so it is contested listener by listener.)"""


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
    created: float = 0.0
    """metadata.creationTimestamp as epoch seconds; 0 when unknown."""

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
    created: float = 0.0
    """metadata.creationTimestamp as epoch seconds; 0 when unknown."""
    locality: str = ""
    """`local` (this cluster's endpoints first), `remote` (the others' first), "": isthmus.io/affinity,
    else the import's trafficDistribution (api.mcs.effective_preference)."""

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
    created: float = 0.0
    """When the claiming Service/ServiceImport was created (epoch seconds, 0 unknown): with no
    holder yet, the older claim wins a contested address."""


@dataclass
class Table:
    listeners: dict[ListenerKey, Target] = field(default_factory=dict)
    conflicts: list[str] = field(default_factory=list)
    """Human-readable reasons an address or listener was claimed by more than one service (port)."""


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


def _has_ready(port: Port, slices: Iterable[SliceSnap], single: bool) -> bool:
    return any(ep.ready and ep.addresses for s in slices if s.address_type != "FQDN"
               and _slice_port(port, s.ports, single) is not None for ep in s.endpoints)


def _with_locality(port: Port, local: Sequence[SliceSnap], remote: Sequence[SliceSnap], locality: str,
                   single: bool) -> tuple[Backend, ...]:
    """A VIP's backends under a preference (Cilium's service affinity): only the preferred
    side's while it has a ready endpoint, else every cluster's (so a preference never blackholes)."""
    preferred = local if locality == "local" else remote if locality == "remote" else None
    if preferred is not None and _has_ready(port, preferred, single):
        return backends_for(port, preferred, single=single)
    return backends_for(port, [*remote, *local], single=single)


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
                        Target(
                            svc.key, p.name, "ClusterIP", backends, svc.affinity_timeout, created=svc.created
                        ),
                    )
                )
            if node_ports and node_address and p.node_port:
                out.append(
                    (
                        ListenerKey(p.protocol, node_address, p.node_port),
                        Target(
                            svc.key, p.name, "NodePort", backends, svc.affinity_timeout, created=svc.created
                        ),
                    )
                )
    if imp is not None and imp.ips and imp.type != "Headless":
        # This cluster's endpoints come from its own kube slices, never from an MCS slice naming it
        # as the source (the agent may publish one for its own export): counted once, and only
        # while this cluster is an exporter.
        remote = [s for s in imp_slices if s.cluster != cluster_id]
        local = list(svc_slices) if cluster_id in imp.clusters else []
        # The agent's MCS slice for this cluster lists only the import's ports its Service serves as
        # the import has them (KEP-1645 "Service Port"): a port it leaves out is not served here either.
        own = [s for s in imp_slices if s.cluster == cluster_id]
        single = len(imp.ports) == 1
        for p in imp.ports:
            if p.protocol not in PROTOCOLS:
                continue
            serves = not own or any(_slice_port(p, s.ports, single) is not None for s in own)
            backends = _with_locality(p, local if serves else [], remote, imp.locality, single)
            for ip in imp.ips:
                out.append(
                    (
                        ListenerKey(p.protocol, ip, p.port),
                        Target(
                            imp.key, p.name, "ClusterSetIP", backends, imp.affinity_timeout, True, imp.created
                        ),
                    )
                )
    return out


Owner = tuple[str, str]
"""(kind, service): who a virtual address belongs to."""


def _owner(t: Target) -> Owner:
    return (t.kind, t.service)


def _rank(t: Target) -> tuple[float, int, str, str]:
    """Order of claims when nobody holds what they contest: older object, then VIP before
    ClusterIP before NodePort, then service key and port name (every proxy picks the same)."""
    return (t.created or math.inf, _KIND_ORDER[t.kind], t.service, t.port_name)


def _describe(owner: Owner) -> str:
    return f"{owner[0]} {owner[1]}"


def _address_owners(
    claims: Mapping[ListenerKey, Sequence[Target]], held: Mapping[ListenerKey, Target], table: Table
) -> dict[str, Owner]:
    """The one owner of each claimed ClusterIP/VIP; each contested address is one conflict."""
    holders = {key.ip: _owner(t) for key, t in held.items() if t.kind in _ADDRESS_KINDS}
    claimants: dict[str, dict[Owner, Target]] = {}
    for key, ts in claims.items():
        for t in ts:
            if t.kind not in _ADDRESS_KINDS:
                continue
            mine = claimants.setdefault(key.ip, {})
            best = mine.get(_owner(t))
            if best is None or _rank(t) < _rank(best):
                mine[_owner(t)] = t
    owners: dict[str, Owner] = {}
    for ip, by_owner in claimants.items():
        holder = holders.get(ip)
        if holder in by_owner:
            winner = holder
        else:
            winner = min(by_owner, key=lambda o: _rank(by_owner[o]))
        owners[ip] = winner
        if len(by_owner) > 1:
            others = ", ".join(_describe(o) for o in sorted(by_owner) if o != winner)
            table.conflicts.append(
                f"{ip} is claimed by {_describe(winner)} and by {others}; serving only the first, "
                "on every port"
            )
    return owners


def _holder_first(ts: Sequence[Target], holder: Target | None) -> list[Target]:
    """Claims of one listener in rank order, but the port that holds it now first."""
    held_by = None if holder is None else (holder.kind, holder.service, holder.port_name)
    return sorted(ts, key=lambda t: ((t.kind, t.service, t.port_name) != held_by, _rank(t)))


def merge_targets(
    per_service: Mapping[str, Sequence[tuple[ListenerKey, Target]]],
    held: Mapping[ListenerKey, Target] | None = None,
) -> Table:
    """One table from every service's listeners; whatever is claimed twice goes to one owner.

    A ClusterIP or VIP goes, with all its ports, to one service; other contested listeners (a
    NodePort, two port names of one service on one port) go to one service port. `held` is the
    table being served: its owner keeps what it still claims, so a newcomer never takes over a
    listener and rebuilds never flip it. What nobody holds goes to the best `_rank`.
    """
    held = held or {}
    claims: dict[ListenerKey, list[Target]] = {}
    for targets in per_service.values():
        for key, target in targets:
            claims.setdefault(key, []).append(target)
    table = Table()
    owners = _address_owners(claims, held, table)
    for key, ts in claims.items():
        owner = owners.get(key.ip)
        if owner is not None:
            ts = [t for t in ts if t.kind not in _ADDRESS_KINDS or _owner(t) == owner]
        if not ts:
            continue
        if len(ts) > 1:
            ts = _holder_first(ts, held.get(key))
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
    held: Mapping[ListenerKey, Target] | None = None,
) -> Table:
    """The whole table from snapshots of every Service, ServiceImport and their slices (by `ns/name`).

    `held`: the table served so far (see `merge_targets`).
    """
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
    return merge_targets(per, held)
