"""Built-in kinds the server serves, with their schemas, short names and printer columns.

Schemas come from `_builtin_schemas` (lightkube's models plus kube's x-kubernetes-* tags). The
defaulters replicate the Go defaulting kube-apiserver applies (pkg/apis/*/v1/defaults.go) that
clients observe; nothing more. Printer columns of built-ins live in `table.py` (they are computed,
not JSONPaths), so `printer_columns` stays empty for them.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from isthmus.apiserver import _builtin_schemas
from isthmus.apiserver.errors import cause
from isthmus.apiserver.resources import ALL_VERBS, ResourceInfo
from isthmus.apiserver.schema import go_sharp, go_value

Obj = dict[str, Any]

# ---------------------------------------------------------------- defaulting helpers


def _dict(parent: Obj, key: str) -> Obj:
    """parent[key] as a dict, created when absent (only used where kube creates the struct too)."""
    val = parent.get(key)
    if not isinstance(val, dict):
        val = {}
        parent[key] = val
    return val


def _dicts(val: Any) -> list[Obj]:
    return [x for x in val if isinstance(x, dict)] if isinstance(val, list) else []


def _set(obj: Obj, key: str, value: Any) -> None:
    if obj.get(key) in (None, ""):
        obj[key] = value


def _default_probe(probe: Any) -> None:
    if not isinstance(probe, dict):
        return
    _set(probe, "timeoutSeconds", 1)
    _set(probe, "periodSeconds", 10)
    _set(probe, "successThreshold", 1)
    _set(probe, "failureThreshold", 3)
    for handler in ("httpGet",):
        h = probe.get(handler)
        if isinstance(h, dict):
            _set(h, "path", "/")
            _set(h, "scheme", "HTTP")


def _default_container(c: Obj) -> None:
    # SetDefaults_Container: imagePullPolicy from the tag, termination message defaults.
    image = c.get("image")
    if c.get("imagePullPolicy") in (None, "") and isinstance(image, str):
        last = image.rsplit("/", 1)[-1]
        tag = last.split("@", 1)[0].split(":", 1)[1] if ":" in last.split("@", 1)[0] else ""
        digest = "@" in last
        c["imagePullPolicy"] = "Always" if (not digest and tag in ("", "latest")) else "IfNotPresent"
    _set(c, "terminationMessagePath", "/dev/termination-log")
    _set(c, "terminationMessagePolicy", "File")
    for port in _dicts(c.get("ports")):
        _set(port, "protocol", "TCP")
    for env in _dicts(c.get("env")):
        ref = (env.get("valueFrom") or {}).get("fieldRef") if isinstance(env.get("valueFrom"), dict) else None
        if isinstance(ref, dict):
            _set(ref, "apiVersion", "v1")
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        _default_probe(c.get(probe))
    # SetDefaults_Pod: requests default to limits for resources that only set a limit.
    res = c.get("resources")
    if isinstance(res, dict) and isinstance(res.get("limits"), dict):
        requests: Obj = res["requests"] if isinstance(res.get("requests"), dict) else {}
        for name, qty in res["limits"].items():
            requests.setdefault(name, qty)
        if requests:
            res["requests"] = requests


def default_pod_spec(spec: Obj) -> None:
    """SetDefaults_PodSpec (+ containers, volumes): what every Pod and pod template gets."""
    _set(spec, "dnsPolicy", "ClusterFirst")
    _set(spec, "restartPolicy", "Always")
    _set(spec, "terminationGracePeriodSeconds", 30)
    _set(spec, "schedulerName", "default-scheduler")
    if spec.get("securityContext") is None:
        spec["securityContext"] = {}
    if spec.get("enableServiceLinks") is None:
        spec["enableServiceLinks"] = True
    for key in ("containers", "initContainers", "ephemeralContainers"):
        for c in _dicts(spec.get(key)):
            _default_container(c)
    for vol in _dicts(spec.get("volumes")):
        for src in ("secret", "configMap", "downwardAPI", "projected"):
            if isinstance(vol.get(src), dict):
                _set(vol[src], "defaultMode", 420)
        if not any(k for k in vol if k != "name"):
            vol["emptyDir"] = {}  # SetDefaults_Volume: a volume without a source is an emptyDir


def default_pod(obj: Obj) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict):
        default_pod_spec(spec)


def _default_template(spec: Obj) -> None:
    tmpl = spec.get("template")
    if isinstance(tmpl, dict) and isinstance(tmpl.get("spec"), dict):
        default_pod_spec(tmpl["spec"])


def default_service(obj: Obj) -> None:
    """SetDefaults_Service."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    _set(spec, "type", "ClusterIP")
    _set(spec, "sessionAffinity", "None")
    if spec["sessionAffinity"] == "ClientIP":
        cfg = _dict(spec, "sessionAffinityConfig")
        cip = _dict(cfg, "clientIP")
        _set(cip, "timeoutSeconds", 10800)
    for port in _dicts(spec.get("ports")):
        _set(port, "protocol", "TCP")
        if port.get("targetPort") in (None, 0, ""):
            port["targetPort"] = port.get("port")
    stype = spec["type"]
    if stype in ("NodePort", "LoadBalancer"):
        _set(spec, "externalTrafficPolicy", "Cluster")
    if stype != "ExternalName":
        _set(spec, "internalTrafficPolicy", "Cluster")
    if stype == "LoadBalancer" and spec.get("allocateLoadBalancerNodePorts") is None:
        spec["allocateLoadBalancerNodePorts"] = True


