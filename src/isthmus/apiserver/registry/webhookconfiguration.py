"""ValidatingWebhookConfiguration and MutatingWebhookConfiguration (admissionregistration.k8s.io/v1):
kube's v1 defaults and validation (validation.go's ValidateValidatingWebhookConfiguration and its
mutating twin, as for a create: v1 takes only sideEffects None/NoneOnDryRun). The plugins that
call the webhooks are apiserver/webhooks."""

from __future__ import annotations

from typing import Any

from isthmus.apiserver.admission.policy.cel import CompileError, compile_expression
from isthmus.apiserver.admission.policy.spec import (
    _compile_cause,
    _invalid,
    _required,
    _unsupported,
    _validate_rules,
    _validate_selector,
)
from isthmus.apiserver.admission.webhook.dispatch import MATCH_CONDITION_ROOTS
from isthmus.apiserver.apimachinery import errors, validation
from isthmus.apiserver.registry.strategy import Strategy
from isthmus.apiserver.registry.table import AGE_COLUMN, NAME_COLUMN, Column, age, col, name_of

Obj = dict[str, Any]
Cause = dict[str, str]

COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("Webhooks", "integer", "Webhooks indicates the number of webhooks in this configuration"),
    AGE_COLUMN,
]
REVIEW_VERSIONS = ("v1", "v1beta1")
MAX_MATCH_CONDITIONS = 64


def default_configuration(obj: Obj, mutating: bool) -> None:
    """kube's SetDefaults_{Validating,Mutating}Webhook and SetDefaults_Rule."""
    for hook in obj.get("webhooks") or []:
        if not isinstance(hook, dict):
            continue
        hook.setdefault("failurePolicy", "Fail")
        hook.setdefault("matchPolicy", "Equivalent")
        hook.setdefault("namespaceSelector", {})
        hook.setdefault("objectSelector", {})
        hook.setdefault("timeoutSeconds", 10)
        if mutating:
            hook.setdefault("reinvocationPolicy", "Never")
        cc = hook.get("clientConfig")
        if isinstance(cc, dict) and isinstance(cc.get("service"), dict):
            cc["service"].setdefault("port", 443)
        for rule in hook.get("rules") or []:
            if isinstance(rule, dict):
                rule.setdefault("scope", "*")


def _validate_client_config(cc: Any, path: str) -> list[Cause]:
    if not isinstance(cc, dict):
        return [_required(path, "exactly one of url or service is required")]
    url, svc = cc.get("url"), cc.get("service")
    if bool(url) == isinstance(svc, dict):
        return [_required(path, "exactly one of url or service is required")]
    causes: list[Cause] = []
    if url:
        u = str(url)
        if not u.startswith("https://"):
            causes.append(_invalid(f"{path}.url", u, "'https' is the only allowed URL scheme"))
        elif "#" in u:
            causes.append(_invalid(f"{path}.url", u, "fragments are not permitted in the URL"))
        elif "?" in u:
            causes.append(_invalid(f"{path}.url", u, "query parameters are not permitted in the URL"))
        return causes
    assert isinstance(svc, dict)
    for key in ("name", "namespace"):
        if not svc.get(key):
            causes.append(_required(f"{path}.service.{key}", f"service {key} is required"))
    port = svc.get("port", 443)
    if not isinstance(port, int) or not 1 <= port <= 65535:
        causes.append(_invalid(f"{path}.service.port", str(port), "port is not valid: must be between 1 and 65535, "
                               "inclusive"))
    p = svc.get("path")
    if p is not None and p != "" and not str(p).startswith("/"):
        causes.append(_invalid(f"{path}.service.path", str(p), "must start with a '/'"))
    return causes


def validate_configuration(obj: Obj, mutating: bool) -> list[Cause]:
    """kube's validate{Validating,Mutating}WebhookConfiguration, causes in its order: each webhook's
    own fields, then its admissionReviewVersions, then a duplicate name."""
    causes: list[Cause] = []
    names: set[str] = set()
    hooks = obj.get("webhooks")
    for i, hook in enumerate(hooks if isinstance(hooks, list) else []):
        p = f"webhooks[{i}]"
        if not isinstance(hook, dict):
            causes.append(_invalid(p, str(hook), "must be an object"))
            continue
        causes += _validate_webhook(hook, p, mutating)
        versions = hook.get("admissionReviewVersions")
        if not isinstance(versions, list) or not versions:
            causes.append(_required(f"{p}.admissionReviewVersions", "must specify one of v1, v1beta1"))
        elif not any(v in REVIEW_VERSIONS for v in versions):
            causes.append(errors.cause(
                f"{p}.admissionReviewVersions",
                f"Invalid value: []string{{{', '.join(errors.go_quote(str(v)) for v in versions)}}}: must include "
                f"at least one of v1, v1beta1"))
        name = str(hook.get("name") or "")
        if name and name in names:
            causes.append(errors.cause(f"{p}.name", f"Duplicate value: {errors.go_quote(name)}",
                                       "FieldValueDuplicate"))
        names.add(name)
    return causes


