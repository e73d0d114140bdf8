"""ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding (admissionregistration.k8s.io/v1):
kube's defaults and validation, with every CEL expression compiled on write (a policy that does
not compile is refused with 422, naming the field). The plugin that enforces them is
apiserver/admission/policy."""

from __future__ import annotations

from typing import Any

from isthmus.apiserver.admission.policy import spec
from isthmus.apiserver.registry.strategy import Strategy
from isthmus.apiserver.registry.table import (
    AGE_COLUMN,
    NAME_COLUMN,
    Column,
    age,
    col,
    dig,
    label_selector_string,
    name_of,
)
from isthmus.apiserver.registry.workloads import EmptyStatusStrategy

Obj = dict[str, Any]
Cause = dict[str, str]


# kubectl's columns (kube's printValidatingAdmissionPolicy / ...Binding)
POLICY_COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("Validations", "integer", "Validations indicates the number of validation rules defined in this configuration"),
    col("ParamKind", "string", "ParamKind specifies the kind of resources used to parameterize this policy"),
    AGE_COLUMN,
]
BINDING_COLUMNS: list[Column] = [
    NAME_COLUMN,
    col("PolicyName", "string", "PolicyName indicates the policy definition which the policy binding binded to"),
    col("ParamRef", "string", "ParamRef indicates the param resource which sets the configration param"),
    AGE_COLUMN,
]


class ValidatingAdmissionPolicyStrategy(EmptyStatusStrategy):
    schema_required = False  # validate() words the missing fields as kube does

    def table_columns(self) -> list[Column]:
        return POLICY_COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        pk = dig(obj, "spec", "paramKind")
        kind = f"{pk.get('apiVersion', '')}/{pk.get('kind', '')}" if isinstance(pk, dict) else "<unset>"
        validations = dig(obj, "spec", "validations")
        return [name_of(obj), len(validations) if isinstance(validations, list) else 0, kind, age(obj, now)]

    def default(self, obj: Obj) -> None:
        spec.default_policy(obj)

    def validate(self, obj: Obj) -> list[Cause]:
        return spec.validate_policy(obj)


class ValidatingAdmissionPolicyBindingStrategy(Strategy):
    schema_required = False

    def table_columns(self) -> list[Column]:
        return BINDING_COLUMNS

    def table_row(self, obj: Obj, now: float) -> list[Any]:
        ref = dig(obj, "spec", "paramRef")
        param = "<unset>"
        if isinstance(ref, dict) and ref.get("name"):
            param = f"{ref.get('namespace') or '*'}/{ref['name']}"
        elif isinstance(ref, dict) and isinstance(ref.get("selector"), dict):
            param = label_selector_string(ref["selector"])
        return [name_of(obj), str(dig(obj, "spec", "policyName") or ""), param, age(obj, now)]

    def default(self, obj: Obj) -> None:
        spec.default_binding(obj)

    def validate(self, obj: Obj) -> list[Cause]:
        return spec.validate_binding(obj)
