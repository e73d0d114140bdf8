"""What the web view watches, and where: the broker's clusterset objects, each member's discovery,
exposure, load-balancing and egress objects, and the Isthmus parts of every cluster.

Names are the api registry's (never retyped): the kind a browser asks for is the Kind, the
lightkube resource comes from `isthmus.kube.resources` or lightkube's built-ins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lightkube import operators
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Pod
from lightkube.resources.discovery_v1 import EndpointSlice

from isthmus.api.egress import ExternalService, Gateway, SourceIP, SourceIPClaim, SourceIPClass
from isthmus.api.lb import LoadBalancerPool
from isthmus.api.mcs import AGENT_NAMESPACE, SERVICE_NAME_LABEL, Cluster, ServiceExport, ServiceImport
from isthmus.api.mcsvc import MultiClusterService
from isthmus.kube.resources import resource_for

BROKER_ROLE = "broker"
MEMBER_ROLE = "member"


@dataclass(frozen=True)
class Kind:
    """One watched kind: its Kind name, resource class, namespace (None: all, or cluster-scoped),
    label selector, and the roles of the clusters it is watched on."""

    kind: str
    resource: Any
    roles: tuple[str, ...]
    namespace: str | None = None
    labels: dict[str, Any] | None = None

    @property
    def namespaced(self) -> bool:
        from lightkube.core import resource as lkr

        return issubclass(self.resource, lkr.NamespacedResource)


BOTH = (BROKER_ROLE, MEMBER_ROLE)
KINDS: tuple[Kind, ...] = (
    Kind("Cluster", resource_for(Cluster), (BROKER_ROLE,)),
    Kind("ServiceExport", resource_for(ServiceExport), (MEMBER_ROLE,)),
    Kind("ServiceImport", resource_for(ServiceImport), (MEMBER_ROLE,)),
    # Only the slices discovery made for imports (kube's own carry kubernetes.io/service-name too,
    # and are dropped by the model).
    Kind("EndpointSlice", EndpointSlice, (MEMBER_ROLE,), labels={SERVICE_NAME_LABEL: operators.exists()}),
    Kind("MultiClusterService", resource_for(MultiClusterService), BOTH),
    Kind("LoadBalancerPool", resource_for(LoadBalancerPool), BOTH),
    Kind("SourceIPClass", resource_for(SourceIPClass), (MEMBER_ROLE,)),
    Kind("SourceIPClaim", resource_for(SourceIPClaim), (MEMBER_ROLE,)),
    Kind("SourceIP", resource_for(SourceIP), (MEMBER_ROLE,)),
    Kind("ExternalService", resource_for(ExternalService), (MEMBER_ROLE,)),
    Kind("Gateway", resource_for(Gateway), (MEMBER_ROLE,)),
    Kind("Deployment", Deployment, BOTH, namespace=AGENT_NAMESPACE),
    Kind("Pod", Pod, BOTH, namespace=AGENT_NAMESPACE),
)
BY_KIND = {k.kind: k for k in KINDS}


def kinds_for(role: str) -> list[Kind]:
    return [k for k in KINDS if role in k.roles]
