"""A stub zone in the cluster's CoreDNS, as Submariner Lighthouse adds one: a server block

    clusterset.local:53 {
        forward . 10.96.0.53:53
    }

between two marker comments in the Corefile of ConfigMap kube-system/coredns, so CoreDNS sends
every clusterset.local query to the Isthmus DNS Service. CoreDNS's `reload` plugin (in kubeadm's and
k3s's default Corefiles) picks the edit up by itself.

The text edits are pure and safe: adding twice is adding once, adding with other servers replaces
ours in place, removing gives back the Corefile exactly as it was before the first add (the block is
put before the first byte of it, so nothing of the user's text moves), and other blocks, comments
and whitespace are left alone. A Corefile we cannot read with confidence (unbalanced braces, a
marker without its partner, a block for the zone that is not ours) raises CorefileError and is never
written.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from typing import Any, cast

from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import ConfigMap

from isthmus.kube.helpers import is_conflict, is_not_found

COREDNS_NAMESPACE = "kube-system"
COREDNS_CONFIGMAP = "coredns"
COREFILE_KEY = "Corefile"
DNS_PORT = 53
FIELD_MANAGER = "isthmus"
CONFLICT_RETRIES = 5

_BEGIN = "# isthmus-begin {zone}: managed by `isthmus join` and `isthmus leave`, do not edit"
_END = "# isthmus-end {zone}"
_ZONE = re.compile(r"(?=.{1,253}\Z)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*")


class CorefileError(ValueError):
    """The Corefile cannot be edited safely (or the request is invalid); nothing was changed."""


# --- pure edits -----------------------------------------------------------------------------------


def add_stub_zone(corefile: str, zone: str, servers: list[str]) -> str:
    """`corefile` with a server block for `zone` forwarding to `servers` (IP or IP:port; port 53 when
    absent). Ours already there: replaced in place (unchanged text when equal). A block for the zone
    that is not ours: CorefileError, as CoreDNS would refuse two definitions of one zone."""
    zone = _check_zone(zone)
    targets = [_server(s) for s in servers]
    if not targets:
        raise CorefileError("a stub zone needs at least one server to forward to")
    newline = "\r\n" if "\r\n" in corefile else "\n"
    found = _find_ours(corefile, zone)
    rest = corefile if found is None else corefile[: found[0]] + corefile[found[1] :]
    _check_structure(rest)
    if zone in _zones_served(rest):
        raise CorefileError(
            f"the Corefile already has a server block for {zone}:{DNS_PORT} that isthmus did not add; "
            "remove it or edit it by hand")
    block = newline.join([
        _BEGIN.format(zone=zone),
        f"{zone}:{DNS_PORT} {{",
        f"    forward . {' '.join(targets)}",
        "}",
        _END.format(zone=zone),
    ]) + newline
    if found is not None:
        return corefile[: found[0]] + block + corefile[found[1] :]
    return block + corefile


def remove_stub_zone(corefile: str, zone: str) -> str:
    """`corefile` without our block for `zone` (unchanged when there is none)."""
    zone = _check_zone(zone)
    found = _find_ours(corefile, zone)
    if found is None:
        return corefile
    return corefile[: found[0]] + corefile[found[1] :]


def stub_zone_servers(corefile: str, zone: str) -> list[str] | None:
    """The servers our block for `zone` forwards to; None when there is no block of ours."""
    found = _find_ours(corefile, _check_zone(zone))
    if found is None:
        return None
    match = re.search(r"^\s*forward\s+\.\s+(.+?)\s*$", corefile[found[0] : found[1]], re.MULTILINE)
    return match.group(1).split() if match else []


def _check_zone(zone: str) -> str:
    name = zone.strip().rstrip(".").lower()
    if not _ZONE.fullmatch(name):
        raise CorefileError(f"{zone!r} is not a DNS zone name")
    return name


def _server(server: str) -> str:
    """An upstream as CoreDNS's forward plugin takes it: IP:port, IPv6 in brackets."""
    text = server.strip()
    host, port = text, str(DNS_PORT)
    if text.startswith("["):
        host, _, tail = text[1:].partition("]")
        if tail:
            if not tail.startswith(":"):
                raise CorefileError(f"server {server!r} is not IP or IP:port")
            port = tail[1:]
    elif text.count(":") == 1:
        host, port = text.split(":")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise CorefileError(f"server {server!r} is not IP or IP:port") from None
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise CorefileError(f"server {server!r} has no valid port")
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


def _find_ours(corefile: str, zone: str) -> tuple[int, int] | None:
    """[start, end) of our marked block for `zone`, end including the end marker's line break."""
    begin = re.compile(rf"^[ \t]*# isthmus-begin {re.escape(zone)}:[^\r\n]*(\r?\n|$)", re.MULTILINE)
    end = re.compile(rf"^[ \t]*# isthmus-end {re.escape(zone)}[ \t]*(\r?\n|$)", re.MULTILINE)
    begins, ends = list(begin.finditer(corefile)), list(end.finditer(corefile))
    if not begins and not ends:
        return None
    if len(begins) != 1 or len(ends) != 1 or ends[0].start() < begins[0].end():
        raise CorefileError(
            f"the Corefile's isthmus markers for {zone} are damaged (expected one begin line, then one end "
            "line); fix them by hand")
    return begins[0].start(), ends[0].end()


