"""kube-apiserver's built-in PodSecurity admission plugin: enforce on Pods, warn on Pods and on
the pod templates of workload kinds, validate the namespace labels and dry-run a namespace's
pods against a stricter enforce level.

Audit mode has nothing to write to: this server keeps no audit log, so the
`pod-security.kubernetes.io/audit-violations` annotation kube would add to its audit event is
dropped (the audit level is still validated on the Namespace).
"""

from __future__ import annotations

from typing import Any

from isthmus.apiserver.admission.attributes import AdmissionRequest
from isthmus.apiserver.admission.podsecurity.checks import evaluate, forbidden_detail, forbidden_reason
from isthmus.apiserver.admission.podsecurity.policy import Policy, compare_levels, policy_from_labels
from isthmus.apiserver.apimachinery import errors

Obj = dict[str, Any]

# Pod subresources PodSecurity leaves alone (kube's ignoredPodSubresources).
IGNORED_POD_SUBRESOURCES = frozenset({"exec", "attach", "binding", "eviction", "log", "portforward", "proxy",
                                      "status"})
# Kinds whose pod template is evaluated for warnings only: (group, plural) → path to the template.
POD_CONTROLLERS: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "podtemplates"): ("template",),
    ("", "replicationcontrollers"): ("spec", "template"),
    ("apps", "replicasets"): ("spec", "template"),
    ("apps", "deployments"): ("spec", "template"),
    ("apps", "statefulsets"): ("spec", "template"),
    ("apps", "daemonsets"): ("spec", "template"),
    ("batch", "jobs"): ("spec", "template"),
    ("batch", "cronjobs"): ("spec", "jobTemplate", "spec", "template"),
}