def default_deployment(obj: Obj) -> None:
    """apps/v1 SetDefaults_Deployment."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    _set(spec, "replicas", 1)
    strategy = _dict(spec, "strategy")
    _set(strategy, "type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        ru = _dict(strategy, "rollingUpdate")
        _set(ru, "maxUnavailable", "25%")
        _set(ru, "maxSurge", "25%")
    _set(spec, "revisionHistoryLimit", 10)
    _set(spec, "progressDeadlineSeconds", 600)
    _default_template(spec)


def default_statefulset(obj: Obj) -> None:
    """apps/v1 SetDefaults_StatefulSet."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    _set(spec, "replicas", 1)
    _set(spec, "podManagementPolicy", "OrderedReady")
    strategy = _dict(spec, "updateStrategy")
    _set(strategy, "type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        _set(_dict(strategy, "rollingUpdate"), "partition", 0)
    _set(spec, "revisionHistoryLimit", 10)
    policy = _dict(spec, "persistentVolumeClaimRetentionPolicy")
    _set(policy, "whenDeleted", "Retain")
    _set(policy, "whenScaled", "Retain")
    _default_template(spec)


def default_endpointslice(obj: Obj) -> None:
    """discovery/v1 SetDefaults_EndpointPort."""
    for port in _dicts(obj.get("ports")):
        if port.get("name") is None:
            port["name"] = ""
        _set(port, "protocol", "TCP")


def default_namespace(obj: Obj) -> None:
    """SetDefaults_Namespace (the immutable kubernetes.io/metadata.name label) and NamespaceStatus."""
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if isinstance(meta, dict) and isinstance(name, str) and name:
        labels = _dict(meta, "labels")
        labels["kubernetes.io/metadata.name"] = name
    _set(_dict(obj, "status"), "phase", "Active")


def default_secret(obj: Obj) -> None:
    _set(obj, "type", "Opaque")


def default_crd(obj: Obj) -> None:
    """SetDefaults_CustomResourceDefinitionSpec: singular, listKind, conversion strategy."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    names = spec.get("names")
    if isinstance(names, dict) and isinstance(names.get("kind"), str):
        _set(names, "singular", names["kind"].lower())
        _set(names, "listKind", names["kind"] + "List")
    conv = _dict(spec, "conversion")
    _set(conv, "strategy", "None")


# ---------------------------------------------------------------- resources

_POD_FIELDS = {
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
}
_EVENT_FIELDS = {
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
}
_EVENTS_V1_FIELDS = {
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "regarding.apiVersion",
    "regarding.resourceVersion",
    "regarding.fieldPath",
    "reason",
    "reportingController",
    "type",
}

_NO_DELETECOLLECTION = [v for v in ALL_VERBS if v != "deletecollection"]

# group, version, plural, singular, kind, namespaced, shortNames, categories, has_status, defaulter, fields, verbs
_TABLE: list[tuple[Any, ...]] = [
    (
        "",
        "v1",
        "namespaces",
        "namespace",
        "Namespace",
        False,
        ["ns"],
        [],
        True,
        default_namespace,
        {"status.phase"},
        _NO_DELETECOLLECTION,
    ),
    (
        "",
        "v1",
        "services",
        "service",
        "Service",
        True,
        ["svc"],
        ["all"],
        True,
        default_service,
        {"spec.clusterIP", "spec.type"},
        ALL_VERBS,
    ),
    ("", "v1", "pods", "pod", "Pod", True, ["po"], ["all"], True, default_pod, _POD_FIELDS, ALL_VERBS),
    ("", "v1", "configmaps", "configmap", "ConfigMap", True, ["cm"], [], False, None, set(), ALL_VERBS),
    ("", "v1", "secrets", "secret", "Secret", True, [], [], False, default_secret, {"type"}, ALL_VERBS),
    ("", "v1", "events", "event", "Event", True, ["ev"], [], False, None, _EVENT_FIELDS, ALL_VERBS),
    (
        "events.k8s.io",
        "v1",
        "events",
        "event",
        "Event",
        True,
        ["ev"],
        [],
        False,
        None,
        _EVENTS_V1_FIELDS,
        ALL_VERBS,
    ),
    ("coordination.k8s.io", "v1", "leases", "lease", "Lease", True, [], [], False, None, set(), ALL_VERBS),
    (
        "discovery.k8s.io",
        "v1",
        "endpointslices",
        "endpointslice",
        "EndpointSlice",
        True,
        [],
        [],
        False,
        default_endpointslice,
        set(),
        ALL_VERBS,
    ),
    (
        "networking.k8s.io",
        "v1",
        "ingresses",
        "ingress",
        "Ingress",
        True,
        ["ing"],
        [],
        True,
        None,
        set(),
        ALL_VERBS,
    ),
    (
        "networking.k8s.io",
        "v1",
        "ingressclasses",
        "ingressclass",
        "IngressClass",
        False,
        [],
        [],
        False,
        None,
        set(),
        ALL_VERBS,
    ),
    (
        "apps",
        "v1",
        "deployments",
        "deployment",
        "Deployment",
        True,
        ["deploy"],
        ["all"],
        True,
        default_deployment,
        set(),
        ALL_VERBS,
    ),
    (
        "apps",
        "v1",
        "statefulsets",
        "statefulset",
        "StatefulSet",
        True,
        ["sts"],
        ["all"],
        True,
        default_statefulset,
        set(),
        ALL_VERBS,
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "customresourcedefinition",
        "CustomResourceDefinition",
        False,
        ["crd", "crds"],
        ["api-extensions"],
        True,
        default_crd,
        set(),
        ALL_VERBS,
    ),
]


def builtin_resources() -> list[ResourceInfo]:
    """Namespace, Service, Pod, ConfigMap, Secret, Event (v1 and events.k8s.io/v1), Lease,
    EndpointSlice, Ingress, IngressClass, Deployment, StatefulSet, CustomResourceDefinition.

    The schemas are built once per process and shared between calls: treat them as read-only."""
    out: list[ResourceInfo] = []
    for (
        group,
        version,
        plural,
        singular,
        kind,
        namespaced,
        short,
        cats,
        status,
        defaulter,
        fields,
        verbs,
    ) in _TABLE:
        out.append(
            ResourceInfo(
                group=group,
                version=version,
                plural=plural,
                singular=singular,
                kind=kind,
                namespaced=namespaced,
                short_names=list(short),
                categories=list(cats),
                verbs=list(verbs),
                has_status=status,
                schema=_builtin_schemas.kind_schema(group, version, kind),
                builtin=True,
                storage_version=True,
                defaulter=defaulter,
                field_selectors=set(fields),
            )
        )
    return out


# ---------------------------------------------------------------- CRDs


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def crd_object_schema(version_schema: Any) -> dict[str, Any]:
    """A served version's openAPIV3Schema wrapped the way kube serves it: apiVersion, kind and
    metadata (ObjectMeta) are always allowed at the root."""
    root: dict[str, Any]
    if isinstance(version_schema, dict) and version_schema:
        root = copy.deepcopy(version_schema)
    else:
        root = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    root.setdefault("type", "object")
    props = root.setdefault("properties", {})
    props.setdefault("apiVersion", {"type": "string"})
    props.setdefault("kind", {"type": "string"})
    meta = copy.deepcopy(_builtin_schemas.object_meta_schema())
    user_meta = props.get("metadata")
    if isinstance(user_meta, dict):  # name/generateName constraints a CRD may declare
        meta["properties"].update(user_meta.get("properties") or {})
    props["metadata"] = meta
    return root


def crd_resources(crd: dict[str, object]) -> list[ResourceInfo]:
    """One ResourceInfo per served version of a CustomResourceDefinition (apiextensions.k8s.io/v1)."""
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return []
    names = spec.get("names") or {}
    kind = str(names.get("kind") or "")
    plural = str(names.get("plural") or "")
    singular = str(names.get("singular") or kind.lower())
    out: list[ResourceInfo] = []
    for v in spec.get("versions") or []:
        if not isinstance(v, dict) or not v.get("served"):
            continue
        columns = [dict(c) for c in v.get("additionalPrinterColumns") or [] if isinstance(c, dict)]
        selectable = {
            str(f["jsonPath"]).lstrip(".")
            for f in v.get("selectableFields") or []
            if isinstance(f, dict) and isinstance(f.get("jsonPath"), str)
        }
        out.append(
            ResourceInfo(
                group=str(spec.get("group") or ""),
                version=str(v.get("name") or ""),
                plural=plural,
                singular=singular,
                kind=kind,
                namespaced=spec.get("scope") != "Cluster",
                short_names=[str(s) for s in names.get("shortNames") or []],
                categories=[str(s) for s in names.get("categories") or []],
                has_status=isinstance(_get(v, "subresources"), dict) and "status" in v["subresources"],
                schema=crd_object_schema(_get(v, "schema", "openAPIV3Schema")),
                printer_columns=columns,
                builtin=False,
                storage_version=bool(v.get("storage")),
                field_selectors=selectable,
            )
        )
    return out


_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUB = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
    "validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
_DNS1123_SUB_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_COLUMN_TYPES = ["date", "integer", "number", "string", "boolean"]
_COLUMN_FORMATS = ["int32", "int64", "float", "double", "byte", "date", "date-time", "password"]


def _dns1035(value: str) -> list[str]:
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not _DNS1035.match(value):
        errs.append(_DNS1035_MSG)
    return errs


def _dns1123_subdomain(value: str) -> list[str]:
    errs = []
    if len(value) > 253:
        errs.append("must be no more than 253 characters")
    if not _DNS1123_SUB.match(value):
        errs.append(_DNS1123_SUB_MSG)
    return errs


def _inv(path: str, value: Any, detail: str) -> dict[str, str]:
    return cause(path, f"Invalid value: {go_value(value)}: {detail}")


def _required(path: str, detail: str = "") -> dict[str, str]:
    return cause(path, "Required value" + (f": {detail}" if detail else ""), "FieldValueRequired")


def _not_supported(path: str, value: Any, allowed: list[str]) -> dict[str, str]:
    values = ", ".join(f'"{a}"' for a in allowed)
    return cause(
        path, f"Unsupported value: {go_value(value)}: supported values: {values}", "FieldValueNotSupported"
    )


def validate_crd(crd: dict[str, object]) -> list[dict[str, str]]:
    """Causes for an invalid CRD (names, group, scope, versions: exactly one storage, structural schemas).

    Messages and paths follow apiextensions-apiserver's ValidateCustomResourceDefinition."""
    errs: list[dict[str, str]] = []
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return [_required("spec")]
    name = str(_get(crd, "metadata", "name") or "")
    group = spec.get("group") or ""
    names = spec.get("names") if isinstance(spec.get("names"), dict) else {}
    assert isinstance(names, dict)
    plural = names.get("plural") or ""
    if name != f"{plural}.{group}":
        errs.append(_inv("metadata.name", name, 'must be spec.names.plural+"."+spec.group'))
    if not group:
        errs.append(_required("spec.group"))
    elif not isinstance(group, str) or _dns1123_subdomain(group):
        errs.append(_inv("spec.group", group, ",".join(_dns1123_subdomain(str(group)))))
    elif len(group.split(".")) < 2:
        errs.append(_inv("spec.group", group, "should be a domain with at least one dot"))
    scope = spec.get("scope")
    if not scope:
        errs.append(_required("spec.scope"))
    elif scope not in ("Cluster", "Namespaced"):
        errs.append(_not_supported("spec.scope", scope, ["Cluster", "Namespaced"]))
    errs.extend(_validate_names(names))
    errs.extend(_validate_versions(spec))
    return errs


def _validate_names(names: dict[str, Any]) -> list[dict[str, str]]:
    errs: list[dict[str, str]] = []
    base = "spec.names"
    plural, singular, kind, list_kind = (
        names.get(k) or "" for k in ("plural", "singular", "kind", "listKind")
    )
    if not plural:
        errs.append(_required(f"{base}.plural"))
    elif _dns1035(str(plural)):
        errs.append(_inv(f"{base}.plural", plural, ",".join(_dns1035(str(plural)))))
    if singular and _dns1035(str(singular)):
        errs.append(_inv(f"{base}.singular", singular, ",".join(_dns1035(str(singular)))))
    if not kind:
        errs.append(_required(f"{base}.kind"))
    elif _dns1035(str(kind).lower()):
        detail = "may have mixed case, but should otherwise match: " + ",".join(_dns1035(str(kind).lower()))
        errs.append(_inv(f"{base}.kind", kind, detail))
    if list_kind and _dns1035(str(list_kind).lower()):
        detail = "may have mixed case, but should otherwise match: " + ",".join(
            _dns1035(str(list_kind).lower())
        )
        errs.append(_inv(f"{base}.listKind", list_kind, detail))
    if kind and kind == list_kind:
        errs.append(_inv(f"{base}.listKind", list_kind, "kind and listKind may not be the same"))
    for field_name in ("shortNames", "categories"):
        for i, item in enumerate(names.get(field_name) or []):
            if _dns1035(str(item)):
                errs.append(_inv(f"{base}.{field_name}[{i}]", item, ",".join(_dns1035(str(item)))))
    return errs


def _validate_versions(spec: dict[str, Any]) -> list[dict[str, str]]:
    errs: list[dict[str, str]] = []
    versions = [v for v in spec.get("versions") or [] if isinstance(v, dict)]
    if not versions:
        errs.append(_required("spec.versions"))
        return errs
    storage = 0
    seen: set[str] = set()
    unique = True
    for i, v in enumerate(versions):
        base = f"spec.versions[{i}]"
        vname = str(v.get("name") or "")
        if v.get("storage"):
            storage += 1
        if vname in seen:
            unique = False
        seen.add(vname)
        if _dns1035(vname):
            errs.append(_inv(f"{base}.name", vname, ",".join(_dns1035(vname))))
        schema = _get(v, "schema", "openAPIV3Schema")
        if not isinstance(schema, dict):
            errs.append(_required(f"{base}.schema.openAPIV3Schema", "schemas are required"))
        else:
            errs.extend(structural_errors(schema, f"{base}.schema.openAPIV3Schema"))
        for j, col in enumerate(v.get("additionalPrinterColumns") or []):
            errs.extend(_validate_column(col, f"{base}.additionalPrinterColumns[{j}]"))
    shown = go_sharp(versions)  # kube prints the Go slice here
    if not unique:
        errs.append(cause("spec.versions", f"Invalid value: {shown}: must contain unique version names"))
    if storage != 1:
        errs.append(
            cause(
                "spec.versions",
                f"Invalid value: {shown}: must have exactly one version marked as storage version",
            )
        )
    return errs


def _validate_column(col: Any, path: str) -> list[dict[str, str]]:
    if not isinstance(col, dict):
        return [_required(path)]
    errs: list[dict[str, str]] = []
    if not col.get("name"):
        errs.append(_required(f"{path}.name"))
    if not col.get("type"):
        errs.append(_required(f"{path}.type"))
    elif col["type"] not in _COLUMN_TYPES:
        errs.append(_not_supported(f"{path}.type", col["type"], _COLUMN_TYPES))
    if col.get("format") and col["format"] not in _COLUMN_FORMATS:
        errs.append(_not_supported(f"{path}.format", col["format"], _COLUMN_FORMATS))
    if not col.get("jsonPath"):
        errs.append(_required(f"{path}.jsonPath"))
    return errs


def structural_errors(schema: dict[str, Any], path: str) -> list[dict[str, str]]:
    """kube's structural-schema rules that matter in practice: a type at every level (except where
    x-kubernetes-int-or-string or x-kubernetes-preserve-unknown-fields stand in), items for arrays,
    object at the root, and only name/generateName under metadata."""
    errs: list[dict[str, str]] = []
    if schema.get("type") != "object":
        if not schema.get("type"):
            errs.append(_required(f"{path}.type", "must not be empty at the root"))
        else:
            errs.append(_inv(f"{path}.type", schema["type"], "must be object at the root"))
    meta = (schema.get("properties") or {}).get("metadata")
    if isinstance(meta, dict):
        extra = set(meta) - {"type", "properties", "description"}
        props = set(meta.get("properties") or {})
        if extra or props - {"name", "generateName"} or meta.get("type", "object") != "object":
            errs.append(
                cause(
                    f"{path}.properties[metadata]",
                    "Forbidden: must not specify anything other than name and generateName, but metadata is implicitly "
                    "specified",
                    "FieldValueForbidden",
                )
            )
    _structural(schema, path, errs, root=True)
    return errs


def _structural(s: dict[str, Any], path: str, errs: list[dict[str, str]], root: bool = False) -> None:
    props = s.get("properties")
    if isinstance(props, dict):
        for key, sub in props.items():
            if not isinstance(sub, dict):
                continue
            p = f"{path}.properties[{key}]"
            if root and key == "metadata":
                continue
            if not sub.get("type") and not _typeless_ok(sub):
                errs.append(_required(f"{p}.type", "must not be empty for specified object fields"))
            _structural(sub, p, errs)
    addl = s.get("additionalProperties")
    if isinstance(addl, dict):
        p = f"{path}.additionalProperties"
        if not addl.get("type") and not _typeless_ok(addl):
            errs.append(_required(f"{p}.type", "must not be empty for specified object fields"))
        if isinstance(props, dict) and props:
            errs.append(
                cause(
                    p,
                    "Forbidden: additionalProperties and properties are mutual exclusive",
                    "FieldValueForbidden",
                )
            )
        _structural(addl, p, errs)
    if s.get("type") == "array":
        items = s.get("items")
        if not isinstance(items, dict):
            errs.append(_required(f"{path}.items", "must be specified"))
        else:
            if not items.get("type") and not _typeless_ok(items):
                errs.append(_required(f"{path}.items.type", "must not be empty for specified array items"))
            _structural(items, f"{path}.items", errs)
    if s.get("x-kubernetes-list-type") == "map" and not s.get("x-kubernetes-list-map-keys"):
        errs.append(
            _required(
                f"{path}.x-kubernetes-list-map-keys", "must not be empty if x-kubernetes-list-type is map"
            )
        )


def _typeless_ok(s: dict[str, Any]) -> bool:
    return bool(s.get("x-kubernetes-int-or-string") or s.get("x-kubernetes-preserve-unknown-fields"))
