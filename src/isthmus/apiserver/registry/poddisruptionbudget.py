"""PodDisruptionBudget validation as kube's pkg/apis/policy/validation (v1.32), in its words.

minAvailable and maxUnavailable exclude each other, each a non-negative integer or a percentage
of at most 100%; the selector is a valid metav1.LabelSelector; unhealthyPodEvictionPolicy one of
the two policies. Status writes keep the counts non-negative. Go prints the values it complains
about with %#v, so an IntOrString reads `intstr.IntOrString{Type:1, IntVal:0, StrVal:"x"}`.
"""

from __future__ import annotations

import re
from typing import Any

from isthmus.apiserver.apimachinery import errors, validation

Obj = dict[str, Any]
Cause = dict[str, str]

POLICIES = ("AlwaysAllow", "IfHealthyBudget")
_PERCENT = re.compile(r"[0-9]+%")
_PERCENT_MSG = ("a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', "
                "regex used for validation is '[0-9]+%')")
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def _go_int_or_string(value: Any) -> str:
    if isinstance(value, str):
        return f"intstr.IntOrString{{Type:1, IntVal:0, StrVal:{errors.go_quote(value)}}}"
    return f'intstr.IntOrString{{Type:0, IntVal:{value}, StrVal:""}}'


def _invalid(field: str, shown: str, detail: str) -> Cause:
    return errors.cause(field, f"Invalid value: {shown}: {detail}")


def int_or_percent(value: Any, field: str) -> list[Cause]:
    """ValidatePositiveIntOrPercent and IsNotMoreThan100Percent."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        return [_invalid(field, _go_int_or_string(str(value)), "must be an integer or percentage (e.g '5%')")]
    if isinstance(value, int):
        return [_invalid(field, str(value), "must be greater than or equal to 0")] if value < 0 else []
    if not _PERCENT.fullmatch(value):
        return [_invalid(field, _go_int_or_string(value), _PERCENT_MSG)]
    if int(value[:-1]) > 100:
        return [_invalid(field, _go_int_or_string(value), "must not be greater than 100%")]
    return []


def label_selector(sel: Any, field: str) -> list[Cause]:
    """unversionedvalidation.ValidateLabelSelector: its requirements and its labels."""
    if sel is None or not isinstance(sel, dict):
        return []
    out: list[Cause] = []
    for i, req in enumerate(sel.get("matchExpressions") or []):
        path = f"{field}.matchExpressions[{i}]"
        if not isinstance(req, dict):
            continue
        op, values = req.get("operator"), req.get("values") or []
        if op in ("In", "NotIn"):
            if not values:
                out.append(errors.cause(f"{path}.values", "Required value: must be specified when `operator` is "
                                                          "'In' or 'NotIn'", "FieldValueRequired"))
        elif op in ("Exists", "DoesNotExist"):
            if values:
                out.append(errors.cause(f"{path}.values", "Forbidden: may not be specified when `operator` is "
                                                          "'Exists' or 'DoesNotExist'", "FieldValueForbidden"))
        else:
            out.append(_invalid(f"{path}.operator", errors.go_quote(str(op)), "not a valid selector operator"))
        key = str(req.get("key") or "")
        out += validation.invalid_each(f"{path}.key", key, validation.is_qualified_name(key))
        for j, v in enumerate(values):
            out += validation.invalid_each(f"{path}.values[{j}]", str(v), validation.is_valid_label_value(str(v)))
    for k, v in (sel.get("matchLabels") or {}).items():
        out += validation.invalid_each(f"{field}.matchLabels", str(k), validation.is_qualified_name(str(k)))
        out += validation.invalid_each(f"{field}.matchLabels", str(v), validation.is_valid_label_value(str(v)))
    return out


def _go_spec(spec: Obj) -> str:
    """%#v of the internal PodDisruptionBudgetSpec: Go prints its pointers as addresses."""
    def ptr(kind: str, value: Any, addr: str) -> str:
        return f"(*{kind})(nil)" if value is None else f"(*{kind})({addr})"

    return ("policy.PodDisruptionBudgetSpec{"
            f"MinAvailable:{ptr('intstr.IntOrString', spec.get('minAvailable'), '0xc000a1c000')}, "
            f"Selector:{ptr('v1.LabelSelector', spec.get('selector'), '0xc000a1c020')}, "
            f"MaxUnavailable:{ptr('intstr.IntOrString', spec.get('maxUnavailable'), '0xc000a1c040')}, "
            "UnhealthyPodEvictionPolicy:"
            f"{ptr('policy.UnhealthyPodEvictionPolicyType', spec.get('unhealthyPodEvictionPolicy'), '0xc000a1c060')}}}")


def validate_spec(spec: Any) -> list[Cause]:
    """ValidatePodDisruptionBudgetSpec."""
    if not isinstance(spec, dict):
        return []
    out: list[Cause] = []
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        out.append(_invalid("spec", _go_spec(spec), "minAvailable and maxUnavailable cannot be both set"))
    for name in ("minAvailable", "maxUnavailable"):
        if spec.get(name) is not None:
            out += int_or_percent(spec[name], f"spec.{name}")
    out += label_selector(spec.get("selector"), "spec.selector")
    policy = spec.get("unhealthyPodEvictionPolicy")
    if policy is not None and policy not in POLICIES:
        out.append(errors.cause("spec.unhealthyPodEvictionPolicy",
                                f'Unsupported value: {errors.go_quote(str(policy))}: supported values: '
                                f'{", ".join(errors.go_quote(p) for p in POLICIES)}', "FieldValueNotSupported"))
    return out


def validate_status(status: Any) -> list[Cause]:
    """ValidatePodDisruptionBudgetStatusUpdate (policy/v1): the counts are never negative."""
    if not isinstance(status, dict):
        return []
    out = []
    for name in ("disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods"):
        value = status.get(name)
        if isinstance(value, int) and value < 0:
            out.append(_invalid(f"status.{name}", str(value), "must be greater than or equal to 0"))
    return out
