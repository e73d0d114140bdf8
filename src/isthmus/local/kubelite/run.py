"""Wiring: every kube-lite controller on one SharedInformerFactory of one cluster's apiserver.

Order matters for persistence: the caches are synced and the address/port pools rebuilt from
the stored objects before any controller runs, so nothing already handed out is handed out
again after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from lightkube import AsyncClient
from lightkube.resources.apps_v1 import ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet
from lightkube.resources.coordination_v1 import Lease
from lightkube.resources.core_v1 import Endpoints, Namespace, Node, Pod, Service
from lightkube.resources.discovery_v1 import EndpointSlice
from lightkube.resources.policy_v1 import PodDisruptionBudget

from isthmus.local.kubelite import COMPONENT
from isthmus.local.kubelite.daemonsets import DaemonSetController
from isthmus.local.kubelite.disruption import DisruptionController
from isthmus.local.kubelite.endpoints import EndpointsController
from isthmus.local.kubelite.endpointslices import EndpointSliceController
from isthmus.local.kubelite.ipam import parse_cidr
from isthmus.local.kubelite.kubelet import KubeletServer
from isthmus.local.kubelite.logs import PodLogs
from isthmus.local.kubelite.node import NODE_LEASE_NAMESPACE, NodeAgent
from isthmus.local.kubelite.nodelifecycle import NodeLifecycleController, PodGCController
from isthmus.local.kubelite.pods import PodRuntime, node_name
from isthmus.local.kubelite.processes import ProcessOptions
from isthmus.local.kubelite.scheduler import Scheduler
from isthmus.local.kubelite.services import ServiceIPController
from isthmus.local.kubelite.workloads import DeploymentController, ReplicaSetController, StatefulSetController
from isthmus.runtime import EventRecorder, SharedInformerFactory

if TYPE_CHECKING:
    from isthmus.local.kubelite.runc import RuncNode
    from isthmus.local.network.cni import PodNetwork

__all__ = ["KubeLite", "run_kubelite", "validate_config", "validate_node_cidr"]

log = logging.getLogger(__name__)

CLOSE_TIMEOUT = 5.0


def _any_cidr(text: str, what: str) -> ipaddress.IPv4Network:
    try:
        net = ipaddress.IPv4Network(text.strip(), strict=True)
    except ValueError:
        raise ValueError(f"{what} {text!r} is not an IPv4 CIDR such as 10.101.0.0/16") from None
    if net.prefixlen > 30:
        raise ValueError(f"{what} {text!r} is too small: use a prefix of /30 or shorter")
    return net


def validate_config(pod_cidr: str, service_cidr: str, node_ports: tuple[int, int], *, loopback: bool = True) -> None:
    """ValueError (message for users) unless both CIDRs are usable, disjoint, and the range sane.
    loopback: the process mode's rule (inside 127.0.0.0/8); runc mode's ranges live in namespaces
    of their own and may be anything."""
    check = parse_cidr if loopback else _any_cidr
    pods = check(pod_cidr, "pod CIDR")
    services = check(service_cidr, "service CIDR")
    if pods.overlaps(services):
        raise ValueError(f"pod CIDR {pod_cidr} and service CIDR {service_cidr} overlap")
    lo, hi = node_ports
    if not 1 <= lo <= hi <= 65535:
        raise ValueError(f"node port range {lo}-{hi} must satisfy 1 <= LOW <= HIGH <= 65535")


def validate_node_cidr(pod_cidr: str, node_pod_cidr: str | None) -> str:
    """The node's pod CIDR (all of the cluster's when not given); ValueError unless inside it."""
    if node_pod_cidr is None:
        return pod_cidr
    try:
        node = ipaddress.IPv4Network(node_pod_cidr.strip(), strict=True)
    except ValueError:
        raise ValueError(f"node pod CIDR {node_pod_cidr!r} is not an IPv4 CIDR such as 10.101.1.0/24") from None
    if not node.subnet_of(ipaddress.IPv4Network(pod_cidr)):
        raise ValueError(f"node pod CIDR {node_pod_cidr} is not inside the cluster's pod CIDR {pod_cidr}")
    if node.prefixlen > 30:
        raise ValueError(f"node pod CIDR {node_pod_cidr!r} is too small: use a prefix of /30 or shorter")
    return str(node)


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
        kubelet_host: str = "127.0.0.1",
        kubelet_port: int = 0,
        kubelet_token: str | None = None,
        processes: ProcessOptions | None = None,
        runc: RuncNode | None = None,
        network: PodNetwork | None = None,
        node: str | None = None,
        node_pod_cidr: str | None = None,
        controllers: bool = True,
    ) -> None:
        """kubelet_port 0: any free port (published in the Node); kubelet_token: the bearer token
        the kubelet endpoint requires (the cluster's: the apiserver proxies with it), None for none;
        processes: how Pods of the Isthmus image run (root dir, the apiserver address they get);
        runc, network: runc mode (every Pod in runc containers, each in a network namespace of its
        own attached by CNI; the Node's InternalIP is runc.node_address).
        node: this kubelet's Node (default ``<cluster>-node``, the one node of a one-node cluster);
        node_pod_cidr: its ``spec.podCIDR``, a slice of pod_cidr (default all of it);
        controllers: also run the cluster-wide controllers and the scheduler (exactly one kube-lite of
        a cluster does: its kube-controller-manager and kube-scheduler; a real cluster runs several,
        leader-elected, which a local clusterset's fixed node 1 does not need)."""
        validate_config(pod_cidr, service_cidr, node_ports, loopback=runc is None)
        node_cidr = validate_node_cidr(pod_cidr, node_pod_cidr)
        self.runc = runc
        self.client = client
        self.cluster = cluster
        self.node_name = node or node_name(cluster)
        self.pod_cidr = pod_cidr
        self.node_pod_cidr = node_cidr
        self.controllers = controllers
        self.factory = SharedInformerFactory(client)
        pods = self.factory.informer(Pod)
        slices = self.factory.informer(EndpointSlice)
        self.recorder = EventRecorder(client, COMPONENT)
        self.logs = PodLogs()
        self.pods = PodRuntime(
            client, pods, self.recorder, cluster=cluster, pod_cidr=node_cidr, workers=workers, logs=self.logs,
            processes=processes, slices=slices, runc=runc, network=network, node=self.node_name, bind=False,
        )
        self.kubelet = KubeletServer(
            self.logs, self._pod_on_node, node=self.node_name, host=kubelet_host, port=kubelet_port,
            token=kubelet_token, runc_pod=self.pods.runc_pod if runc is not None else None,
        )
        self.node: NodeAgent | None = None
        self.service_ips: ServiceIPController | None = None
        self.endpoint_slices: EndpointSliceController | None = None
        self.endpoints: EndpointsController | None = None
        self.deployments: DeploymentController | None = None
        self.replicasets: ReplicaSetController | None = None
        self.statefulsets: StatefulSetController | None = None
        self.daemonsets: DaemonSetController | None = None
        self.scheduler: Scheduler | None = None
        self.disruption: DisruptionController | None = None
        self.node_lifecycle: NodeLifecycleController | None = None
        self.pod_gc: PodGCController | None = None
        if controllers:
            services = self.factory.informer(Service)
            replicasets = self.factory.informer(ReplicaSet)
            revisions = self.factory.informer(ControllerRevision)
            self.service_ips = ServiceIPController(
                client, services, self.recorder, service_cidr=service_cidr, node_ports=node_ports, workers=2
            )
            self.endpoint_slices = EndpointSliceController(client, services, pods, slices, workers=workers)
            self.endpoints = EndpointsController(client, services, pods, self.factory.informer(Endpoints))
            deployments = self.factory.informer(Deployment)
            statefulsets = self.factory.informer(StatefulSet)
            budgets = self.factory.informer(PodDisruptionBudget)
            self.deployments = DeploymentController(client, deployments, replicasets, pods, recorder=self.recorder)
            self.replicasets = ReplicaSetController(client, replicasets, pods, recorder=self.recorder)
            self.statefulsets = StatefulSetController(client, statefulsets, pods, revisions, recorder=self.recorder)
            nodes = self.factory.informer(Node)
            self.daemonsets = DaemonSetController(client, self.factory.informer(DaemonSet), nodes, pods, revisions,
                                                  recorder=self.recorder)
            # kube-scheduler's place: it binds every Pod, a one-node cluster's too (the kubelets never do)
            self.scheduler = Scheduler(client, pods, nodes, self.recorder, namespaces=self.factory.informer(Namespace),
                                       pdbs=budgets, services=services)
            self.disruption = DisruptionController(client, budgets, pods, deployments, replicasets, statefulsets,
                                                   recorder=self.recorder)
            self.node_lifecycle = NodeLifecycleController(
                client, nodes, self.factory.informer(Lease, NODE_LEASE_NAMESPACE), pods, self.recorder)
            self.pod_gc = PodGCController(client, nodes, pods)
        self._ready = False

    @property
    def ready(self) -> bool:
        return self._ready

    def _pod_on_node(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The kubelet's GetPodByName: a Pod bound to our node, as the cache has it."""
        pod = self.pods.pods.cache.get(f"{namespace}/{name}")
        if pod is None:
            return None
        data = pod.to_dict()
        return data if (data.get("spec") or {}).get("nodeName") == self.node_name else None

    def _runners(self) -> list[tuple[str, Callable[[], Coroutine[Any, Any, Any]]]]:
        """The node's own loops, then (the controllers' kube-lite) the cluster-wide ones."""
        assert self.node is not None
        out: list[tuple[str, Callable[[], Coroutine[Any, Any, Any]]]] = [("node", self.node.run), ("pods", self.pods.run)]
        for name, part in (
            ("service-ips", self.service_ips),
            ("endpointslices", self.endpoint_slices),
            ("endpoints", self.endpoints),
            ("deployments", self.deployments),
            ("replicasets", self.replicasets),
            ("statefulsets", self.statefulsets),
            ("daemonsets", self.daemonsets),
            ("scheduler", self.scheduler),
            ("disruption", self.disruption),
            ("node-lifecycle", self.node_lifecycle),
            ("pod-gc", self.pod_gc),
        ):
            if part is not None:
                out.append((name, part.run))
        return out

    async def run(self, ready: asyncio.Event | None = None) -> None:
        self.factory.start()
        tasks: list[asyncio.Task[Any]] = []
        try:
            await self.factory.wait_synced()
            if self.service_ips is not None:
                self.service_ips.rebuild()
            self.pods.rebuild()
            await self.kubelet.start()
            self.node = NodeAgent(
                self.client, name=self.node_name, pod_cidr=self.node_pod_cidr, kubelet_port=self.kubelet.port,
                control_plane=self.controllers,
                **({"address": self.runc.node_address} if self.runc is not None else {}),
            )
            try:  # registered before we say ready, unless the apiserver refuses (then the beats retry)
                await self.node.beat()
            except Exception as e:
                log.warning("node not registered yet", extra={"node": self.node_name, "error": str(e)})
            for name, runner in self._runners():
                tasks.append(asyncio.create_task(runner(), name=f"kube-lite {name}"))
            self._ready = True
            if ready is not None:
                ready.set()
            log.info("kube-lite running", extra={"cluster": self.cluster, "node": self.node_name,
                                                 "controllers": self.controllers})
            await asyncio.gather(*tasks)
        finally:
            self._ready = False
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await t
            await self.pods.close()
            await self.kubelet.stop()
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
    **options: Any,
) -> None:
    """Run kube-lite for one cluster until cancelled; ``ready`` is set once it serves.
    ``options``: KubeLite's keyword arguments (the kubelet endpoint's).

    Raises ValueError (a message for users) at once for unusable CIDRs or port range.
    """
    await KubeLite(
        client, cluster=cluster, pod_cidr=pod_cidr, service_cidr=service_cidr, node_ports=node_ports, **options
    ).run(ready)
