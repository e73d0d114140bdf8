"""Wiring: every kube-lite controller on one SharedInformerFactory of one cluster's apiserver.

Order matters for persistence: the caches are synced and the address/port pools rebuilt from
the stored objects before any controller runs, so nothing already handed out is handed out
again after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.apps_v1 import Deployment, StatefulSet
from lightkube.resources.core_v1 import Pod, Service
from lightkube.resources.discovery_v1 import EndpointSlice

from isthmus.local.kubelite import COMPONENT
from isthmus.local.kubelite.endpointslices import EndpointSliceController
from isthmus.local.kubelite.ipam import parse_cidr
from isthmus.local.kubelite.pods import PodRuntime
from isthmus.local.kubelite.services import ServiceIPController
from isthmus.local.kubelite.workloads import DeploymentController, StatefulSetController
from isthmus.runtime import EventRecorder, SharedInformerFactory

__all__ = ["KubeLite", "run_kubelite", "validate_config"]

log = logging.getLogger(__name__)

CLOSE_TIMEOUT = 5.0


def validate_config(pod_cidr: str, service_cidr: str, node_ports: tuple[int, int]) -> None:
    """ValueError (message for users) unless both CIDRs are usable, disjoint, and the range sane."""
    pods = parse_cidr(pod_cidr, "pod CIDR")
    services = parse_cidr(service_cidr, "service CIDR")
    if pods.overlaps(services):
        raise ValueError(f"pod CIDR {pod_cidr} and service CIDR {service_cidr} overlap")
    lo, hi = node_ports
    if not 1 <= lo <= hi <= 65535:
        raise ValueError(f"node port range {lo}-{hi} must satisfy 1 <= LOW <= HIGH <= 65535")


class KubeLite:
    """All kube-lite controllers of one cluster. :meth:`run` until cancelled; :attr:`ready` once
    the caches are synced, allocations rebuilt and the controllers started."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        cluster: str,
        pod_cidr: str,
        service_cidr: str,
        node_ports: tuple[int, int],
        workers: int = 4,
    ) -> None:
        validate_config(pod_cidr, service_cidr, node_ports)
        self.client = client
        self.cluster = cluster
        self.factory = SharedInformerFactory(client)
        services = self.factory.informer(Service)
        pods = self.factory.informer(Pod)
        slices = self.factory.informer(EndpointSlice)
        deployments = self.factory.informer(Deployment)
        statefulsets = self.factory.informer(StatefulSet)
        self.recorder = EventRecorder(client, COMPONENT)
        self.service_ips = ServiceIPController(
            client, services, self.recorder, service_cidr=service_cidr, node_ports=node_ports, workers=2
        )
        self.endpoint_slices = EndpointSliceController(client, services, pods, slices, workers=workers)
        self.pods = PodRuntime(
            client, pods, self.recorder, cluster=cluster, pod_cidr=pod_cidr, workers=workers
        )
        self.deployments = DeploymentController(client, deployments, pods)
        self.statefulsets = StatefulSetController(client, statefulsets, pods)
        self._ready = False

    @property
    def ready(self) -> bool:
        return self._ready

    async def run(self, ready: asyncio.Event | None = None) -> None:
        self.factory.start()
        tasks: list[asyncio.Task[Any]] = []
        try:
            await self.factory.wait_synced()
            self.service_ips.rebuild()
            self.pods.rebuild()
            for name, runner in (
                ("service-ips", self.service_ips.run),
                ("endpointslices", self.endpoint_slices.run),
                ("pods", self.pods.run),
                ("deployments", self.deployments.run),
                ("statefulsets", self.statefulsets.run),
            ):
                tasks.append(asyncio.create_task(runner(), name=f"kube-lite {name}"))
            self._ready = True
            if ready is not None:
                ready.set()
            log.info("kube-lite running", extra={"cluster": self.cluster})
            await asyncio.gather(*tasks)
        finally:
            self._ready = False
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await t
            await self.pods.close()
            await self.factory.stop()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSE_TIMEOUT):  # an unreachable apiserver must not hang shutdown
                    await self.recorder.aclose()


async def run_kubelite(
    client: AsyncClient,
    *,
    cluster: str,
    pod_cidr: str,
    service_cidr: str,
    node_ports: tuple[int, int],
    ready: asyncio.Event | None = None,
) -> None:
    """Run kube-lite for one cluster until cancelled; ``ready`` is set once it serves.

    Raises ValueError (a message for users) at once for unusable CIDRs or port range.
    """
    await KubeLite(
        client, cluster=cluster, pod_cidr=pod_cidr, service_cidr=service_cidr, node_ports=node_ports
    ).run(ready)
