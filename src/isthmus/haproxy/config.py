"""haproxy.cfg for one pool instance: pure, deterministic (same input → same text), so the file on
disk can always be compared with what the running process was given.

What the spec asks and how it is rendered:
- a public pool (`role: slave_public`) binds every frontend on the edge host's public and private
  addresses (EdgeLB's public agents listen on all of theirs); an internal pool on the private one;
- frontends link backends by `linkBackend.map`, emitted as `use_backend` rules in list order
  (first match wins: the translator sorts them); no match → `defaultBackend`, else an internal
  backend answering 404 (HTTP) or closing (TCP);
- every backend has a fixed number of server slots (`slot_count`): servers sit in slots, unused
  slots are `disabled` at a placeholder address, so server changes are runtime-API commands on
  existing slots, never a reload;
- the stats frontend (HAProxy's stats page at `/`, Prometheus at `/metrics`, `/healthz`) listens on a
  port the pool manager allocated: HAProxy 2.6 refuses `bind :0`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from isthmus.api.lb import (
    LoadBalancerPoolSpec,
    PoolBackend,
    PoolFrontend,
    is_public,
    maxconn_for,
    threads_for,
)

BALANCE_ALGORITHMS = frozenset(
    {"roundrobin", "static-rr", "leastconn", "first", "source", "random", "uri", "hdr(host)"}
)
"""Balance algorithms a pool may ask for (HAProxy's, without their arguments but `hdr(host)`)."""
PLACEHOLDER = ("127.0.0.1", 1)
"""Where unused server slots point (disabled: never connected to)."""
MIN_SLOTS = 8
NOT_FOUND_BACKEND = "isthmus-not-found"
REJECT_BACKEND = "isthmus-reject"
_NAME_RE = re.compile(r"[A-Za-z0-9_.:-]+")


class PoolConfigError(ValueError):
    """A pool spec HAProxy cannot run as it is (the message names the part)."""


def slot_count(servers: int) -> int:
    """Slots for a backend with `servers` servers: at least 8, else the next power of two, so a
    backend can double before a reload is needed."""
    n = MIN_SLOTS
    while n < servers:
        n *= 2
    return n


@dataclass(frozen=True)
class Slot:
    """One server line: `None` address = unused (disabled placeholder)."""

    address: str | None = None
    port: int = 0


@dataclass
class Layout:
    """Where this instance listens and which server sits in which slot (the manager's choices)."""

    addresses: tuple[str, ...]
    stats_port: int
    frontend_ports: Mapping[str, int]
    """Frontend name → real bind port (the spec's, or the allocated one for bindPort 0)."""
    slots: dict[str, list[Slot]] = field(default_factory=dict)
    """Backend name → its server slots."""


def instance_addresses(role: str, public_address: str, private_address: str) -> tuple[str, ...]:
    """The addresses an instance of a pool with `role` binds (public pools: both)."""
    if is_public(role):
        return tuple(dict.fromkeys((public_address, private_address)))
    return (private_address,)


def assign_slots(servers: Sequence[tuple[str, int]], previous: Sequence[Slot] | None) -> list[Slot] | None:
    """Servers placed into slots, keeping every server that stays in the slot it had (a runtime
    update then touches only what changed). None: they do not fit the previous slots (reload)."""
    wanted = list(dict.fromkeys(servers))
    if previous is None:
        slots = [Slot(a, p) for a, p in wanted]
        return slots + [Slot()] * (slot_count(len(wanted)) - len(wanted))
    if len(wanted) > len(previous):
        return None
    keep = set(wanted)
    out = [s if s.address is not None and (s.address, s.port) in keep else Slot() for s in previous]
    placed = {(s.address, s.port) for s in out if s.address is not None}
    free = (i for i, s in enumerate(out) if s.address is None)
    for server in wanted:
        if server not in placed:
            out[next(free)] = Slot(*server)
    return out


def quote(value: str) -> str:
    """A config word HAProxy reads back as exactly `value` (strong quotes when possible)."""
    if "\n" in value or "\r" in value or "\0" in value:
        raise PoolConfigError(f"{value!r}: line breaks and NUL are not allowed")
    if "'" not in value:
        return f"'{value}'"
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def proxy_name(name: str) -> str:
    """Frontend/backend names are used as they are when HAProxy allows them (letters, digits,
    `-_.:`, the translator's names always are)."""
    if not _NAME_RE.fullmatch(name):  # whole name: `$` would let a trailing newline through
        raise PoolConfigError(f"{name!r} is not a valid HAProxy proxy name (letters, digits and -_.: only)")
    return name


def validate(spec: LoadBalancerPoolSpec) -> None:
    """What must hold before rendering; PoolConfigError names the first problem."""
    names: set[str] = set()
    for be in spec.haproxy.backends:
        proxy_name(be.name)
        if be.name in names:
            raise PoolConfigError(f"backend {be.name!r} is defined twice")
        names.add(be.name)
        if be.balance not in BALANCE_ALGORITHMS:
            raise PoolConfigError(
                f"backend {be.name!r}: balance {be.balance!r} is not one of {', '.join(sorted(BALANCE_ALGORITHMS))}"
            )
    ports: dict[int, str] = {}
    fe_names: set[str] = set()
    for fe in spec.haproxy.frontends:
        proxy_name(fe.name)
        if fe.name in fe_names:
            raise PoolConfigError(f"frontend {fe.name!r} is defined twice")
        fe_names.add(fe.name)
        if fe.bind_port and fe.bind_port in ports:
            raise PoolConfigError(f"frontends {ports[fe.bind_port]!r} and {fe.name!r} both bind port {fe.bind_port}")
        if fe.bind_port:
            ports[fe.bind_port] = fe.name
        link = fe.link_backend
        for target in [link.default_backend, *(m.backend for m in link.map)]:
            if target is not None and target not in names:
                raise PoolConfigError(f"frontend {fe.name!r} links backend {target!r}, which the pool does not define")
        for m in link.map:
            for value in (m.host_eq, m.host_reg, m.path_beg, m.path_reg, m.path_exact):
                if value is not None:
                    quote(value)
            for regex in (m.host_reg, m.path_reg):
                if regex is not None:
                    try:
                        re.compile(regex)
                    except re.error as e:
                        raise PoolConfigError(f"frontend {fe.name!r}: {regex!r} is not a regular expression: {e}") from None


def maxconn_within(spec: LoadBalancerPoolSpec, layout: Layout, max_fds: int | None) -> int:
    """`maxconn_for(mem)`, lowered to what `max_fds` descriptors allow: HAProxy needs two per
    connection plus one per listener, server check and socket, and refuses to start when it cannot
    raise its file limit that far ("Cannot raise FD limit to 32785, limit is 20000": memory 512 on
    a host whose hard limit is 20000 left the pool at 0/1)."""
    wanted = maxconn_for(spec.mem)
    if max_fds is None:
        return wanted
    listeners = len(layout.addresses) * (1 + len(spec.haproxy.frontends))
    servers = sum(len(slots) for slots in layout.slots.values()) or sum(
        slot_count(len(be.servers)) for be in spec.haproxy.backends)  # fmt: skip
    reserve = 64 + listeners + servers
    return max(1, min(wanted, (max_fds - reserve) // 2))


def render(
    pool: str, spec: LoadBalancerPoolSpec, layout: Layout, admin_socket: Path, *, prometheus: bool = True,
    max_fds: int | None = None,
) -> str:
    """The whole haproxy.cfg of one instance of `pool` (its runtime API on `admin_socket`;
    `/metrics` only when the binary has the Prometheus exporter; maxconn within `max_fds`, the
    hard file limit HAProxy may raise itself to)."""
    validate(spec)
    lines = [
        f"# pool {pool}: written by isthmus pools; the running process was given exactly this file",
        "global",
        f"    nbthread {threads_for(spec.cpus)}",
        f"    maxconn {maxconn_within(spec, layout, max_fds)}",
        f"    stats socket {admin_socket} mode 600 level admin expose-fd listeners",
        "    hard-stop-after 30s",
        "",
        "defaults",
        "    timeout connect 5s",
        "    timeout client 60s",
        "    timeout server 60s",
        "    timeout http-request 10s",
        "    timeout tunnel 1h",
        "    retries 3",
        "    option redispatch 1",  # every retry goes to another server: a dead one is not tried again
        "",
        "frontend isthmus-stats",
        "    mode http",
        *(f"    bind {a}:{layout.stats_port}" for a in layout.addresses),
        "    monitor-uri /healthz",
        *(["    http-request use-service prometheus-exporter if { path /metrics }"] if prometheus else []),
        "    stats enable",
        "    stats uri /",
        "    stats refresh 10s",
        "",
    ]
    for fe in spec.haproxy.frontends:
        lines += _frontend(fe, layout)
    for be in spec.haproxy.backends:
        lines += _backend(be, layout.slots.get(be.name))
    lines += [
        f"backend {NOT_FOUND_BACKEND}",
        "    mode http",
        "    http-request return status 404 content-type text/plain string 'no rule matches this request'",
        "",
        f"backend {REJECT_BACKEND}",
        "    mode tcp",
        "    tcp-request content reject",
        "",
    ]
    return "\n".join(lines)


def _frontend(fe: PoolFrontend, layout: Layout) -> list[str]:
    http = fe.protocol == "HTTP"
    port = layout.frontend_ports[fe.name]
    out = [f"frontend {proxy_name(fe.name)}", f"    mode {'http' if http else 'tcp'}"]
    out += [f"    bind {a}:{port}" for a in layout.addresses]
    if http:
        out += ["    option http-keep-alive", "    option idle-close-on-response"]
        for m in fe.link_backend.map:
            conds = []
            if m.host_eq is not None:
                conds.append(f"{{ req.hdr(host),field(1,:),lower -m str {quote(m.host_eq.lower())} }}")
            if m.host_reg is not None:
                conds.append(f"{{ req.hdr(host),field(1,:),lower -m reg {quote(m.host_reg)} }}")
            if m.path_exact is not None:
                conds.append(f"{{ path -m str {quote(m.path_exact)} }}")
            if m.path_beg is not None:
                conds.append(f"{{ path -m beg {quote(m.path_beg)} }}")
            if m.path_reg is not None:
                conds.append(f"{{ path -m reg {quote(m.path_reg)} }}")
            target = proxy_name(m.backend)
            out.append(f"    use_backend {target} if {' '.join(conds)}" if conds else f"    use_backend {target}")
    default = fe.link_backend.default_backend
    out.append(f"    default_backend {default if default else NOT_FOUND_BACKEND if http else REJECT_BACKEND}")
    out.append("")
    return out


def _backend(be: PoolBackend, slots: Sequence[Slot] | None) -> list[str]:
    http = be.protocol == "HTTP"
    out = [f"backend {be.name}", f"    mode {'http' if http else 'tcp'}", f"    balance {be.balance}"]
    if http and be.rewrite_http is not None:
        req = be.rewrite_http.request
        if req.forwardfor:
            out.append("    option forwardfor")
        if req.x_forwarded_port:
            out.append("    http-request set-header X-Forwarded-Port %[dst_port]")
        if req.x_forwarded_proto:
            out.append("    http-request set-header X-Forwarded-Proto http")
    hc = be.health_check
    check = ""
    if hc is not None:
        if hc.protocol == "HTTP":  # any answer below 500 in time: alive (a frozen server gives none)
            out += ["    option httpchk", f"    http-check send meth GET uri {quote(hc.path)}",
                    "    http-check expect rstatus ^[1-4]"]  # fmt: skip
        out.append(f"    timeout check {hc.timeout_seconds}s")
        check = f" check inter {hc.period_seconds}s fall {hc.failure_threshold} rise {hc.success_threshold}"
    if slots is None:
        slots = assign_slots([(s.address, s.port) for s in be.servers], None)
        assert slots is not None
    extra = check + (" send-proxy-v2" if be.proxy_protocol and not http else "")
    for i, slot in enumerate(slots, 1):
        if slot.address is None:
            out.append(f"    server s{i} {PLACEHOLDER[0]}:{PLACEHOLDER[1]} disabled{extra}")
        else:
            out.append(f"    server s{i} {_hostport(slot.address, slot.port)}{extra}")
    out.append("")
    return out


def _hostport(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
