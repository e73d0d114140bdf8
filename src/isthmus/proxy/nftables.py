"""The proxy's kernel dataplane (`isthmus proxy --mode nftables`): kube-proxy's nftables mode.

The userspace proxy relays every byte, so each request pays two extra `recv` + `send` and the
wakeups; here the kernel rewrites the first packet of a connection or flow (DNAT) and conntrack
does the rest, so a proxied request costs about what a direct one does. The same table drives
both modes (`table.py`: what to serve, `merge_targets`: who holds a contested address); only how it
is served differs.

One nftables table per address family (`ip`/`ip6` `isthmus_proxy`):

- map `services`: `address . protocol . port` → `goto` the service port's chain, looked up in the
  `nat` hooks `output` (clients on this host) and `prerouting` (clients behind an interface);
- a service port's chain picks an endpoint with `numgen random mod N` (kube-proxy's nftables
  balancing), after ClientIP affinity: one dynamic set per endpoint holds the client addresses
  pinned to it (`update` on each new connection refreshes the pin, so it lasts `timeout` after the
  client's last connection);
- an endpoint's chain DNATs to it, and marks a client connecting to itself (hairpin) for
  masquerade in `postrouting` when it leaves through an interface other than loopback;
- set `no-endpoints`: new connections to a service port with no ready endpoint are rejected in
  the `filter` hooks (the client sees "connection refused" at once, as kube-proxy does).

A sync is one `nft -f -` transaction: `flush table` empties every chain, the map and the set are
refilled, chains and affinity sets still wanted are (re)added — an affinity set keeps its elements
across syncs — and those no longer wanted are deleted, so no packet ever sees a half-written table.
The first sync replaces whatever table a previous run left. Names are hashes of what they serve, so
the same service port keeps the same chain and its pins from one sync to the next.

Conntrack keeps a flow on the endpoint its first packet was sent to. For UDP (no handshake, no
reset) that would keep sending to an endpoint that left, so after a sync removed one, its flows are
deleted with `conntrack -D` (as kube-proxy does); so are flows to a port that had no endpoints and
now has some.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import logging
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from isthmus.proxy.table import Backend, ListenerKey, Target

__all__ = ["MASQUERADE_MARK", "TABLE", "NftablesDataplane", "NftablesError", "Rendered", "render"]

log = logging.getLogger(__name__)

TABLE = "isthmus_proxy"
MASQUERADE_MARK = 0x4000
"""The packet mark of a hairpin connection (the bit kube-proxy uses for the same purpose)."""
TIMEOUT = 15.0
"""Seconds one `nft` or `conntrack` command may take."""

Family = Literal["ip", "ip6"]
_ADDR_TYPE: dict[Family, str] = {"ip": "ipv4_addr", "ip6": "ipv6_addr"}


class NftablesError(Exception):
    """`nft` refused the script or could not run; the message carries its stderr."""


def _family(ip: str) -> Family:
    return "ip6" if ipaddress.ip_address(ip).version == 6 else "ip"


def _hash(*parts: object) -> str:
    return hashlib.sha1("\0".join(map(str, parts)).encode(), usedforsecurity=False).hexdigest()[:16]


def _addr(ip: str) -> str:
    return str(ipaddress.ip_address(ip))


def _dnat(family: Family, b: Backend) -> str:
    host = f"[{_addr(b.host)}]" if family == "ip6" else _addr(b.host)
    return f"{host}:{b.port}"


def _element(key: ListenerKey) -> str:
    return f"{_addr(key.ip)} . {key.protocol.lower()} . {key.port}"


@dataclass
class Rendered:
    """One sync's script and the chains and sets it leaves in each table (deleted by the next sync
    that no longer wants them)."""

    script: str
    names: dict[Family, set[str]] = field(default_factory=dict)


def render(listeners: Mapping[ListenerKey, Target], *, table: str = TABLE,
           previous: Mapping[Family, set[str]] | None = None) -> Rendered:
    """The transaction that makes both families' tables serve exactly `listeners`.

    `previous`: the names the last sync left (None: unknown, so the tables are deleted and made
    anew). An endpoint of the other address family is left out (kube-proxy runs one proxier per
    family); a port with none left rejects. Raises ValueError for a protocol or port nftables cannot take.
    """
    by_family: dict[Family, list[tuple[ListenerKey, Target]]] = {"ip": [], "ip6": []}
    for key, target in sorted(listeners.items()):
        if key.protocol not in ("TCP", "UDP"):
            raise ValueError(f"{key}: protocol must be TCP or UDP")
        if not 0 < key.port < 65536 or any(not 0 < b.port < 65536 for b in target.backends):
            raise ValueError(f"{key}: ports must be 1-65535")
        family = _family(key.ip)
        same = tuple(b for b in target.backends if _family(b.host) == family)
        by_family[family].append((key, target if same == target.backends else replace(target, backends=same)))
    lines: list[str] = []
    names: dict[Family, set[str]] = {}
    for family, items in by_family.items():
        t = f"{family} {table}"
        addr = _ADDR_TYPE[family]
        lines.append(f"add table {t}")
        if previous is None:
            lines.append(f"delete table {t}")
            lines.append(f"add table {t}")
        lines += [
            f"flush table {t}",
            f"add map {t} services {{ type {addr} . inet_proto . inet_service : verdict ; }}",
            f"flush map {t} services",
            f"add set {t} no-endpoints {{ type {addr} . inet_proto . inet_service ; }}",
            f"flush set {t} no-endpoints",
            f"add chain {t} nat-output {{ type nat hook output priority -100 ; policy accept ; }}",
            f"add chain {t} nat-prerouting {{ type nat hook prerouting priority -100 ; policy accept ; }}",
            f"add chain {t} nat-postrouting {{ type nat hook postrouting priority 100 ; policy accept ; }}",
            f"add chain {t} filter-output {{ type filter hook output priority 0 ; policy accept ; }}",
            f"add chain {t} filter-input {{ type filter hook input priority 0 ; policy accept ; }}",
            f"add chain {t} filter-forward {{ type filter hook forward priority 0 ; policy accept ; }}",
            f"add rule {t} nat-output {family} daddr . meta l4proto . th dport vmap @services",
            f"add rule {t} nat-prerouting {family} daddr . meta l4proto . th dport vmap @services",
            f"add rule {t} nat-postrouting meta mark & {MASQUERADE_MARK:#x} == {MASQUERADE_MARK:#x} "
            f'oifname != "lo" meta mark set meta mark ^ {MASQUERADE_MARK:#x} masquerade',
        ]
        for hook in ("output", "input", "forward"):
            lines.append(f"add rule {t} filter-{hook} ct state new {family} daddr . meta l4proto . th dport "
                         "@no-endpoints reject")
        wanted: set[str] = set()
        services: list[str] = []
        empty: list[str] = []
        for key, target in items:
            if not target.backends:
                empty.append(_element(key))
                continue
            svc = f"svc-{_hash(key, target.service, target.port_name)}"
            wanted.add(svc)
            lines.append(f"add chain {t} {svc}")
            proto = key.protocol.lower()
            ep_chains = []
            for b in target.backends:
                ep = f"ep-{_hash(key, b)}"
                wanted.add(ep)
                ep_chains.append(ep)
                lines.append(f"add chain {t} {ep}")
                if target.affinity_timeout is not None:
                    aff = f"aff-{_hash(key, b, target.affinity_timeout)}"
                    wanted.add(aff)
                    lines.append(f"add set {t} {aff} {{ type {addr} ; flags dynamic,timeout ; "
                                 f"timeout {int(target.affinity_timeout)}s ; }}")
                    lines.append(f"add rule {t} {svc} {family} saddr @{aff} goto {ep}")
                    lines.append(f"add rule {t} {ep} update @{aff} {{ {family} saddr }}")
                lines.append(f"add rule {t} {ep} {family} saddr {_addr(b.host)} "
                             f"meta mark set meta mark | {MASQUERADE_MARK:#x}")
                lines.append(f"add rule {t} {ep} meta l4proto {proto} dnat to {_dnat(family, b)}")
            if len(ep_chains) == 1:
                lines.append(f"add rule {t} {svc} goto {ep_chains[0]}")
            else:
                pick = ", ".join(f"{i} : goto {ep}" for i, ep in enumerate(ep_chains))
                lines.append(f"add rule {t} {svc} numgen random mod {len(ep_chains)} vmap {{ {pick} }}")
            services.append(f"{_element(key)} : goto {svc}")
        if services:
            lines.append(f"add element {t} services {{ {', '.join(services)} }}")
        if empty:
            lines.append(f"add element {t} no-endpoints {{ {', '.join(empty)} }}")
        for name in sorted((previous or {}).get(family, set()) - wanted):  # unreferenced once flushed
            kind = "set" if name.startswith("aff-") else "chain"
            lines.append(f"delete {kind} {t} {name}")
        names[family] = wanted
    return Rendered("\n".join(lines) + "\n", names)


class NftablesDataplane:
    """Applies the proxy's table to the kernel; one sync at a time.

    `netns`: run `nft`/`conntrack` inside that named network namespace (`ip netns exec`) — tests
    program a namespace they made, never the host's."""

    def __init__(self, *, table: str = TABLE, nft: str = "nft", conntrack: str = "conntrack",
                 netns: str | None = None, ip: str = "ip") -> None:
        self.table = table
        self.nft = nft
        self.conntrack = conntrack
        self.netns = netns
        self.ip = ip
        self.applied: dict[ListenerKey, Target] = {}
        """What the kernel serves now (after the last successful sync)."""
        self._names: dict[Family, set[str]] | None = None
        self._lock = asyncio.Lock()
        self._warned_conntrack = False

    async def _run(self, *argv: str, stdin: str | None = None) -> tuple[int, str]:
        cmd = [*((self.ip, "netns", "exec", self.netns) if self.netns else ()), *argv]
        try:
            proc = await asyncio.create_subprocess_exec(
                *cmd, stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        except OSError as err:
            raise NftablesError(f"{' '.join(cmd)}: {err}") from err
        try:
            _, err_ = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin is not None else None), TIMEOUT)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise NftablesError(f"{' '.join(cmd)}: no answer in {TIMEOUT:.0f}s") from None
        return (proc.returncode if proc.returncode is not None else -1), err_.decode(errors="replace").strip()

    async def sync(self, listeners: Mapping[ListenerKey, Target]) -> None:
        """Make the kernel serve exactly `listeners`; raises NftablesError (the previous rules stay)."""
        async with self._lock:
            wanted = dict(listeners)
            rendered = render(wanted, table=self.table, previous=self._names)
            rc, err = await self._run(self.nft, "-f", "-", stdin=rendered.script)
            if rc != 0:
                self._names = None  # unknown now: the next sync starts from a clean table
                raise NftablesError(f"nft -f failed ({rc}): {err}")
            self._names = rendered.names
            previous, self.applied = self.applied, wanted
            await self._forget_flows(previous, wanted)

    async def _forget_flows(self, before: Mapping[ListenerKey, Target], after: Mapping[ListenerKey, Target]) -> None:
        """Delete UDP conntrack entries that would keep a flow on an endpoint that left, or on a
        port that had no endpoint (its first packets were not translated)."""
        deletes: list[list[str]] = []
        for key, target in after.items():
            if key.protocol != "UDP":
                continue
            old = before.get(key)
            if old is None or not old.backends:
                if target.backends:
                    deletes.append(["-p", "udp", "--orig-dst", key.ip, "--dport", str(key.port)])
                continue
            for gone in _hosts(old.backends) - _hosts(target.backends):
                deletes.append(["-p", "udp", "--orig-dst", key.ip, "--dport", str(key.port), "--dst-nat", gone])
        for key in sorted(before.keys() - after.keys()):
            if key.protocol == "UDP":
                deletes.append(["-p", "udp", "--orig-dst", key.ip, "--dport", str(key.port)])
        if not deletes:
            return
        if shutil.which(self.conntrack) is None:
            if not self._warned_conntrack:
                self._warned_conntrack = True
                log.warning("conntrack not found: UDP flows stay on an endpoint that left until they idle out "
                            "(install conntrack-tools)")
            return
        for args in deletes:
            try:
                # rc 1 with "0 flow entries": nothing to delete, which is the usual case.
                rc, err = await self._run(self.conntrack, "-D", *args)
            except NftablesError as e:
                log.warning("deleting stale UDP flows failed: %s", e)
                continue
            if rc not in (0, 1):
                log.warning("deleting stale UDP flows failed: conntrack -D %s: %s", " ".join(args), err)

    async def cleanup(self) -> None:
        """Delete both tables (a proxy stopping for good takes its rules with it)."""
        async with self._lock:
            script = "".join(f"add table {f} {self.table}\ndelete table {f} {self.table}\n" for f in ("ip", "ip6"))
            rc, err = await self._run(self.nft, "-f", "-", stdin=script)
            self._names = None
            self.applied = {}
            if rc != 0:
                raise NftablesError(f"nft -f failed ({rc}): {err}")


def _hosts(backends: Iterable[Backend]) -> set[str]:
    return {b.host for b in backends}
