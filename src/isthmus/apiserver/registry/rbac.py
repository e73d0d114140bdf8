"""rbac.authorization.k8s.io: Roles, ClusterRoles and their bindings (kube's pkg/registry/rbac).

Names are path segments (`system:basic-user`); subjects and role references are defaulted and
validated as kube does, a binding's roleRef never changes. Writes go through kube's escalation
prevention (the policybased storages): a user may grant, in a role or through a binding, only
permissions they hold, unless they may `escalate` the role or `bind` the referenced role;
system:masters, and the server's own in-process writes, bypass. A write that changes only what
the garbage collector edits (ownerReferences, finalizers) is never checked.
"""

from __future__ import annotations

from typing import Any, ClassVar

from isthmus.apiserver import authorization
from isthmus.apiserver.apimachinery import errors
from isthmus.apiserver.apimachinery.meta import validate_name
from isthmus.apiserver.authentication.authenticators import MASTERS_GROUP
from isthmus.apiserver.authorization.attributes import Attributes
from isthmus.apiserver.authorization.rbac import (
    GROUP,
    PolicyRule,
    covers,
    escalation_message,
    only_gc_fields_changed,
    rules_of,
)
from isthmus.apiserver.registry.strategy import Cause, Strategy

Obj = dict[str, Any]

# ClusterRole aggregation may gather anything: setting it needs every permission.
_FULL_AUTHORITY = (PolicyRule(("*",), ("*",), ("*",)), PolicyRule(("*",), non_resource_urls=("*",)))


def _go_strings(value: Any) -> str:
    """Go's %#v of a []string, as field.Invalid prints it: `[]string{"a", "b"}`."""
    items = value if isinstance(value, list) else []
    return "[]string{" + ", ".join(errors.go_quote(str(v)) for v in items) + "}"


def _not_supported(field: str, value: Any, supported: list[str]) -> Cause:
    return errors.cause(field, f"Unsupported value: {errors.go_quote(str(value or ''))}: supported values: "
                        + ", ".join(errors.go_quote(s) for s in supported), "FieldValueNotSupported")


def _required(field: str, detail: str = "") -> Cause:
    return errors.cause(field, "Required value" + (f": {detail}" if detail else ""), "FieldValueRequired")


def validate_rules(obj: Obj, namespaced: bool) -> list[Cause]:
    """ValidatePolicyRule for each of `rules`."""
    rules = obj.get("rules")
    causes: list[Cause] = []
    for i, raw in enumerate(rules if isinstance(rules, list) else []):
        rule, path = raw if isinstance(raw, dict) else {}, f"rules[{i}]"
        if not rule.get("verbs"):
            causes.append(_required(f"{path}.verbs", "verbs must contain at least one value"))
        urls = rule.get("nonResourceURLs")
        if urls:
            if namespaced:
                causes.append(errors.cause(f"{path}.nonResourceURLs", f"Invalid value: {_go_strings(urls)}: "
                                           "namespaced rules cannot apply to non-resource URLs"))
            if rule.get("apiGroups") or rule.get("resources") or rule.get("resourceNames"):
                causes.append(errors.cause(f"{path}.nonResourceURLs", f"Invalid value: {_go_strings(urls)}: "
                                           "rules cannot apply to both regular resources and non-resource URLs"))
            continue
        if not rule.get("apiGroups"):
            causes.append(_required(f"{path}.apiGroups", "resource rules must supply at least one api group"))
        if not rule.get("resources"):
            causes.append(_required(f"{path}.resources", "resource rules must supply at least one resource"))
    return causes


def _default_binding(obj: Obj) -> None:
    """SetDefaults_RoleBinding / _ClusterRoleBinding and SetDefaults_Subject."""
    ref = obj.get("roleRef")
    if isinstance(ref, dict) and not ref.get("apiGroup"):
        ref["apiGroup"] = GROUP
    for s in obj.get("subjects") or []:
        if isinstance(s, dict) and not s.get("apiGroup") and s.get("kind") in ("User", "Group"):
            s["apiGroup"] = GROUP


def _validate_binding(obj: Obj, namespaced: bool) -> list[Cause]:
    """ValidateRoleBinding / ValidateClusterRoleBinding and ValidateRoleBindingSubject."""
    causes: list[Cause] = []
    ref = obj.get("roleRef") if isinstance(obj.get("roleRef"), dict) else {}
    assert isinstance(ref, dict)
    if ref.get("apiGroup") != GROUP:
        causes.append(_not_supported("roleRef.apiGroup", ref.get("apiGroup"), [GROUP]))
    kinds = ["Role", "ClusterRole"] if namespaced else ["ClusterRole"]
    if ref.get("kind") not in kinds:
        causes.append(_not_supported("roleRef.kind", ref.get("kind"), kinds))
    name = str(ref.get("name") or "")
    if not name:
        causes.append(_required("roleRef.name"))
    else:
        causes += validate_name(name, "path", field="roleRef.name")
    subjects = obj.get("subjects")
    for i, raw in enumerate(subjects if isinstance(subjects, list) else []):
        s, path = raw if isinstance(raw, dict) else {}, f"subjects[{i}]"
        if not s.get("name"):
            causes.append(_required(f"{path}.name"))
        kind, group = s.get("kind"), s.get("apiGroup") or ""
        if kind == "ServiceAccount":
            if group:
                causes.append(_not_supported(f"{path}.apiGroup", group, [""]))
            if not namespaced and not s.get("namespace"):
                causes.append(_required(f"{path}.namespace"))
        elif kind in ("User", "Group"):
            if group != GROUP:
                causes.append(_not_supported(f"{path}.apiGroup", group, [GROUP]))
        else:
            causes.append(_not_supported(f"{path}.kind", kind, ["ServiceAccount", "User", "Group"]))
    return causes