def _validate_webhook(hook: Obj, p: str, mutating: bool) -> list[Cause]:
    causes: list[Cause] = []
    name = str(hook.get("name") or "")
    if not name:  # utilvalidation.IsFullyQualifiedName
        causes.append(_required(f"{p}.name"))
    elif subdomain := validation.is_dns1123_subdomain(name):
        causes.append(_invalid(f"{p}.name", name, ",".join(subdomain)))
    elif len(name.split(".")) < 3:
        causes.append(_invalid(f"{p}.name", name, "should be a domain with at least three segments separated by dots"))
    causes += _validate_rules(hook.get("rules"), f"{p}.rules")
    fp = hook.get("failurePolicy")
    if fp is not None and fp not in ("Fail", "Ignore"):
        causes.append(_unsupported(f"{p}.failurePolicy", fp, ("Fail", "Ignore")))
    mp = hook.get("matchPolicy")
    if mp is not None and mp not in ("Equivalent", "Exact"):
        causes.append(_unsupported(f"{p}.matchPolicy", mp, ("Equivalent", "Exact")))
    se = hook.get("sideEffects")
    if se is None:
        causes.append(_required(f"{p}.sideEffects", "must specify one of None, NoneOnDryRun"))
    elif se not in ("None", "NoneOnDryRun"):
        causes.append(_unsupported(f"{p}.sideEffects", se, ("None", "NoneOnDryRun")))
    timeout = hook.get("timeoutSeconds")
    if timeout is not None and (not isinstance(timeout, int) or not 1 <= timeout <= 30):
        causes.append(errors.cause(f"{p}.timeoutSeconds", f"Invalid value: {timeout}: the timeout value must be "
                                   "between 1 and 30 seconds"))
    causes += _validate_selector(hook.get("namespaceSelector"), f"{p}.namespaceSelector")
    causes += _validate_selector(hook.get("objectSelector"), f"{p}.objectSelector")
    if mutating:
        rp = hook.get("reinvocationPolicy")
        if rp is not None and rp not in ("IfNeeded", "Never"):
            causes.append(_unsupported(f"{p}.reinvocationPolicy", rp, ("IfNeeded", "Never")))
    causes += _validate_client_config(hook.get("clientConfig"), f"{p}.clientConfig")
    causes += _validate_conditions(hook.get("matchConditions"), f"{p}.matchConditions")
    return causes


def _validate_conditions(conditions: Any, path: str) -> list[Cause]:
    causes: list[Cause] = []
    if not isinstance(conditions, list):
        return causes
    if len(conditions) > MAX_MATCH_CONDITIONS:
        causes.append(errors.cause(path, f"Too many: {len(conditions)}: must have at most {MAX_MATCH_CONDITIONS} "
                                   "items", "FieldValueTooMany"))
    seen: set[str] = set()
    for i, cond in enumerate(conditions):
        p = f"{path}[{i}]"
        if not isinstance(cond, dict):
            causes.append(_invalid(p, str(cond), "must be an object"))
            continue
        name, text = str(cond.get("name") or ""), str(cond.get("expression") or "")
        if not name:
            causes.append(_required(f"{p}.name"))
        elif name in seen:
            causes.append(errors.cause(f"{p}.name", f"Duplicate value: {errors.go_quote(name)}",
                                       "FieldValueDuplicate"))
        seen.add(name)
        if not text:
            causes.append(_required(f"{p}.expression"))
            continue
        try:
            compile_expression(text, MATCH_CONDITION_ROOTS)
        except CompileError as e:
            causes.append(_compile_cause(f"{p}.expression", text, e))
    return causes


class _WebhookConfigurationStrategy(Strategy):
    schema_required = False  # validate() words the problems as kube does
    mutating = False

    def table_columns(self) -> list[Column]:
        return COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        hooks = obj.get("webhooks")
        return [name_of(obj), len(hooks) if isinstance(hooks, list) else 0, age(obj, now)]

    def default(self, obj: Obj) -> None:
        default_configuration(obj, self.mutating)

    def validate(self, obj: Obj) -> list[Cause]:
        return validate_configuration(obj, self.mutating)


class ValidatingWebhookConfigurationStrategy(_WebhookConfigurationStrategy):
    mutating = False


class MutatingWebhookConfigurationStrategy(_WebhookConfigurationStrategy):
    mutating = True