def _tokens(corefile: str) -> list[str]:
    """Corefile tokens, comments dropped, braces as tokens of their own (quotes respected)."""
    out: list[str] = []
    i, n = 0, len(corefile)
    while i < n:
        c = corefile[i]
        if c.isspace():
            i += 1
        elif c == "#":
            while i < n and corefile[i] != "\n":
                i += 1
        elif c in "{}":
            out.append(c)
            i += 1
        elif c in "\"`":
            close = corefile.find(c, i + 1)
            if close < 0:
                raise CorefileError("the Corefile has an unterminated quoted string")
            out.append(corefile[i + 1 : close])
            i = close + 1
        else:
            j = i
            while j < n and not corefile[j].isspace() and corefile[j] not in "{}#":
                j += 1
            out.append(corefile[i:j])
            i = j
    return out


def _check_structure(corefile: str) -> None:
    depth = 0
    for tok in _tokens(corefile):
        if tok == "{":
            depth += 1
        elif tok == "}":
            depth -= 1
            if depth < 0:
                raise CorefileError("the Corefile has a '}' without its '{'")
    if depth:
        raise CorefileError("the Corefile has a '{' without its '}'")


def _zones_served(corefile: str) -> set[str]:
    """Zones the top-level server blocks serve on port 53 (`zone`, `zone:53`, `dns://zone:53`)."""
    zones: set[str] = set()
    keys: list[str] = []
    depth = 0
    for tok in _tokens(corefile):
        if tok == "{":
            if depth == 0:
                for key in keys:
                    zone, port = _key_zone(key)
                    if port == DNS_PORT and zone:
                        zones.add(zone)
                keys = []
            depth += 1
        elif tok == "}":
            depth -= 1
        elif depth == 0:
            keys.extend(k for k in tok.split(",") if k)
    return zones


def _key_zone(key: str) -> tuple[str, int]:
    key = re.sub(r"^[a-z]+://", "", key.lower())
    host, _, port = key.rpartition(":") if ":" in key else (key, "", "")
    return host.rstrip("."), int(port) if port.isdigit() else DNS_PORT


# --- the ConfigMap ----------------------------------------------------------------------------------


async def ensure_coredns_stub(client: AsyncClient, zone: str, servers: list[str]) -> str | None:
    """Make CoreDNS forward `zone` to `servers`. Returns None when the Corefile has the stub zone (now
    or already), else why it was skipped (no ConfigMap kube-system/coredns with a Corefile: the
    cluster's DNS is not a kubeadm-style CoreDNS, e.g. OpenShift's dns-default)."""
    zone = _check_zone(zone)
    targets = [_server(s) for s in servers]
    return await _edit(client, lambda text: add_stub_zone(text, zone, targets))


async def remove_coredns_stub(client: AsyncClient, zone: str) -> str | None:
    """Take our stub zone out of CoreDNS's Corefile. None when it is not there (now or already), else
    why the ConfigMap was skipped."""
    zone = _check_zone(zone)
    return await _edit(client, lambda text: remove_stub_zone(text, zone))


async def _edit(client: AsyncClient, edit: Callable[[str], str]) -> str | None:
    """Read-modify-write of the Corefile, conditional on the resourceVersion read (a concurrent edit
    is a 409: read again and redo ours on top of it)."""
    for attempt in range(CONFLICT_RETRIES + 1):
        try:
            cm = await client.get(ConfigMap, COREDNS_CONFIGMAP, namespace=COREDNS_NAMESPACE)
        except ApiError as err:
            if is_not_found(err):
                return (f"no ConfigMap {COREDNS_NAMESPACE}/{COREDNS_CONFIGMAP}: this cluster's DNS is not "
                        "CoreDNS as kubeadm installs it; configure the stub zone by hand (docs/deploy.md)")
            raise
        data = dict(cm.data or {})
        if COREFILE_KEY not in data:
            return (f"ConfigMap {COREDNS_NAMESPACE}/{COREDNS_CONFIGMAP} has no {COREFILE_KEY} key; configure "
                    "the stub zone by hand (docs/deploy.md)")
        updated = edit(data[COREFILE_KEY])
        if updated == data[COREFILE_KEY]:
            return None
        body: dict[str, Any] = {
            "metadata": {"resourceVersion": cm.metadata.resourceVersion if cm.metadata else None},
            "data": {COREFILE_KEY: updated},
        }
        try:
            await cast(Any, client).patch(ConfigMap, COREDNS_CONFIGMAP, body, namespace=COREDNS_NAMESPACE,
                                          field_manager=FIELD_MANAGER)
            return None
        except ApiError as err:
            if not is_conflict(err) or attempt == CONFLICT_RETRIES:
                raise
    raise AssertionError("unreachable")  # pragma: no cover
