"""authorization.k8s.io reviews (kube's pkg/registry/authorization): virtual, create-only.

Each is answered by the server's authorizer chain (apiserver/authorization), the one that
authorizes requests: a SubjectAccessReview asks about the user of its spec, a
LocalSubjectAccessReview the same in its namespace, a SelfSubjectAccessReview about the requester
(`kubectl auth can-i`), a SelfSubjectRulesReview lists the requester's rules in a namespace
(`kubectl auth can-i --list`). Without a request being served (in-process calls) they answer as
an AlwaysAllow authorizer.
"""

from __future__ import annotations

from typing import Any, ClassVar

from isthmus.apiserver import authorization
from isthmus.apiserver.apimachinery import errors
from isthmus.apiserver.apimachinery.jsoncopy import clone
from isthmus.apiserver.authentication.authenticators import UserInfo
from isthmus.apiserver.authorization import Attributes, Authorizer, RulesReview
from isthmus.apiserver.authorization.rbac import PolicyRule
from isthmus.apiserver.registry.strategy import Cause, Strategy, VirtualRequest

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


def _authorizer() -> Authorizer | None:
    ctx = authorization.CURRENT.get()
    return ctx.authorizer if ctx is not None else None


def _attributes(user: UserInfo, spec: Obj) -> Attributes:
    """authorizationutil.AuthorizationAttributesFrom: resourceAttributes or nonResourceAttributes."""
    res = spec.get("resourceAttributes")
    if isinstance(res, dict):
        return Attributes(user, str(res.get("verb") or ""), True, api_group=str(res.get("group") or ""),
                          api_version=str(res.get("version") or "*"), resource=str(res.get("resource") or ""),
                          subresource=str(res.get("subresource") or ""), namespace=str(res.get("namespace") or ""),
                          name=str(res.get("name") or ""))
    non = spec.get("nonResourceAttributes")
    non = non if isinstance(non, dict) else {}
    return Attributes(user, str(non.get("verb") or ""), False, path=str(non.get("path") or ""))


def _review_status(user: UserInfo, spec: Obj) -> Obj:
    """SubjectAccessReviewStatus in Go's field order, empty fields omitted (allowed always there)."""
    authorizer = _authorizer()
    if authorizer is None:
        return {"allowed": True}
    decision = authorizer.authorize(_attributes(user, spec))
    status: Obj = {"allowed": decision.allowed}
    if decision.reason:
        status["reason"] = decision.reason
    return status


def _spec(obj: Obj) -> Obj:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


class _AccessReviewStrategy(Strategy):
    stored: ClassVar[bool] = False

    def validate(self, obj: Obj) -> list[Cause]:
        return _attributes_causes(_spec(obj))

    def create_virtual(self, obj: Obj, request: VirtualRequest) -> Obj:
        """Who the review asks about: the user of its spec (the self review overrides this)."""
        spec = _spec(obj)
        extra = spec.get("extra") if isinstance(spec.get("extra"), dict) else {}
        assert isinstance(extra, dict)
        groups = spec.get("groups") if isinstance(spec.get("groups"), list) else []
        assert isinstance(groups, list)
        user = UserInfo(str(spec.get("user") or ""), str(spec.get("uid") or ""), tuple(str(g) for g in groups),
                        {str(k): tuple(str(v) for v in vs) for k, vs in extra.items() if isinstance(vs, list)})
        return _answer(obj, _review_status(user, spec))


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
    def create_virtual(self, obj: Obj, request: VirtualRequest) -> Obj:
        return _answer(obj, _review_status(request.user, _spec(obj)))


def _rules_review(authorizer: Authorizer | None, user: UserInfo, namespace: str) -> RulesReview:
    if authorizer is None:
        return RulesReview([PolicyRule(("*",), ("*",), ("*",))], [PolicyRule(("*",), non_resource_urls=("*",))])
    return authorizer.rules_for(user, namespace)


class SelfSubjectRulesReviewStrategy(Strategy):
    stored: ClassVar[bool] = False

    def create_virtual(self, obj: Obj, request: VirtualRequest) -> Obj:
        """kube answers with a new review: its status, an empty spec."""
        namespace = _spec(obj).get("namespace")
        if not namespace:
            raise errors.bad_request("no namespace on request")
        review = _rules_review(_authorizer(), request.user, str(namespace))
        status: Obj = {
            "resourceRules": [
                {k: v for k, v in (("verbs", list(r.verbs)), ("apiGroups", list(r.api_groups)),
                                   ("resources", list(r.resources)), ("resourceNames", list(r.resource_names)))
                 if v or k == "verbs"}
                for r in review.resource_rules],
            "nonResourceRules": [{"verbs": list(r.verbs), "nonResourceURLs": list(r.non_resource_urls)}
                                 for r in review.non_resource_rules],
            "incomplete": review.incomplete,
        }
        if review.evaluation_error:
            status["evaluationError"] = review.evaluation_error
        return {"kind": obj["kind"], "apiVersion": obj["apiVersion"], "metadata": {"creationTimestamp": None},
                "spec": {}, "status": status}


class NotServedVirtualStrategy(Strategy):
    """A virtual type listed in discovery, as kube does, whose create this server does not answer
    (bindings; the authentication reviews until they are implemented): 405 with kube's wording."""

    stored: ClassVar[bool] = False
