"""The EndpointSlice controller: what kube-controller-manager's endpointslice controller does.

For every Service with a selector, the Pods of its namespace that match it become endpoints,
grouped into slices by the ports they resolve to (a named targetPort may resolve to different
numbers on different Pods, or to nothing). Slices carry kube's labels and managed-by value and
are owned by the Service, so every consumer (the MCS agent, DNS, the proxy) reads them exactly
as on a real cluster. Slice names are deterministic (``<svc>-<hash of the port set>``), so a
restarted kube-lite finds its own slices instead of creating new ones.

Slices of Services without a selector belong to the user and are never touched; slices
managed by anything else (the MCS agent's imports) neither.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Pod, Service
from lightkube.resources.discovery_v1 import EndpointSlice

from isthmus.api.mcs import KUBE_SERVICE_NAME_LABEL, MANAGED_BY_LABEL
from isthmus.kube.helpers import is_not_found
from isthmus.local.kubelite import FIELD_MANAGER, HEADLESS_LABEL, KUBE_ENDPOINTSLICE_MANAGER
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

__all__ = [
    "ALPHANUMS",
    "MAX_ENDPOINTS_PER_SLICE",
    "EndpointSliceController",
    "desired_slices",
    "pod_endpoint",
    "pod_is_ready",
    "resolve_ports",
    "safe_encode",
    "selector_matches",
    "slice_name",
    "slices_equal",
]

log = logging.getLogger(__name__)

MAX_ENDPOINTS_PER_SLICE = 100
"""kube's default --max-endpoints-per-slice."""

ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"
"""k8s.io/apimachinery/pkg/util/rand's alphabet: no vowels (no words), no 0/1/3 (no look-alikes)."""

BY_SERVICE = "kubelite-service"

Obj = dict[str, Any]
PortKey = tuple[str, int, str, str | None]
"""(name, port, protocol, appProtocol) of one EndpointPort."""


def safe_encode(data: bytes, length: int) -> str:
    """``length`` characters of kube's name-safe alphabet derived from ``data``'s SHA-256."""
    digest = hashlib.sha256(data).digest()
    return "".join(ALPHANUMS[b % len(ALPHANUMS)] for b in digest[:length])


def slice_name(service: str, ports: Sequence[PortKey], chunk: int = 0) -> str:
    """``<service>-<5 chars>``: stable for a Service, a port set and a chunk of 100 endpoints."""
    material = json.dumps([service, [list(p) for p in ports], chunk]).encode()
    return f"{service}-{safe_encode(material, 5)}"


def selector_matches(selector: Mapping[str, str] | None, labels: Mapping[str, str]) -> bool:
    """A Service selector (equality on every key) against Pod labels; empty selects nothing here."""
    if not selector:
        return False
    return all(labels.get(k) == v for k, v in selector.items())


def _target(port: Mapping[str, Any]) -> int | str:
    tp = port.get("targetPort")
    if tp in (None, "", 0):
        return int(port.get("port") or 0)
    if isinstance(tp, str) and tp.isdigit():
        return int(tp)
    return tp if isinstance(tp, str) else int(tp)


def resolve_ports(service: Mapping[str, Any], pod: Mapping[str, Any]) -> tuple[PortKey, ...]:
    """The Service's ports as seen on ``pod``: numbers as is, names looked up among the Pod's
    container ports (same name and protocol, like kube's FindPort); unresolved ports are left out."""
    spec = service.get("spec") or {}
    containers = (pod.get("spec") or {}).get("containers") or []
    out: list[PortKey] = []
    for sp in spec.get("ports") or []:
        protocol = str(sp.get("protocol") or "TCP")
        target = _target(sp)
        number: int | None = None
        if isinstance(target, int):
            number = target
        else:
            for c in containers:
                for cp in c.get("ports") or []:
                    if cp.get("name") == target and str(cp.get("protocol") or "TCP") == protocol:
                        number = int(cp["containerPort"])
                        break
                if number is not None:
                    break
        if number:
            out.append((str(sp.get("name") or ""), number, protocol, sp.get("appProtocol")))
    return tuple(sorted(out, key=lambda p: (p[0], p[2], p[1])))


