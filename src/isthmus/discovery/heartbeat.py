"""The agent's heartbeat on its broker `Cluster`, and its verdict on the peers' (liveness).

Every agent beats on its own broker `Cluster` (the heartbeat annotation, and a Ready condition on
its status): peers and `isthmus show clusters` age it. Whether a beat gets through is also this
agent's measure of whether it sees the broker at all (liveness.py: a broker outage must never look
like every peer dying).

A peer whose heartbeat has not changed for longer than the grace period is silent: every service
with one of its broker slices is requeued, and imports.py withdraws its endpoints until it beats
again. The verdict is this agent's alone (an Event on the peer's `Cluster`, never a write of it: a
member may write only its own). A peer already silent when this agent starts stays withdrawn: its
age is read in the broker's clock (`judge_after_restart`).

A 401 from the broker ends the agent (`BrokerCredentialsRejected`): its token was revoked or
replaced, and only a restart reads the new one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

import httpx2
from lightkube import ApiError, AsyncClient
from lightkube.types import PatchType

from isthmus.api.base import format_time, merge_conditions, new_condition
from isthmus.api.mcs import (
    AGENT_FIELD_MANAGER,
    AGENT_NAMESPACE,
    BROKER_SECRET_NAME,
    HEARTBEAT_ANNOTATION,
    Cluster,
    ClusterEventReason,
    ClusterReason,
    ConditionType,
)
from isthmus.discovery.caches import BY_SOURCE_CLUSTER, Caches, annotations_of, conditions_key, dump
from isthmus.discovery.errors import BrokerCredentialsRejected
from isthmus.discovery.liveness import Liveness
from isthmus.kube import helpers, keys
from isthmus.kube.resources import resource_for
from isthmus.runtime import EventRecorder, object_name

__all__ = ["HEARTBEAT_SECONDS", "Heartbeat", "broker_server"]

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 10.0


def broker_server(broker: AsyncClient) -> str:
    """The broker's address, for messages."""
    try:
        return str(cast(Any, broker)._client.config.cluster.server)  # lightkube internals
    except AttributeError:
        return "its address in broker-info"


def heartbeat_written_at(obj: Any) -> datetime | None:
    """When the broker recorded the last write of a Cluster by its agent (its own clock; heartbeats are
    the agent's only writes of the main resource), from metadata.managedFields."""
    for entry in (dump(obj).get("metadata") or {}).get("managedFields") or []:
        if (entry.get("manager") == AGENT_FIELD_MANAGER and entry.get("operation") == "Update"
                and not entry.get("subresource") and entry.get("time")):
            try:
                return datetime.fromisoformat(str(entry["time"]).replace("Z", "+00:00"))
            except ValueError:
                return None
    return None


