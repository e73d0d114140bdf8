"""The proxy's kernel dataplane (`isthmus proxy --mode nftables`): kube-proxy's nftables mode.

The userspace proxy relays every byte, so each request pays two extra `recv` + `send` and the
wakeups; here the kernel rewrites the first packet of a connection or flow (DNAT) and conntrack
does the rest, so a proxied request costs about what a direct one does. The same table drives
both modes (`table.py`: what to serve, `merge_targets`: who holds a contested address); only how it
is served differs.

One nftables table per address family (`ip`/`ip6` `isthmus_proxy`):

- map `services`: `address . protocol . port` → `goto` the service port's chain, looked up in the
  `nat` hooks `output` (clients on this host) and `prerouting` (clients behind an interface);
- a service port's chain marks a client that is one of its endpoints (hairpin) for masquerade in
  `postrouting` when it leaves through an interface other than loopback, and DNATs to an endpoint
  picked uniformly at random (`numgen random`, as kube-proxy's nftables mode balances);
- with ClientIP affinity, each endpoint has a chain and a dynamic set of the client addresses
  pinned to it (`update` on each new connection refreshes the pin, so it lasts `timeout` after the
  client's last connection), and a pinned client goes straight to its endpoint's chain;
- set `no-endpoints`: new connections to a service port with no ready endpoint are rejected in
  the `filter` hooks (the client sees "connection refused" at once, as kube-proxy does).

A sync is one `nft -f -` transaction, so no packet ever sees a half-written table. The first one
replaces whatever tables a previous run left; after it, a sync writes only the service ports whose
target changed (their element, their chains flushed and refilled, the chains and sets they no
longer use deleted), so one endpoint leaving costs a few lines whatever the number of services
(kube-proxy's partial sync). Names are hashes of what they serve, so a service port keeps its
chains, and its affinity sets their pins, from one sync to the next. A failed transaction leaves
the state unknown: the next sync replaces the tables whole.

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
from isthmus.runtime.commands import CommandError, run_command

__all__ = ["MASQUERADE_MARK", "TABLE", "NftablesDataplane", "NftablesError", "Programmed", "Rendered", "render"]

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


@dataclass(frozen=True)
class Programmed:
    """What one service port left in its family's table: the map or set element, its chains and
    affinity sets (so the next sync touches only what changed)."""

    target: Target
    family: Family
    svc: str | None
    """The service chain; None when the port has no endpoint (an element of `no-endpoints`)."""
    eps: tuple[str, ...] = ()
    sets: tuple[str, ...] = ()


@dataclass
class Rendered:
    script: str
    programmed: dict[ListenerKey, Programmed] = field(default_factory=dict)


def _base(family: Family, t: str) -> list[str]:
    addr = _ADDR_TYPE[family]
    lines = [
        f"add table {t}",
        f"delete table {t}",  # whatever a previous run left: replaced in the same transaction
        f"add table {t}",
        f"add map {t} services {{ type {addr} . inet_proto . inet_service : verdict ; }}",
        f"add set {t} no-endpoints {{ type {addr} . inet_proto . inet_service ; }}",
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
    return lines


def _checked(key: ListenerKey, target: Target) -> tuple[Family, Target]:
    if key.protocol not in ("TCP", "UDP"):
        raise ValueError(f"{key}: protocol must be TCP or UDP")
    if not 0 < key.port < 65536 or any(not 0 < b.port < 65536 for b in target.backends):
        raise ValueError(f"{key}: ports must be 1-65535")
    family = _family(key.ip)
    same = tuple(b for b in target.backends if _family(b.host) == family)
    return family, (target if same == target.backends else replace(target, backends=same))


def _program(key: ListenerKey, family: Family, target: Target, t: str, old: Programmed | None,
             lines: list[str]) -> Programmed:
    """Lines that make `key` serve `target` in table `t`, where `old` is what it serves now."""
    if old is not None:  # its element goes first: the same key cannot hold two values
        where = "services" if old.svc else "no-endpoints"
        lines.append(f"delete element {t} {where} {{ {_element(key)} }}")
    if not target.backends:
        lines.append(f"add element {t} no-endpoints {{ {_element(key)} }}")
        new = Programmed(target, family, None)
    else:
        svc = f"svc-{_hash(key, target.service, target.port_name)}"
        lines += [f"add chain {t} {svc}", f"flush chain {t} {svc}"]
        proto = key.protocol.lower()
        eps: list[str] = []
        sets: list[str] = []
        svc_rules: list[str] = []
        if target.kind == "NodePort":
            # From another host, the reply must come back through this one (kube-proxy masquerades
            # NodePort traffic too); on loopback the postrouting rule leaves it alone.
            svc_rules.append(f"add rule {t} {svc} meta mark set meta mark | {MASQUERADE_MARK:#x}")
        n = len(target.backends)
        # Picking uniformly without an anonymous map or set (nft names each one by scanning the
        # others, which made a first sync of 5,000 services take 9 s): rule i takes the i-th endpoint
        # with probability 1/(n-i), iptables' `statistic` cascade.
        if target.affinity_timeout is None:
            # One chain per service port: the hairpin mark for a client that is one of the
            # endpoints, then DNAT.
            for host in sorted({_addr(b.host) for b in target.backends}):
                svc_rules.append(f"add rule {t} {svc} {family} saddr {host} meta mark set meta mark | "
                                 f"{MASQUERADE_MARK:#x}")
            for i, b in enumerate(target.backends):
                pick = f"numgen random mod {n - i} == 0 " if i < n - 1 else ""
                svc_rules.append(f"add rule {t} {svc} {pick}meta l4proto {proto} dnat to {_dnat(family, b)}")
        else:
            # ClientIP affinity: a chain and a dynamic set of pinned clients per endpoint
            # (kube-proxy's layout); a pinned client goes straight to its endpoint.
            for b in target.backends:
                ep = f"ep-{_hash(key, b)}"
                aff = f"aff-{_hash(key, b, target.affinity_timeout)}"
                eps.append(ep)
                sets.append(aff)
                lines += [f"add chain {t} {ep}", f"flush chain {t} {ep}",
                          f"add set {t} {aff} {{ type {_ADDR_TYPE[family]} ; flags dynamic,timeout ; "
                          f"timeout {int(target.affinity_timeout)}s ; }}",  # kept, with its pins, if it exists
                          f"add rule {t} {ep} update @{aff} {{ {family} saddr }}",
                          f"add rule {t} {ep} {family} saddr {_addr(b.host)} "
                          f"meta mark set meta mark | {MASQUERADE_MARK:#x}",
                          f"add rule {t} {ep} meta l4proto {proto} dnat to {_dnat(family, b)}"]
                svc_rules.append(f"add rule {t} {svc} {family} saddr @{aff} goto {ep}")
            for i, ep in enumerate(eps):
                pick = f"numgen random mod {n - i} == 0 " if i < n - 1 else ""
                svc_rules.append(f"add rule {t} {svc} {pick}goto {ep}")
        lines += svc_rules
        lines.append(f"add element {t} services {{ {_element(key)} : goto {svc} }}")
        new = Programmed(target, family, svc, tuple(eps), tuple(sets))
    if old is not None:
        _drop(old, t, lines, keep=new)
    return new


def _drop(old: Programmed, t: str, lines: list[str], keep: Programmed | None = None) -> None:
    """Delete the chains and sets `old` had that `keep` does not use (a kept service chain was
    flushed already; one that goes is flushed first, so nothing refers to its endpoints' chains)."""
    kept = set() if keep is None else {keep.svc, *keep.eps, *keep.sets}
    if old.svc and old.svc not in kept:
        lines.append(f"flush chain {t} {old.svc}")
    for ep in old.eps:
        if ep not in kept:
            lines.append(f"delete chain {t} {ep}")
    if old.svc and old.svc not in kept:
        lines.append(f"delete chain {t} {old.svc}")
    for aff in old.sets:
        if aff not in kept:
            lines.append(f"delete set {t} {aff}")


def render(listeners: Mapping[ListenerKey, Target], *, table: str = TABLE,
           programmed: Mapping[ListenerKey, Programmed] | None = None) -> Rendered:
    """The transaction that makes both families' tables serve exactly `listeners`.

    `programmed`: what the last successful sync left (None: unknown, so both tables are replaced
    whole). Otherwise only what changed is written: one endpoint leaving one service is a few
    lines, whatever the number of services. An endpoint of the other address family is left out
    (kube-proxy runs one proxier per family); a port with none left rejects. Raises ValueError for a
    protocol or port nftables cannot take.
    """
    wanted = {key: _checked(key, target) for key, target in sorted(listeners.items())}
    lines: list[str] = []
    result: dict[ListenerKey, Programmed] = {}
    if programmed is None:
        for family in _ADDR_TYPE:
            lines += _base(family, f"{family} {table}")
        programmed = {}
    for key, gone in sorted(programmed.items()):
        if key not in wanted:
            t = f"{gone.family} {table}"
            lines.append(f"delete element {t} {'services' if gone.svc else 'no-endpoints'} {{ {_element(key)} }}")
            _drop(gone, t, lines)
    for key, (family, target) in wanted.items():
        old = programmed.get(key)
        if old is not None and old.target == target:
            result[key] = old
            continue
        result[key] = _program(key, family, target, f"{family} {table}", old, lines)
    return Rendered("\n".join(lines) + "\n" if lines else "", result)


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
        """What the kernel serves, once the last successful sync also deleted the stale UDP flows."""
        self._programmed: dict[ListenerKey, Programmed] | None = None
        """What the kernel's tables hold, per service port; None: unknown (the next sync replaces them)."""
        self._lock = asyncio.Lock()
        self._warned_conntrack = False

    async def _run(self, *argv: str, stdin: str | None = None) -> tuple[int, str]:
        """(exit code, stderr); NftablesError when the command cannot run or hangs."""
        try:
            rc, _, err = await run_command(*argv, stdin=stdin, timeout=TIMEOUT, netns=self.netns, ip=self.ip)
        except CommandError as e:
            raise NftablesError(str(e)) from e
        return rc, err.strip()

    async def sync(self, listeners: Mapping[ListenerKey, Target]) -> None:
        """Make the kernel serve exactly `listeners`; raises NftablesError (the previous rules stay)."""
        async with self._lock:
            wanted = dict(listeners)
            rendered = render(wanted, table=self.table, programmed=self._programmed)
            if rendered.script:
                rc, err = await self._run(self.nft, "-f", "-", stdin=rendered.script)
                if rc != 0:
                    self._programmed = None  # unknown now: the next sync replaces the tables whole
                    raise NftablesError(f"nft -f failed ({rc}): {err}")
            self._programmed = rendered.programmed
            await self._forget_flows(self.applied, wanted)
            self.applied = wanted

    async def intact(self) -> bool:
        """Whether the tables the last sync left are still there (someone may have flushed the
        ruleset: kube-proxy watches canary chains for the same reason). Unknown state counts as intact:
        the next sync replaces the tables anyway."""
        if not self._programmed:
            return True
        families = {p.family for p in self._programmed.values()}
        for family in sorted(families):
            rc, _ = await self._run(self.nft, "list", "chain", family, self.table, "nat-output")
            if rc != 0:
                async with self._lock:
                    self._programmed = None  # the next sync writes everything again
                return False
        return True

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
            self._programmed = None
            self.applied = {}
            if rc != 0:
                raise NftablesError(f"nft -f failed ({rc}): {err}")


def _hosts(backends: Iterable[Backend]) -> set[str]:
    return {b.host for b in backends}