def pod_is_ready(pod: Mapping[str, Any]) -> bool:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return bool(c.get("status") == "True")
    return False


def pod_endpoint(service: Mapping[str, Any], pod: Mapping[str, Any]) -> Obj | None:
    """The Endpoint for ``pod`` (None if it has no IPv4 address or has terminated), kube's rules."""
    status = pod.get("status") or {}
    ip = status.get("podIP")
    if not ip or ":" in str(ip) or status.get("phase") in ("Succeeded", "Failed"):
        return None
    meta = pod.get("metadata") or {}
    pspec = pod.get("spec") or {}
    svc_meta = service.get("metadata") or {}
    publish = bool((service.get("spec") or {}).get("publishNotReadyAddresses"))
    terminating = meta.get("deletionTimestamp") is not None
    serving = pod_is_ready(pod)
    ep: Obj = {
        "addresses": [str(ip)],
        "conditions": {
            "ready": publish or (serving and not terminating),
            "serving": serving,
            "terminating": terminating,
        },
    }
    if pspec.get("hostname") and pspec.get("subdomain") == svc_meta.get("name"):
        ep["hostname"] = pspec["hostname"]
    if pspec.get("nodeName"):
        ep["nodeName"] = pspec["nodeName"]
    ref = {"kind": "Pod", "name": meta.get("name"), "namespace": meta.get("namespace")}
    if meta.get("uid"):
        ref["uid"] = meta["uid"]
    ep["targetRef"] = ref
    return ep


def _slice_labels(service: Mapping[str, Any]) -> dict[str, str]:
    meta = service.get("metadata") or {}
    labels = {
        k: v
        for k, v in (meta.get("labels") or {}).items()
        if k not in (KUBE_SERVICE_NAME_LABEL, MANAGED_BY_LABEL)
    }
    labels[KUBE_SERVICE_NAME_LABEL] = str(meta.get("name"))
    labels[MANAGED_BY_LABEL] = KUBE_ENDPOINTSLICE_MANAGER
    if (service.get("spec") or {}).get("clusterIP") == "None":
        labels[HEADLESS_LABEL] = ""
    return labels


def _port_dict(p: PortKey) -> Obj:
    out: Obj = {"name": p[0], "port": p[1], "protocol": p[2]}
    if p[3]:
        out["appProtocol"] = p[3]
    return out


