"""The ValidatingAdmissionPolicy admission plugin: which policies and bindings apply to a write,
and their verdict, as kube-apiserver's `ValidatingAdmissionPolicy` plugin decides them.

Per write: policies whose matchConstraints match (namespaceSelector, objectSelector, exclude
then resource rules, with matchPolicy Equivalent trying the resource's other versions), then
each binding of the policy whose matchResources match too; its params (paramKind/paramRef);
matchConditions (all true, else the policy is skipped); then every validation. A false
validation is a decision the binding's validationActions enforce: Deny fails the request with
the first denial (kube's wording and reason, Invalid/422 unless the validation names one), Warn
adds a `Validation failed for ValidatingAdmissionPolicy ...` warning, Audit is recorded nowhere
(no audit log here). Errors (evaluation, a missing param) follow the policy's failurePolicy.

The policy objects are compiled once per resourceVersion; until one is stored (and bound),
`covers` is False for every resource and writes pay nothing. Policies never apply to the
admission configuration resources themselves, as kube exempts them (no admin lock-out).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from celpy import celtypes
from celpy.evaluation import CELEvalError

from isthmus.apiserver.admission.attributes import AdmissionRequest, admission_review_request
from isthmus.apiserver.admission.matching import (
    EXEMPT,
    NAMESPACES_KEY,
    equivalents,
    label_selector_matches,
    may_cover,
    namespace_labels,
    object_labels,
    rule_matches,
    split_resource,
)
from isthmus.apiserver.admission.policy.cel import EvalError, LazyMap, to_cel
from isthmus.apiserver.admission.policy.spec import (
    BINDING_KEY,
    GROUP,
    POLICY_KEY,
    CompiledPolicy,
    Expression,
    compile_policy,
)
from isthmus.apiserver.apimachinery import errors
from isthmus.apiserver.apimachinery.jsoncopy import clone
from isthmus.apiserver.registry.resources import ResourceInfo, ResourceRegistry
from isthmus.apiserver.storage.store import Store
from isthmus.apiserver.storage.watch import WatchEvent

Obj = dict[str, Any]

REASON_CODES = {"Forbidden": 403, "Unauthorized": 401, "RequestEntityTooLarge": 413, "Invalid": 422}
MAX_MESSAGE_BYTES = 5 * 1024  # kube's MaxEvaluatedMessageExpressionSizeBytes


@dataclass
class Decision:
    message: str
    reason: str = ""  # "" → Invalid


class PolicyDenied(errors.ApiError):
    """A denial; carries the request's warnings (a Warn binding's) to the error response."""

    def __init__(self, base: errors.ApiError, warnings: list[str]) -> None:
        super().__init__(base.code, base.reason, base.message, base.details)
        self.warnings = list(warnings)


class ConfigError(Exception):
    """A policy or binding that cannot be applied (kube's configuration errors)."""


def _is_bool(v: Any) -> bool:
    return isinstance(v, (bool, celtypes.BoolType))


class ValidatingAdmissionPolicies:
    """The plugin over the server's storage; `on_write` keeps its compiled view current."""

    write_keys = (POLICY_KEY, BINDING_KEY)

    def __init__(self, storage: Store, resources: ResourceRegistry) -> None:
        self.storage = storage
        self.resources = resources
        self._dirty = True
        self._compiled: dict[str, CompiledPolicy] = {}
        # (policy, its bindings sorted by name), policies sorted by name; only bound policies
        self._hooks: list[tuple[CompiledPolicy, list[Obj]]] = []
        self._bases: frozenset[str] = frozenset()  # resource names any bound policy's rules name

    # ------------------------------------------------------------------ the compiled view

    def on_write(self, ev: WatchEvent) -> None:
        if ev.key in (POLICY_KEY, BINDING_KEY):
            self._dirty = True

    def _refresh(self) -> None:
        self._dirty = False
        compiled: dict[str, CompiledPolicy] = {}
        for obj in self.storage.list(POLICY_KEY):
            m = obj["metadata"]
            old = self._compiled.get(m["name"])
            rv = str(m.get("resourceVersion") or "")
            compiled[m["name"]] = old if old is not None and old.resource_version == rv else compile_policy(obj)
        self._compiled = compiled
        bindings: dict[str, list[Obj]] = {}
        for b in self.storage.list(BINDING_KEY):
            name = (b.get("spec") or {}).get("policyName")
            if name in compiled:
                bindings.setdefault(name, []).append(b)
        self._hooks = [(compiled[n], sorted(bs, key=lambda b: str(b["metadata"]["name"])))
                       for n, bs in sorted(bindings.items())]
        bases: set[str] = set()
        for policy, _ in self._hooks:
            mc = policy.spec.get("matchConstraints") or {}
            for rule in mc.get("resourceRules") or []:
                bases.update(split_resource(str(r))[0] for r in rule.get("resources") or [])
        self._bases = frozenset(bases)

    def covers(self, info: ResourceInfo) -> bool:
        """Whether some bound policy may apply to writes of `info` (cheap: no policy, no cost)."""
        if self._dirty:
            self._refresh()
        return may_cover(self._bases, info)

    # ------------------------------------------------------------------ matching

    def _matches(self, mr: Obj, a: AdmissionRequest) -> ResourceInfo | None:
        """The resource (the request's or an equivalent) `mr` matches the request as, else None."""
        is_namespace = a.resource.group == "" and a.resource.plural == "namespaces"
        sel = mr.get("namespaceSelector")
        if sel and (a.namespace or is_namespace) and not label_selector_matches(sel, namespace_labels(a, self.storage)):
            return None
        sel = mr.get("objectSelector")
        if sel and not ((label_selector_matches(sel, object_labels(a.object)) and a.object is not None)
                        or (label_selector_matches(sel, object_labels(a.old_object)) and a.old_object is not None)):
            return None
        equivalent = mr.get("matchPolicy", "Equivalent") != "Exact"
        if self._rules_match(mr.get("excludeResourceRules") or [], a, equivalent) is not None:
            return None
        rules = mr.get("resourceRules") or []
        if not rules:
            return a.resource
        return self._rules_match(rules, a, equivalent)

    def _rules_match(self, rules: list[Obj], a: AdmissionRequest, equivalent: bool) -> ResourceInfo | None:
        for rule in rules:
            if rule_matches(rule, a, a.resource):
                names = rule.get("resourceNames") or []
                if not names or a.name in names:
                    return a.resource
        if not equivalent:
            return None
        for rule in rules:
            for other in equivalents(self.resources, a.resource):
                if rule_matches(rule, a, other):
                    return other
        return None

    # ------------------------------------------------------------------ evaluation

    def _params(self, policy: CompiledPolicy, binding: Obj, a: AdmissionRequest) -> list[Any]:
        """The param objects the binding evaluates the policy with ([None] without paramKind);
        [] when none is found and the binding allows that; raises ConfigError."""
        pk = policy.param_kind
        if pk is None:
            return [None]
        info = next((i for i in self.resources.all()
                     if i.kind == pk.get("kind") and i.api_version == pk.get("apiVersion")), None)
        if info is None:
            raise ConfigError(f"failed to find resource referenced by paramKind: "
                              f"'{pk.get('apiVersion')}, Kind={pk.get('kind')}'")
        ref = (binding.get("spec") or {}).get("paramRef")
        if not isinstance(ref, dict):
            raise ConfigError("paramKind is set but binding has no paramRef")
        ns = ""
        if info.namespaced:
            ns = ref.get("namespace") or a.namespace
            if not ns:
                raise ConfigError("cannot use namespaced paramRef in policy binding that matches cluster-scoped "
                                  "resources")
        found: list[Any] = []
        if ref.get("name"):
            obj = self.storage.get(info.key, ns, ref["name"])
            if obj is not None:
                found = [info.strategy.from_storage(obj)]
        else:
            found = [info.strategy.from_storage(o) for o in self.storage.list(info.key, ns if info.namespaced else None)
                     if label_selector_matches(ref.get("selector") or {}, object_labels(o))]
        if not found and ref.get("parameterNotFoundAction", "Deny") == "Deny":
            raise ConfigError("no params found for policy binding with `Deny` parameterNotFoundAction")
        return found

    def _converted(self, obj: Obj | None, a: AdmissionRequest, matched: ResourceInfo) -> Obj | None:
        """The object as the matched (equivalent) version serves it."""
        if obj is None or matched is a.resource or matched.api_version == a.resource.api_version:
            return obj
        out: Obj = matched.strategy.from_storage(a.resource.strategy.to_storage(clone(obj)))
        return out

    def _evaluate(self, policy: CompiledPolicy, a: AdmissionRequest, matched: ResourceInfo, param: Any,
                  namespace: Obj | None) -> list[Decision]:
        """kube's validator.Validate: the denials (and errors under failurePolicy Fail)."""
        fail = policy.failure_policy != "Ignore"
        activation: dict[str, Any] = {
            "object": to_cel(self._converted(a.object, a, matched)),
            "oldObject": to_cel(self._converted(a.old_object, a, matched)),
            "request": to_cel(admission_review_request(a, matched)),
            "params": to_cel(param),
            "namespaceObject": to_cel(None),
        }

        def run(expr: Expression, act: dict[str, Any]) -> Any:
            if expr.program is None:
                raise EvalError(f"compilation error: {expr.error}")
            return expr.program.evaluate(act)

        def thunk(name: str, expr: Expression, act: dict[str, Any]) -> Callable[[], Any]:
            def value() -> Any:
                try:
                    return run(expr, act)
                except EvalError as e:  # an error value: CEL's && and || may still absorb it
                    return CELEvalError(f'composited variable "{name}" fails to evaluate: {e}', EvalError, None)
            return value

        activation["variables"] = LazyMap({n: thunk(n, e, activation) for n, e in policy.variables})
        # match conditions: any false skips the policy; errors (with no false) follow failurePolicy
        errs: list[str] = []
        for _, cond in policy.match_conditions:
            try:
                result = run(cond, activation)
            except EvalError as e:
                errs.append(f"expression '{cond.text}' resulted in error: {e}")
                continue
            if _is_bool(result) and not result:
                return []
        if errs:
            return [Decision(errs[0] if len(errs) == 1 else "[" + ", ".join(errs) + "]")] if fail else []
        full = activation
        if policy.reads_namespace_object:  # else the match conditions' variables are the validations' too
            full = dict(activation)
            if namespace is not None:
                full["namespaceObject"] = to_cel({k: namespace[k] for k in ("metadata", "spec", "status")
                                                  if k in namespace})
            full["variables"] = LazyMap({n: thunk(n, e, full) for n, e in policy.variables})
        out: list[Decision] = []
        for v in policy.validations:
            try:
                result = run(v.expression, full)
            except EvalError as e:
                if fail:
                    out.append(Decision(f"expression '{v.expression.text}' resulted in error: {e}"))
                continue
            if _is_bool(result) and result:
                continue
            message = ""
            if v.message_expression is not None:
                try:
                    value = run(v.message_expression, full)
                    if isinstance(value, str):
                        message = value.strip()
                        if len(message.encode()) > MAX_MESSAGE_BYTES or "\n" in message:
                            message = ""
                except EvalError:
                    message = ""
            message = message or v.message.strip() or f"failed expression: {v.expression.text.strip()}"
            out.append(Decision(message, v.reason or "Invalid"))
        return out

    # ------------------------------------------------------------------ the plugin

    def validate(self, a: AdmissionRequest) -> None:
        """Raise the first denial as kube's Status; Warn decisions go to `a.warnings`."""
        warnings = a.warnings
        if self._dirty:
            self._refresh()
        if a.resource.group == GROUP and a.resource.plural in EXEMPT:
            return
        denied: list[tuple[str, Decision]] = []  # (kube's prefix, decision)
        for policy, bindings in self._hooks:
            constraints = policy.spec.get("matchConstraints")
            if not isinstance(constraints, dict):
                continue
            matched = self._matches(constraints, a)
            if matched is None:
                continue
            namespace = None
            if policy.reads_namespace_object and a.namespace and not (
                    a.resource.group == "" and a.resource.plural == "namespaces"):
                namespace = self.storage.get(NAMESPACES_KEY, "", a.namespace)
            for binding in bindings:
                bspec = binding.get("spec") or {}
                mr = bspec.get("matchResources")
                if isinstance(mr, dict) and self._matches(mr, a) is None:
                    continue
                prefix = f"ValidatingAdmissionPolicy '{policy.name}' with binding '{binding['metadata']['name']}'"
                try:
                    params = self._params(policy, binding, a)
                except ConfigError as e:
                    if policy.failure_policy != "Ignore":
                        denied.append((prefix, Decision(f"failed to configure binding: {e}")))
                    continue
                actions = bspec.get("validationActions") or []
                for param in params:
                    for d in self._evaluate(policy, a, matched, param, namespace):
                        if "Deny" in actions:
                            denied.append((prefix, d))
                        if "Warn" in actions:
                            warnings.append(f"Validation failed for {prefix}: {d.message}"
                                            .replace("\\", "\\\\").replace('"', '\\"'))
        if denied:
            prefix, d = denied[0]
            message = f"{prefix} denied request: {d.message}"
            reason = d.reason or "Invalid"
            err = PolicyDenied(errors.forbidden(message, a.resource.group, a.resource.plural, a.name), warnings)
            err.code = REASON_CODES.get(reason, 422)
            err.reason = reason
            assert err.details is not None
            err.details["causes"] = [{"message": message}]
            raise err
