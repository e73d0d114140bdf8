"""ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding (admissionregistration.k8s.io/v1):
kube's defaults and validation, with every CEL expression compiled on write (a policy that does
not compile is refused with 422, naming the field). The plugin that enforces them is
apiserver/admissionpolicy."""

from __future__ import annotations

from typing import Any

from isthmus.apiserver.admissionpolicy import spec
from isthmus.apiserver.registry.strategy import Strategy
from isthmus.apiserver.registry.workloads import EmptyStatusStrategy

Obj = dict[str, Any]
Cause = dict[str, str]


class ValidatingAdmissionPolicyStrategy(EmptyStatusStrategy):
    schema_required = False  # validate() words the missing fields as kube does

    def default(self, obj: Obj) -> None:
        spec.default_policy(obj)

    def validate(self, obj: Obj) -> list[Cause]:
        return spec.validate_policy(obj)


class ValidatingAdmissionPolicyBindingStrategy(Strategy):
    schema_required = False

    def default(self, obj: Obj) -> None:
        spec.default_binding(obj)

    def validate(self, obj: Obj) -> list[Cause]:
        return spec.validate_binding(obj)
