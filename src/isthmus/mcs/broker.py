"""The broker: `isthmus deploy-broker` sets up the namespace where clusters meet, and every other
step reads the clusterset settings from its `Broker` object (docs/discovery.md lists the objects).
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import yaml
from lightkube import AsyncClient, codecs
from lightkube.models.meta_v1 import ObjectMeta as LkObjectMeta
from lightkube.resources.core_v1 import ConfigMap

from isthmus.api.base import ObjectMeta
from isthmus.api.mcs import (
    BROKER_INFO_CONFIGMAP,
    BROKER_NAME,
    DEFAULT_CLUSTERSET_IP_CIDR_RANGE,
    Broker,
    BrokerSpec,
)
from isthmus.kube.helpers import create_or_update, install_crds
from isthmus.mcs.allocator import validate_cluster_id
from isthmus.mcs.brokerinfo import BrokerInfo
from isthmus.mcs.control import CRD_TIMEOUT, FIELD_MANAGER, DiscoveryError, ensure_namespace, get_if_kind

GLOBALNET_UNSUPPORTED = (
    "Globalnet is not supported with ClusterSet IPs: every pod behind an exported service would need "
    "its own global ingress IP, which does not scale; drop --globalnet"
)


def _check_namespace_name(namespace: str) -> None:
    problem = validate_cluster_id(namespace)
    if problem is not None:
        raise DiscoveryError(f"invalid namespace {namespace!r}: must be a DNS-1123 label")


def normalize_cidr_range(cidrs: Sequence[str] | None) -> list[str]:
    """The clusterset VIP range(s): split comma lists, require strict IPv4 networks that do not
    overlap one another; default 243.0.0.0/8, set even when VIPs are off by default (a cluster or an
    export may still ask for one)."""
    items = [c.strip() for raw in (cidrs or []) for c in raw.split(",") if c.strip()]
    if not items:
        return [DEFAULT_CLUSTERSET_IP_CIDR_RANGE]
    nets: list[ipaddress.IPv4Network] = []
    for item in items:
        try:
            net = ipaddress.IPv4Network(item, strict=True)
        except ValueError as err:
            if "host bits set" in str(err):
                fixed = ipaddress.IPv4Network(item, strict=False)
                raise DiscoveryError(
                    f"clusterset IP CIDR range {item} has host bits set: the network is {fixed}; use that instead"
                ) from None
            raise DiscoveryError(
                f"clusterset IP CIDR range {item!r} is not a valid IPv4 network (a.b.c.d/n)"
            ) from None
        for other in nets:
            if net.overlaps(other):
                raise DiscoveryError(f"clusterset IP CIDR ranges {other} and {net} overlap")
        nets.append(net)
    return [str(n) for n in nets]


def _deploy_dir() -> Path:
    """deploy/ of a source checkout (editable install), else the copy packaged as isthmus/_deploy."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package.parents[1] / "deploy", package / "_deploy"):
        if (candidate / "broker" / "kustomization.yaml").is_file():
            return candidate
    raise DiscoveryError("the broker manifests (deploy/broker) are missing from this installation")


