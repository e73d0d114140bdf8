"""Kernel mode of `isthmus egress-gateway`: nftables SNAT/DNAT in the gateway's network namespace.

The gateway host routes between the pod network and the outside network. Instead of relaying bytes
in userspace, the leader programs one nftables table per address family and adds the claimed source
IPs to the outside interface (so the gateway answers ARP/ND for them):

- egress: a pod in a flow's `clients` sending to `target_ip:port` is SNAT'd to the flow's `source_ip`;
  every other sender to that destination is dropped in `forward` and counted (`refused`), so nothing
  leaves for a guarded destination with an unclaimed source (fail closed);
- ingress: `peer_ip` connecting to `source_ip:port` is DNAT'd to `dest_ip:dest_port`; any other new
  packet to a source IP is dropped before DNAT and counted (`refused_ingress`), and a DNAT'd packet
  to a destination of an ingress flow that did not come from that flow's peer is dropped in `forward`.

Every lookup is a set or map keyed by a concatenation (address . protocol . port), so the ruleset is
a fixed handful of rules whatever the number of flows. `render` is pure; `KernelGateway` applies it
with one `nft -f -` transaction (`add table` + `delete table` + definition: the old table is
replaced atomically, never observed half-written).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from isthmus.runtime.commands import CommandError, run_command

TABLE = "isthmus_egress"
RELEASED_SUFFIX = "_released"
"""`<table>_released`: what a gateway that lost the lease leaves behind (see `render_released`)."""
PROTOCOLS = ("TCP", "UDP")
COUNTERS = ("refused", "refused_ingress")
"""Named counters in each table: egress senders not in a flow's clients; ingress packets refused."""
TIMEOUT = 15.0
"""Seconds any one `nft`/`ip` command may take."""

Family = Literal["ip", "ip6"]
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class KernelError(Exception):
    """An `nft` or `ip` command failed; the message carries its stderr."""


@dataclass(frozen=True)
class EgressFlow:
    """Pods `clients` reach `target_ip:port` and arrive there from `source_ip`."""

    protocol: str
    source_ip: str
    target_ip: str
    port: int
    clients: tuple[str, ...]


@dataclass(frozen=True)
class IngressFlow:
    """`peer_ip` connecting to `source_ip:port` reaches `dest_ip:dest_port`."""

    protocol: str
    source_ip: str
    port: int
    peer_ip: str
    dest_ip: str
    dest_port: int


# --- validation ---------------------------------------------------------------------------------------


def _proto(flow: EgressFlow | IngressFlow) -> str:
    if flow.protocol not in PROTOCOLS:
        raise ValueError(f"{flow}: protocol must be TCP or UDP, not {flow.protocol!r}")
    return flow.protocol.lower()


