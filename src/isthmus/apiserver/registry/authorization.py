"""authorization.k8s.io reviews (kube's pkg/registry/authorization): virtual, create-only.

This server authorizes every authenticated request (one bearer token, full access), so it
answers as a kube-apiserver with `--authorization-mode=AlwaysAllow` does: every access review
is allowed, and a rules review lists everything.
"""

from __future__ import annotations

from typing import Any, ClassVar

from isthmus.apiserver import errors
from isthmus.apiserver.registry.strategy import Cause, Strategy, VirtualRequest, clone

Obj = dict[str, Any]


def _answer(obj: Obj, status: Obj) -> Obj:
    out: Obj = clone(obj)
    out["metadata"] = {**(out.get("metadata") or {}), "creationTimestamp": None}
    out["status"] = status
    return out


def _attributes_causes(spec: Obj) -> list[Cause]:
    # ValidateSubjectAccessReviewSpec: exactly one of resourceAttributes, nonResourceAttributes.
    has_res, has_non = spec.get("resourceAttributes") is not None, spec.get("nonResourceAttributes") is not None
    if has_res and has_non:
        return [errors.cause("spec.nonResourceAttributes", "Forbidden: cannot be specified in combination with resourceAttributes",
                             "FieldValueForbidden")]
    if not has_res and not has_non:
        return [errors.cause("spec.resourceAttributes", "Invalid value: null: exactly one of nonResourceAttributes or "
                             "resourceAttributes must be specified")]
    return []


class _AccessReviewStrategy(Strategy):
    stored: ClassVar[bool] = False

    def validate(self, obj: Obj) -> list[Cause]:
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        assert isinstance(spec, dict)
        return _attributes_causes(spec)

    def create_virtual(self, obj: Obj, request: VirtualRequest) -> Obj:
        return _answer(obj, {"allowed": True})


class SubjectAccessReviewStrategy(_AccessReviewStrategy):
    def validate(self, obj: Obj) -> list[Cause]:
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        assert isinstance(spec, dict)
        causes = _attributes_causes(spec)
        if not spec.get("user") and not spec.get("groups"):
            causes.append(errors.cause("spec.user", 'Invalid value: "": at least one of user or group must be '
                                       "specified"))
        return causes


class LocalSubjectAccessReviewStrategy(SubjectAccessReviewStrategy):
    def validate(self, obj: Obj) -> list[Cause]:
        causes = super().validate(obj)
        spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
        assert isinstance(spec, dict)
        ns = (obj.get("metadata") or {}).get("namespace", "")
        attrs = spec.get("resourceAttributes")
        if isinstance(attrs, dict) and attrs.get("namespace", "") != ns:
            causes.append(errors.cause("spec.resourceAttributes.namespace",
                                       f"Invalid value: {errors.go_quote(str(attrs.get('namespace', '')))}: "
                                       "must match metadata.namespace"))
        return causes


class SelfSubjectAccessReviewStrategy(_AccessReviewStrategy):
    pass


class SelfSubjectRulesReviewStrategy(Strategy):
    stored: ClassVar[bool] = False

    def create_virtual(self, obj: Obj, request: VirtualRequest) -> Obj:
        return _answer(obj, {
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": False,
        })


class NotServedVirtualStrategy(Strategy):
    """A virtual type listed in discovery, as kube does, whose create this server does not answer
    (bindings; the authentication reviews until they are implemented): 405 with kube's wording."""

    stored: ClassVar[bool] = False
