"""The Endpoints controller: kube-controller-manager's endpoints controller (kube 1.32 still runs it).

Beside the EndpointSlices (endpointslices.py), every Service with a selector gets an Endpoints
object of its name: the selected Pods with an address, grouped into subsets by the ports they
resolve to, ready ones under ``addresses`` and the others under ``notReadyAddresses`` (all under
``addresses`` with ``publishNotReadyAddresses``); terminating Pods are left out unless
``publishNotReadyAddresses``. Labels are the Service's, plus ``service.kubernetes.io/headless``
for headless Services. As kube's controller, it deletes the Endpoints of a Service that is gone;
Endpoints of Services without a selector belong to the user.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, cast

from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Endpoints, Pod, Service

from isthmus.kube.helpers import is_conflict, is_not_found
from isthmus.local.kubelite import FIELD_MANAGER, HEADLESS_LABEL
from isthmus.local.kubelite.endpointslices import PortKey, pod_is_ready, resolve_ports, selector_matches
from isthmus.local.kubelite.workloads import semantic
from isthmus.runtime import (
    Controller,
    Informer,
    Result,
    make_key,
    object_labels,
    object_name,
    object_namespace,
    split_key,
)

__all__ = ["EndpointsController", "desired_endpoints"]

log = logging.getLogger(__name__)

Obj = dict[str, Any]


def _address(service: Mapping[str, Any], pod: Mapping[str, Any], ip: str) -> Obj:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    addr: Obj = {"ip": ip}
    if spec.get("hostname") and spec.get("subdomain") == (service.get("metadata") or {}).get("name"):
        addr["hostname"] = spec["hostname"]
    if spec.get("nodeName"):
        addr["nodeName"] = spec["nodeName"]
    ref: Obj = {"kind": "Pod", "namespace": meta.get("namespace"), "name": meta.get("name")}
    if meta.get("uid"):
        ref["uid"] = meta["uid"]
    addr["targetRef"] = ref
    return addr


def _port(p: PortKey) -> Obj:
    out: Obj = {"port": p[1], "protocol": p[2]}
    if p[0]:
        out["name"] = p[0]
    if p[3]:
        out["appProtocol"] = p[3]
    return out


def desired_endpoints(service: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> Obj:
    """The Endpoints of ``service`` (which has a selector) over the Pods of its namespace."""
    meta = service.get("metadata") or {}
    spec = service.get("spec") or {}
    ns = meta.get("namespace")
    publish = bool(spec.get("publishNotReadyAddresses"))
    groups: dict[tuple[PortKey, ...], tuple[list[Obj], list[Obj]]] = {}
    for pod in pods:
        pmeta = pod.get("metadata") or {}
        status = pod.get("status") or {}
        ip = status.get("podIP")
        if pmeta.get("namespace") != ns or not selector_matches(spec.get("selector"), pmeta.get("labels") or {}):
            continue
        if not ip or ":" in str(ip) or status.get("phase") in ("Succeeded", "Failed"):
            continue
        if pmeta.get("deletionTimestamp") is not None and not publish:
            continue
        ports = resolve_ports(service, pod)
        if spec.get("ports") and not ports:
            continue  # none of the Service's ports exists on this Pod
        ready, not_ready = groups.setdefault(ports, ([], []))
        (ready if publish or pod_is_ready(pod) else not_ready).append(_address(service, pod, str(ip)))
    subsets = []
    for ports in sorted(groups):
        ready, not_ready = groups[ports]
        subset: Obj = {}
        if ready:
            subset["addresses"] = sorted(ready, key=lambda a: a["ip"])
        if not_ready:
            subset["notReadyAddresses"] = sorted(not_ready, key=lambda a: a["ip"])
        if ports:
            subset["ports"] = [_port(p) for p in ports]
        subsets.append(subset)
    labels = dict(meta.get("labels") or {})
    if spec.get("clusterIP") == "None":
        labels[HEADLESS_LABEL] = ""
    out: Obj = {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": meta.get("name"), "namespace": ns, "labels": labels},
    }
    if subsets:
        out["subsets"] = subsets
    return out


def _same(want: Mapping[str, Any], have: Mapping[str, Any]) -> bool:
    return bool(
        semantic((want.get("metadata") or {}).get("labels")) == semantic((have.get("metadata") or {}).get("labels"))
        and semantic(want.get("subsets")) == semantic(have.get("subsets"))
    )


class EndpointsController:
    """Keyed by Service ("ns/name"): the Service, the Pods it selects and its Endpoints trigger it."""

    def __init__(
        self,
        client: AsyncClient,
        services: Informer[Service],
        pods: Informer[Pod],
        endpoints: Informer[Endpoints],
        *,
        workers: int = 2,
    ) -> None:
        self.client = client
        self.services = services
        self.pods = pods
        self.endpoints = endpoints
        self.controller = Controller("kubelite-endpoints", self.reconcile, workers=workers)
        self.controller.watch(services)
        self.controller.watch(pods, self._services_of_pod)
        self.controller.watch(endpoints)

    def _services_of_pod(self, pod: Any) -> list[str]:
        ns = object_namespace(pod)
        if ns is None:
            return []
        labels = object_labels(pod)
        return [
            make_key(ns, object_name(svc))
            for svc in self.services.cache.list_namespace(ns)
            if svc.spec is not None and selector_matches(svc.spec.selector, labels)
        ]

    async def run(self) -> None:
        await self.controller.run()

    async def reconcile(self, key: str) -> Result | None:
        ns, name = split_key(key)
        svc = self.services.cache.get(key)
        have = self.endpoints.cache.get(key)
        if svc is None:
            if have is not None:  # kube's controller deletes the Endpoints of a deleted Service
                try:
                    await self.client.delete(Endpoints, name, namespace=ns)
                except ApiError as e:
                    if not is_not_found(e):
                        raise
            return None
        data = svc.to_dict()
        spec = data.get("spec") or {}
        if not spec.get("selector") or spec.get("type") == "ExternalName":
            return None  # the user's (or nobody's)
        want = desired_endpoints(data, (p.to_dict() for p in self.pods.cache.list_namespace(ns or "")))
        if have is None:
            try:
                await self.client.create(cast(Endpoints, Endpoints.from_dict(want)), field_manager=FIELD_MANAGER)
            except ApiError as e:
                if not is_conflict(e):
                    raise
                return Result(requeue_after=1.0)  # created meanwhile: compare with what is stored
            return None
        have_d = have.to_dict()
        if _same(want, have_d):
            return None
        want["metadata"]["resourceVersion"] = have_d["metadata"].get("resourceVersion")
        try:
            await self.client.replace(cast(Endpoints, Endpoints.from_dict(want)), field_manager=FIELD_MANAGER)
        except ApiError as e:
            if not is_conflict(e):
                raise
            return Result(requeue_after=1.0)
        return None
