"""OpenAPI v3 schemas of the built-in kinds, derived from lightkube's models.

lightkube-models is generated from kube's own OpenAPI document, so its structs carry every field,
its JSON name, its type and whether kube marks it required. What the generator drops (map value
types, Quantity, the x-kubernetes-* merge/list extensions) is overlaid below from kube's Go type tags.
Schemas are built once per kind and cached: they are large (a PodSpec has ~200 structs under it).
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import msgspec.inspect as mi
from lightkube.models import (
    admissionregistration_v1,
    apiextensions_v1,
    apiregistration_v1,
    apps_v1,
    authentication_v1,
    authorization_v1,
    autoscaling_v1,
    autoscaling_v2,
    batch_v1,
    certificates_v1,
    coordination_v1,
    core_v1,
    discovery_v1,
    events_v1,
    flowcontrol_v1,
    meta_v1,
    networking_v1,
    node_v1,
    policy_v1,
    rbac_v1,
    scheduling_v1,
    storage_v1,
)

Schema = dict[str, Any]

# kube's Quantity: a string ("100m") or a JSON number (1, 0.5); kube's v3 document says oneOf string/number.
QUANTITY: Schema = {"oneOf": [{"type": "string"}, {"type": "number"}]}
INT_OR_STRING: Schema = {"x-kubernetes-int-or-string": True}
_STRING_MAP: Schema = {"type": "object", "additionalProperties": {"type": "string"}}
_QUANTITY_MAP: Schema = {"type": "object", "additionalProperties": QUANTITY}
_FREE_OBJECT: Schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}

# Map-typed fields whose values are not strings (lightkube types every map as a bare dict).
_MAP_VALUES: dict[tuple[str, str], Schema] = {
    ("ResourceRequirements", "limits"): _QUANTITY_MAP,
    ("ResourceRequirements", "requests"): _QUANTITY_MAP,
    ("VolumeResourceRequirements", "limits"): _QUANTITY_MAP,
    ("VolumeResourceRequirements", "requests"): _QUANTITY_MAP,
    ("PodSpec", "overhead"): _QUANTITY_MAP,
    ("PodStatus", "allocatedResources"): _QUANTITY_MAP,
    ("ContainerStatus", "allocatedResources"): _QUANTITY_MAP,
    ("PersistentVolumeClaimStatus", "allocatedResources"): _QUANTITY_MAP,
    ("PersistentVolumeClaimStatus", "capacity"): _QUANTITY_MAP,
    ("PersistentVolumeSpec", "capacity"): _QUANTITY_MAP,
    ("NodeStatus", "capacity"): _QUANTITY_MAP,
    ("NodeStatus", "allocatable"): _QUANTITY_MAP,
    ("ResourceQuotaSpec", "hard"): _QUANTITY_MAP,
    ("ResourceQuotaStatus", "hard"): _QUANTITY_MAP,
    ("ResourceQuotaStatus", "used"): _QUANTITY_MAP,
    ("LimitRangeItem", "default"): _QUANTITY_MAP,
    ("LimitRangeItem", "defaultRequest"): _QUANTITY_MAP,
    ("LimitRangeItem", "max"): _QUANTITY_MAP,
    ("LimitRangeItem", "min"): _QUANTITY_MAP,
    ("LimitRangeItem", "maxLimitRequestRatio"): _QUANTITY_MAP,
    ("Overhead", "podFixed"): _QUANTITY_MAP,
    ("ManagedFieldsEntry", "fieldsV1"): _FREE_OBJECT,
    ("ControllerRevision", "data"): _FREE_OBJECT,  # a runtime.RawExtension: any JSON (kube: a patch)
    ("CustomResourceSubresources", "status"): {"type": "object"},
    # JSONSchemaProps is recursive and arbitrary JSON (defaults, enums): kube keeps it whole.
    ("CustomResourceValidation", "openAPIV3Schema"): _FREE_OBJECT,
}

_ATOMIC: Schema = {"x-kubernetes-list-type": "atomic"}
_SET: Schema = {"x-kubernetes-list-type": "set"}


def _map_list(keys: list[str], merge_key: str | None = None, strategy: str = "merge") -> Schema:
    out: Schema = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": keys}
    if merge_key:
        out["x-kubernetes-patch-merge-key"] = merge_key
        out["x-kubernetes-patch-strategy"] = strategy
    return out


_BY_NAME = _map_list(["name"], "name")
_CONDITIONS = _map_list(["type"], "type")
_CONTAINER_FIELDS: dict[str, Schema] = {
    "ports": _map_list(["containerPort", "protocol"], "containerPort"),
    "env": _BY_NAME,
    "envFrom": _ATOMIC,
    "volumeMounts": _map_list(["mountPath"], "mountPath"),
    "volumeDevices": _map_list(["devicePath"], "devicePath"),
    "command": _ATOMIC,
    "args": _ATOMIC,
    "resizePolicy": _ATOMIC,
}

# x-kubernetes-* extensions per (struct, field), as kube's types.go tags declare them.
_FIELD_EXT: dict[tuple[str, str], Schema] = {
    ("ObjectMeta", "finalizers"): {"x-kubernetes-patch-strategy": "merge", "x-kubernetes-list-type": "set"},
    ("ObjectMeta", "ownerReferences"): _map_list(["uid"], "uid"),
    ("ObjectMeta", "managedFields"): _ATOMIC,
    ("LabelSelector", "matchExpressions"): _ATOMIC,
    ("LabelSelectorRequirement", "values"): _ATOMIC,
    ("PodSpec", "volumes"): _map_list(["name"], "name", "merge,retainKeys"),
    ("PodSpec", "containers"): _BY_NAME,
    ("PodSpec", "initContainers"): _BY_NAME,
    ("PodSpec", "ephemeralContainers"): _BY_NAME,
    ("PodSpec", "imagePullSecrets"): {
        "x-kubernetes-patch-merge-key": "name",
        "x-kubernetes-patch-strategy": "merge",
    },
    ("PodSpec", "tolerations"): _ATOMIC,
    ("PodSpec", "hostAliases"): _map_list(["ip"], "ip"),
    ("PodSpec", "readinessGates"): _ATOMIC,
    ("PodSpec", "topologySpreadConstraints"): _map_list(["topologyKey", "whenUnsatisfiable"], "topologyKey"),
    ("PodSpec", "resourceClaims"): _map_list(["name"], "name", "merge,retainKeys"),
    ("PodSpec", "schedulingGates"): _BY_NAME,
    ("PodSpec", "nodeSelector"): {"x-kubernetes-map-type": "atomic"},
    ("PodStatus", "conditions"): _CONDITIONS,
    ("PodStatus", "podIPs"): _map_list(["ip"], "ip"),
    ("PodStatus", "hostIPs"): {
        **_ATOMIC,
        "x-kubernetes-patch-merge-key": "ip",
        "x-kubernetes-patch-strategy": "merge",
    },
    ("PodStatus", "containerStatuses"): _ATOMIC,
    ("PodStatus", "initContainerStatuses"): _ATOMIC,
    ("PodStatus", "ephemeralContainerStatuses"): _ATOMIC,
    ("PodStatus", "resourceClaimStatuses"): _map_list(["name"], "name", "merge,retainKeys"),
    ("ResourceRequirements", "claims"): _map_list(["name"]),
    ("PodSecurityContext", "supplementalGroups"): _ATOMIC,
    ("PodSecurityContext", "sysctls"): _ATOMIC,
    ("PodDNSConfig", "nameservers"): _ATOMIC,
    ("PodDNSConfig", "searches"): _ATOMIC,
    ("PodDNSConfig", "options"): _ATOMIC,
    ("Capabilities", "add"): _ATOMIC,
    ("Capabilities", "drop"): _ATOMIC,
    ("ExecAction", "command"): _ATOMIC,
    ("HTTPGetAction", "httpHeaders"): _ATOMIC,
    ("ConfigMapVolumeSource", "items"): _ATOMIC,
    ("SecretVolumeSource", "items"): _ATOMIC,
    ("DownwardAPIVolumeSource", "items"): _ATOMIC,
    ("ProjectedVolumeSource", "sources"): _ATOMIC,
    ("ConfigMapProjection", "items"): _ATOMIC,
    ("SecretProjection", "items"): _ATOMIC,
    ("DownwardAPIProjection", "items"): _ATOMIC,
    ("NodeSelector", "nodeSelectorTerms"): _ATOMIC,
    ("NodeSelectorTerm", "matchExpressions"): _ATOMIC,
    ("NodeSelectorTerm", "matchFields"): _ATOMIC,
    ("NodeSelectorRequirement", "values"): _ATOMIC,
    ("NodeAffinity", "preferredDuringSchedulingIgnoredDuringExecution"): _ATOMIC,
    ("PodAffinity", "requiredDuringSchedulingIgnoredDuringExecution"): _ATOMIC,
    ("PodAffinity", "preferredDuringSchedulingIgnoredDuringExecution"): _ATOMIC,
    ("PodAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution"): _ATOMIC,
    ("PodAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution"): _ATOMIC,
    ("PodAffinityTerm", "namespaces"): _ATOMIC,
    ("PodAffinityTerm", "matchLabelKeys"): _ATOMIC,
    ("PodAffinityTerm", "mismatchLabelKeys"): _ATOMIC,
    ("TopologySpreadConstraint", "matchLabelKeys"): _ATOMIC,
    ("ServiceSpec", "ports"): _map_list(["port", "protocol"], "port"),
    ("ServiceSpec", "selector"): {"x-kubernetes-map-type": "atomic"},
    ("ServiceSpec", "clusterIPs"): _ATOMIC,
    ("ServiceSpec", "externalIPs"): _ATOMIC,
    ("ServiceSpec", "loadBalancerSourceRanges"): _ATOMIC,
    ("ServiceSpec", "ipFamilies"): _ATOMIC,
    ("ServiceStatus", "conditions"): _CONDITIONS,
    ("LoadBalancerStatus", "ingress"): _ATOMIC,
    ("LoadBalancerIngress", "ports"): _ATOMIC,
    ("IngressLoadBalancerStatus", "ingress"): _ATOMIC,
    ("IngressLoadBalancerIngress", "ports"): _ATOMIC,
    ("IngressSpec", "rules"): _ATOMIC,
    ("IngressSpec", "tls"): _ATOMIC,
    ("IngressTLS", "hosts"): _ATOMIC,
    ("HTTPIngressRuleValue", "paths"): _ATOMIC,
    ("DeploymentSpec", "strategy"): {"x-kubernetes-patch-strategy": "retainKeys"},
    ("DeploymentStatus", "conditions"): _CONDITIONS,
    ("StatefulSetSpec", "volumeClaimTemplates"): _ATOMIC,
    ("StatefulSetStatus", "conditions"): _CONDITIONS,
    ("EndpointSlice", "endpoints"): _ATOMIC,
    ("EndpointSlice", "ports"): _ATOMIC,
    ("Endpoint", "addresses"): _SET,
    ("EndpointHints", "forZones"): _ATOMIC,
    ("EndpointHints", "forNodes"): _ATOMIC,
    ("CustomResourceDefinitionSpec", "versions"): _ATOMIC,
    ("CustomResourceDefinitionVersion", "additionalPrinterColumns"): _ATOMIC,
    ("CustomResourceDefinitionNames", "shortNames"): _ATOMIC,
    ("CustomResourceDefinitionNames", "categories"): _ATOMIC,
    ("CustomResourceDefinitionStatus", "conditions"): _map_list(["type"]),
    ("CustomResourceDefinitionStatus", "storedVersions"): _ATOMIC,
}
for _f, _ext in _CONTAINER_FIELDS.items():
    _FIELD_EXT[("Container", _f)] = _ext
    _FIELD_EXT[("EphemeralContainer", _f)] = _ext

# Structs kube declares +structType=atomic (replaced as a whole by server-side apply).
_ATOMIC_STRUCTS = {"LabelSelector", "OwnerReference", "NodeSelectorTerm", "ObjectReference"}

# Fields kube marks required in OpenAPI but accepts absent/null at the API (Go clients send null slices).
_NOT_REQUIRED = {("EndpointSlice", "endpoints")}


# Nested structs already built, by (class, in status, required stripped): a PodSpec is shared by a
# dozen kinds, and building it is most of the cost. Callers get copies (they add descriptions).
_NESTED: dict[tuple[type, bool, bool], Schema] = {}


@cache
def struct_info(cls: type) -> mi.StructType:
    """msgspec's description of a model and the whole tree below it (costly: each call walks the
    tree), kept for the OpenAPI components built from the same roots later."""
    found = mi.type_info(cls)
    assert isinstance(found, mi.StructType)
    return found


def _struct(cls: type, stack: tuple[type, ...], in_status: bool, strip_required: bool,
            info: mi.StructType | None = None) -> Schema:
    if cls in stack:  # recursion: accept anything below (only JSONSchemaProps, which is overridden)
        return dict(_FREE_OBJECT)
    if not stack or cls.__name__.startswith("JSONSchemaProps"):  # roots and the recursive type: not shared
        return _build_struct(cls, stack, in_status, strip_required, info)
    key = (cls, in_status, strip_required)
    built = _NESTED.get(key)
    if built is None:
        built = _NESTED[key] = _build_struct(cls, stack, in_status, strip_required, info)
    return copy.deepcopy(built)


def _build_struct(cls: type, stack: tuple[type, ...], in_status: bool, strip_required: bool,
                  info: mi.StructType | None) -> Schema:
    name = cls.__name__
    # msgspec inspects the whole tree below a class: nested structs reuse what their parent's gave.
    if info is None:
        info = struct_info(cls)
    props: dict[str, Schema] = {}
    required: list[str] = []
    for f in info.fields:
        key = (name, f.encode_name)
        child_status = in_status or (not stack and f.encode_name == "status")
        sub = _MAP_VALUES.get(key)
        if sub is not None:
            sub = copy.deepcopy(sub)
        elif "Quantity" in str(cls.__annotations__.get(f.name, "")):
            sub = copy.deepcopy(QUANTITY)
        else:
            sub = _type(f.type, key, (*stack, cls), child_status, strip_required)
        sub.update(copy.deepcopy(_FIELD_EXT.get(key, {})))
        doc = _field_doc(cls, f.encode_name)
        if doc:
            sub["description"] = doc
        props[f.encode_name] = sub
        if f.required and not in_status and not strip_required and key not in _NOT_REQUIRED:
            if not (not stack and f.encode_name == "metadata"):
                required.append(f.encode_name)
    out: Schema = {"type": "object", "properties": props}
    if required:
        out["required"] = sorted(required)
    if name in _ATOMIC_STRUCTS:
        out["x-kubernetes-map-type"] = "atomic"
    desc = _class_doc(cls)
    if desc:
        out["description"] = desc
    return out


def _type(t: mi.Type, key: tuple[str, str], stack: tuple[type, ...], in_status: bool, strip: bool) -> Schema:
    if isinstance(t, mi.UnionType):
        kinds = [x for x in t.types if not isinstance(x, mi.NoneType)]
        if len(kinds) == 1:
            return _type(kinds[0], key, stack, in_status, strip)
        if {type(x) for x in kinds} == {mi.IntType, mi.StrType}:
            return dict(INT_OR_STRING)
        return dict(_FREE_OBJECT)
    if isinstance(t, mi.StrType):
        return {"type": "string"}
    if isinstance(t, mi.BoolType):
        return {"type": "boolean"}
    if isinstance(t, mi.IntType):
        return {"type": "integer", "format": "int64" if key[1] in _INT64 else "int32"}
    if isinstance(t, mi.FloatType):
        return {"type": "number", "format": "double"}
    if isinstance(t, mi.DateTimeType):
        return {"type": "string", "format": "date-time"}
    if isinstance(t, mi.ListType):
        return {"type": "array", "items": _type(t.item_type, key, stack, in_status, strip)}
    if isinstance(t, mi.DictType):
        return copy.deepcopy(_STRING_MAP)
    if isinstance(t, mi.StructType):
        return _struct(t.cls, stack, in_status, strip, t)
    return {"x-kubernetes-preserve-unknown-fields": True}


# Integer fields kube declares int64 (the rest are int32); only used for the `format` annotation.
_INT64 = {
    "generation",
    "observedGeneration",
    "deletionGracePeriodSeconds",
    "terminationGracePeriodSeconds",
    "activeDeadlineSeconds",
    "runAsUser",
    "runAsGroup",
    "fsGroup",
    "supplementalGroups",
    "count",
    "expirationSeconds",
    "gracePeriodSeconds",
    "value",
    "uid",
    "gid",
    "sizeBytes",
}


def _docs(cls: type) -> dict[str, str]:
    """Field descriptions from the model's docstring (`* **name** ``type`` - text`)."""
    cached: dict[str, str] | None = _DOC_CACHE.get(cls)
    if cached is not None:
        return cached
    out: dict[str, str] = {}
    current: str | None = None
    lines: list[str] = []
    for raw in (cls.__doc__ or "").splitlines():
        line = raw.strip()
        if line.startswith("* **"):
            if current:
                out[current] = " ".join(lines).strip()
            current = line[4:].split("**", 1)[0]
            rest = line.split(" - ", 1)
            lines = [rest[1]] if len(rest) == 2 else []
        elif current and line:
            lines.append(line)
    if current:
        out[current] = " ".join(lines).strip()
    head = (cls.__doc__ or "").split("**parameters**", 1)[0]
    out["\0"] = " ".join(x.strip() for x in head.splitlines() if x.strip())
    _DOC_CACHE[cls] = out
    return out