def _request() -> authorization.RequestContext | None:
    """The HTTP request being served; None (in-process writes) and system:masters are never checked,
    as kube's EscalationAllowed lets its privileged group through."""
    ctx = authorization.CURRENT.get()
    if ctx is None or MASTERS_GROUP in ctx.user.groups:
        return None
    return ctx


def _confirm_no_escalation(ctx: authorization.RequestContext, rules: tuple[PolicyRule, ...], namespace: str,
                           plural: str, name: str) -> None:
    """ConfirmNoEscalation: the user holds every permission of `rules` in `namespace`, else 403."""
    owner, resolution_errors = ctx.authorizer.resolver.rules_for(ctx.user, namespace)
    missing = covers(owner, rules)
    if missing:
        raise errors.forbidden(escalation_message(ctx.user, missing, resolution_errors), GROUP, plural, name)


class _RoleStrategy(Strategy):
    name_rule: ClassVar[str] = "path"
    plural: ClassVar[str] = "roles"
    namespaced: ClassVar[bool] = True

    def _check(self, obj: Obj) -> None:
        """The policybased role storage: `escalate` on the role, or hold what it grants."""
        ctx = _request()
        if ctx is None:
            return
        a = ctx.attributes
        if a is not None and a.resource_request and a.api_group == GROUP and a.resource == self.plural and ctx.authorizer.allows(
                Attributes(ctx.user, "escalate", True, api_group=GROUP, api_version="*", resource=self.plural,
                           name=a.name, namespace=a.namespace)):
            return
        m = obj.get("metadata") or {}
        name, namespace = str(m.get("name") or ""), str(m.get("namespace") or "") if self.namespaced else ""
        _confirm_no_escalation(ctx, rules_of(obj), namespace, self.plural, name)
        if not self.namespaced and obj.get("aggregationRule") is not None:
            missing = covers(ctx.authorizer.resolver.rules_for(ctx.user, "")[0], _FULL_AUTHORITY)
            if missing:
                raise errors.forbidden("must have cluster-admin privileges to use the aggregationRule", GROUP,
                                       self.plural, name)

    def prepare_for_create(self, obj: Obj) -> None:
        self._check(obj)

    def prepare_for_update(self, new: Obj, old: Obj) -> None:
        if not only_gc_fields_changed(new, old):
            self._check(new)

    def validate(self, obj: Obj) -> list[Cause]:
        causes = validate_rules(obj, self.namespaced)
        agg = obj.get("aggregationRule")
        if not self.namespaced and agg is not None and not (isinstance(agg, dict) and agg.get("clusterRoleSelectors")):
            causes.append(_required("aggregationRule.clusterRoleSelectors",
                                    "at least one clusterRoleSelector required if aggregationRule is non-nil"))
        return causes


class RoleStrategy(_RoleStrategy):
    pass


class ClusterRoleStrategy(_RoleStrategy):
    plural = "clusterroles"
    namespaced = False


class _BindingStrategy(Strategy):
    name_rule: ClassVar[str] = "path"
    plural: ClassVar[str] = "rolebindings"
    namespaced: ClassVar[bool] = True

    def _check(self, obj: Obj) -> None:
        """The policybased binding storage: `bind` on the referenced role, or hold what it grants."""
        ctx = _request()
        if ctx is None:
            return
        _default_binding(obj)  # kube checks the decoded, defaulted object
        m = obj.get("metadata") or {}
        name, namespace = str(m.get("name") or ""), str(m.get("namespace") or "") if self.namespaced else ""
        ref = obj.get("roleRef") if isinstance(obj.get("roleRef"), dict) else {}
        assert isinstance(ref, dict)
        kind = ref.get("kind")
        if kind in ("Role", "ClusterRole") and ctx.authorizer.allows(Attributes(
                ctx.user, "bind", True, api_group=str(ref.get("apiGroup") or ""),
                resource="roles" if kind == "Role" else "clusterroles", name=str(ref.get("name") or ""),
                namespace=namespace)):
            return
        rules = ctx.authorizer.resolver.role_reference_rules(ref, namespace, registry=True)
        _confirm_no_escalation(ctx, rules, namespace, self.plural, name)

    def prepare_for_create(self, obj: Obj) -> None:
        self._check(obj)

    def prepare_for_update(self, new: Obj, old: Obj) -> None:
        if not only_gc_fields_changed(new, old):
            self._check(new)

    def default(self, obj: Obj) -> None:
        _default_binding(obj)

    def validate(self, obj: Obj) -> list[Cause]:
        return _validate_binding(obj, self.namespaced)

    def validate_update(self, new: Obj, old: Obj) -> list[Cause]:
        causes = self.validate(new)
        ref, old_ref = new.get("roleRef"), old.get("roleRef")
        if ref != old_ref and isinstance(ref, dict):
            value = (f"rbac.RoleRef{{APIGroup:{errors.go_quote(str(ref.get('apiGroup', '')))}, "
                     f"Kind:{errors.go_quote(str(ref.get('kind', '')))}, Name:{errors.go_quote(str(ref.get('name', '')))}}}")
            causes.append(errors.cause("roleRef", f"Invalid value: {value}: cannot change roleRef"))
        return causes


class RoleBindingStrategy(_BindingStrategy):
    pass


class ClusterRoleBindingStrategy(_BindingStrategy):
    plural = "clusterrolebindings"
    namespaced = False
