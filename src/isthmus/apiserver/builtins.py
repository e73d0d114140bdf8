"""The built-in resource types the server serves: one table entry each.

An entry is what discovery says about the type (group, version, plural, kind, scope, short
names, categories, verbs, subresources) and the strategy class holding what is particular to
it (registry/<kind>.py); its schema comes from `_builtin_schemas` (lightkube's models plus
kube's x-kubernetes-* tags) by group, version and kind. Types without a strategy class get the
generic behaviour.

CRD versions are served the same way, from the CRD: `crd_resources` (registry/customresource.py)
is exported here too, for callers that list both.
"""

from __future__ import annotations

from dataclasses import dataclass

from isthmus.apiserver import _builtin_schemas
from isthmus.apiserver.registry.configmap import ConfigMapStrategy
from isthmus.apiserver.registry.customresource import crd_resources
from isthmus.apiserver.registry.customresourcedefinition import CustomResourceDefinitionStrategy
from isthmus.apiserver.registry.deployment import DeploymentStrategy
from isthmus.apiserver.registry.endpointslice import EndpointSliceStrategy
from isthmus.apiserver.registry.event import EventStrategy, EventsV1Strategy
from isthmus.apiserver.registry.ingress import IngressClassStrategy, IngressStrategy
from isthmus.apiserver.registry.lease import LeaseStrategy
from isthmus.apiserver.registry.namespace import NamespaceStrategy
from isthmus.apiserver.registry.pod import PodStrategy
from isthmus.apiserver.registry.secret import SecretStrategy
from isthmus.apiserver.registry.service import ServiceStrategy
from isthmus.apiserver.registry.statefulset import StatefulSetStrategy
from isthmus.apiserver.registry.strategy import Strategy
from isthmus.apiserver.resources import ALL_VERBS, ResourceInfo

__all__ = ["BUILTINS", "Builtin", "builtin_resources", "crd_resources"]

_NO_DELETECOLLECTION = tuple(v for v in ALL_VERBS if v != "deletecollection")


@dataclass(frozen=True)
class Builtin:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = tuple(ALL_VERBS)
    subresources: tuple[str, ...] = ()  # served subresources: "status"
    strategy: type[Strategy] = Strategy
    singular: str = ""  # default: the kind in lower case


BUILTINS: list[Builtin] = [
    Builtin("", "v1", "namespaces", "Namespace", namespaced=False, short_names=("ns",),
            verbs=_NO_DELETECOLLECTION, subresources=("status",), strategy=NamespaceStrategy),
    Builtin("", "v1", "services", "Service", short_names=("svc",), categories=("all",), subresources=("status",),
            strategy=ServiceStrategy),
    Builtin("", "v1", "pods", "Pod", short_names=("po",), categories=("all",), subresources=("status",),
            strategy=PodStrategy),
    Builtin("", "v1", "configmaps", "ConfigMap", short_names=("cm",), strategy=ConfigMapStrategy),
    Builtin("", "v1", "secrets", "Secret", strategy=SecretStrategy),
    Builtin("", "v1", "events", "Event", short_names=("ev",), strategy=EventStrategy),
    Builtin("events.k8s.io", "v1", "events", "Event", short_names=("ev",), strategy=EventsV1Strategy),
    Builtin("coordination.k8s.io", "v1", "leases", "Lease", strategy=LeaseStrategy),
    Builtin("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", strategy=EndpointSliceStrategy),
    Builtin("networking.k8s.io", "v1", "ingresses", "Ingress", short_names=("ing",), subresources=("status",),
            strategy=IngressStrategy),
    Builtin("networking.k8s.io", "v1", "ingressclasses", "IngressClass", namespaced=False,
            strategy=IngressClassStrategy),
    Builtin("apps", "v1", "deployments", "Deployment", short_names=("deploy",), categories=("all",),
            subresources=("status",), strategy=DeploymentStrategy),
    Builtin("apps", "v1", "statefulsets", "StatefulSet", short_names=("sts",), categories=("all",),
            subresources=("status",), strategy=StatefulSetStrategy),
    Builtin("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
            namespaced=False, short_names=("crd", "crds"), categories=("api-extensions",),
            subresources=("status",), strategy=CustomResourceDefinitionStrategy),
]


def builtin_resources() -> list[ResourceInfo]:
    """A ResourceInfo for each entry of BUILTINS, each with its own strategy instance.

    The schemas are built once per process and shared between calls: treat them as read-only."""
    return [
        ResourceInfo(
            group=b.group,
            version=b.version,
            plural=b.plural,
            singular=b.singular or b.kind.lower(),
            kind=b.kind,
            namespaced=b.namespaced,
            short_names=list(b.short_names),
            categories=list(b.categories),
            verbs=list(b.verbs),
            has_status="status" in b.subresources,
            schema=_builtin_schemas.kind_schema(b.group, b.version, b.kind, required=b.strategy.schema_required),
            builtin=True,
            storage_version=True,
            strategy=b.strategy(),
        )
        for b in BUILTINS
    ]
