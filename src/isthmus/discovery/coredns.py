"""The clusterset.local stub zone in a member's CoreDNS (`isthmus join` adds it, `isthmus leave`
removes it), forwarding to the ClusterIP of the Isthmus DNS Service. The Corefile edit itself is
`isthmus.kube.coredns`; this adds what join and leave need: find the Service, and turn every
outcome into one line for the user (a cluster without the Service or without a kubeadm-style
CoreDNS is a note, never a failed join).
"""

from __future__ import annotations

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Service

from isthmus.api.mcs import AGENT_NAMESPACE, CLUSTERSET_DOMAIN, DNS_SERVICE_NAME
from isthmus.kube import coredns
from isthmus.kube.helpers import get_or_none


async def ensure_coredns_stub(client: AsyncClient, zone: str = CLUSTERSET_DOMAIN) -> str:
    """Add (or update) the stub zone; returns a one-line note saying what happened."""
    svc = await get_or_none(client, Service, DNS_SERVICE_NAME, namespace=AGENT_NAMESPACE)
    ip = svc.spec.clusterIP if svc is not None and svc.spec is not None else None
    if not ip or ip == "None":
        return (f"CoreDNS not configured: no Service {AGENT_NAMESPACE}/{DNS_SERVICE_NAME} yet (apply deploy/member "
                f"first, then re-run join)")
    try:
        skipped = await coredns.ensure_coredns_stub(client, zone, [ip])
    except coredns.CorefileError as err:
        return f"CoreDNS not configured: {err}"
    if skipped:
        return f"CoreDNS not configured: {skipped}"
    return f"CoreDNS forwards {zone} to {AGENT_NAMESPACE}/{DNS_SERVICE_NAME} ({ip})"


async def remove_coredns_stub(client: AsyncClient, zone: str = CLUSTERSET_DOMAIN) -> str:
    """Remove the stub zone; returns a one-line note."""
    try:
        skipped = await coredns.remove_coredns_stub(client, zone)
    except coredns.CorefileError as err:
        return f"CoreDNS left as it is: {err}"
    return f"CoreDNS left as it is: {skipped}" if skipped else f"CoreDNS no longer forwards {zone}"
