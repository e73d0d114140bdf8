"""What a write must look like for an admission plugin to judge it, shared by the ValidatingAdmissionPolicy
plugin (policy/engine.py) and the admission webhooks (webhook/dispatch.py), as kube's
admission/plugin/webhook/predicates (rules, namespace and object selectors) serve both.

`rule_matches` is kube's rules.Matcher on one resource; `label_selector_matches` metav1.LabelSelector
semantics over an object's labels (`object_labels`) or its namespace's (`namespace_labels`); EXEMPT
the admission configuration resources that neither plugin ever judges (no admin lock-out);
`may_cover` the cheap pre-check both make before any rule is read, and `equivalents` kube's
EquivalentResourceMapper.
"""

from __future__ import annotations

from typing import Any

from isthmus.apiserver.admission.attributes import AdmissionRequest
from isthmus.apiserver.registry.resources import ResourceInfo, ResourceRegistry
from isthmus.apiserver.storage.store import Store

Obj = dict[str, Any]

NAMESPACES_KEY = "/namespaces"
ADMISSION_GROUP = "admissionregistration.k8s.io"
# kube's IsExemptAdmissionConfigurationResource: neither policies nor webhooks judge writes of these.
EXEMPT = frozenset({"validatingadmissionpolicies", "validatingadmissionpolicybindings",
                    "mutatingadmissionpolicies", "mutatingadmissionpolicybindings",
                    "validatingwebhookconfigurations", "mutatingwebhookconfigurations"})


def may_cover(bases: frozenset[str], info: ResourceInfo) -> bool:
    """Whether rules naming the resources `bases` ("*" for all) may match writes of `info`: no rule,
    no cost, and the exempt configuration kinds never."""
    if not bases or (info.group == ADMISSION_GROUP and info.plural in EXEMPT):
        return False
    return "*" in bases or info.plural in bases


def equivalents(resources: ResourceRegistry, info: ResourceInfo) -> list[ResourceInfo]:
    """The resource in its other groups/versions (kube's EquivalentResourceMapper): same storage."""
    return [i for i in resources.all() if i.key == info.key and i is not info and i.plural == info.plural]


def label_selector_matches(sel: Any, labels: dict[str, str] | None) -> bool:
    """metav1.LabelSelector semantics; an empty selector matches everything."""
    if not isinstance(sel, dict):
        return True
    lbl = labels or {}
    for k, v in (sel.get("matchLabels") or {}).items():
        if lbl.get(k) != v:
            return False
    for req in sel.get("matchExpressions") or []:
        key, op, values = req.get("key"), req.get("operator"), req.get("values") or []
        if op == "In" and lbl.get(key) not in values:
            return False
        if op == "NotIn" and key in lbl and lbl[key] in values:
            return False
        if op == "Exists" and key not in lbl:
            return False
        if op == "DoesNotExist" and key in lbl:
            return False
    return True


def object_labels(obj: Obj | None) -> dict[str, str] | None:
    if not isinstance(obj, dict):
        return None
    labels = (obj.get("metadata") or {}).get("labels")
    return labels if isinstance(labels, dict) else {}


def namespace_labels(a: AdmissionRequest, storage: Store) -> dict[str, str] | None:
    """The labels a namespaceSelector is matched against: the namespace's, or the object's own when
    the write is of a Namespace."""
    if a.resource.group == "" and a.resource.plural == "namespaces":
        return object_labels(a.object) or object_labels(a.old_object)
    ns = storage.get(NAMESPACES_KEY, "", a.namespace) if a.namespace else None
    return object_labels(ns)


def split_resource(res: str) -> tuple[str, str]:
    base, _, sub = res.partition("/")
    return base, sub


def rule_matches(rule: Obj, a: AdmissionRequest, info: ResourceInfo) -> bool:
    """kube's rules.Matcher on one resource (`info`, the request's or an equivalent)."""
    scope = rule.get("scope") or "*"
    is_namespace = info.group == "" and info.plural == "namespaces"
    if scope == "Namespaced" and (is_namespace or not a.namespace):
        return False
    if scope == "Cluster" and not (is_namespace or not a.namespace):
        return False
    ops = rule.get("operations") or []
    if "*" not in ops and a.operation not in ops:
        return False
    groups = rule.get("apiGroups") or []
    if "*" not in groups and info.group not in groups:
        return False
    versions = rule.get("apiVersions") or []
    if "*" not in versions and info.version not in versions:
        return False
    for res in rule.get("resources") or []:
        base, sub = split_resource(str(res))
        if (base in ("*", info.plural)) and (sub in ("*", a.subresource)):
            return True
    return False