def _load_kustomization(directory: Path) -> list[dict[str, Any]]:
    """The objects of a kustomization that only lists resources (files, or directories that are
    kustomizations themselves): all deploy/broker uses, so `kubectl apply -k` and this agree."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text()) or {}
    objs: list[dict[str, Any]] = []
    for entry in kustomization.get("resources") or []:
        path = (directory / entry).resolve()
        if path.is_dir():
            objs.extend(_load_kustomization(path))
        else:
            objs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return objs


def broker_manifests(namespace: str) -> list[dict[str, Any]]:
    """deploy/broker's objects, moved to `namespace`; CRDs left out (install_crds installs the same
    CRDs from the API models and waits until they are served)."""
    out: list[dict[str, Any]] = []
    for obj in _load_kustomization(_deploy_dir() / "broker"):
        kind = obj.get("kind")
        if kind == "CustomResourceDefinition":
            continue
        meta = obj.setdefault("metadata", {})
        if kind == "Namespace":
            meta["name"] = namespace
        elif "namespace" in meta:
            meta["namespace"] = namespace
        out.append(obj)
    return out


async def _apply_manifests(client: AsyncClient, objs: list[dict[str, Any]]) -> None:
    """Server-side apply (forced: these objects are ours) in file order, Namespace first."""
    for obj in sorted(objs, key=lambda o: o.get("kind") != "Namespace"):
        resource = codecs.from_dict(obj)
        await cast(Any, client).apply(resource, field_manager=FIELD_MANAGER, force=True,
                           namespace=obj["metadata"].get("namespace"))


def _describe(spec: BrokerSpec) -> str:
    return (
        f"clustersetIPEnabled={str(spec.clusterset_ip_enabled).lower()}, "
        f"clustersetIPCIDRRange={','.join(spec.clusterset_ip_cidr_range)}"
    )


async def deploy_broker(
    client: AsyncClient,
    *,
    namespace: str,
    enable_clusterset_ip: bool,
    cidr_range: Sequence[str] | None,
    server_url: str,
    ca_pem: str | None,
) -> BrokerInfo:
    """Set up the broker: CRDs and deploy/broker (namespace, the member Role, the write policy), the
    Broker `broker` and the ConfigMap `broker-info`. The broker-info returned carries no credentials:
    `isthmus join` gets each cluster its own token.

    Idempotent with the same settings. The clusterset settings cannot change once clusters may have
    joined (changing them means reinstalling the clusterset), so a re-run with
    different ones is a DiscoveryError naming the current settings.
    """
    _check_namespace_name(namespace)
    ranges = normalize_cidr_range(cidr_range)
    wanted = BrokerSpec(clusterset_ip_enabled=enable_clusterset_ip, clusterset_ip_cidr_range=ranges)
    async with asyncio.timeout(CRD_TIMEOUT):
        await install_crds(client, field_manager=FIELD_MANAGER)
    await ensure_namespace(client, namespace)
    await _apply_manifests(client, broker_manifests(namespace))

    def mutate(current: Broker | None) -> Broker | None:
        if current is None:
            return Broker(metadata=ObjectMeta(name=BROKER_NAME, namespace=namespace), spec=wanted)
        if current.spec != wanted:
            raise DiscoveryError(
                f"the broker in namespace {namespace} is already deployed with {_describe(current.spec)}; "
                f"clusterset settings cannot change once deployed (to change them, reinstall the whole "
                f"clusterset), so re-run with exactly these settings"
            )
        return None

    await create_or_update(client, Broker, BROKER_NAME, mutate, namespace=namespace, field_manager=FIELD_MANAGER)

    data = {
        "clustersetIPEnabled": str(enable_clusterset_ip).lower(),
        "clustersetIPCIDRRange": ",".join(ranges),
    }

    def mutate_cm(current: ConfigMap | None) -> ConfigMap:
        cm = current or ConfigMap(metadata=LkObjectMeta(name=BROKER_INFO_CONFIGMAP, namespace=namespace))
        cm.data = data
        return cm

    await create_or_update(
        client, ConfigMap, BROKER_INFO_CONFIGMAP, mutate_cm, namespace=namespace, field_manager=FIELD_MANAGER
    )
    return BrokerInfo(
        server=server_url,
        ca_pem=ca_pem,
        namespace=namespace,
        clusterset_ip_enabled=enable_clusterset_ip,
        clusterset_ip_cidr_range=ranges,
    )


async def get_broker(client: AsyncClient, namespace: str) -> Broker:
    """The Broker object, or a DiscoveryError saying deploy-broker has not run there."""
    broker = cast(Broker | None, await get_if_kind(client, Broker, BROKER_NAME, namespace))
    if broker is None:
        raise DiscoveryError(
            f"no broker in namespace {namespace} of the broker API: run `isthmus deploy-broker` there first"
        )
    return broker

