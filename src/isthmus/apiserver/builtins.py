"""The built-in resource types the server serves: every type a default kube-apiserver v1.32 serves.

The table is data: `data/discovery-v1.32.json` holds kube v1.32's own discovery documents, and
each resource there becomes one `Builtin` (group, version, plural, singular, kind, scope, verbs,
short names, categories, its subresources and storageVersionHash, exactly as kube lists them).
What is particular to a type is its strategy class (registry/<kind>.py), named in `STRATEGIES`;
types without one get the generic behaviour. Every schema comes from `openapi/builtin_schemas.py`
(lightkube's models plus kube's x-kubernetes-* tags) by group, version and kind.

Of the subresources kube lists, `status` and `scale` are served here (scale where the strategy
says where replicas live); the others (pods/exec, log, proxy, ...) are listed in discovery only,
and answered by their own handlers where those exist.

CRD versions are served the same way, from the CRD: `crd_resources` (registry/customresource.py)
is exported here too, for callers that list both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from isthmus.apiserver.openapi import builtin_schemas
from isthmus.apiserver.registry import horizontalpodautoscaler
from isthmus.apiserver.registry.admissionpolicy import (
    ValidatingAdmissionPolicyBindingStrategy,
    ValidatingAdmissionPolicyStrategy,
)
from isthmus.apiserver.registry.authentication import SelfSubjectReviewStrategy, TokenReviewStrategy
from isthmus.apiserver.registry.authorization import (
    LocalSubjectAccessReviewStrategy,
    NotServedVirtualStrategy,
    SelfSubjectAccessReviewStrategy,
    SelfSubjectRulesReviewStrategy,
    SubjectAccessReviewStrategy,
)
from isthmus.apiserver.registry.configmap import ConfigMapStrategy
from isthmus.apiserver.registry.customresource import crd_resources
from isthmus.apiserver.registry.customresourcedefinition import CustomResourceDefinitionStrategy
from isthmus.apiserver.registry.deployment import DeploymentStrategy
from isthmus.apiserver.registry.endpoints import EndpointsStrategy
from isthmus.apiserver.registry.endpointslice import EndpointSliceStrategy
from isthmus.apiserver.registry.event import EventStrategy, EventsV1Strategy
from isthmus.apiserver.registry.flowcontrol import FlowSchemaStrategy, PriorityLevelConfigurationStrategy
from isthmus.apiserver.registry.ingress import IngressClassStrategy, IngressStrategy
from isthmus.apiserver.registry.lease import LeaseStrategy
from isthmus.apiserver.registry.namespace import NamespaceStrategy
from isthmus.apiserver.registry.pod import PodStrategy
from isthmus.apiserver.registry.rbac import (
    ClusterRoleBindingStrategy,
    ClusterRoleStrategy,
    RoleBindingStrategy,
    RoleStrategy,
)
from isthmus.apiserver.registry.resources import ResourceInfo
from isthmus.apiserver.registry.secret import SecretStrategy
from isthmus.apiserver.registry.service import ServiceStrategy
from isthmus.apiserver.registry.statefulset import StatefulSetStrategy
from isthmus.apiserver.registry.strategy import Strategy
from isthmus.apiserver.registry.webhookconfiguration import (
    MutatingWebhookConfigurationStrategy,
    ValidatingWebhookConfigurationStrategy,
)
from isthmus.apiserver.registry.workloads import (
    CertificateSigningRequestStrategy,
    CronJobStrategy,
    DaemonSetStrategy,
    EmptyStatusStrategy,
    HorizontalPodAutoscalerV2Strategy,
    JobStrategy,
    NodeStrategy,
    PersistentVolumeClaimStrategy,
    PersistentVolumeStrategy,
    PodDisruptionBudgetStrategy,
    PodTemplateStrategy,
    PriorityClassStrategy,
    ReplicaSetStrategy,
    ReplicationControllerStrategy,
    ServiceAccountStrategy,
    StorageClassStrategy,
    VolumeAttachmentStrategy,
)

__all__ = ["BUILTINS", "DISCOVERY_JSON", "GROUP_ORDER", "STRATEGIES", "Builtin", "builtin_resources",
           "crd_resources"]

Obj = dict[str, Any]

DISCOVERY_JSON = Path(__file__).resolve().parent / "data" / "discovery-v1.32.json"

# (group, plural) → strategy class, for every version kube serves the resource in.
STRATEGIES: dict[tuple[str, str], type[Strategy]] = {
    ("", "namespaces"): NamespaceStrategy,
    ("", "services"): ServiceStrategy,
    ("", "endpoints"): EndpointsStrategy,
    ("", "pods"): PodStrategy,
    ("", "configmaps"): ConfigMapStrategy,
    ("", "secrets"): SecretStrategy,
    ("", "events"): EventStrategy,
    ("", "nodes"): NodeStrategy,
    ("", "persistentvolumes"): PersistentVolumeStrategy,
    ("", "persistentvolumeclaims"): PersistentVolumeClaimStrategy,
    ("", "replicationcontrollers"): ReplicationControllerStrategy,
    ("", "bindings"): NotServedVirtualStrategy,
    ("events.k8s.io", "events"): EventsV1Strategy,
    ("coordination.k8s.io", "leases"): LeaseStrategy,
    ("discovery.k8s.io", "endpointslices"): EndpointSliceStrategy,
    ("networking.k8s.io", "ingresses"): IngressStrategy,
    ("networking.k8s.io", "ingressclasses"): IngressClassStrategy,
    ("apps", "deployments"): DeploymentStrategy,
    ("apps", "statefulsets"): StatefulSetStrategy,
    ("apps", "replicasets"): ReplicaSetStrategy,
    ("apps", "daemonsets"): DaemonSetStrategy,
    ("batch", "jobs"): JobStrategy,
    ("batch", "cronjobs"): CronJobStrategy,
    ("", "serviceaccounts"): ServiceAccountStrategy,
    ("", "podtemplates"): PodTemplateStrategy,
    ("storage.k8s.io", "storageclasses"): StorageClassStrategy,
    ("scheduling.k8s.io", "priorityclasses"): PriorityClassStrategy,
    ("policy", "poddisruptionbudgets"): PodDisruptionBudgetStrategy,
    ("storage.k8s.io", "volumeattachments"): VolumeAttachmentStrategy,
    ("", "resourcequotas"): EmptyStatusStrategy,
    ("apiregistration.k8s.io", "apiservices"): EmptyStatusStrategy,
    ("flowcontrol.apiserver.k8s.io", "flowschemas"): FlowSchemaStrategy,
    ("flowcontrol.apiserver.k8s.io", "prioritylevelconfigurations"): PriorityLevelConfigurationStrategy,
    ("admissionregistration.k8s.io", "validatingadmissionpolicies"): ValidatingAdmissionPolicyStrategy,
    ("admissionregistration.k8s.io", "validatingadmissionpolicybindings"): ValidatingAdmissionPolicyBindingStrategy,
    ("admissionregistration.k8s.io", "validatingwebhookconfigurations"): ValidatingWebhookConfigurationStrategy,
    ("admissionregistration.k8s.io", "mutatingwebhookconfigurations"): MutatingWebhookConfigurationStrategy,
    ("certificates.k8s.io", "certificatesigningrequests"): CertificateSigningRequestStrategy,
    ("apiextensions.k8s.io", "customresourcedefinitions"): CustomResourceDefinitionStrategy,
    ("authentication.k8s.io", "tokenreviews"): TokenReviewStrategy,
    ("authentication.k8s.io", "selfsubjectreviews"): SelfSubjectReviewStrategy,
    ("authorization.k8s.io", "subjectaccessreviews"): SubjectAccessReviewStrategy,
    ("authorization.k8s.io", "localsubjectaccessreviews"): LocalSubjectAccessReviewStrategy,
    ("authorization.k8s.io", "selfsubjectaccessreviews"): SelfSubjectAccessReviewStrategy,
    ("authorization.k8s.io", "selfsubjectrulesreviews"): SelfSubjectRulesReviewStrategy,
    ("rbac.authorization.k8s.io", "roles"): RoleStrategy,
    ("rbac.authorization.k8s.io", "clusterroles"): ClusterRoleStrategy,
    ("rbac.authorization.k8s.io", "rolebindings"): RoleBindingStrategy,
    ("rbac.authorization.k8s.io", "clusterrolebindings"): ClusterRoleBindingStrategy,
}

# Where one version of a resource has a strategy of its own: (group, version, plural) → class.
VERSION_STRATEGIES: dict[tuple[str, str, str], type[Strategy]] = {
    ("autoscaling", "v2", "horizontalpodautoscalers"): HorizontalPodAutoscalerV2Strategy,
    ("autoscaling", "v1", "horizontalpodautoscalers"): horizontalpodautoscaler.HorizontalPodAutoscalerV1Strategy,
}

# Versions kube serves but does not store: their objects are the storage version's, converted by
# the strategy (to_storage/from_storage) on the way in and out.
NOT_STORED_VERSIONS = {("autoscaling", "v1", "horizontalpodautoscalers"), ("events.k8s.io", "v1", "events")}

# Resources stored as another group's (group, plural) → storage key: kube keeps events.k8s.io
# Events in /registry/events, as core/v1 Events; both APIs serve the same objects.
STORAGE_KEYS = {("events.k8s.io", "events"): "/events"}


@dataclass(frozen=True)
class Builtin:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ()
    # kube's discovery entries of the subresources ("<plural>/status", "<plural>/scale", ...)
    subresources: tuple[Obj, ...] = field(default=(), hash=False)
    strategy: type[Strategy] = Strategy
    singular: str = ""  # default: the kind in lower case
    storage_version_hash: str = ""
    storage_key: str | None = None  # see STORAGE_KEYS; None: "<group>/<plural>"

    @property
    def subresource_names(self) -> tuple[str, ...]:
        return tuple(s["name"].split("/", 1)[1] for s in self.subresources)

    def discovery(self) -> list[Obj]:
        """The APIResourceList entries kube serves for this resource and its subresources."""
        main: Obj = {"name": self.plural, "singularName": self.singular or self.kind.lower(),
                     "namespaced": self.namespaced, "kind": self.kind, "verbs": list(self.verbs)}
        if self.short_names:
            main["shortNames"] = list(self.short_names)
        if self.categories:
            main["categories"] = list(self.categories)
        if self.storage_version_hash:
            main["storageVersionHash"] = self.storage_version_hash
        return [main, *(dict(s) for s in self.subresources)]


@cache
def _discovery_documents() -> dict[str, Any]:
    docs: dict[str, Any] = json.loads(DISCOVERY_JSON.read_text(encoding="utf-8"))["documents"]
    return docs


def _load() -> tuple[list[Builtin], list[str]]:
    docs = _discovery_documents()
    group_versions = [("", "v1")]
    groups = [g["name"] for g in docs["/apis"]["groups"]]
    for g in docs["/apis"]["groups"]:
        group_versions += [(g["name"], v["version"]) for v in g["versions"]]
    out: list[Builtin] = []
    for group, version in group_versions:
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        entries = docs[path]["resources"]
        for r in entries:
            if "/" in r["name"]:
                continue
            subs = tuple(s for s in entries if s["name"].startswith(r["name"] + "/"))
            out.append(Builtin(
                group, version, r["name"], r["kind"], namespaced=r["namespaced"],
                short_names=tuple(r.get("shortNames") or ()), categories=tuple(r.get("categories") or ()),
                verbs=tuple(r["verbs"]), subresources=subs,
                strategy=VERSION_STRATEGIES.get((group, version, r["name"]))
                or STRATEGIES.get((group, r["name"]), Strategy), singular=r["singularName"],
                storage_version_hash=r.get("storageVersionHash", ""),
                storage_key=STORAGE_KEYS.get((group, r["name"]))))
    return out, groups


BUILTINS, GROUP_ORDER = _load()


def builtin_resources() -> list[ResourceInfo]:
    """A ResourceInfo for each entry of BUILTINS, each with its own strategy instance.

    The schemas are built once per process and shared between calls: treat them as read-only."""
    out = []
    for b in BUILTINS:
        strategy = b.strategy()
        served = set(b.subresource_names) & {"status", "scale"}
        if strategy.scale_strategy is None:
            served.discard("scale")
        out.append(ResourceInfo(
            group=b.group,
            version=b.version,
            plural=b.plural,
            singular=b.singular or b.kind.lower(),
            kind=b.kind,
            namespaced=b.namespaced,
            short_names=list(b.short_names),
            categories=list(b.categories),
            verbs=list(b.verbs),
            has_status="status" in served,
            has_scale="scale" in served,
            schema=builtin_schemas.kind_schema(b.group, b.version, b.kind, required=b.strategy.schema_required),
            builtin=True,
            storage_version=(b.group, b.version, b.plural) not in NOT_STORED_VERSIONS,
            strategy=strategy,
            discovery=b.discovery(),
            storage_key=b.storage_key,
        ))
    return out
