"""The clusterset.local stub zone in a member's CoreDNS, as Lighthouse adds it: a server block for
the zone forwarding to the Isthmus DNS Service, in the Corefile of ConfigMap kube-system/coredns.

`isthmus join` adds it and `isthmus leave` removes it. The block carries a marker comment, so adding
twice changes nothing, a new Service IP replaces the old one, and removing it gives back the Corefile
exactly as it was. CoreDNS's `reload` plugin (in kubeadm's and k3s's default Corefiles) picks the
change up on its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from lightkube import AsyncClient
from lightkube.resources.core_v1 import ConfigMap, Service

from isthmus.api.mcs import AGENT_NAMESPACE, CLUSTERSET_DOMAIN, DNS_SERVICE_NAME
from isthmus.kube.helpers import create_or_update, get_or_none

COREDNS_NAMESPACE = "kube-system"
COREDNS_CONFIGMAP = "coredns"
COREFILE_KEY = "Corefile"
MARKER = "# isthmus: stub zone (added by `isthmus join`, removed by `isthmus leave`)"


class CorefileError(ValueError):
    """The Corefile cannot be edited safely; it is left as it is."""


def _block(zone: str, servers: list[str]) -> str:
    return f"{MARKER}\n{zone}:53 {{\n    forward . {' '.join(servers)}\n}}\n"


def _ours(zone: str) -> re.Pattern[str]:
    return re.compile(rf"\n?{re.escape(MARKER)}\n{re.escape(zone)}:53 \{{\n[^{{}}]*\}}\n")


def add_stub_zone(corefile: str, zone: str, servers: list[str]) -> str:
    """`corefile` with our block for `zone` forwarding to `servers` (replacing an older one of ours),
    after a blank line at the end."""
    if not servers:
        raise CorefileError("a stub zone needs at least one server to forward to")
    base = remove_stub_zone(corefile, zone)
    if re.search(rf"(^|\s){re.escape(zone)}\.?(:\d+)?\s*\{{", base):
        raise CorefileError(f"the Corefile already has a server block for {zone} that isthmus did not add")
    if base and not base.endswith("\n"):
        base += "\n"
    return f"{base}\n{_block(zone, servers)}"


def remove_stub_zone(corefile: str, zone: str) -> str:
    """`corefile` without our block for `zone` (unchanged when there is none): what it was before
    add_stub_zone, for a Corefile ending in a newline as ConfigMaps' do."""
    return _ours(zone).sub("", corefile, count=1)


async def ensure_coredns_stub(client: AsyncClient, zone: str = CLUSTERSET_DOMAIN) -> str:
    """Add (or update) the stub zone; returns a one-line note saying what happened."""
    svc = await get_or_none(client, Service, DNS_SERVICE_NAME, namespace=AGENT_NAMESPACE)
    ip = svc.spec.clusterIP if svc is not None and svc.spec is not None else None
    if not ip or ip == "None":
        return (f"CoreDNS not configured: no Service {AGENT_NAMESPACE}/{DNS_SERVICE_NAME} yet (apply deploy/member "
                f"first, then re-run join)")
    return await _edit(client, lambda text: add_stub_zone(text, zone, [ip]),
                       f"CoreDNS forwards {zone} to {AGENT_NAMESPACE}/{DNS_SERVICE_NAME} ({ip})")


async def remove_coredns_stub(client: AsyncClient, zone: str = CLUSTERSET_DOMAIN) -> str:
    """Remove the stub zone; returns a one-line note."""
    return await _edit(client, lambda text: remove_stub_zone(text, zone), f"CoreDNS no longer forwards {zone}")


async def _edit(client: AsyncClient, edit: Callable[[str], str], done: str) -> str:
    result = {"found": False, "changed": False}

    def mutate(current: ConfigMap | None) -> ConfigMap | None:
        if current is None or COREFILE_KEY not in (current.data or {}):
            return None
        result["found"] = True
        data = dict(current.data or {})
        updated = edit(data[COREFILE_KEY])
        if updated == data[COREFILE_KEY]:
            return None
        result["changed"] = True
        data[COREFILE_KEY] = updated
        current.data = data
        return current

    await create_or_update(client, ConfigMap, COREDNS_CONFIGMAP, mutate, namespace=COREDNS_NAMESPACE,
                           field_manager="isthmus-cli")
    if not result["found"]:
        return f"CoreDNS not configured: no ConfigMap {COREDNS_NAMESPACE}/{COREDNS_CONFIGMAP} with a Corefile"
    return done if result["changed"] else f"{done} (already so)"