def desired_slices(service: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> list[Obj]:
    """Every EndpointSlice the Service should have: one per distinct resolved port set (and chunk
    of 100 endpoints); a Service selecting nothing gets one empty slice, like kube's placeholder."""
    meta = service.get("metadata") or {}
    spec = service.get("spec") or {}
    name, ns = str(meta.get("name")), str(meta.get("namespace"))
    selector = spec.get("selector")
    groups: dict[tuple[PortKey, ...], list[tuple[str, Obj]]] = {}
    for pod in pods:
        pmeta = pod.get("metadata") or {}
        if pmeta.get("namespace") != ns or not selector_matches(selector, pmeta.get("labels") or {}):
            continue
        ep = pod_endpoint(service, pod)
        if ep is None:
            continue
        groups.setdefault(resolve_ports(service, pod), []).append((str(pmeta.get("name")), ep))
    if not groups:
        groups[()] = []
    owner = {
        "apiVersion": "v1",
        "kind": "Service",
        "name": name,
        "uid": meta.get("uid"),
        "controller": True,
        "blockOwnerDeletion": True,
    }
    out: list[Obj] = []
    for ports in sorted(groups):
        eps = [ep for _, ep in sorted(groups[ports], key=lambda t: t[0])]
        chunks = [
            eps[i : i + MAX_ENDPOINTS_PER_SLICE] for i in range(0, len(eps), MAX_ENDPOINTS_PER_SLICE)
        ] or [[]]
        for i, chunk in enumerate(chunks):
            out.append(
                {
                    "apiVersion": "discovery.k8s.io/v1",
                    "kind": "EndpointSlice",
                    "metadata": {
                        "name": slice_name(name, ports, i),
                        "namespace": ns,
                        "labels": _slice_labels(service),
                        "ownerReferences": [dict(owner)],
                    },
                    "addressType": "IPv4",
                    "endpoints": chunk,
                    "ports": [_port_dict(p) for p in ports],
                }
            )
    return out


def _comparable(s: Mapping[str, Any]) -> Obj:
    meta = s.get("metadata") or {}
    return {
        "labels": meta.get("labels") or {},
        "owners": [
            {k: r.get(k) for k in ("apiVersion", "kind", "name", "uid", "controller")}
            for r in meta.get("ownerReferences") or []
        ],
        "addressType": s.get("addressType"),
        "endpoints": s.get("endpoints") or [],
        "ports": s.get("ports") or [],
    }


def slices_equal(desired: Mapping[str, Any], existing: Mapping[str, Any]) -> bool:
    """Whether the stored slice already says what ``desired`` says (server defaults included)."""
    return _comparable(desired) == _comparable(existing)


def _managed(s: Any) -> bool:
    return object_labels(s).get(MANAGED_BY_LABEL) == KUBE_ENDPOINTSLICE_MANAGER


def _slice_service_key(s: Any) -> list[str]:
    svc = object_labels(s).get(KUBE_SERVICE_NAME_LABEL)
    return [make_key(object_namespace(s), svc)] if svc and _managed(s) else []


class EndpointSliceController:
    """Keyed by Service ("ns/name"); triggered by its Service, the Pods it selects and its slices."""

    def __init__(
        self,
        client: AsyncClient,
        services: Informer[Service],
        pods: Informer[Pod],
        slices: Informer[EndpointSlice],
        *,
        workers: int = 4,
    ) -> None:
        self.client = client
        self.services = services
        self.pods = pods
        self.slices = slices
        slices.add_indexer(BY_SERVICE, _slice_service_key)
        self.controller = Controller("kubelite-endpointslices", self.reconcile, workers=workers)
        self.controller.watch(services)
        self.controller.watch(pods, self._services_of_pod)
        self.controller.watch(slices, _slice_service_key)

    def _services_of_pod(self, pod: Any) -> list[str]:
        ns = object_namespace(pod)
        if ns is None:
            return []
        labels = object_labels(pod)
        keys = []
        for svc in self.services.cache.list_namespace(ns):
            spec = svc.spec
            if spec is not None and selector_matches(spec.selector, labels):
                keys.append(make_key(ns, object_name(svc)))
        return keys

    async def run(self) -> None:
        await self.controller.run()

    async def reconcile(self, key: str) -> Result | None:
        ns, _ = split_key(key)
        svc = self.services.cache.get(key)
        desired: list[Obj] = []
        if svc is not None:
            data = svc.to_dict()
            spec = data.get("spec") or {}
            if spec.get("selector") and spec.get("type") != "ExternalName":
                pods = [p.to_dict() for p in self.pods.cache.list_namespace(ns or "")]
                desired = desired_slices(data, pods)
        existing = {object_name(s): s for s in self.slices.cache.by_index(BY_SERVICE, key)}
        for want in desired:
            name = want["metadata"]["name"]
            have = existing.pop(name, None)
            if have is None:
                await self.client.create(
                    cast(EndpointSlice, EndpointSlice.from_dict(want)), field_manager=FIELD_MANAGER
                )
                log.debug("endpointslice created", extra={"key": key, "slice": name})
                continue
            have_d = have.to_dict()
            if slices_equal(want, have_d):
                continue
            want["metadata"]["resourceVersion"] = have_d["metadata"].get("resourceVersion")
            await self.client.replace(
                cast(EndpointSlice, EndpointSlice.from_dict(want)), field_manager=FIELD_MANAGER
            )
            log.debug("endpointslice updated", extra={"key": key, "slice": name})
        for name in existing:
            try:
                await self.client.delete(EndpointSlice, name, namespace=ns)
            except ApiError as e:
                if not is_not_found(e):
                    raise
            log.debug("endpointslice deleted", extra={"key": key, "slice": name})
        return None