class Heartbeat:
    """This agent's heartbeat and its view of the peers' (`silent`: whose endpoints it withholds)."""

    def __init__(self, *, broker: AsyncClient, cluster_id: str, broker_ns: str, liveness: Liveness,
                 recorder: EventRecorder) -> None:
        self.broker = broker
        self.cluster_id = cluster_id
        self.broker_ns = broker_ns
        self.liveness = liveness
        self.recorder = recorder
        # Peers judge silence with the same grace (one clusterset, one setting): beat several times
        # within it, so one lost beat never looks like death.
        self.interval = min(HEARTBEAT_SECONDS, liveness.grace / 4)
        self.silent: frozenset[str] = frozenset()
        self.requeue: Callable[[str], None] | None = None
        """Set while leading: requeues a service whose imports a verdict changes."""

    def attach(self, caches: Caches, requeue: Callable[[str], None]) -> None:
        """Start a leadership term: follow the broker's Clusters in `caches`, requeue through `requeue`."""
        self.caches = caches
        self.requeue = requeue
        caches.b_clusters.add_handler(on_add=self.observe_cluster, on_update=lambda _o, n: self.observe_cluster(n),
                                      on_delete=self._forget_cluster)

    def detach(self) -> None:
        self.requeue = None

    async def start(self) -> None:
        """Once the caches are synced: peers already silent stay withdrawn from the first reconcile
        on. The lists just succeeded, so the broker is reachable."""
        try:
            await self.judge_after_restart()
        except Exception as e:  # the heartbeat loop retries; peers then get a whole grace period
            log.warning("could not judge peers' heartbeats at start: %s", helpers.describe_error(e))
        self.liveness.link_ok()
        self.silent = self.liveness.silent()

    async def beat(self) -> Any:
        """One heartbeat: the annotation on our own Cluster (the only Cluster we may write). Returns it."""
        return await cast(Any, self.broker).patch(
            resource_for(Cluster), self.cluster_id,
            {"metadata": {"annotations": {HEARTBEAT_ANNOTATION: format_time(datetime.now(UTC))}}},
            namespace=self.broker_ns, patch_type=PatchType.MERGE, field_manager=AGENT_FIELD_MANAGER)

    async def run(self) -> None:
        """Tell the broker this cluster's agent is alive: the heartbeat annotation (what peers and
        `isthmus show clusters` age) and a Ready condition on the Cluster's status. Its success or
        failure is also this agent's measure of whether it can see the broker (see liveness.py)."""
        while True:
            try:
                stored = await self.beat()
                await self._observe_peers()
                cluster = Cluster.from_dict(stored.to_dict())
                ready = new_condition(ConditionType.READY, True, ClusterReason.AGENT_RUNNING,
                                      f"the agent of cluster {self.cluster_id} is running", cluster.metadata.generation)
                merged = merge_conditions(cluster.status.conditions, [ready])
                if conditions_key(merged) != conditions_key(cluster.status.conditions):
                    cluster.status.conditions = merged
                    await helpers.patch_status_quiet(self.broker, cluster, field_manager=AGENT_FIELD_MANAGER,
                                                     patch_type=PatchType.MERGE)
            except (httpx2.TransportError, OSError) as e:  # the broker may be briefly unreachable: keep beating
                self.liveness.link_failed()
                log.warning("heartbeat to broker failed: %s", helpers.describe_error(e))
            except ApiError as e:
                if helpers.status_code(e) == 401:
                    raise BrokerCredentialsRejected(
                        f"the broker at {broker_server(self.broker)} rejects this cluster's token (401 "
                        f"Unauthorized): it was revoked (`isthmus leave`) or replaced (a new join); stopping, so "
                        f"that a restart reads Secret {AGENT_NAMESPACE}/{BROKER_SECRET_NAME} again") from None
                log.warning("heartbeat to broker failed: %s", helpers.describe_error(e))
            except Exception as e:
                log.warning("heartbeat to broker failed: %s", helpers.describe_error(e))
            await asyncio.sleep(self.interval)

    # ------------------------------------------------------------------ peers' liveness

    async def _observe_peers(self) -> None:
        """Read every peer's heartbeat from the broker itself, then count the link as up.

        Not from the informer: after an outage its watch may take many seconds to reconnect, and
        peers must not look silent meanwhile; a list that succeeded is a view known to be fresh.
        """
        peers = [o async for o in cast(Any, self.broker).list(resource_for(Cluster), namespace=self.broker_ns)]
        names = set()
        for obj in peers:
            names.add(object_name(obj))
            self.observe_cluster(obj)
        for gone in self.liveness.peers() - names:
            self.liveness.forget(gone)
        self.liveness.link_ok()

    def observe_cluster(self, obj: Any) -> None:
        name = object_name(obj)
        if name == self.cluster_id:
            return
        self.liveness.observe(name, annotations_of(obj).get(HEARTBEAT_ANNOTATION))
        if name in self.silent and name not in self.liveness.silent():
            self.apply_silence()  # it beats again: restore at once rather than at the next tick

    def _forget_cluster(self, obj: Any) -> None:
        self.liveness.forget(object_name(obj))

    async def judge(self) -> None:
        """Withdraw silent peers' endpoints and restore returning ones (time-based, so a loop)."""
        period = max(0.2, min(5.0, self.liveness.grace / 4))
        while True:
            await asyncio.sleep(period)
            self.apply_silence()

    def apply_silence(self) -> frozenset[str]:
        """Recompute the silent set; requeue every service of a cluster that changed side and say so
        with an Event on its broker `Cluster`. Returns the clusters that just went silent.

        The verdict is this agent's own: a member may write only its own Cluster on the broker, so the
        peer's status is left alone (it keeps what its own agent last wrote) and the Event says why.
        """
        silent = self.liveness.silent()
        changed = silent ^ self.silent
        if not changed:
            return frozenset()
        went, back = silent - self.silent, self.silent - silent
        self.silent = silent
        for name in sorted(went):
            log.warning("cluster %s: no heartbeat for over %.0f s: its endpoints are withdrawn from every import",
                        name, self.liveness.grace)
            self._post_verdict(name, silent=True)
        for name in sorted(back):
            log.info("cluster %s is alive again: its endpoints are imported again", name)
            self._post_verdict(name, silent=False)
        if self.requeue is not None:
            for name in sorted(changed):
                for o in self.caches.b_slices.cache.by_index(BY_SOURCE_CLUSTER, name):
                    for key in keys.mcs_keys(o):
                        self.requeue(key)
        return went

    def _post_verdict(self, name: str, *, silent: bool) -> None:
        """A Warning (withdrawn) or Normal (restored) Event on the peer's `Cluster`, from this cluster."""
        raw = self.caches.broker_cluster(name) if self.requeue is not None else None
        if raw is None:
            return
        if silent:
            age = self.liveness.silent_for(name)
            message = (f"no heartbeat from the agent of cluster {name} for "
                       f"{f'{age:.0f} s' if age is not None else 'longer than the grace period'} "
                       f"(grace {self.liveness.grace:.0f} s): cluster {self.cluster_id} withdrew its "
                       "endpoints from every import until it returns")
            self.recorder.warning(raw, ClusterEventReason.WITHDRAWN, message)
        else:
            self.recorder.normal(
                raw, ClusterEventReason.RESTORED,
                f"the agent of cluster {name} is back: cluster {self.cluster_id} imports its endpoints again")

    async def judge_after_restart(self) -> None:
        """Peers already silent when this agent starts stay withdrawn until they beat again.

        Their age is read in the broker's clock, never this host's: the time the broker recorded for
        a peer's last heartbeat write (its agent's managedFields entry) against the time it records
        for our own heartbeat just now. Clock skew between clusters therefore cannot matter.
        """
        stored = await self.beat()
        now = heartbeat_written_at(stored)
        if now is None:
            return
        for raw in self.caches.b_clusters.cache.list():
            name = object_name(raw)
            written = heartbeat_written_at(raw)
            if name == self.cluster_id or written is None or (now - written).total_seconds() <= self.liveness.grace:
                continue
            self.liveness.forget(name)
            self.liveness.observe(name, annotations_of(raw).get(HEARTBEAT_ANNOTATION), marked_silent=True)
