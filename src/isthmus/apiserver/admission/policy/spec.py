"""ValidatingAdmissionPolicy and its Binding as objects: defaults, validation (422 causes) and the
compiled form the engine evaluates.

As kube's admissionregistration/v1 defaults.go and validation.go: failurePolicy Fail, matchPolicy
Equivalent, empty selectors, paramRef.parameterNotFoundAction Deny (rule scope: see _default_match);
expressions must compile (`spec.validations[0].expression: Invalid value: "...": compilation failed: ...`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from isthmus.apiserver.admission.policy.cel import CompileError, Program, compile_expression
from isthmus.apiserver.apimachinery import errors

Obj = dict[str, Any]
Cause = dict[str, str]

GROUP = "admissionregistration.k8s.io"
POLICY_KEY = f"{GROUP}/validatingadmissionpolicies"
BINDING_KEY = f"{GROUP}/validatingadmissionpolicybindings"

OPERATIONS = ("*", "CONNECT", "CREATE", "DELETE", "UPDATE")
SCOPES = ("*", "Cluster", "Namespaced")
REASONS = ("Forbidden", "Invalid", "RequestEntityTooLarge", "Unauthorized")
ACTIONS = ("Audit", "Deny", "Warn")


def roots(has_params: bool) -> tuple[str, ...]:
    """The variables kube declares for policy expressions (`authorizer` is not served here)."""
    base = ("object", "oldObject", "request", "namespaceObject", "variables")
    return (*base, "params") if has_params else base


# ---------------------------------------------------------------------------------- defaults


def _default_match(mr: Any) -> None:
    if not isinstance(mr, dict):
        return
    mr.setdefault("namespaceSelector", {})
    mr.setdefault("objectSelector", {})
    mr.setdefault("matchPolicy", "Equivalent")
    # kube also defaults each rule's scope to "*". Not here: resourceRules is an atomic list, and
    # our server-side apply (like the webhook configurations' rules, never defaulted here either)
    # would then see every re-apply of the same manifest as a change; a missing scope means "*".


def default_policy(obj: Obj) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    spec.setdefault("failurePolicy", "Fail")
    _default_match(spec.get("matchConstraints"))


def default_binding(obj: Obj) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    _default_match(spec.get("matchResources"))
    ref = spec.get("paramRef")
    if isinstance(ref, dict):
        ref.setdefault("parameterNotFoundAction", "Deny")


# ---------------------------------------------------------------------------------- validation


def _required(path: str, detail: str = "") -> Cause:
    return errors.cause(path, "Required value" + (f": {detail}" if detail else ""), "FieldValueRequired")


def _unsupported(path: str, value: Any, supported: tuple[str, ...]) -> Cause:
    allowed = ", ".join(f'"{s}"' for s in supported)
    return errors.cause(path, f"Unsupported value: {errors.go_quote(str(value))}: supported values: {allowed}",
                        "FieldValueNotSupported")


def _invalid(path: str, value: str, detail: str) -> Cause:
    return errors.cause(path, f"Invalid value: {errors.go_quote(value)}: {detail}")


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _validate_rules(rules: Any, path: str) -> list[Cause]:
    causes: list[Cause] = []
    for i, rule in enumerate(_list(rules)):
        p = f"{path}[{i}]"
        if not isinstance(rule, dict):
            causes.append(_invalid(p, str(rule), "must be an object"))
            continue
        for key in ("apiGroups", "apiVersions", "resources", "operations"):
            values = _list(rule.get(key))
            if not values:
                causes.append(_required(f"{p}.{key}"))
            elif "*" in values and len(values) > 1 and key != "resources":
                causes.append(_invalid(f"{p}.{key}", str(values), "if '*' is present, must not specify other "
                                       + {"apiGroups": "API groups", "apiVersions": "API versions",
                                          "operations": "operations"}[key]))
        for j, op in enumerate(_list(rule.get("operations"))):
            if op not in OPERATIONS:
                causes.append(_unsupported(f"{p}.operations[{j}]", op, OPERATIONS))
        scope = rule.get("scope")
        if scope is not None and scope not in SCOPES:
            causes.append(_unsupported(f"{p}.scope", scope, SCOPES))
    return causes


def _validate_selector(sel: Any, path: str) -> list[Cause]:
    causes: list[Cause] = []
    if sel is None:
        return causes
    if not isinstance(sel, dict):
        return [_invalid(path, str(sel), "must be a label selector")]
    for i, req in enumerate(_list(sel.get("matchExpressions"))):
        op = req.get("operator") if isinstance(req, dict) else None
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            causes.append(_unsupported(f"{path}.matchExpressions[{i}].operator", op,
                                       ("DoesNotExist", "Exists", "In", "NotIn")))
        elif op in ("In", "NotIn") and not _list(req.get("values")):
            causes.append(_required(f"{path}.matchExpressions[{i}].values",
                                    "must be specified when `operator` is 'In' or 'NotIn'"))
    return causes


def _validate_match(mr: Any, path: str, rules_required: bool) -> list[Cause]:
    if mr is None:
        return [_required(path)] if rules_required else []
    if not isinstance(mr, dict):
        return [_invalid(path, str(mr), "must be an object")]
    causes: list[Cause] = []
    if rules_required and not _list(mr.get("resourceRules")):
        causes.append(_required(f"{path}.resourceRules"))
    causes += _validate_rules(mr.get("resourceRules"), f"{path}.resourceRules")
    causes += _validate_rules(mr.get("excludeResourceRules"), f"{path}.excludeResourceRules")
    policy = mr.get("matchPolicy")
    if policy is not None and policy not in ("Equivalent", "Exact"):
        causes.append(_unsupported(f"{path}.matchPolicy", policy, ("Equivalent", "Exact")))
    causes += _validate_selector(mr.get("namespaceSelector"), f"{path}.namespaceSelector")
    causes += _validate_selector(mr.get("objectSelector"), f"{path}.objectSelector")
    return causes


def _compile_cause(path: str, expression: str, e: CompileError) -> Cause:
    return _invalid(path, expression, f"compilation failed: {e}")


def validate_policy(obj: Obj) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [_required("spec")]
    causes: list[Cause] = []
    fp = spec.get("failurePolicy")
    if fp not in ("Fail", "Ignore"):
        causes.append(_unsupported("spec.failurePolicy", fp, ("Fail", "Ignore")))
    causes += _validate_match(spec.get("matchConstraints"), "spec.matchConstraints", True)
    pk = spec.get("paramKind")
    if pk is not None:
        if not isinstance(pk, dict) or not pk.get("apiVersion"):
            causes.append(_required("spec.paramKind.apiVersion"))
        if not isinstance(pk, dict) or not pk.get("kind"):
            causes.append(_required("spec.paramKind.kind"))
    if not _list(spec.get("validations")) and not _list(spec.get("auditAnnotations")):
        causes.append(_required("spec.validations", "validations or auditAnnotations must contain at least one item"))
    compiled = compile_policy(obj)
    for path, expression, e in compiled.compile_errors:
        causes.append(_required(path) if not expression else _compile_cause(path, expression, e))
    seen: set[str] = set()
    for i, mc in enumerate(_list(spec.get("matchConditions"))):
        name = mc.get("name") if isinstance(mc, dict) else None
        if not name:
            causes.append(_required(f"spec.matchConditions[{i}].name"))
        elif name in seen:
            causes.append(errors.cause(f"spec.matchConditions[{i}].name", f"Duplicate value: {errors.go_quote(name)}",
                                       "FieldValueDuplicate"))
        seen.add(str(name))
    for i, var in enumerate(_list(spec.get("variables"))):
        if not (isinstance(var, dict) and var.get("name")):
            causes.append(_required(f"spec.variables[{i}].name"))
    for i, v in enumerate(_list(spec.get("validations"))):
        if not isinstance(v, dict):
            continue
        reason = v.get("reason")
        if reason is not None and reason not in REASONS:
            causes.append(_unsupported(f"spec.validations[{i}].reason", reason, REASONS))
        message = v.get("message")
        if isinstance(message, str) and "\n" in message:
            causes.append(_invalid(f"spec.validations[{i}].message", message, "message must not contain line breaks"))
    return causes


def validate_binding(obj: Obj) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [_required("spec")]
    causes: list[Cause] = []
    if not spec.get("policyName"):
        causes.append(_required("spec.policyName"))
    actions = _list(spec.get("validationActions"))
    if not actions:
        causes.append(_required("spec.validationActions"))
    seen: set[str] = set()
    for i, a in enumerate(actions):
        if a not in ACTIONS:
            causes.append(_unsupported(f"spec.validationActions[{i}]", a, ACTIONS))
        elif a in seen:
            causes.append(errors.cause(f"spec.validationActions[{i}]", f"Duplicate value: {errors.go_quote(a)}",
                                       "FieldValueDuplicate"))
        seen.add(str(a))
    if {"Deny", "Warn"} <= seen:
        causes.append(errors.cause("spec.validationActions", 'Invalid value: []string{"Deny", "Warn"}: must not '
                                   "contain both Deny and Warn (repeating the same validation failure information "
                                   "in the API response and headers serves no purpose)"))
    ref = spec.get("paramRef")
    if isinstance(ref, dict):
        if ref.get("name") and ref.get("selector") is not None:
            causes.append(errors.cause("spec.paramRef.name", "Forbidden: name and selector are mutually exclusive",
                                       "FieldValueForbidden"))
        elif not ref.get("name") and ref.get("selector") is None:
            causes.append(_required("spec.paramRef", "one of name or selector must be specified"))
        action = ref.get("parameterNotFoundAction")
        if action not in ("Allow", "Deny"):
            causes.append(_unsupported("spec.paramRef.parameterNotFoundAction", action, ("Allow", "Deny")))
    causes += _validate_match(spec.get("matchResources"), "spec.matchResources", False)
    return causes


# ---------------------------------------------------------------------------------- compiled form


@dataclass
class Expression:
    """One expression and its program, or why it does not compile."""

    text: str
    program: Program | None
    error: CompileError | None


@dataclass
class Validation:
    expression: Expression
    message: str
    message_expression: Expression | None
    reason: str  # "" → Invalid (kube's default)


@dataclass
class CompiledPolicy:
    name: str
    resource_version: str
    spec: Obj
    failure_policy: str
    match_conditions: list[tuple[str, Expression]] = field(default_factory=list)
    variables: list[tuple[str, Expression]] = field(default_factory=list)
    validations: list[Validation] = field(default_factory=list)
    # (field path, expression text, error) of every expression that failed to compile
    compile_errors: list[tuple[str, str, CompileError]] = field(default_factory=list)

    @functools.cached_property
    def reads_namespace_object(self) -> bool:
        """Whether an expression names `namespaceObject`: if none does, a request needs neither its
        namespace read nor a second evaluation of the variables (the only thing that differs between
        the match conditions' activation and the validations')."""
        exprs = [e for _, e in (*self.match_conditions, *self.variables)]
        exprs += [e for v in self.validations for e in (v.expression, v.message_expression) if e is not None]
        return any(e.program is not None and "namespaceObject" in e.program.names for e in exprs)

    @property
    def param_kind(self) -> Obj | None:
        pk = self.spec.get("paramKind")
        return pk if isinstance(pk, dict) else None


def compile_policy(obj: Obj) -> CompiledPolicy:
    """Every expression of the policy compiled once (kube's per-generation compilation)."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    m = obj.get("metadata") or {}
    out = CompiledPolicy(str(m.get("name") or ""), str(m.get("resourceVersion") or ""), spec,
                         str(spec.get("failurePolicy") or "Fail"))
    env_roots = roots(isinstance(spec.get("paramKind"), dict))

    def compile_one(path: str, text: Any, variables: list[str]) -> Expression:
        if not isinstance(text, str) or not text:
            err = CompileError("expression is required")
            out.compile_errors.append((path, "", err))
            return Expression("", None, err)
        try:
            return Expression(text, compile_expression(text, env_roots, variables), None)
        except CompileError as e:
            out.compile_errors.append((path, text, e))
            return Expression(text, None, e)

    declared: list[str] = []
    for i, var in enumerate(_list(spec.get("variables"))):
        if not isinstance(var, dict):
            continue
        name = str(var.get("name") or "")
        out.variables.append((name, compile_one(f"spec.variables[{i}].expression", var.get("expression"),
                                                list(declared))))
        declared.append(name)
    for i, mc in enumerate(_list(spec.get("matchConditions"))):
        if isinstance(mc, dict):
            # kube composes variables into match conditions too (namespaceObject is null there)
            out.match_conditions.append((str(mc.get("name") or ""), compile_one(
                f"spec.matchConditions[{i}].expression", mc.get("expression"), declared)))
    for i, v in enumerate(_list(spec.get("validations"))):
        if not isinstance(v, dict):
            continue
        expr = compile_one(f"spec.validations[{i}].expression", v.get("expression"), declared)
        msg_expr = None
        if v.get("messageExpression"):
            msg_expr = compile_one(f"spec.validations[{i}].messageExpression", v.get("messageExpression"), declared)
        out.validations.append(Validation(expr, str(v.get("message") or ""), msg_expr, str(v.get("reason") or "")))
    for i, a in enumerate(_list(spec.get("auditAnnotations"))):
        if isinstance(a, dict):  # accepted, compiled for validation, never evaluated (no audit log here)
            compile_one(f"spec.auditAnnotations[{i}].valueExpression", a.get("valueExpression"), declared)
    return out
