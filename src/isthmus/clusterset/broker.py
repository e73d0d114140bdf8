"""The broker: `isthmus deploy-broker` sets up the namespace where clusters meet, and every other
step reads the clusterset settings from its `Broker` object (docs/discovery.md lists the objects).
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Sequence
from typing import Any, cast

from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta as LkObjectMeta
from lightkube.resources.core_v1 import ConfigMap

from isthmus.api.base import ObjectMeta
from isthmus.api.mcs import (
    BROKER_INFO_CONFIGMAP,
    BROKER_NAME,
    DEFAULT_CLUSTER_CIDR_PREFIX_V6,
    DEFAULT_CLUSTERSET_IP_CIDR_RANGE,
    Broker,
    BrokerSpec,
)
from isthmus.clusterset.brokerinfo import BrokerInfo
from isthmus.clusterset.cidrs import validate_cluster_id
from isthmus.clusterset.control import CRD_TIMEOUT, FIELD_MANAGER, ClustersetError, get_if_kind
from isthmus.clusterset.crds import ensure_crds
from isthmus.kube import manifests
from isthmus.kube.helpers import create_or_update

GLOBALNET_UNSUPPORTED = (
    "Globalnet is not supported with ClusterSet IPs: every pod behind an exported service would need "
    "its own global ingress IP, which does not scale; drop --globalnet"
)


def _check_namespace_name(namespace: str) -> None:
    problem = validate_cluster_id(namespace)
    if problem is not None:
        raise ClustersetError(f"invalid namespace {namespace!r}: must be a DNS-1123 label")


def normalize_cidr_range(cidrs: Sequence[str] | None) -> list[str]:
    """The clusterset VIP range(s): split comma lists, require strict IPv4 or IPv6 networks that do
    not overlap one another; default 243.0.0.0/8, set even when VIPs are off by default (a cluster or
    an export may still ask for one). An IPv6 range makes the clusterset dual-stack: every cluster
    joining gets a /64 of it beside its IPv4 /16."""
    items = [c.strip() for raw in (cidrs or []) for c in raw.split(",") if c.strip()]
    if not items:
        return [DEFAULT_CLUSTERSET_IP_CIDR_RANGE]
    nets: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for item in items:
        try:
            net = ipaddress.ip_network(item, strict=True)
        except ValueError as err:
            if "host bits set" in str(err):
                fixed = ipaddress.ip_network(item, strict=False)
                raise ClustersetError(
                    f"clusterset IP CIDR range {item} has host bits set: the network is {fixed}; use that instead"
                ) from None
            raise ClustersetError(
                f"clusterset IP CIDR range {item!r} is not a valid IP network "
                f"(a.b.c.d/n or an IPv6 network such as fd00:243::/48)"
            ) from None
        if net.version == 6 and net.prefixlen > DEFAULT_CLUSTER_CIDR_PREFIX_V6:
            raise ClustersetError(
                f"clusterset IP CIDR range {item} is smaller than one cluster's IPv6 block "
                f"(/{DEFAULT_CLUSTER_CIDR_PREFIX_V6}): use a /{DEFAULT_CLUSTER_CIDR_PREFIX_V6} or wider, "
                f"e.g. a /48"
            )
        for other in nets:
            if net.overlaps(other):
                raise ClustersetError(f"clusterset IP CIDR ranges {other} and {net} overlap")
        nets.append(net)
    return [str(n) for n in nets]


def broker_manifests(namespace: str) -> list[dict[str, Any]]:
    """deploy/broker rendered for `namespace`: the Namespace, the member Role and the
    member write policy (what `kubectl apply -k deploy/broker` installs in isthmus-broker)."""
    try:
        objs = manifests.render(manifests.deploy_dir() / "broker", namespace=namespace)
    except manifests.ManifestError as err:
        raise ClustersetError(f"the broker manifests cannot be built: {err}") from None
    for obj in objs:
        if obj.get("kind") in _CLUSTER_SCOPED_POLICY_KINDS:
            # kustomize's namespace transformer does not know these kinds are cluster-scoped
            obj.get("metadata", {}).pop("namespace", None)
    return objs


_CLUSTER_SCOPED_POLICY_KINDS = frozenset({"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"})


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
    different ones is a ClustersetError naming the current settings.
    """
    _check_namespace_name(namespace)
    ranges = normalize_cidr_range(cidr_range)
    wanted = BrokerSpec(clusterset_ip_enabled=enable_clusterset_ip, clusterset_ip_cidr_range=ranges)
    async with asyncio.timeout(CRD_TIMEOUT):
        await ensure_crds(client, FIELD_MANAGER)  # deploy/broker has none: shared ones only where absent
        await manifests.apply(client, broker_manifests(namespace), FIELD_MANAGER)

    def mutate(current: Broker | None) -> Broker | None:
        if current is None:
            return Broker(metadata=ObjectMeta(name=BROKER_NAME, namespace=namespace), spec=wanted)
        if current.spec != wanted:
            raise ClustersetError(
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
    """The Broker object, or a ClustersetError saying deploy-broker has not run there."""
    broker = cast(Broker | None, await get_if_kind(client, Broker, BROKER_NAME, namespace))
    if broker is None:
        raise ClustersetError(
            f"no broker in namespace {namespace} of the broker API: run `isthmus deploy-broker` there first"
        )
    return broker