def _port(flow: EgressFlow | IngressFlow, what: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
        raise ValueError(f"{flow}: {what} must be a port 1-65535, not {value!r}")
    return value


def _addr(flow: EgressFlow | IngressFlow, what: str, value: object) -> Address:
    try:
        return ipaddress.ip_address(value)  # type: ignore[arg-type]
    except ValueError:
        raise ValueError(f"{flow}: {what} is not an IP address: {value!r}") from None


def _family(flow: EgressFlow | IngressFlow, addrs: Iterable[tuple[str, Address]]) -> Family:
    """The one family of every address of a flow: a v4 pod cannot be SNAT'd to a v6 source."""
    versions = {(what, a.version) for what, a in addrs}
    if len({v for _, v in versions}) > 1:
        raise ValueError(f"{flow}: mixes IPv4 and IPv6 addresses ({', '.join(sorted(w for w, _ in versions))})")
    return "ip" if next(iter(versions))[1] == 4 else "ip6"


@dataclass
class _Tables:
    """Elements of one family's sets and maps, as nft literals; built by `_collect`."""

    source_ips: set[str]
    egress_targets: set[str]
    egress_allowed: set[str]
    egress_snat: dict[str, str]
    ingress_allowed: set[str]
    ingress_dnat: dict[str, str]
    ingress_dests: set[str]
    ingress_dest_allowed: set[str]
    has_egress: bool = False
    has_ingress: bool = False


def _collect(egress: Sequence[EgressFlow], ingress: Sequence[IngressFlow]) -> dict[Family, _Tables]:
    """Validate every flow (ValueError names the bad one) and sort them into per-family elements.

    A (client, target, protocol, port) key maps to one source IP: if two flows claim it with different
    sources, the first given wins (deterministic; the gateway orders its rules by creation time).
    """
    out: dict[Family, _Tables] = {}

    def tables(family: Family) -> _Tables:
        return out.setdefault(family, _Tables(set(), set(), set(), {}, set(), {}, set(), set()))

    for e in egress:
        proto = _proto(e)
        port = _port(e, "port", e.port)
        if not isinstance(e.clients, tuple):
            raise ValueError(f"{e}: clients must be a tuple of pod IPs")
        src, dst = _addr(e, "source_ip", e.source_ip), _addr(e, "target_ip", e.target_ip)
        clients = [_addr(e, "client", c) for c in e.clients]
        t = tables(_family(e, [("source_ip", src), ("target_ip", dst), *(("clients", c) for c in clients)]))
        t.has_egress = True
        t.source_ips.add(str(src))
        t.egress_targets.add(f"{dst} . {proto} . {port}")
        for c in clients:
            key = f"{c} . {dst} . {proto} . {port}"
            t.egress_allowed.add(key)
            t.egress_snat.setdefault(key, str(src))
    for i in ingress:
        proto = _proto(i)
        port, dport = _port(i, "port", i.port), _port(i, "dest_port", i.dest_port)
        src, peer, dest = (_addr(i, "source_ip", i.source_ip), _addr(i, "peer_ip", i.peer_ip),
                           _addr(i, "dest_ip", i.dest_ip))
        t = tables(_family(i, [("source_ip", src), ("peer_ip", peer), ("dest_ip", dest)]))
        t.has_ingress = True
        t.source_ips.add(str(src))
        key = f"{peer} . {src} . {proto} . {port}"
        if key not in t.ingress_dnat:
            t.ingress_allowed.add(key)
            t.ingress_dnat[key] = f"{dest} . {dport}"
            t.ingress_dests.add(f"{dest} . {proto} . {dport}")
            t.ingress_dest_allowed.add(f"{peer} . {dest} . {proto} . {dport}")
    return out


# --- rendering ------------------------------------------------------------------------------------------


def _elements(items: Iterable[str]) -> str:
    return ", ".join(sorted(items))


def _set(name: str, type_: str, items: set[str]) -> list[str]:
    lines = [f"\tset {name} {{", f"\t\ttype {type_}"]
    if items:
        lines.append(f"\t\telements = {{ {_elements(items)} }}")
    return [*lines, "\t}"]


def _map(name: str, type_: str, items: dict[str, str]) -> list[str]:
    lines = [f"\tmap {name} {{", f"\t\ttype {type_}"]
    if items:
        lines.append(f"\t\telements = {{ {_elements(f'{k} : {v}' for k, v in items.items())} }}")
    return [*lines, "\t}"]


def _table(family: Family, table: str, t: _Tables, counters: Mapping[str, tuple[int, int]]) -> list[str]:
    ip = family  # the address match keyword happens to equal the family name: `ip saddr` / `ip6 saddr`
    addr = "ipv4_addr" if family == "ip" else "ipv6_addr"
    svc = f"{addr} . inet_proto . inet_service"
    pair = f"{addr} . {svc}"
    key = f"{ip} saddr . {ip} daddr . meta l4proto . th dport"
    lines = [f"table {family} {table} {{"]
    for name in COUNTERS:
        packets, bytes_ = counters.get(f"{family}/{name}", (0, 0))
        lines += [f"\tcounter {name} {{", f"\t\tpackets {packets} bytes {bytes_}", "\t}"]
    if t.source_ips:
        lines += _set("source_ips", addr, t.source_ips)
    if t.has_egress:
        lines += _set("egress_targets", svc, t.egress_targets)
        lines += _set("egress_allowed", pair, t.egress_allowed)
        lines += _map("egress_snat", f"{pair} : {addr}", t.egress_snat)
    if t.has_ingress:
        lines += _set("ingress_allowed", pair, t.ingress_allowed)
        lines += _map("ingress_dnat", f"{pair} : {addr} . inet_service", t.ingress_dnat)
        lines += _set("ingress_dests", svc, t.ingress_dests)
        lines += _set("ingress_dest_allowed", pair, t.ingress_dest_allowed)

    # Before DNAT: a new packet to a source IP is welcome only as an ingress flow from its peer
    # (replies of SNAT'd egress connections are established). Everything else is refused here,
    # before it can reach the gateway host's own sockets or be routed anywhere.
    guard = ["\tchain guard {", "\t\ttype filter hook prerouting priority dstnat - 10; policy accept;"]
    if t.source_ips:
        guard.append("\t\tct state established,related accept")
        allowed = f" {key} != @ingress_allowed" if t.has_ingress else ""
        # Neighbour discovery (unicast solicitations to the address) must keep working.
        nd = " meta l4proto != ipv6-icmp" if family == "ip6" else ""
        guard.append(f"\t\t{ip} daddr @source_ips{nd}{allowed} counter name refused_ingress drop")
    lines += [*guard, "\t}"]

    forward = ["\tchain forward {", "\t\ttype filter hook forward priority filter; policy accept;"]
    if t.has_egress or t.has_ingress:
        forward.append("\t\tct state established,related accept")
    if t.has_egress:
        forward.append(f"\t\t{ip} daddr . meta l4proto . th dport @egress_targets"
                       f" {key} != @egress_allowed counter name refused drop")
    if t.has_ingress:
        forward.append(f"\t\tct status dnat {ip} daddr . meta l4proto . th dport @ingress_dests"
                       f" {key} != @ingress_dest_allowed counter name refused_ingress drop")
    lines += [*forward, "\t}"]

    post = ["\tchain postrouting {", "\t\ttype nat hook postrouting priority srcnat; policy accept;"]
    if t.has_egress:
        post.append(f"\t\tsnat to {key} map @egress_snat")
    lines += [*post, "\t}"]

    pre = ["\tchain prerouting {", "\t\ttype nat hook prerouting priority dstnat; policy accept;"]
    if t.has_ingress:
        pre.append(f"\t\tdnat to {key} map @ingress_dnat")
    lines += [*pre, "\t}", "}"]
    return lines


def render(egress: Sequence[EgressFlow], ingress: Sequence[IngressFlow], *, table: str = TABLE,
           counters: Mapping[str, tuple[int, int]] | None = None) -> str:
    """nft script that atomically replaces table `ip <table>` (IPv4) and `ip6 <table>` when v6 flows exist:
    `add table` + `delete table` + full definition in one script, so applying it is one transaction.

    The ip6 table is always deleted (a v6 flow removed leaves nothing behind). `counters`
    ("ip/refused" → (packets, bytes)) carries the named counters over the replacement.
    """
    per_family = _collect(egress, ingress)
    lines: list[str] = []
    for family in ("ip", "ip6"):
        lines += [f"add table {family} {table}", f"delete table {family} {table}"]
        if family == "ip" or family in per_family:
            t = per_family.get(family) or _Tables(set(), set(), set(), {}, set(), {}, set(), set())
            lines += _table(family, table, t, counters or {})
    return "\n".join(lines) + "\n"


def source_ips(egress: Sequence[EgressFlow], ingress: Sequence[IngressFlow]) -> frozenset[str]:
    """Every flow's source IP, normalised (what must be present on the interface)."""
    flows: list[EgressFlow | IngressFlow] = [*egress, *ingress]
    return frozenset(str(ipaddress.ip_address(f.source_ip)) for f in flows)


def render_released(egress: Sequence[EgressFlow], *, table: str = TABLE) -> str:
    """nft script for a gateway that lost the lease: every packet toward a destination it carried is
    dropped, established connections included (their conntrack NAT state would otherwise outlive
    the lease, and new ones would leave unNATed from the pod's own address). Replaced atomically,
    like the main table; removed by the next `apply`."""
    per_family = _collect(egress, [])
    name = table + RELEASED_SUFFIX
    lines: list[str] = []
    for family in ("ip", "ip6"):
        lines += [f"add table {family} {name}", f"delete table {family} {name}"]
        t = per_family.get(family)
        if t is None or not t.egress_targets:
            continue
        ip = family
        addr = "ipv4_addr" if family == "ip" else "ipv6_addr"
        lines += [f"table {family} {name} {{", *_set("egress_targets", f"{addr} . inet_proto . inet_service",
                                                      t.egress_targets),
                  "\tchain forward {", "\t\ttype filter hook forward priority filter - 10; policy accept;",
                  f"\t\t{ip} daddr . meta l4proto . th dport @egress_targets counter drop", "\t}", "}"]
    return "\n".join(lines) + "\n"


# --- applying ---------------------------------------------------------------------------------------------


class KernelGateway:
    """Applies flows in the current network namespace (or `netns`, via `ip netns exec`).

    Only addresses this object added are ever removed: an address somebody else configured on the
    interface is used but left alone. Calls are serialised.
    """

    def __init__(self, *, interface: str, table: str = TABLE, nft: str = "nft", ip: str = "ip",
                 netns: str | None = None) -> None:
        self.interface = interface
        self.table = table
        self.nft = nft
        self.ip = ip
        self.netns = netns
        self._owned: set[str] = set()
        self._egress: list[EgressFlow] = []
        """The egress flows last applied: what `release` keeps blocked."""
        self._lock = asyncio.Lock()

    @property
    def owned(self) -> frozenset[str]:
        """Addresses currently added by this object."""
        return frozenset(self._owned)

    async def _run(self, *argv: str, stdin: str | None = None, check: bool = True) -> tuple[int, str, str]:
        try:
            rc, out, err = await run_command(*argv, stdin=stdin, timeout=TIMEOUT, netns=self.netns, ip=self.ip)
        except CommandError as e:
            raise KernelError(str(e)) from e
        if check and rc != 0:
            cmd = [*((self.ip, "netns", "exec", self.netns) if self.netns else ()), *argv]
            raise KernelError(f"{' '.join(cmd)} failed ({rc}): {err.strip()}")
        return rc, out, err

    async def _present(self) -> set[str]:
        _, out, _ = await self._run(self.ip, "-j", "addr", "show", "dev", self.interface)
        return {str(ipaddress.ip_address(a["local"])) for link in json.loads(out or "[]")
                for a in link.get("addr_info", []) if "local" in a}

    def _addr_argv(self, verb: str, address: str) -> list[str]:
        v6 = ipaddress.ip_address(address).version == 6
        # nodad: a tentative v6 address cannot be used for a second; the source IP is ours by claim.
        return [self.ip, "addr", verb, f"{address}/{128 if v6 else 32}", "dev", self.interface,
                *(("nodad",) if v6 and verb == "add" else ())]

    async def counters(self) -> dict[str, tuple[int, int]]:
        """Named counters of the live tables: "ip/refused" → (packets, bytes); {} without tables."""
        result: dict[str, tuple[int, int]] = {}
        for family in ("ip", "ip6"):
            rc, out, _ = await self._run(self.nft, "-j", "list", "counters", "table", family, self.table,
                                         check=False)
            if rc != 0:
                continue
            for obj in json.loads(out).get("nftables", []):
                c = obj.get("counter")
                if c and c.get("table") == self.table:
                    result[f"{family}/{c['name']}"] = (int(c["packets"]), int(c["bytes"]))
        return result

    async def refused(self) -> dict[str, int]:
        """Packets refused so far, summed over both families: {"refused": n, "refused_ingress": m}."""
        totals = dict.fromkeys(COUNTERS, 0)
        for key, (packets, _) in (await self.counters()).items():
            totals[key.split("/", 1)[1]] = totals.get(key.split("/", 1)[1], 0) + packets
        return totals

    async def apply(self, egress: Sequence[EgressFlow], ingress: Sequence[IngressFlow]) -> None:
        """Idempotent: make exactly the flows' source IPs present on `interface` (ip addr add <ip>/32 (/128);
        remove ones this object added earlier that are no longer wanted — never addresses it did not add),
        then replace the table in one `nft -f -` transaction. Raises KernelError (with nft's stderr) on failure.

        Validation happens before anything changes. If nft refuses the script, the addresses added by
        this call are taken away again (an address without its rules would reach the host itself).
        """
        render(egress, ingress, table=self.table)  # ValueError before touching the kernel
        wanted = source_ips(egress, ingress)
        async with self._lock:
            present = await self._present()
            added: list[str] = []
            try:
                for address in sorted(wanted - present):
                    await self._run(*self._addr_argv("add", address))
                    added.append(address)
                    self._owned.add(address)
                script = render(egress, ingress, table=self.table, counters=await self.counters())
                script += render_released([], table=self.table)  # leading again: the block goes
                await self._run(self.nft, "-f", "-", stdin=script)
                self._egress = list(egress)
            except BaseException:
                for address in added:
                    await self._run(*self._addr_argv("del", address), check=False)
                    self._owned.discard(address)
                raise
            for address in sorted(self._owned - wanted):
                if address in present:
                    await self._run(*self._addr_argv("del", address))
                self._owned.discard(address)

    async def release(self) -> None:
        """Losing leadership, fail closed: replace the table by `render_released`'s block of every
        destination it carried, and delete every address this object added."""
        async with self._lock:
            errors: list[str] = []
            script = "".join(f"add table {f} {self.table}\ndelete table {f} {self.table}\n" for f in ("ip", "ip6"))
            script += render_released(self._egress, table=self.table)
            try:
                await self._run(self.nft, "-f", "-", stdin=script)
            except KernelError as err:
                errors.append(str(err))
            try:
                present = await self._present() if self._owned else set()
            except KernelError as err:  # keep `owned`: a later release can still remove them
                raise KernelError("; ".join([*errors, str(err)])) from err
            for address in sorted(self._owned):
                if address in present:
                    rc, _, err_ = await self._run(*self._addr_argv("del", address), check=False)
                    if rc != 0:
                        errors.append(f"ip addr del {address}: {err_.strip()}")
                        continue
                self._owned.discard(address)
            if errors:
                raise KernelError("; ".join(errors))