def header_text(text: str) -> str:
    """A warning as the response's Warning header carries it: `"` and `\\` escaped, as every
    producer of AdmissionRequest.warnings writes them (kubectl drops a warning whose quoting is broken)."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _d(value: Any) -> Obj:
    return value if isinstance(value, dict) else {}


def _dig(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def is_significant_pod_update(new: Obj, old: Obj) -> bool:
    """kube re-checks a Pod update only when its containers change beyond what the update
    validation allows anyway (images), or ephemeral containers are added."""
    ns, os_ = _d(new.get("spec")), _d(old.get("spec"))
    for key in ("containers", "initContainers"):
        a, b = ns.get(key) or [], os_.get(key) or []
        if len(a) != len(b) or any(_d(x).get("image") != _d(y).get("image") for x, y in zip(a, b, strict=False)):
            return True
    old_eph = {_d(c).get("name"): _d(c) for c in os_.get("ephemeralContainers") or []}
    for c in ns.get("ephemeralContainers") or []:
        prior = old_eph.get(_d(c).get("name"))
        if prior is None or prior.get("image") != _d(c).get("image"):
            return True
    return False


def evaluate_pods_in_namespace(namespace: str, enforce: Any, pods: list[Obj]) -> list[str]:
    """The warnings kube returns when a namespace's enforce level gets stricter: one line saying
    so, then one per distinct violation naming the first pod (by name) and how many others."""
    # One pod per controller first, as kube orders them (its limit of pods checked never bites here).
    seen: set[str] = set()
    first, rest = [], []
    for pod in pods:
        owner = next((r for r in _d(pod.get("metadata")).get("ownerReferences") or []
                      if isinstance(r, dict) and r.get("controller")), None)
        if owner is None or owner.get("uid") not in seen:
            first.append(pod)
            if owner is not None:
                seen.add(str(owner.get("uid")))
        else:
            rest.append(pod)
    counts: dict[str, tuple[str, int]] = {}
    order: list[str] = []
    for pod in first + rest:
        failed = evaluate(enforce.level, enforce.version, _d(pod.get("metadata")), _d(pod.get("spec")))
        if not failed:
            continue
        reason = forbidden_reason(failed)
        name = str(_d(pod.get("metadata")).get("name", ""))
        if reason not in counts:
            order.append(reason)
            counts[reason] = (name, 1)
        else:
            prior, n = counts[reason]
            counts[reason] = (min(prior, name), n + 1)
    if not order:
        return []
    lines = []
    for reason in order:
        name, n = counts[reason]
        who = name if n == 1 else f"{name} (and 1 other pod)" if n == 2 else f"{name} (and {n - 1} other pods)"
        lines.append(f"{who}: {reason}")
    return [f"existing pods in namespace {errors.go_quote(namespace)} violate the new PodSecurity enforce level "
            f"{errors.go_quote(str(enforce))}", *sorted(lines)]


class PodSecurity:
    """The plugin; `reader`/`lister` read the stored Namespace and Pods (the Admission's)."""

    def __init__(self, admission: Any) -> None:
        self.admission = admission

    def _namespace_policy(self, namespace: str) -> Policy | None:
        reader = self.admission.reader
        ns = reader("", "namespaces", "", namespace) if reader is not None else None
        if ns is None:
            return None
        policy, _ = policy_from_labels(_d(ns.get("metadata")).get("labels"))
        return policy

    async def validate_pod(self, req: AdmissionRequest) -> None:
        if req.operation not in ("CREATE", "UPDATE") or req.subresource in IGNORED_POD_SUBRESOURCES:
            return
        policy = self._namespace_policy(req.namespace)
        if policy is None or policy.fully_privileged() or req.object is None:
            return
        if req.operation == "UPDATE" and req.old_object is not None and \
                not is_significant_pod_update(req.object, req.old_object):
            return
        meta, spec = _d(req.object.get("metadata")), _d(req.object.get("spec"))
        failed = evaluate(policy.enforce.level, policy.enforce.version, meta, spec)
        if failed:
            raise errors.forbidden(f"violates PodSecurity {errors.go_quote(str(policy.enforce))}: "
                                   f"{forbidden_detail(failed)}", "", "pods", req.name)
        self._warn(req, policy, meta, spec)

    async def validate_template(self, req: AdmissionRequest) -> None:
        if req.operation not in ("CREATE", "UPDATE") or req.subresource or req.object is None:
            return
        path = POD_CONTROLLERS.get((req.resource.group, req.resource.plural))
        template = _dig(req.object, path) if path else None
        if not isinstance(template, dict):
            return
        policy = self._namespace_policy(req.namespace)
        if policy is None or policy.warn.level == "privileged":
            return
        self._warn(req, policy, _d(template.get("metadata")), _d(template.get("spec")))

    @staticmethod
    def _warn(req: AdmissionRequest, policy: Policy, meta: Obj, spec: Obj) -> None:
        failed = evaluate(policy.warn.level, policy.warn.version, meta, spec)
        if failed:
            req.warnings.append(header_text(f"would violate PodSecurity {errors.go_quote(str(policy.warn))}: "
                                            f"{forbidden_detail(failed)}"))

    async def validate_namespace(self, req: AdmissionRequest) -> None:
        if req.subresource or req.object is None or req.operation not in ("CREATE", "UPDATE"):
            return
        new, causes = policy_from_labels(_d(req.object.get("metadata")).get("labels"))
        if req.operation == "CREATE":
            if causes:
                raise errors.invalid("", "Namespace", req.name, causes)
            return
        old, old_causes = policy_from_labels(_d(_d(req.old_object).get("metadata")).get("labels"))
        if causes and (not old_causes or causes != old_causes):
            raise errors.invalid("", "Namespace", req.name, causes)
        if new.enforce == old.enforce or new.enforce.level == "privileged":
            return
        if new.enforce.version == old.enforce.version and compare_levels(new.enforce.level, old.enforce.level) < 1:
            return
        pods = self.admission.lister("", "pods", req.name) if self.admission.lister is not None else []
        req.warnings.extend(header_text(w) for w in evaluate_pods_in_namespace(req.name, new.enforce, pods))


def install(admission: Any) -> None:
    """Register the plugin's validating hooks on `admission` (an admission.chain.Admission)."""
    plugin = PodSecurity(admission)
    admission.add_builtin_validating("", "pods", plugin.validate_pod)
    admission.add_builtin_validating("", "namespaces", plugin.validate_namespace)
    for group, plural in POD_CONTROLLERS:
        admission.add_builtin_validating(group, plural, plugin.validate_template)
