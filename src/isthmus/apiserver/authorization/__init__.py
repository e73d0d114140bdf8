"""Authorization: may this user do this, decided as kube-apiserver's authorizer chain does.

kube-apiserver authorizes every request after authentication and before any handler: the
request's attributes (attributes.py: verb, group, resource, subresource, namespace, name, or a
non-resource path) go to a union of authorizers, the first that allows or denies wins, and a
request nobody allowed gets a 403 worded by `attributes.forbidden`. The chain here is kube's:
members of `system:masters` are always allowed (its privileged-groups authorizer, ahead of every
mode), then the modes of `--authorization-mode` in order: `RBAC` (rbac.py, over the store's
Roles, ClusterRoles and their bindings; bootstrappolicy.py holds kube's default policy, which
controllers/bootstraprbac.py writes at start), `AlwaysAllow`, `AlwaysDeny`.

The same chain answers the access reviews (registry/authorization.py) and, through `CURRENT`,
the RBAC strategies' escalation checks (registry/rbac.py), which run deep in the write pipeline
where kube reads the user from the request context.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass

from isthmus.apiserver.authentication.authenticators import MASTERS_GROUP, UserInfo
from isthmus.apiserver.authorization.attributes import Attributes, forbidden, request_attributes
from isthmus.apiserver.authorization.rbac import PolicyRule, RuleResolver, Source, aggregate

__all__ = [
    "CURRENT",
    "MODES",
    "Attributes",
    "Authorizer",
    "Decision",
    "RequestContext",
    "RuleResolver",
    "RulesReview",
    "forbidden",
    "request_attributes",
]

MODES = ("AlwaysAllow", "AlwaysDeny", "RBAC")
_EVERYTHING = PolicyRule(("*",), ("*",), ("*",))
_EVERY_URL = PolicyRule(("*",), non_resource_urls=("*",))


@dataclass(frozen=True)
class Decision:
    allowed: bool
    denial: str = ""  # why nobody allowed it, when an authorizer said
    source: Source | None = None  # the RBAC binding that allowed it

    @property
    def reason(self) -> str:
        """kube's reason: `RBAC: allowed by ...` for an RBAC allowance, the denial's otherwise."""
        return f"RBAC: allowed by {self.source}" if self.source is not None else self.denial


@dataclass(frozen=True)
class RulesReview:
    """What the authorizers' RulesFor say of a user in a namespace (a SelfSubjectRulesReview)."""

    resource_rules: list[PolicyRule]
    non_resource_rules: list[PolicyRule]
    incomplete: bool = False
    evaluation_error: str = ""


class Authorizer:
    """The chain: system:masters, then each mode of `modes` (kube's --authorization-mode list)."""

    def __init__(self, modes: Sequence[str], resolver: RuleResolver) -> None:
        unknown = [m for m in modes if m not in MODES]
        if unknown or not modes:
            raise ValueError(f"authorization mode {unknown[0] if unknown else ''!r} is not one of "
                             + ", ".join(MODES))
        self.modes = tuple(modes)
        self.resolver = resolver

    def authorize(self, a: Attributes) -> Decision:
        if MASTERS_GROUP in a.user.groups:
            return Decision(True)
        reasons: list[str] = []
        for mode in self.modes:
            if mode == "AlwaysAllow":
                return Decision(True)
            if mode == "AlwaysDeny":  # kube's says no opinion, with a reason
                reasons.append("Everything is forbidden.")
                continue
            source, reason = self.resolver.authorize(a)
            if source is not None:
                return Decision(True, source=source)
            if reason:
                reasons.append(reason)
        return Decision(False, "\n".join(reasons))

    def allows(self, a: Attributes) -> bool:
        return self.authorize(a).allowed

    def rules_for(self, user: UserInfo, namespace: str) -> RulesReview:
        """The union of the modes' RulesFor (the privileged-groups authorizer lists no rules)."""
        resource: list[PolicyRule] = []
        non_resource: list[PolicyRule] = []
        errs: list[str] = []
        for mode in self.modes:
            if mode == "AlwaysAllow":
                resource.append(_EVERYTHING)
                non_resource.append(_EVERY_URL)
            elif mode == "RBAC":
                rules, rule_errs = self.resolver.rules_for(user, namespace)
                resource += [r for r in rules if r.resources]
                non_resource += [r for r in rules if r.non_resource_urls]
                errs += rule_errs
        return RulesReview(resource, non_resource, False, aggregate(errs) if errs else "")


@dataclass(frozen=True)
class RequestContext:
    """The request being served, as the write pipeline's RBAC checks need it."""

    user: UserInfo
    authorizer: Authorizer
    attributes: Attributes | None = None
    """None for system:masters, which every check lets through without looking at the request."""


# Set by the server for each HTTP request it serves; None for in-process writes (the server's own
# controllers and bootstrap), which act as kube's privileged loopback client does.
CURRENT: ContextVar[RequestContext | None] = ContextVar("isthmus_apiserver_request", default=None)
