"""Membership as the broker has it: which clusters are registered (its Cluster objects), their
agents' last heartbeats, and what `status` says of a cluster that is not a live member."""

from __future__ import annotations

import asyncio
import datetime
from dataclasses import dataclass
from typing import Any

from isthmus.api.mcs import STALE_HEARTBEAT_SECONDS
from isthmus.local.plan import BROKER
from isthmus.local.state import Layout
from isthmus.local.status.health import short

__all__ = ["BROKER_READ_TIMEOUT", "Member", "Membership", "read_members", "read_membership"]

BROKER_READ_TIMEOUT = 2.0


@dataclass(frozen=True)
class Member:
    """A Cluster object on the broker."""

    heartbeat: datetime.datetime | None


async def read_members(layout: Layout) -> dict[str, Member]:
    """The member clusters registered on the broker (its Cluster objects), by name.

    Raises on anything that prevents reading them; no Cluster kind or namespace yet (before
    deploy-broker) is no members.
    """
    from isthmus.api.mcs import DEFAULT_BROKER_NAMESPACE, HEARTBEAT_ANNOTATION, Cluster
    from isthmus.clusterset.brokerinfo import BrokerInfo
    from isthmus.kube.client import make_client
    from isthmus.kube.helpers import is_not_found, list_all

    try:
        namespace = BrokerInfo.decode(layout.broker_info.read_text()).namespace
    except (OSError, ValueError):
        namespace = DEFAULT_BROKER_NAMESPACE
    client = make_client(layout.kubeconfig_of(BROKER), timeout=BROKER_READ_TIMEOUT)
    try:
        async with asyncio.timeout(BROKER_READ_TIMEOUT):
            clusters = await list_all(client, Cluster, namespace=namespace)
    except Exception as e:
        if is_not_found(e):
            return {}
        raise
    finally:
        await client.close()
    return {c.name: Member(_parse_time((c.metadata.annotations or {}).get(HEARTBEAT_ANNOTATION)))
            for c in clusters}


def _parse_time(value: str | None) -> datetime.datetime | None:
    if not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass(frozen=True)
class Membership:
    """The broker's members as read now; None with `error` when they could not be read (then
    membership is unknown, not guessed). `now`: the time heartbeat ages are measured from."""

    members: dict[str, Member] | None
    error: str | None
    now: datetime.datetime

    def _age(self, member: Member | None) -> int | None:
        if member is None or member.heartbeat is None:
            return None
        return max(0, int((self.now - member.heartbeat).total_seconds()))

    def fields(self, cluster: str) -> dict[str, Any]:
        """``joined``, ``heartbeat`` and ``heartbeatAge`` of the cluster's status."""
        member = self.members.get(cluster) if self.members is not None else None
        return {
            "joined": None if self.members is None else member is not None,
            "heartbeat": member.heartbeat.strftime("%Y-%m-%dT%H:%M:%SZ") if member and member.heartbeat else None,
            "heartbeatAge": self._age(member),
        }

    def problem(self, cluster: str, joined_before: bool) -> str | None:
        """Why the cluster is not a live member (`joined_before`: this clusterset joined it once)."""
        member = self.members.get(cluster) if self.members is not None else None
        age = self._age(member)
        if self.members is None:
            return f"{cluster}: membership unknown ({self.error})"
        if member is None:
            left = "left the clusterset (not registered on the broker)" if joined_before else "not joined yet"
            return f"{cluster} {left}"
        if age is None:
            return f"{cluster}: no heartbeat from its agent on the broker yet"
        if age > STALE_HEARTBEAT_SECONDS:
            return (f"{cluster}: its agent's last heartbeat is {age}s old "
                    f"(stale after {STALE_HEARTBEAT_SECONDS:.0f}s)")
        return None


async def read_membership(layout: Layout, broker_ready: bool) -> Membership:
    """The broker's members, when its apiserver is ready (`broker_ready`)."""
    members: dict[str, Member] | None = None
    if broker_ready:
        try:
            members = await read_members(layout)
            error = None
        except Exception as e:  # reported per cluster: membership is unknown, not guessed
            error = f"cannot read the broker's clusters: {short(e)}"
    else:
        error = "the broker apiserver is not ready"
    return Membership(members, error, datetime.datetime.now(datetime.UTC))