_DOC_CACHE: dict[type, dict[str, str]] = {}


def _field_doc(cls: type, name: str) -> str:
    return _docs(cls).get(name, "")


def _class_doc(cls: type) -> str:
    return _docs(cls).get("\0", "")


# (group, version, kind) → lightkube model class
MODELS: dict[tuple[str, str, str], type] = {
    ("", "v1", "Binding"): core_v1.Binding,
    ("", "v1", "ComponentStatus"): core_v1.ComponentStatus,
    ("", "v1", "ConfigMap"): core_v1.ConfigMap,
    ("", "v1", "Endpoints"): core_v1.Endpoints,
    ("", "v1", "Event"): core_v1.Event,
    ("", "v1", "LimitRange"): core_v1.LimitRange,
    ("", "v1", "Namespace"): core_v1.Namespace,
    ("", "v1", "Node"): core_v1.Node,
    ("", "v1", "PersistentVolumeClaim"): core_v1.PersistentVolumeClaim,
    ("", "v1", "PersistentVolume"): core_v1.PersistentVolume,
    ("", "v1", "Pod"): core_v1.Pod,
    ("", "v1", "PodTemplate"): core_v1.PodTemplate,
    ("", "v1", "ReplicationController"): core_v1.ReplicationController,
    ("", "v1", "ResourceQuota"): core_v1.ResourceQuota,
    ("", "v1", "Secret"): core_v1.Secret,
    ("", "v1", "ServiceAccount"): core_v1.ServiceAccount,
    ("", "v1", "Service"): core_v1.Service,
    ("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration"):
        admissionregistration_v1.MutatingWebhookConfiguration,
    ("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy"):
        admissionregistration_v1.ValidatingAdmissionPolicy,
    ("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicyBinding"):
        admissionregistration_v1.ValidatingAdmissionPolicyBinding,
    ("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration"):
        admissionregistration_v1.ValidatingWebhookConfiguration,
    ("apiextensions.k8s.io", "v1", "CustomResourceDefinition"): apiextensions_v1.CustomResourceDefinition,
    ("apiregistration.k8s.io", "v1", "APIService"): apiregistration_v1.APIService,
    ("apps", "v1", "ControllerRevision"): apps_v1.ControllerRevision,
    ("apps", "v1", "DaemonSet"): apps_v1.DaemonSet,
    ("apps", "v1", "Deployment"): apps_v1.Deployment,
    ("apps", "v1", "ReplicaSet"): apps_v1.ReplicaSet,
    ("apps", "v1", "StatefulSet"): apps_v1.StatefulSet,
    ("authentication.k8s.io", "v1", "SelfSubjectReview"): authentication_v1.SelfSubjectReview,
    ("authentication.k8s.io", "v1", "TokenReview"): authentication_v1.TokenReview,
    ("authorization.k8s.io", "v1", "LocalSubjectAccessReview"): authorization_v1.LocalSubjectAccessReview,
    ("authorization.k8s.io", "v1", "SelfSubjectAccessReview"): authorization_v1.SelfSubjectAccessReview,
    ("authorization.k8s.io", "v1", "SelfSubjectRulesReview"): authorization_v1.SelfSubjectRulesReview,
    ("authorization.k8s.io", "v1", "SubjectAccessReview"): authorization_v1.SubjectAccessReview,
    ("autoscaling", "v1", "HorizontalPodAutoscaler"): autoscaling_v1.HorizontalPodAutoscaler,
    ("autoscaling", "v1", "Scale"): autoscaling_v1.Scale,
    ("autoscaling", "v2", "HorizontalPodAutoscaler"): autoscaling_v2.HorizontalPodAutoscaler,
    ("batch", "v1", "CronJob"): batch_v1.CronJob,
    ("batch", "v1", "Job"): batch_v1.Job,
    ("certificates.k8s.io", "v1", "CertificateSigningRequest"): certificates_v1.CertificateSigningRequest,
    ("coordination.k8s.io", "v1", "Lease"): coordination_v1.Lease,
    ("discovery.k8s.io", "v1", "EndpointSlice"): discovery_v1.EndpointSlice,
    ("events.k8s.io", "v1", "Event"): events_v1.Event,
    ("flowcontrol.apiserver.k8s.io", "v1", "FlowSchema"): flowcontrol_v1.FlowSchema,
    ("flowcontrol.apiserver.k8s.io", "v1", "PriorityLevelConfiguration"): flowcontrol_v1.PriorityLevelConfiguration,
    ("networking.k8s.io", "v1", "Ingress"): networking_v1.Ingress,
    ("networking.k8s.io", "v1", "IngressClass"): networking_v1.IngressClass,
    ("networking.k8s.io", "v1", "NetworkPolicy"): networking_v1.NetworkPolicy,
    ("node.k8s.io", "v1", "RuntimeClass"): node_v1.RuntimeClass,
    ("policy", "v1", "PodDisruptionBudget"): policy_v1.PodDisruptionBudget,
    ("policy", "v1", "Eviction"): policy_v1.Eviction,  # pods/eviction's body (OpenAPI only)
    ("rbac.authorization.k8s.io", "v1", "ClusterRole"): rbac_v1.ClusterRole,
    ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"): rbac_v1.ClusterRoleBinding,
    ("rbac.authorization.k8s.io", "v1", "Role"): rbac_v1.Role,
    ("rbac.authorization.k8s.io", "v1", "RoleBinding"): rbac_v1.RoleBinding,
    ("scheduling.k8s.io", "v1", "PriorityClass"): scheduling_v1.PriorityClass,
    ("storage.k8s.io", "v1", "CSIDriver"): storage_v1.CSIDriver,
    ("storage.k8s.io", "v1", "CSINode"): storage_v1.CSINode,
    ("storage.k8s.io", "v1", "CSIStorageCapacity"): storage_v1.CSIStorageCapacity,
    ("storage.k8s.io", "v1", "StorageClass"): storage_v1.StorageClass,
    ("storage.k8s.io", "v1", "VolumeAttachment"): storage_v1.VolumeAttachment,
}


@cache
def kind_schema(group: str, version: str, kind: str, *, required: bool = True) -> Schema:
    """The whole-object schema of a built-in kind (shared, treat as read-only).

    required=False leaves out the models' required lists (for kinds whose own validation words those errors)."""
    cls = MODELS[(group, version, kind)]
    return _struct(cls, (), False, strip_required=not required)


@cache
def object_meta_schema() -> Schema:
    """ObjectMeta with its extensions: CRD objects share it, so `metadata.foo` is pruned like kube does."""
    return _struct(meta_v1.ObjectMeta, (object,), False, False)  # non-root: no root special cases
