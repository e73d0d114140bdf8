"""`isthmus dns` as a component: informers + wire cache + listeners (+ optional metrics server).

The CLI, `isthmus up` and the tests all start the server through `DnsService`, so they run the
same wiring. Listeners come up first and answer SERVFAIL until the informers have synced.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field

from lightkube import AsyncClient

from isthmus.api.mcs import CLUSTERSET_DOMAIN
from isthmus.clusterset.about import check_cluster_identity
from isthmus.dns.metrics import DnsStats
from isthmus.dns.server import UDP_MMSG_BATCH, DnsServer, TcpLimits
from isthmus.dns.source import CLUSTERSET_DNS_VERSION, KUBE_DNS_VERSION, DnsSource
from isthmus.dns.wire import DEFAULT_MAX_UDP, WireCache, name_to_wire
from isthmus.runtime import HealthServer, SharedInformerFactory

__all__ = ["DnsConfig", "DnsService", "validate_zone"]

log = logging.getLogger(__name__)


def validate_zone(zone: str) -> str:
    """A zone name normalised (lowercase, no trailing dot); ValueError with a user-facing message."""
    z = zone.strip().rstrip(".").lower()
    if not z:
        raise ValueError("a zone cannot be the root")
    try:
        name_to_wire(z)
    except (ValueError, UnicodeError) as e:
        raise ValueError(f"zone {zone!r} is not a DNS name: {e}") from None
    return z


@dataclass
class DnsConfig:
    cluster_id: str
    listen: Sequence[tuple[str, int]] = (("127.0.0.1", 5353),)
    zones: Sequence[str] = (CLUSTERSET_DOMAIN,)
    ttl: int = 5
    cluster_names: bool = False
    local_zone: str | None = None
    max_udp: int = DEFAULT_MAX_UDP
    metrics_addr: str | None = None
    sync_timeout: float | None = None
    versions: dict[str, str] = field(default_factory=dict)
    tcp: TcpLimits = field(default_factory=TcpLimits)
    udp_batch: int = UDP_MMSG_BATCH
    """Datagrams per recvmmsg/sendmmsg; 0 reads and writes one at a time (recvfrom/sendto)."""


class DnsService:
    """One cluster's authoritative DNS server."""

    def __init__(
        self,
        client: AsyncClient,
        config: DnsConfig,
        factory: SharedInformerFactory | None = None,
        *,
        sockets: Sequence[tuple[socket.socket, socket.socket]] | None = None,
    ) -> None:
        """`sockets`: (UDP, TCP) per `config.listen` address, already bound (a `--workers` process
        gets them from its parent) instead of binding them here."""
        self.config = config
        self._client = client
        self._sockets = sockets
        zones = [validate_zone(z) for z in config.zones]
        local_zone = validate_zone(config.local_zone) if config.local_zone else None
        if local_zone in zones:
            raise ValueError(f"--local-zone {local_zone} is also a clusterset --zone; they must differ")
        all_zones = zones + ([local_zone] if local_zone and local_zone not in zones else [])
        versions = {z: CLUSTERSET_DNS_VERSION for z in zones}
        if local_zone:
            versions.setdefault(local_zone, KUBE_DNS_VERSION)
        versions.update(config.versions)
        self.stats = DnsStats(cluster=config.cluster_id)
        self.cache = WireCache(
            all_zones, ttl=config.ttl, max_udp=config.max_udp, stats=self.stats, versions=versions
        )
        self.factory = factory or SharedInformerFactory(client)
        self.source = DnsSource(
            self.factory,
            self.cache,
            cluster_id=config.cluster_id,
            zones=zones,
            local_zone=local_zone,
            cluster_names=config.cluster_names,
        )
        self.server = DnsServer(self.cache, config.listen, tcp=config.tcp, udp_batch=config.udp_batch)
        self.health: HealthServer | None = None
        self.draining = False
        """In the lame-duck period (`lame_duck()`): still answering, no longer ready."""
        self._sync_task: asyncio.Task[bool] | None = None

    @property
    def bound(self) -> list[tuple[str, int]]:
        return self.server.bound

    @property
    def ready(self) -> bool:
        return self.cache.ready and not self.draining

    def lame_duck(self) -> None:
        """Turn not-ready (so /readyz fails and the endpoints drop this server) but keep answering:
        proxies that have not seen the change yet still send queries here (cli.lameduck)."""
        self.draining = True

    async def start(self) -> None:
        """Listen (SERVFAIL until synced), then sync informers in the background.

        First the cluster ID is checked against the About API's cluster.clusterset.k8s.io: a server
        answering `<hostname>.<clusterid>` names under one ID while the cluster's property (what other
        tools read) says another raises ClusterIdentityError (the command's one-line error) and never
        listens, so it is never ready."""
        warning = await check_cluster_identity(self._client, self.config.cluster_id)
        if warning is not None:
            log.warning("%s", warning)
        if self.config.metrics_addr:
            self.health = HealthServer()
            self.health.add_readiness_check("dns-synced", lambda: self.cache.ready)
            self.health.add_readiness_check("dns-not-stopping", lambda: not self.draining)
            self.health.add_liveness_check("dns-serving", lambda: self.server.serving)
            await self.health.start(self.config.metrics_addr)
        try:
            await self.server.start(self._sockets)
        except BaseException:
            if self.health is not None:
                await self.health.stop()
            raise
        self._sync_task = asyncio.get_running_loop().create_task(
            self.source.run(self.config.sync_timeout), name="dns informer sync"
        )

    async def wait_ready(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """True once answers are being served; False on timeout or a failed sync."""
        if self._sync_task is None:
            raise RuntimeError("start() first")
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.shield(self._sync_task)
        except TimeoutError:
            return False

    async def stop(self) -> None:
        if self._sync_task is not None and not self._sync_task.done():
            self._sync_task.cancel()
            try:
                await self._sync_task
            except asyncio.CancelledError:
                pass
        await self.server.stop()
        await self.factory.stop()
        if self.health is not None:
            await self.health.stop()
