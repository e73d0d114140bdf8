"""The `default/kubernetes` Service and its endpoints: how workloads find the apiserver.

As kube-apiserver's kubernetesservice controller and its endpoint reconciler
(pkg/controlplane/controller/kubernetesservice, pkg/controlplane/reconcilers):

- Service `kubernetes` (labels component=apiserver, provider=kubernetes): type ClusterIP, port 443
  named `https` to the apiserver's port, no selector. Its `spec.clusterIP` is left for whoever
  allocates ClusterIPs (kube-lite in a local clusterset, as for any Service): kube takes the first
  address of its service CIDR, and this server has no service CIDR of its own.
- Endpoints `kubernetes` (label endpointslice.kubernetes.io/skip-mirror=true: the mirroring
  controller leaves it alone): one subset, the apiserver's address and port named `https`.
- EndpointSlice `kubernetes` (label kubernetes.io/service-name=kubernetes, no managed-by, as
  kube's EndpointsAdapter writes it): the same address, ready.

Reconciled when the server starts and whenever one of them is deleted or changed by someone
else (kube re-checks every 10 s; here the write itself triggers it). An existing Service keeps
everything but its ports and type, which are reset, as kube does.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

from isthmus.apiserver.apimachinery.errors import ApiError
from isthmus.apiserver.apimachinery.jsoncopy import clone
from isthmus.apiserver.controllers.base import QueueController
from isthmus.apiserver.registry.resources import ResourceInfo, ResourceRegistry
from isthmus.apiserver.registry.store import GenericStore
from isthmus.apiserver.storage.store import Store
from isthmus.apiserver.storage.watch import WatchEvent

log = logging.getLogger("isthmus.apiserver")

Obj = dict[str, Any]

NAME, NAMESPACE = "kubernetes", "default"
MANAGER, USER = "kube-apiserver", "system:apiserver"
SERVICE_LABELS = {"component": "apiserver", "provider": "kubernetes"}
SKIP_MIRROR = {"endpointslice.kubernetes.io/skip-mirror": "true"}
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
# (group, version, plural) of what is reconciled.
SERVICES, ENDPOINTS, SLICES = ("", "v1", "services"), ("", "v1", "endpoints"), ("discovery.k8s.io", "v1",
                                                                                 "endpointslices")


def advertise_address(host: str) -> str:
    """The address the endpoints name: the listen address when it is one, else loopback
    (a wildcard or a host name is no endpoint address; every local client reaches loopback)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return "127.0.0.1"
    if ip.is_unspecified:
        return "::1" if ip.version == 6 else "127.0.0.1"
    return str(ip)


class KubernetesServiceController(QueueController):
    name = "kubernetes-service"

    def __init__(self, storage: Store, resources: ResourceRegistry, store: GenericStore, address: str,
                 port: int) -> None:
        super().__init__()
        self.storage = storage
        self.resources = resources
        self.store = store
        self.address = address
        self.port = port
        self._keys = self.write_keys = frozenset(f"{g}/{p}" for g, _, p in (SERVICES, ENDPOINTS, SLICES))

    def on_write(self, ev: WatchEvent) -> None:
        m = ev.obj.get("metadata") or {}
        if ev.key in self._keys and m.get("name") == NAME and m.get("namespace") == NAMESPACE:
            self.put(("reconcile", None))

    async def handle(self, kind: str, arg: Any) -> None:
        await self.reconcile()

    async def reconcile(self) -> None:
        """Bring the three objects in line; a type this server does not serve is skipped."""
        for gvp, desired, differs in (
            (SERVICES, self._service(), self._service_differs),
            (ENDPOINTS, self._endpoints(), self._endpoints_differ),
            (SLICES, self._slice(), self._slice_differs),
        ):
            info = self.resources.find(*gvp)
            if info is None:
                continue
            try:
                await self._ensure(info, desired, differs)
            except ApiError as e:
                if e.code != 409:  # a conflict is retried by the queue; anything else is reported
                    log.warning("cannot reconcile %s %s/%s: %s", info.kind, NAMESPACE, NAME, e.message)
                raise

    async def _ensure(self, info: ResourceInfo, desired: Obj, differs: Any) -> None:
        live = self.storage.get(info.key, NAMESPACE, NAME)
        if live is None or live["metadata"].get("deletionTimestamp"):
            if live is None:
                await self.store.create(info, NAMESPACE, clone(desired), manager=MANAGER, user=USER)
            return
        if not differs(live, desired):
            return

        def build(current: Obj) -> Obj:
            return self._merged(current, desired)

        await self.store.update(info, NAMESPACE, NAME, build, manager=MANAGER, user=USER)
        log.info("reset %s %s/%s", info.kind, NAMESPACE, NAME)

    @staticmethod
    def _merged(current: Obj, desired: Obj) -> Obj:
        out: Obj = clone(current)
        if out["kind"] == "Service":
            # kube resets ports and type only; the ClusterIP someone allocated stays.
            out["spec"]["ports"] = desired["spec"]["ports"]
            out["spec"]["type"] = desired["spec"]["type"]
            return out
        out["metadata"]["labels"] = desired["metadata"]["labels"]
        for k, v in desired.items():
            if k not in ("apiVersion", "kind", "metadata"):
                out[k] = v
        return out

    # ------------------------------------------------------------------ what should be

    def _meta(self, labels: dict[str, str]) -> Obj:
        return {"name": NAME, "namespace": NAMESPACE, "labels": dict(labels)}

    def _port(self) -> Obj:
        return {"name": "https", "port": self.port, "protocol": "TCP"}

    def _service(self) -> Obj:
        return {"apiVersion": "v1", "kind": "Service", "metadata": self._meta(SERVICE_LABELS),
                "spec": {"type": "ClusterIP", "sessionAffinity": "None",
                         "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": self.port}]}}

    def _endpoints(self) -> Obj:
        return {"apiVersion": "v1", "kind": "Endpoints", "metadata": self._meta(SKIP_MIRROR),
                "subsets": [{"addresses": [{"ip": self.address}], "ports": [self._port()]}]}

    def _slice(self) -> Obj:
        family = "IPv6" if ipaddress.ip_address(self.address).version == 6 else "IPv4"
        return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": self._meta({SERVICE_NAME_LABEL: NAME}), "addressType": family,
                "endpoints": [{"addresses": [self.address], "conditions": {"ready": True}}],
                "ports": [self._port()]}

    # ------------------------------------------------------------------ what differs (kube's checks)

    @staticmethod
    def _service_differs(live: Obj, desired: Obj) -> bool:
        spec = live.get("spec") or {}
        return bool(spec.get("ports") != desired["spec"]["ports"] or spec.get("type") != desired["spec"]["type"])

    @staticmethod
    def _endpoints_differ(live: Obj, desired: Obj) -> bool:
        return bool(live.get("subsets") != desired["subsets"]
                    or (live["metadata"].get("labels") or {}) != desired["metadata"]["labels"])

    @staticmethod
    def _slice_differs(live: Obj, desired: Obj) -> bool:
        return any(live.get(k) != desired[k] for k in ("endpoints", "ports", "addressType")) or bool(
            (live["metadata"].get("labels") or {}) != desired["metadata"]["labels"])
